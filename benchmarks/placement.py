"""Placement tier: where the installed SGLang's PrefillAdder negotiates with the PrefillDelayer (CPU only)."""

from __future__ import annotations

from typing import Any

from dpbench.placement import bench

from .common import OneRun, Track, tracks


@tracks(
    {
        "placement_code": Track("placement_code", "code (0 unknown, 1 early, 2 post-kv, 3 absent)"),
        "kv_exits_before_negotiation": Track("kv_exits_before_negotiation", "exits", optional=True),
        "false_prefillable_reports": Track("false_prefillable_reports", "reports", optional=True),
        "chunked_negotiates": Track("chunked_negotiates", "bool (0/1)", optional=True),
        "pr31835_conforming_cases": Track("pr31835_conforming_cases", "cases of 5", optional=True),
    }
)
class Placement(OneRun):
    """Static (AST) and behavioural (real PrefillAdder + recording delayer) placement of the negotiation.

    ``setup_cache`` runs the probe once per SGLang commit, in asv's environment for that
    commit, and files the full run result (per-case detail included) beside asv's results.
    """

    timeout = 300  # first SGLang import + five admission cases: ~20-40 s on 2 cores
    version = "placement-2"  # metrics not measured are NaN (absent), never 0

    def setup_cache(self) -> dict[str, Any]:
        return bench.placement()

    setup_cache.timeout = 300

    def setup(self, result: dict[str, Any]) -> None:
        if "skip" in result:
            raise NotImplementedError(result["skip"])
        self.result = result
