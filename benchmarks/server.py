"""Server tier: a real sglang.launch_server in DP-attention mode driven by a replayed workload.

``ServeThroughput`` (≥2 CUDA GPUs) launches SGLang per (workload, DP size, delayer on/off)
with DeepSeek-V3's shipped config and dummy weights (``DPBENCH_SERVER_MODEL`` names a real
checkpoint instead; ``DPBENCH_SERVER_TP`` the tensor-parallel size, default 8), replays
the workload's trace and reads client metrics plus the server's Prometheus counts.
``SimulatedRooflineServe`` (CPU) runs the same launcher with SGLang's real server and
only the model forward simulated by the twin's roofline cost model
(``executor: simulated``; see ``dpbench.sglang_compat.simforward``).
``ClientOverhead`` (CPU) measures this suite's load client at 1,000 concurrent streams
against the protocol test double; ``BenchServingReference`` measures SGLang's own
``bench_serving`` the same way, for comparison.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, ClassVar, Literal, get_args

from .common import (
    FIDELITY_CHUNKED_PREFILL,
    cache_settings,
    cached,
    delayer_metric,
    metric,
    optional_metric,
    require_cuda,
    run_file,
    save_run,
)

Workload = Literal["long-prompt-burst", "balanced-baseline"]
DpSize = Literal[2, 8]
DelayerMode = Literal["on", "off"]


def _key(workload: str, dp: int, delayer: str) -> str:
    if workload not in get_args(Workload):
        raise ValueError(f"workload must be one of {get_args(Workload)}; found {workload!r}")
    if dp not in get_args(DpSize):
        raise ValueError(f"dp_size must be one of {get_args(DpSize)}; found {dp!r}")
    if delayer not in get_args(DelayerMode):
        raise ValueError(f"delayer must be one of {get_args(DelayerMode)}; found {delayer!r}")
    return f"{workload}-dp{dp}-delayer_{delayer}"


def _require_server_gpus(tp: int) -> None:
    """Skip unless ≥2 CUDA GPUs (and ``tp`` of them) are visible and SGLang's GPU dependencies import."""
    found = require_cuda(2)
    if found < tp:
        raise NotImplementedError(
            f"needs {tp} CUDA GPUs for tp={tp} (DPBENCH_SERVER_TP); found {found}"
        )
    missing = [m for m in ("sgl_kernel", "flashinfer") if importlib.util.find_spec(m) is None]
    if missing:
        raise NotImplementedError(
            f"SGLang's GPU dependencies missing: {', '.join(missing)} not importable"
        )


class ServeThroughput:
    """Per (workload, DP size, delayer): client throughput/latency and the server's PrefillDelayer counts."""

    params: ClassVar[tuple[list[Any], ...]] = (
        list(get_args(Workload)),
        list(get_args(DpSize)),
        list(get_args(DelayerMode)),
    )
    param_names: ClassVar[list[str]] = ["workload", "dp_size", "delayer"]
    timeout = 14400
    version = "server-serve-1"

    def setup_cache(self) -> dict[str, Any]:
        tp = int(os.environ.get("DPBENCH_SERVER_TP", "8"))
        try:
            _require_server_gpus(tp)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        from dpbench.server.run import RunOptions, execute, prepare

        def one(workload: str, dp: int, delayer: str) -> dict[str, Any]:
            opts = RunOptions(
                spec=workload,
                tp_size=tp,
                dp_size=dp,
                delayer=delayer == "on",
                model_path=os.environ.get("DPBENCH_SERVER_MODEL") or None,
                python=sys.executable,
            )
            result = execute(prepare(opts))
            save_run("server", _key(workload, dp, delayer), result)
            return {"metrics": result["metrics"]}

        return cache_settings(
            (_key(w, dp, d), lambda w=w, dp=dp, d=d: one(w, dp, d))
            for w in get_args(Workload)
            for dp in get_args(DpSize)
            for d in get_args(DelayerMode)
        )

    setup_cache.timeout = 14400

    def setup(self, cache: dict[str, Any], workload: str, dp_size: int, delayer: str) -> None:
        self.result = cached(cache, _key(workload, dp_size, delayer))

    def _m(self, name: str) -> float:
        return metric(self.result, name)

    def track_request_throughput_per_s(self, cache, workload, dp_size, delayer) -> float:
        return self._m("request_throughput_per_s")

    track_request_throughput_per_s.unit = "req/s"

    def track_output_tokens_per_s(self, cache, workload, dp_size, delayer) -> float:
        return self._m("output_tokens_per_s")

    track_output_tokens_per_s.unit = "tok/s"

    def track_goodput_requests_per_s(self, cache, workload, dp_size, delayer) -> float:
        return self._m("goodput_requests_per_s")

    track_goodput_requests_per_s.unit = "req/s"

    def track_ttft_ms_p50(self, cache, workload, dp_size, delayer) -> float:
        return self._m("ttft_ms_p50")

    track_ttft_ms_p50.unit = "ms"

    def track_ttft_ms_p99(self, cache, workload, dp_size, delayer) -> float:
        return self._m("ttft_ms_p99")

    track_ttft_ms_p99.unit = "ms"

    def track_itl_ms_p99(self, cache, workload, dp_size, delayer) -> float:
        return self._m("itl_ms_p99")

    track_itl_ms_p99.unit = "ms"

    def track_e2e_ms_p99(self, cache, workload, dp_size, delayer) -> float:
        return self._m("e2e_ms_p99")

    track_e2e_ms_p99.unit = "ms"

    def track_errors(self, cache, workload, dp_size, delayer) -> float:
        return self._m("errors_total")

    track_errors.unit = "requests"

    def track_delayer_delay_fraction(self, cache, workload, dp_size, delayer) -> float:
        # absent without delayer outcomes (delayer off): NaN, never 0
        return delayer_metric(self.result, "delayer_delay_fraction", delayer)

    track_delayer_delay_fraction.unit = "fraction of outcomes"

    def track_delayer_delay_fraction_prefillable(self, cache, spec, dp_size, delayer) -> float:
        return self._m("delayer_delay_fraction_prefillable")

    track_delayer_delay_fraction_prefillable.unit = "fraction of outcomes with a prefillable rank"

    def track_delayer_outcomes(self, cache, workload, dp_size, delayer) -> float:
        return self._m("delayer_outcomes_total")

    track_delayer_outcomes.unit = "outcomes"


# Client comparison at 1,000 concurrent streams against the protocol test double (CPU).
def _comparison_config():
    from dpbench.server.client_bench import ComparisonConfig

    return ComparisonConfig(
        num_requests=3000, concurrency=1000, output_len=8, first_token_delay_s=0.25, itl_s=0.2
    )


class ClientOverhead:
    """This suite's client, 1,000 streams vs the protocol test double: request rate and TTFT error."""

    timeout = 600
    version = "server-client-1"

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.server.client_bench import compare

        return compare(_comparison_config(), sglang_python=None, double_python=sys.executable)[
            "clients"
        ][0]

    setup_cache.timeout = 600

    def track_request_rate_per_s(self, row: dict[str, Any]) -> float:
        return row["request_rate_per_s"]

    track_request_rate_per_s.unit = "req/s"

    def track_ttft_error_ms_mean(self, row: dict[str, Any]) -> float:
        return row["ttft_error_ms_mean"]

    track_ttft_error_ms_mean.unit = "ms"

    def track_ttft_error_ms_p99(self, row: dict[str, Any]) -> float:
        return row["ttft_error_ms_p99"]

    track_ttft_error_ms_p99.unit = "ms"


class BenchServingReference:
    """SGLang's own bench_serving, same double and load as ClientOverhead: the reference to beat."""

    timeout = 900
    version = "server-client-1"

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.server.client_bench import measure_bench_serving

        if importlib.util.find_spec("sglang") is None:
            return {"skip": "SGLang is not installed in this environment"}
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:  # a failed bench_serving run fails here
            return measure_bench_serving(
                _comparison_config(),
                sglang_python=sys.executable,
                double_python=sys.executable,
                workdir=Path(tmp),
            )

    setup_cache.timeout = 900

    def setup(self, row: dict[str, Any]) -> None:
        if "skip" in row:
            raise NotImplementedError(row["skip"])

    def track_request_rate_per_s(self, row: dict[str, Any]) -> float:
        return row["request_rate_per_s"]

    track_request_rate_per_s.unit = "req/s"

    def track_ttft_error_ms_mean(self, row: dict[str, Any]) -> float:
        return row["ttft_error_ms_mean"]

    track_ttft_error_ms_mean.unit = "ms"

    def track_ttft_error_ms_p99(self, row: dict[str, Any]) -> float:
        return row["ttft_error_ms_p99"]

    track_ttft_error_ms_p99.unit = "ms"


# --- simulated-forward server (CPU) ------------------------------------------------------
SimSpec = Literal[
    "long-prompt-burst-small"
]  # = common.FIDELITY_SPEC  # high-KV (target_kv_util 0.98), CPU-sized
SimDp = Literal[2, 4]
# Each (DP, delayer) is one SGLang start-up (~30-40 s on 2 idle cores, most of a run's
# cost). Fixed parameters (never read from the environment): other DP sizes are
# `dpbench server run SPEC --dp N --simulate-forward`.
SIM_DP_SIZES = list(get_args(SimDp))


def replayed_twin_report(
    spec: str, dp: int, delayer: bool, runs: list[dict[str, Any]], paths: list[Any], key: str
) -> None:
    """The twin replaying each of these replays' arrivals, paired with them, as `dpbench server
    fidelity` reports it (results/fidelity/main-job-<commit>-<key>.json): the dashboard's
    fidelity page shows it for the commit. A replay that lost requests fails the setting."""
    from importlib.metadata import version

    from dpbench.server import fidelity

    inp = fidelity.Inputs(
        spec=spec,
        dp=dp,
        release=version("sglang"),
        chunked_prefill_size=FIDELITY_CHUNKED_PREFILL,
        delayer=delayer,
        repeats=len(runs),
        flush_replays=True,
    )
    commit = os.environ.get("ASV_COMMIT", "local")[:8]
    fidelity.report_runs(
        inp,
        paths,
        runs,
        out_dir=run_file("server", key).parents[3] / "fidelity",
        python=sys.executable,
        stem=f"main-job-{commit}-{key}",
        made_by="the main job (asv), its flushed replays",
    )


def missing_cores(dp: int) -> str | None:
    """Why this machine cannot run the simulated server at ``dp``, or None.

    Its instrument holds (device idle ≤ 5 %, dpbench.server.health) with a CPU core per DP
    rank: DP 2 on two cores reads ≤ 0.3 %, DP 4 on two cores 1-9 % on the CPU-sized specs
    (docs/server.md) and, in the main job of 2026-12-03, 5.8-10.7 % in every replay of 0.5.16
    and over 5 % in two of 0.5.23's three: runs whose every metric is then left out as the
    instrument's. Missing hardware, so a skip naming it."""
    have = len(os.sched_getaffinity(0))
    if have >= dp:
        return None
    return (
        f"the simulated server at DP {dp} needs ≥ {dp} CPU cores for its instrument to hold "
        f"(device idle ≤ 5 %); this machine has {have}"
    )


SIM_DELAYER_ONLY = {
    "delayer_outcomes_total",
    "delayer_delay_fraction",
    "delayer_delay_fraction_prefillable",
}


def _sim_key(spec: str, dp: int, delayer: str) -> str:
    if spec not in get_args(SimSpec):
        raise ValueError(f"spec must be one of {get_args(SimSpec)}; found {spec!r}")
    if dp not in get_args(SimDp):
        raise ValueError(f"dp_size must be one of {get_args(SimDp)}; found {dp!r}")
    if delayer not in get_args(DelayerMode):
        raise ValueError(f"delayer must be one of {get_args(DelayerMode)}; found {delayer!r}")
    return f"simulated-roofline-{spec}-dp{dp}-delayer_{delayer}"


def _require_hookable() -> None:
    """Skip (one line naming the member) when this SGLang cannot be hooked for a simulated forward."""
    import json
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "dpbench.sglang_compat.simforward.check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(
            f"simforward.check printed nothing (status {proc.returncode}): {proc.stderr[-1500:]}"
        )
    verdict = json.loads(lines[-1])
    if not verdict["ok"]:
        raise NotImplementedError(f"cannot simulate this SGLang's forward: {verdict['error']}")


# Each published server setting is replayed SIM_REPLAYS times against one SGLang start-up,
# its caches flushed between replays (dpbench.server.run.execute_replays): a start-up costs
# as much as a replay on two cores, and one run's spread is as large as the effects. asv
# keeps each replay's value (--record-samples); comparisons treat them as repeats (Welch),
# never as seeds to pair. The delayer-off control runs on demand (SimulatedRooflineServeControl).
SIM_REPLAYS = 3
# what a broken instrument limit spoils (dpbench.server.health): a replay whose instrument
# spoiled a metric's scope is left out of that metric's samples
_DECISIONS = (
    "dp_mixed",
    "decode_rank",
    "dp_coop",
    "delayer_",
    "kv_pool",
    "rank_",
    "steps_",
    "false_",
)
_SCHEDULING = ("scheduler_ttft", "simulated_step")
_CLIENT = (
    "ttft",
    "tpot",
    "itl",
    "e2e",
    "goodput",
    "request_throughput",
    "output_tokens",
    "prefix_hit",
)
_INSTRUMENT = ("device_idle", "pickup", "first_token_return", "server_startup", "errors")


def _scope(name: str) -> str | None:
    if name.startswith(_INSTRUMENT):
        return None  # the instrument's own readings: always kept
    if name.startswith(_DECISIONS):
        return "decisions"
    if name.startswith(_SCHEDULING):
        return "scheduling"
    if name.startswith(_CLIENT):
        return "client"
    return None


def _kept(result: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a replay: its metrics and its instrument's verdicts."""
    return {"metrics": result["metrics"], "health": result["extra"]["instrument_health"]}


def _samples(values: list[float]) -> Any:
    seen = [float(v) for v in values if v == v]  # NaN: not measured in that replay
    return {"samples": seen, "number": 1} if seen else float("nan")


class SimulatedRooflineServe:
    """executor: simulated, cost model: roofline. SGLang's real DP-attention server on a CPU
    (HTTP, tokenizer manager, DP controller, schedulers, PrefillDelayer, radix cache,
    metrics, gloo MLP sync), only the forward simulated, per (spec, DP size, delayer).

    Tracks client latencies and throughput (in the simulated forward's time on a virtual
    device, plus whatever scheduler CPU work the overlap schedule did not hide, measured
    as device idle), the server's own delayer outcomes and DP
    cooperation counters, and the stand-in's per-step DP-mixed ground truth. A metric a
    run did not measure (the delayer's, with it off) is NaN, never 0.
    """

    params: ClassVar[tuple[list[Any], ...]] = (list(get_args(SimSpec)), SIM_DP_SIZES, ["on"])
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "delayer"]
    timeout = 3600
    # 3: virtual device (overlap hides CPU work); 4: SIM_REPLAYS replays against one server
    # (caches flushed between), asv samples over the healthy ones; delayer on only
    version = "server-simulated-roofline-4"

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.core import faults
        from dpbench.server.run import RunOptions, execute_replays, prepare

        faults.inject_if_requested("server-sim")
        try:
            _require_hookable()
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one(spec: str, dp: int, delayer: str) -> dict[str, Any]:
            opts = RunOptions(
                spec=spec,
                dp_size=dp,
                delayer=delayer == "on",
                simulate_forward=True,
                chunked_prefill_size=FIDELITY_CHUNKED_PREFILL,
                python=sys.executable,
                check_gpus=False,
            )
            runs = execute_replays(prepare(opts), SIM_REPLAYS)
            key = _sim_key(spec, dp, delayer)
            paths = [save_run("server", f"{key}-r{k}", r) for k, r in enumerate(runs)]
            replayed_twin_report(spec, dp, delayer == "on", runs, paths, key)
            return {"runs": [_kept(r) for r in runs]}

        settings = [
            (s, dp, d)
            for s in self.params[0]
            for dp in self.params[1]
            for d in self.params[2]  # the control class runs the delayer off, this one on
        ]
        too_few = {k: why for k in settings if (why := missing_cores(k[1])) is not None}
        cache = cache_settings(
            (_sim_key(*k), lambda k=k: one(*k)) for k in settings if k not in too_few
        )
        return {**cache, **{_sim_key(*k): {"skip": why} for k, why in too_few.items()}}

    setup_cache.timeout = 3600

    def setup(self, cache: dict[str, Any], spec: str, dp_size: int, delayer: str) -> None:
        self.runs = cached(cache, _sim_key(spec, dp_size, delayer))["runs"]
        self.delayer = delayer

    def _m(self, name: str) -> Any:
        """The metric over the replays whose instrument was healthy for it (asv samples, in
        replay order: repeats, never paired with another commit's); NaN when none was."""
        if name in SIM_DELAYER_ONLY:
            if self.delayer == "off":
                return float("nan")  # not measured (delayer off): absent, never 0
            values = [delayer_metric(r, name, self.delayer) for r in self._valid(name)]
        else:
            values = [metric(r, name) for r in self._valid(name)]
        return _samples(values)

    def _opt(self, name: str) -> Any:
        """As :meth:`_m` for a metric a run may leave out (not measured: absent)."""
        return _samples([optional_metric(r, name) for r in self._valid(name)])

    def _valid(self, name: str) -> list[dict[str, Any]]:
        scope = _scope(name)
        return [r for r in self.runs if scope is None or r["health"].get(f"{scope}_valid", True)]

    def track_dp_mixed_step_fraction(self, cache, spec, dp_size, delayer) -> float:
        return self._m("dp_mixed_step_fraction")

    track_dp_mixed_step_fraction.unit = "fraction"

    def track_decode_rank_s_beside_prefill(self, cache, spec, dp_size, delayer) -> float:
        return self._m("decode_rank_s_beside_prefill")

    track_decode_rank_s_beside_prefill.unit = "rank·s"

    def track_decode_rank_time_beside_prefill_fraction(
        self, cache, spec, dp_size, delayer
    ) -> float:
        return self._opt("decode_rank_time_beside_prefill_fraction")

    track_decode_rank_time_beside_prefill_fraction.unit = "fraction"

    def track_dp_coop_decode_tokens_beside_prefill_fraction(
        self, cache, spec, dp_size, delayer
    ) -> float:
        return self._opt("dp_coop_decode_tokens_beside_prefill_fraction")

    track_dp_coop_decode_tokens_beside_prefill_fraction.unit = "fraction"

    def track_delayer_outcomes(self, cache, spec, dp_size, delayer) -> float:
        return self._m("delayer_outcomes_total")

    track_delayer_outcomes.unit = "outcomes"

    def track_delayer_delay_fraction(self, cache, spec, dp_size, delayer) -> float:
        return self._m("delayer_delay_fraction")

    track_delayer_delay_fraction.unit = "fraction of outcomes"

    def track_delayer_delay_fraction_prefillable(self, cache, spec, dp_size, delayer) -> float:
        return self._m("delayer_delay_fraction_prefillable")

    track_delayer_delay_fraction_prefillable.unit = "fraction of outcomes with a prefillable rank"

    def track_ttft_ms_p50(self, cache, spec, dp_size, delayer) -> float:
        return self._m("ttft_ms_p50")

    track_ttft_ms_p50.unit = "ms"

    def track_ttft_ms_p99(self, cache, spec, dp_size, delayer) -> float:
        return self._m("ttft_ms_p99")

    track_ttft_ms_p99.unit = "ms"

    def track_tpot_ms_p99(self, cache, spec, dp_size, delayer) -> float:
        return self._m("tpot_ms_p99")

    track_tpot_ms_p99.unit = "ms"

    def track_itl_ms_p99(self, cache, spec, dp_size, delayer) -> float:
        return self._m("itl_ms_p99")

    track_itl_ms_p99.unit = "ms"

    def track_goodput_requests_per_s(self, cache, spec, dp_size, delayer) -> float:
        return self._m("goodput_requests_per_s")

    track_goodput_requests_per_s.unit = "req/s meeting TTFT ≤ 2 s and TPOT ≤ 100 ms"

    def track_request_throughput_per_s(self, cache, spec, dp_size, delayer) -> float:
        return self._m("request_throughput_per_s")

    track_request_throughput_per_s.unit = "req/s"

    def track_output_tokens_per_s(self, cache, spec, dp_size, delayer) -> float:
        return self._m("output_tokens_per_s")

    track_output_tokens_per_s.unit = "tok/s"

    def track_errors(self, cache, spec, dp_size, delayer) -> float:
        return self._m("errors_total")

    track_errors.unit = "requests"

    def track_kv_pool_occupied_max(self, cache, spec, dp_size, delayer) -> float:
        return self._m("kv_pool_occupied_max")

    track_kv_pool_occupied_max.unit = "fraction (evictable entries included)"

    def track_device_idle_fraction(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("device_idle_fraction")

    track_device_idle_fraction.unit = "fraction (virtual device idle between busy steps)"

    def track_pickup_ms_p50(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("pickup_ms_p50")

    track_pickup_ms_p50.unit = "ms (client send → the scheduler takes the request in)"

    def track_simulated_step_ms_p50(self, cache, spec, dp_size, delayer) -> float:
        return self._m("simulated_step_ms_p50")

    track_simulated_step_ms_p50.unit = "ms"

    def track_scheduler_ttft_ms_p50(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("scheduler_ttft_ms_p50")

    track_scheduler_ttft_ms_p50.unit = "ms (first token computed − planned send: the twin's TTFT)"

    def track_first_token_return_ms_p99(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("first_token_return_ms_p99")

    track_first_token_return_ms_p99.unit = "ms (first token computed → read by the client)"

    def track_rank_tokens_imbalance(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("rank_tokens_imbalance")

    track_rank_tokens_imbalance.unit = "max/mean over DP ranks"

    def track_rank_idle_while_others_wait_fraction(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("rank_idle_while_others_wait_fraction")

    track_rank_idle_while_others_wait_fraction.unit = "fraction of working steps"


class SimulatedRooflineServeControl(SimulatedRooflineServe):
    """The delayer-off control of ``SimulatedRooflineServe`` (same settings, SGLang's
    PrefillDelayer off): run on demand, `asv run -b SimulatedRooflineServeControl`; the main
    job's delayer-off controls are the twin's."""

    params: ClassVar[tuple[list[Any], ...]] = (list(get_args(SimSpec)), SIM_DP_SIZES, ["off"])
    version = "server-simulated-roofline-control-1"


TRACE_SIM_SPEC = "mooncake-conversation-small"  # 48 requests of a Mooncake window, DP 2


class SimulatedProductionTrace(SimulatedRooflineServe):
    """executor: simulated. The simulated-forward server (as ``SimulatedRooflineServe``) on a
    CPU-sized window of Mooncake's production trace at DP 2, delayer on, behind SGLang's own
    round robin: the placement's effect on real traffic per commit, with SGLang's own prefix
    hit rate. Skips, naming the file and its upstream, where the trace is not on this machine.
    The main job runs it on the placement change's pair (one SGLang start-up per commit)."""

    params: ClassVar[tuple[list[Any], ...]] = ([TRACE_SIM_SPEC], [2], ["on"])
    version = "server-simulated-production-trace-2"  # 2: SIM_REPLAYS flushed replays

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.server.run import RunOptions, execute_replays, prepare

        from .workloads import trace_path

        try:
            trace_path("mooncake")
            _require_hookable()
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one() -> dict[str, Any]:
            opts = RunOptions(
                spec=TRACE_SIM_SPEC,
                dp_size=2,
                simulate_forward=True,
                chunked_prefill_size=FIDELITY_CHUNKED_PREFILL,
                python=sys.executable,
                check_gpus=False,
            )
            runs = execute_replays(prepare(opts), SIM_REPLAYS)
            key = f"simulated-production-trace-{TRACE_SIM_SPEC}-dp2"
            paths = [save_run("server", f"{key}-r{k}", r) for k, r in enumerate(runs)]
            replayed_twin_report(TRACE_SIM_SPEC, 2, True, runs, paths, key)
            return {"runs": [_kept(r) for r in runs]}

        return cache_settings([(TRACE_SIM_SPEC, one)])

    setup_cache.timeout = 3600

    def setup(self, cache: dict[str, Any], spec: str, dp_size: int, delayer: str) -> None:
        self.runs = cached(cache, spec)["runs"]
        self.delayer = delayer

    def track_prefix_hit_rate(self, cache, spec, dp_size, delayer) -> float:
        return self._opt("prefix_hit_rate")

    track_prefix_hit_rate.unit = "fraction of prompt tokens SGLang found cached"
