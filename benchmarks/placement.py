"""Placement tier: where the installed SGLang's PrefillAdder negotiates with the PrefillDelayer (CPU only)."""

from __future__ import annotations

from typing import Any

from .common import metric, optional_metric, save_run


class Placement:
    """Static (AST) and behavioural (real PrefillAdder + recording delayer) placement of the negotiation.

    ``setup_cache`` runs the probe once per SGLang commit, in asv's environment for that
    commit, and files the full run result (per-case detail included) beside asv's results.
    """

    timeout = 300  # first SGLang import + five admission cases: ~20-40 s on 2 cores
    version = "placement-2"  # metrics not measured are NaN (absent), never 0

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.core.faults import inject_if_requested
        from dpbench.placement.probe import build_result
        from dpbench.sglang_compat.detect import UnsupportedSGLang

        inject_if_requested("placement")
        try:
            result = build_result()
        except UnsupportedSGLang as exc:
            return {"skip": str(exc)}
        save_run("placement", "placement", result)
        return result

    setup_cache.timeout = 300

    def setup(self, result: dict[str, Any]) -> None:
        if "skip" in result:
            raise NotImplementedError(result["skip"])

    def track_placement_code(self, result: dict[str, Any]) -> float:
        return metric(result, "placement_code")

    track_placement_code.unit = "code (0 unknown, 1 early, 2 post-kv, 3 absent)"

    def track_kv_exits_before_negotiation(self, result: dict[str, Any]) -> float:
        return optional_metric(result, "kv_exits_before_negotiation")

    track_kv_exits_before_negotiation.unit = "exits"

    def track_false_prefillable_reports(self, result: dict[str, Any]) -> float:
        return optional_metric(result, "false_prefillable_reports")

    track_false_prefillable_reports.unit = "reports"

    def track_chunked_negotiates(self, result: dict[str, Any]) -> float:
        return optional_metric(result, "chunked_negotiates")

    track_chunked_negotiates.unit = "bool (0/1)"

    def track_pr31835_conforming_cases(self, result: dict[str, Any]) -> float:
        return optional_metric(result, "pr31835_conforming_cases")

    track_pr31835_conforming_cases.unit = "cases of 5"
