"""What every trace importer shares: the rows a reader returns, and the one error it raises.

A reader (one module per format) turns a production trace file into :class:`RawTrace`:
numpy columns in the file's order (arrival seconds from the trace's start, prompt and output
lengths, the source line of each request) and, where the format has them, each prompt's KV
block ids. Windowing, rate scaling, caps and over-long prompts are not the reader's business
(:mod:`dpbench.workload.importers.fit`). A reader checks every line and raises
:class:`TraceImportError` naming the file, the line, the field and what is allowed, before
anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpbench.core.schema import InputError

# the inputs of an import: TraceSource's fields (checked there), then the window
SOURCE_FIELDS = (
    "format",
    "path",
    "window_start_s",
    "window_s",
    "rate_scale",
    "max_requests",
    "overlong",
    "max_input_len",
)
# how a spec names them: a `trace:` key, and the window is the spec's seed
SPEC_NAMES = {**{key: f"trace.{key}" for key in SOURCE_FIELDS}, "window": "seed"}


class TraceImportError(InputError):
    """A production trace that cannot be imported, in one line: what was wrong and what is
    allowed. A bad line of the file is named by file, line and field; a bad input by
    ``{field}`` in the template, which reads as the spec's key (:data:`SPEC_NAMES`) or, through
    :meth:`~dpbench.core.schema.InputError.spelled`, as the command line's flag."""

    SPELLING = SPEC_NAMES


class TraceFileMissing(TraceImportError):
    """The trace file is not on this machine (the benchmarks skip on it, naming where to get it)."""


@dataclass(frozen=True, slots=True)
class RawTrace:
    """A production trace as read, one row a request, in the file's (time) order."""

    path: Path
    arrival_s: np.ndarray  # float64, seconds from the trace's first request, non-decreasing
    input_len: np.ndarray  # int64 ≥ 1
    output_len: np.ndarray  # int64 ≥ 1
    line: np.ndarray  # int64: the request's line in the file (1-based)
    blocks: list[tuple[int, ...]] | None  # per request, its prompt's KV block ids
    block_size: int | None

    def __len__(self) -> int:
        return len(self.arrival_s)


def where(path: Path, line: int, field: str | None = None) -> str:
    return f"{path}:{line}" + (f": field {field!r}" if field else "")


def check_order(path: Path, arrival_s: np.ndarray, line: np.ndarray, field: str) -> None:
    """Timestamps must not go back: the first line that does is named."""
    back = np.flatnonzero(np.diff(arrival_s) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise TraceImportError(
            f"{where(path, int(line[i]), field)}: timestamps out of order "
            f"({arrival_s[i]:.6f} s after {arrival_s[i - 1]:.6f} s on the line before); "
            f"allowed: non-decreasing times"
        )
