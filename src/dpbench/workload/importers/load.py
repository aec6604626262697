"""The importers' one interface: resolve, read (per format) and fit a trace source."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType

from dpbench.workload.importers import azure, mooncake
from dpbench.workload.importers.base import RawTrace, TraceFileMissing
from dpbench.workload.importers.fit import ImportReport, fit
from dpbench.workload.importers.source import FORMATS, TraceSource
from dpbench.workload.trace import TraceRequest

READERS: dict[str, ModuleType] = {"mooncake": mooncake, "azure": azure}
assert tuple(READERS) == FORMATS


def resolve_path(source: TraceSource, base: Path | None = None) -> Path:
    """The trace file (a relative path is taken from ``base``, a spec's folder); a missing one
    raises :class:`TraceFileMissing` naming where the file comes from."""
    path = Path(source.path).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise TraceFileMissing(
            f"{source.format} trace file {path} is not here; get it from "
            f"{READERS[source.format].UPSTREAM} and put it there (or point the spec's "
            f"`trace.path` at your copy)"
        )
    return path.resolve()


_CACHE: dict[tuple[str, str, int, int], RawTrace] = {}


def read_raw(fmt: str, path: Path) -> RawTrace:
    """The format's reader on ``path`` (kept per file and modification time in this process)."""
    st = path.stat()
    key = (fmt, str(path), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = READERS[fmt].read(path)
    return _CACHE[key]


def file_sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def import_trace(
    source: TraceSource,
    *,
    window: int = 0,
    context_len: int | None = None,
    base: Path | None = None,
) -> tuple[list[TraceRequest], ImportReport]:
    """Window ``window`` of ``source`` as the suite's trace requests, and what the import did."""
    path = resolve_path(source, base)
    return fit(read_raw(source.format, path), source, window=window, context_len=context_len)
