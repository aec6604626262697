"""Twin tier: SGLang's real PrefillAdder + PrefillDelayer on N DP ranks joined by gloo, simulated time (CPU only).

``TwinHighKV`` replays the shipped high-KV specs on 2, 4 and 8 ranks with the delayer
on and off; ``TwinScale`` is the issue's speed target (4 ranks × 2,000 requests of
long-prompt-burst in ≤ 60 s wall on a 2-core machine); ``SchedulerPass`` times one
rank's scheduler pass on a saturated KV pool.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from .common import metric, require_sglang, save_run

SpecName = Literal[
    "long-prompt-burst", "agentic-multiturn", "long-context-chat"
]  # target_kv_util ≥ 0.85
DpSize = Literal[2, 4, 8]
DelayerMode = Literal["on", "off"]
HIGH_KV_REQUESTS = 256  # per run: 18 runs in one setup_cache on a 2-core CPU runner
SCALE_REQUESTS = 2000
# The twin drives the adder through detect's generations; the delayer through
# sglang_compat.delayer, which knows more constructor shapes (0.5.19, 0.5.21) and raises
# UnsupportedSGLang itself for an unknown one.
TWIN_COMPONENTS = ("adder",)


def _key(spec: str, dp: int, delayer: str) -> str:
    if spec not in get_args(SpecName):
        raise ValueError(f"spec must be one of {get_args(SpecName)}; found {spec!r}")
    if dp not in get_args(DpSize):
        raise ValueError(f"dp_size must be one of {get_args(DpSize)}; found {dp!r}")
    if delayer not in get_args(DelayerMode):
        raise ValueError(f"delayer must be one of {get_args(DelayerMode)}; found {delayer!r}")
    return f"{spec}-dp{dp}-delayer_{delayer}"


def _run(spec: str, dp: int, delayer: str, requests: int) -> dict[str, Any]:
    from dataclasses import replace

    from dpbench.twin.config import SchedulerSettings, TwinConfig
    from dpbench.twin.run import run_twin

    config = TwinConfig(
        dp_size=dp,
        scheduler=replace(SchedulerSettings(), enable_prefill_delayer=delayer == "on"),
        record_timeline=False,
        deadline_s=900,
    )
    return run_twin(spec, config, num_requests=requests)


class TwinHighKV:
    """Per (spec, DP size, delayer): DP-mixed forwards, false reports, delayer verdicts, simulated TTFT/throughput."""

    params: ClassVar[tuple[list[Any], ...]] = (
        list(get_args(SpecName)),
        list(get_args(DpSize)),
        list(get_args(DelayerMode)),
    )
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "delayer"]
    timeout = 3600
    version = "twin-high-kv-1"

    def setup_cache(self) -> dict[str, Any]:
        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        out: dict[str, Any] = {}
        for spec in get_args(SpecName):
            for dp in get_args(DpSize):
                for delayer in get_args(DelayerMode):
                    key = _key(spec, dp, delayer)
                    try:
                        result = _run(spec, dp, delayer, HIGH_KV_REQUESTS)
                    except Exception as exc:
                        out[key] = {"error": f"{type(exc).__name__}: {exc}"}
                        continue
                    save_run("twin", key, result)
                    out[key] = {"metrics": result["metrics"]}
        return out

    setup_cache.timeout = 3600

    def setup(self, cache: dict[str, Any], spec: str, dp_size: int, delayer: str) -> None:
        if "skip" in cache:
            raise NotImplementedError(cache["skip"])
        entry = cache.get(_key(spec, dp_size, delayer))
        if entry is None or "error" in entry:
            raise NotImplementedError(
                f"twin run failed: {entry.get('error') if entry else 'missing'}"
            )
        self.result = entry

    def _m(self, name: str) -> float:
        return metric(self.result, name)

    def track_dp_mixed_step_fraction(self, cache, spec, dp_size, delayer) -> float:
        return self._m("dp_mixed_step_fraction")

    track_dp_mixed_step_fraction.unit = "fraction of steps"

    def track_false_prefillable_reports(self, cache, spec, dp_size, delayer) -> float:
        return self._m("false_prefillable_reports_count") if delayer == "on" else 0.0

    track_false_prefillable_reports.unit = "reports"

    def track_false_report_mixed_steps(self, cache, spec, dp_size, delayer) -> float:
        return self._m("false_report_mixed_steps_count") if delayer == "on" else 0.0

    track_false_report_mixed_steps.unit = "steps"

    def track_delay_passes(self, cache, spec, dp_size, delayer) -> float:
        return self._m("delayer_delay_count") if delayer == "on" else 0.0

    track_delay_passes.unit = "rank passes"

    def track_ttft_ms_p50(self, cache, spec, dp_size, delayer) -> float:
        return self._m("ttft_ms_p50")

    track_ttft_ms_p50.unit = "ms (simulated)"

    def track_ttft_ms_p99(self, cache, spec, dp_size, delayer) -> float:
        return self._m("ttft_ms_p99")

    track_ttft_ms_p99.unit = "ms (simulated)"

    def track_output_tokens_per_s(self, cache, spec, dp_size, delayer) -> float:
        return self._m("output_tokens_per_s")

    track_output_tokens_per_s.unit = "tok/s (simulated)"

    def track_request_throughput(self, cache, spec, dp_size, delayer) -> float:
        return self._m("request_throughput_req_per_s")

    track_request_throughput.unit = "req/s (simulated)"

    def track_kv_utilization_max(self, cache, spec, dp_size, delayer) -> float:
        return self._m("kv_utilization_max")

    track_kv_utilization_max.unit = "fraction"

    def track_retractions(self, cache, spec, dp_size, delayer) -> float:
        return self._m("retractions_count")

    track_retractions.unit = "requests"


class TwinScale:
    """4 ranks × 2,000 requests of long-prompt-burst: wall time (target ≤ 60 s on 2 cores) and passes/s."""

    timeout = 900
    version = "twin-scale-1"

    def setup_cache(self) -> dict[str, Any]:
        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        result = _run("long-prompt-burst", 4, "on", SCALE_REQUESTS)
        save_run("twin", "scale-long-prompt-burst-dp4-2000", result)
        return {"metrics": result["metrics"], "wall_time_s": result["wall_time_s"]}

    setup_cache.timeout = 900

    def setup(self, cache: dict[str, Any]) -> None:
        if "skip" in cache:
            raise NotImplementedError(cache["skip"])

    def track_wall_time_s(self, cache: dict[str, Any]) -> float:
        return cache["wall_time_s"]

    track_wall_time_s.unit = "s (wall, incl. SGLang import)"

    def track_passes_per_s(self, cache: dict[str, Any]) -> float:
        return metric(cache, "passes_per_s")

    track_passes_per_s.unit = "lockstep passes/s (wall)"

    def track_scheduler_pass_us_p50(self, cache: dict[str, Any]) -> float:
        return metric(cache, "scheduler_pass_us_p50")

    track_scheduler_pass_us_p50.unit = "us (wall)"


class SchedulerPass:
    """One rank's scheduler pass on a saturated KV pool: real PrefillAdder (NO_TOKEN) + real PrefillDelayer.

    The delayer negotiates over a one-process gloo group, so this is the pass's own
    cost without waiting on other ranks.
    """

    version = "scheduler-pass-1"
    timeout = 300

    def setup(self) -> None:
        require_sglang(TWIN_COMPONENTS)
        from dpbench.twin.bench import admission_pass, saturated_rank

        self.rank, self.close = saturated_rank()
        self.one_pass = admission_pass

    def teardown(self) -> None:
        close = getattr(self, "close", None)
        if close is not None:
            close()

    def time_scheduler_pass(self) -> None:
        self.one_pass(self.rank)
