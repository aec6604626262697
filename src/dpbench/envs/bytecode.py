"""Build-time bytecode for an environment, compiled once per source file's content.

This machine's image (like many CI images) exports ``PYTHONDONTWRITEBYTECODE=1``, so a
module without a ``.pyc`` on disk is compiled from source by every process that imports
it. :func:`compile_bytecode` writes an environment's ``.pyc`` files once, at build time.

Most of what it compiles it has compiled before. asv uninstalls SGLang and installs the
next commit's into the same environment, and each commit's files are mostly the files
of the one before; a change's environment, an asv environment and a release environment
hold the same wheel. Compiling SGLang 0.5.23's site-packages took ~25–35 s of CPU on
these cores, every time. So each compiled module's code is kept under
``.cache/bytecode/<magic>/``, keyed by the sha256 of its source, and a later build writes
that code under a header naming the new file's mtime and size: exactly the ``.pyc``
``compileall`` would write, without compiling. Python fixes the code's file name to
the importing path when it loads a ``.pyc``, so where the source lies does not matter.
Only timestamp ``.pyc`` files (what ``compileall`` writes without ``SOURCE_DATE_EPOCH``)
are kept.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dpbench.core.paths import cache_dir


class BytecodeError(RuntimeError):
    """``compileall`` failed on an environment."""


@dataclass(frozen=True)
class Interpreter:
    """What a ``.pyc`` for ``python`` is named and starts with."""

    magic: bytes
    cache_tag: str  # "cpython-311"

    @classmethod
    def of(cls, python: str | Path) -> Interpreter:
        code = "import importlib.util, sys; print(importlib.util.MAGIC_NUMBER.hex(), sys.implementation.cache_tag)"
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
        magic, tag = out.stdout.split()
        return cls(bytes.fromhex(magic), tag)

    def pyc(self, source: Path) -> Path:
        return source.parent / "__pycache__" / f"{source.stem}.{self.cache_tag}.pyc"


@dataclass
class Counts:
    restored: int = 0  # .pyc written from the cache
    compiled: int = 0  # compiled by compileall, now kept in the cache
    fresh: int = 0  # already had a valid .pyc


def _header(interp: Interpreter, st: os.stat_result) -> bytes:
    return interp.magic + struct.pack(
        "<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
    )


def _valid(interp: Interpreter, source: Path, st: os.stat_result) -> bool:
    try:
        with open(interp.pyc(source), "rb") as fh:
            return fh.read(16) == _header(interp, st)
    except OSError:
        return False


def _sources(dirs: tuple[Path, ...]) -> Iterator[Path]:
    for top in dirs:
        for root, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    yield Path(root) / name


def _write(path: Path, data: bytes) -> None:
    """Atomically (a rename), as importlib writes its own ``.pyc`` files; a temporary name of
    its own, since two builds (threads of one process too) may write the same entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Store:
    """Compiled code by source sha256, for one interpreter's magic number."""

    def __init__(self, interp: Interpreter, root: Path | None = None) -> None:
        self.interp = interp
        self.root = (root or cache_dir() / "bytecode") / interp.magic.hex()

    def _entry(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def restore(self, source: Path, st: os.stat_result, digest: str) -> bool:
        try:
            code = self._entry(digest).read_bytes()
        except OSError:
            return False
        _write(self.interp.pyc(source), _header(self.interp, st) + code)
        return True

    def keep(self, source: Path, st: os.stat_result, digest: str) -> bool:
        """Keep the code compileall wrote for ``source`` (unless the source changed since)."""
        try:
            data = self.interp.pyc(source).read_bytes()
        except OSError:
            return False  # did not compile (a Python 2 file in some package's tests)
        if data[:16] != _header(self.interp, st):
            return False
        entry = self._entry(digest)
        if not entry.exists():
            _write(entry, data[16:])
        return True


def compile_bytecode(python: str | Path, *dirs: Path, store_root: Path | None = None) -> Counts:
    """Write the ``.pyc`` of every module under ``dirs`` for ``python``: from the cache where
    a file's content was compiled before, by ``compileall`` for the rest (kept for next time)."""
    found = tuple(Path(d) for d in dirs if Path(d).is_dir())
    counts = Counts()
    if not found:
        return counts
    interp = Interpreter.of(python)
    store = Store(interp, store_root)
    missing: list[tuple[Path, os.stat_result, str]] = []
    for source in _sources(found):
        try:
            st = source.stat()
        except OSError:
            continue  # a dangling link
        if _valid(interp, source, st):
            counts.fresh += 1
            continue
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if store.restore(source, st, digest):
            counts.restored += 1
        else:
            missing.append((source, st, digest))
    if missing:
        cmd = [str(python), "-m", "compileall", "-q", "-j", "0", *map(str, found)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        # status 1: some file did not compile (a test fixture in Python 2 syntax in some
        # package), named on stdout and skipped, as pip's own compile step skips it
        if proc.returncode not in (0, 1):
            raise BytecodeError(f"compileall failed ({proc.returncode}): {proc.stderr[-2000:]}")
        counts.compiled = sum(store.keep(*m) for m in missing)
    return counts
