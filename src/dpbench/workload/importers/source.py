"""Where an imported trace comes from and how it is fitted to a deployment: one schema, used by a
spec's ``trace:`` block, ``dpbench workload import``'s options and the run results.

A trace is one draw of real traffic; its disjoint windows are the repeats. Window ``k`` (the
seed, for a spec) covers ``[window_start_s + k·window_s, window_start_s + (k+1)·window_s)`` of
the trace's own time; its requests arrive ``rate_scale`` times faster than they did (2 halves
every gap), the first window request's arrival taken as the window's start.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import ModuleType
from typing import Literal

from dpbench.workload.importers import azure, mooncake
from dpbench.workload.importers.base import SOURCE_FIELDS, TraceFileMissing, TraceImportError

FORMATS = ("mooncake", "azure")


@dataclass(frozen=True)
class TraceSource:
    """A production trace file and the window, rate and limits to import it with."""

    format: Literal["mooncake", "azure"] = field(
        metadata={"help": "the trace file's format", "argument": True}
    )
    path: str = field(
        metadata={
            "help": "the trace file (in a spec: relative to the spec's folder)",
            "argument": True,
        }
    )
    window_start_s: float = field(
        default=0.0,
        metadata={"help": "where window 0 starts, seconds from the trace's first request"},
    )
    window_s: float | None = field(
        default=None,
        metadata={"help": "window length in the trace's seconds (default: to the trace's end)"},
    )
    rate_scale: float = field(
        default=1.0,
        metadata={"help": "offered rate as a multiple of the trace's (2: gaps halved)"},
    )
    max_requests: int | None = field(
        default=None, metadata={"help": "keep at most this many requests of the window"}
    )
    overlong: Literal["drop", "truncate"] = field(
        default="drop",
        metadata={
            "help": "a prompt past the model's context or --max-input-len: drop the request or "
            "truncate the prompt (counted and reported either way)"
        },
    )
    max_input_len: int | None = field(
        default=None,
        metadata={"help": "longest prompt to keep, e.g. a rank's KV pool (default: the context)"},
    )

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise TraceImportError(f"{{format}} is {self.format!r}; allowed: {', '.join(FORMATS)}")
        if not isinstance(self.path, str) or not self.path:
            raise TraceImportError(f"{{path}} is {self.path!r}; allowed: a file path")
        checks = (
            ("window_start_s", self.window_start_s, lambda v: v >= 0, "a number ≥ 0"),
            ("window_s", self.window_s, lambda v: v is None or v > 0, "a number > 0, or unset"),
            ("rate_scale", self.rate_scale, lambda v: v > 0, "a number > 0"),
            (
                "max_requests",
                self.max_requests,
                lambda v: v is None or (type(v) is int and v > 0),
                "an integer > 0, or unset",
            ),
            (
                "max_input_len",
                self.max_input_len,
                lambda v: v is None or (type(v) is int and v > 0),
                "an integer > 0, or unset",
            ),
        )
        for name, value, ok, allowed in checks:
            finite = value is None or (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
            )
            if not finite or not ok(value):
                raise TraceImportError(f"{{{name}}} is {value!r}; allowed: {allowed}")
        if self.overlong not in ("drop", "truncate"):
            raise TraceImportError(f"{{overlong}} is {self.overlong!r}; allowed: drop, truncate")

    def window(self, k: int) -> tuple[float, float]:
        """Window ``k``'s ``[start, end)`` in the trace's seconds (``end`` inf: to the end)."""
        if type(k) is not int or k < 0:
            raise TraceImportError(f"{{window}} is {k!r}; allowed: an integer ≥ 0")
        if self.window_s is None:
            if k:
                raise TraceImportError(
                    f"{{window}} is {k}, but without {{window_s}} the trace is one window; "
                    f"allowed: {{window}} 0, or set {{window_s}}"
                )
            return self.window_start_s, math.inf
        start = self.window_start_s + k * self.window_s
        return start, start + self.window_s

    def describe(self) -> str:
        span = (
            f"from {self.window_start_s:g} s"
            if self.window_s is None
            else f"windows of {self.window_s:g} s from {self.window_start_s:g} s"
        )
        cap = "" if self.max_requests is None else f", at most {self.max_requests} requests"
        return f"{self.format} trace {self.path}, {span}, ×{self.rate_scale:g} rate{cap}"


READERS: dict[str, ModuleType] = {"mooncake": mooncake, "azure": azure}
assert tuple(READERS) == FORMATS
assert tuple(f.name for f in fields(TraceSource)) == SOURCE_FIELDS


def resolve_path(source: TraceSource, base: Path | None = None) -> Path:
    """The trace file (a relative path is taken from ``base``, a spec's folder); a missing one
    raises :class:`TraceFileMissing`, naming where to get it when it is a published trace."""
    path = Path(source.path).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        reader = READERS[source.format]
        full = "" if str(path) == str(path.absolute()) else f" ({path.absolute()})"
        upstream = (
            f"; get it from {reader.UPSTREAM_DIR}{path.name} ({reader.LICENCE})"
            if path.name in reader.UPSTREAM_FILES
            else ""
        )
        raise TraceFileMissing(
            f"{{path}} {source.path}: no such file{full}; allowed: an existing "
            f"{source.format} trace file{upstream}"
        )
    return path.resolve()


def file_sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


# The production traces' copies under ../shared/traces/ ($DPBENCH_TRACES), which tests, CI and
# the benchmarks read (not shipped: see docs/workloads.md, "Production traces").
SHARED_TRACE_FILES = {
    "mooncake": "mooncake-fast25/conversation_trace.jsonl",
    "azure": "azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
}


def shared_trace(fmt: str) -> Path:
    """Where the shared copy of the ``fmt`` production trace lives (it may be missing)."""
    from dpbench.core.paths import shared_traces_dir

    return shared_traces_dir() / SHARED_TRACE_FILES[fmt]


def missing_shared_trace(fmt: str) -> str | None:
    """Why the shared ``fmt`` trace cannot be read here (naming the file and where to get
    it), or None when it is there."""
    path = shared_trace(fmt)
    if path.is_file():
        return None
    return (
        f"needs the {fmt} trace at {path} (from {READERS[fmt].UPSTREAM}; $DPBENCH_TRACES "
        f"names another folder)"
    )
