"""The importers' one interface: resolve, read (per format) and fit a trace source."""

from __future__ import annotations

from pathlib import Path

from dpbench.workload.importers.base import RawTrace
from dpbench.workload.importers.fit import ImportReport, fit
from dpbench.workload.importers.source import READERS, TraceSource, resolve_path
from dpbench.workload.request import TraceRequest

_CACHE: dict[tuple[str, str, int, int], RawTrace] = {}


def read_raw(fmt: str, path: Path) -> RawTrace:
    """The format's reader on ``path`` (kept per file and modification time in this process)."""
    st = path.stat()
    key = (fmt, str(path), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = READERS[fmt].read(path)
    return _CACHE[key]


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
