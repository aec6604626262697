"""Workload tier: how fast a 100,000-request trace is generated, written and planned (CPU only).

Target (issue #3): a 100,000-request trace in ≤ 10 s on one core.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import ClassVar, Literal, get_args

from .common import require_trace

SpecName = Literal[
    "long-prompt-burst", "long-context-chat", "agentic-multiturn", "balanced-baseline"
]
Dispatch = Literal["round_robin", "shortest_queue", "total_tokens"]
REQUESTS = 100_000


def _spec(name: str):
    from dpbench.workload.spec import load_spec

    if name not in get_args(SpecName):
        raise ValueError(f"spec must be one of {get_args(SpecName)}; found {name!r}")
    return load_spec(name).with_overrides(num_requests=REQUESTS)


class TraceGeneration:
    """A shipped spec scaled to 100,000 requests: sampled into TraceRequests, then written as JSONL."""

    params: ClassVar[list[str]] = list(get_args(SpecName))
    param_names: ClassVar[list[str]] = ["spec"]
    version = "trace-generation-1"

    def setup(self, name: str) -> None:
        from dpbench.workload.trace import generate_trace

        self.spec = _spec(name)
        self.reqs = generate_trace(self.spec)
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-trace-"))

    def teardown(self, name: str) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_generate(self, name: str) -> None:
        from dpbench.workload.trace import generate_trace

        generate_trace(self.spec)

    def time_generate_and_write(self, name: str) -> None:
        from dpbench.workload.trace import generate_trace, write_trace

        write_trace(generate_trace(self.spec), self.tmp / "trace.jsonl")

    def time_load(self, name: str) -> None:
        from dpbench.workload.trace import load_trace, write_trace

        load_trace(write_trace(self.reqs, self.tmp / "load.jsonl"))


class KVPlanning:
    """The KV planner over a 100,000-request long-prompt-burst trace on 8 DP ranks."""

    params: ClassVar[list[str]] = list(get_args(Dispatch))
    param_names: ClassVar[list[str]] = ["dispatch"]
    version = "kv-planning-1"

    def setup(self, dispatch: str) -> None:
        from dpbench.workload.trace import generate_columns

        if dispatch not in get_args(Dispatch):
            raise ValueError(f"dispatch must be one of {get_args(Dispatch)}; found {dispatch!r}")
        self.spec = _spec("long-prompt-burst")
        self.cols = generate_columns(self.spec)

    def time_plan(self, dispatch: str) -> None:
        from dpbench.workload.planner import plan_kv

        plan_kv(self.spec, self.cols, 8, dispatch)


TraceFormat = Literal["mooncake", "azure"]


class TraceImport:
    """Importing a whole production trace: read, check every line, fit to the model (target,
    issue #20: the whole Mooncake trace in ≤ 5 s on one core), and writing it as JSONL."""

    params: ClassVar[list[str]] = list(get_args(TraceFormat))
    param_names: ClassVar[list[str]] = ["format"]
    version = "trace-import-1"

    def setup(self, fmt: str) -> None:
        from dpbench.workload.importers.source import TraceSource

        if fmt not in get_args(TraceFormat):
            raise ValueError(f"format must be one of {get_args(TraceFormat)}; found {fmt!r}")
        self.source = TraceSource(fmt, require_trace(fmt))
        self.tmp = Path(tempfile.mkdtemp(prefix="dpbench-import-"))

    def teardown(self, fmt: str) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_import(self, fmt: str) -> None:
        from dpbench.workload.importers.fit import fit
        from dpbench.workload.importers.source import READERS

        # the reader itself, not its per-process cache
        raw = READERS[fmt].read(Path(self.source.path))
        fit(raw, self.source, window=0, context_len=163840)

    def time_import_and_write(self, fmt: str) -> None:
        from dpbench.workload.importers.fit import fit
        from dpbench.workload.importers.source import READERS
        from dpbench.workload.trace import write_trace

        raw = READERS[fmt].read(Path(self.source.path))
        reqs, _ = fit(raw, self.source, window=0, context_len=163840)
        write_trace(reqs, self.tmp / "trace.jsonl")
