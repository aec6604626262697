"""Twin tier: SGLang's real PrefillAdder + PrefillDelayer on N DP ranks, simulated time (CPU only).

``TwinHighKV`` replays the shipped high-KV specs on 2, 4 and 8 ranks at SGLang's H200
chunked-prefill size (``TwinHeadline`` has twice it), with the delayer on and off, over a seed set
(in-process ranks: identical numbers to gloo processes, tested); ``TwinScale`` times
4 ranks × 2,000 requests of long-prompt-burst in both rank modes (threads and gloo
processes); ``SchedulerPass`` times one rank's scheduler pass on a saturated KV pool.
``PublishedClock`` holds the cost model against published DeepSeek serving figures
(predicted / published per figure and cost profile; no SGLang).
Scenario errors propagate (``asv run`` fails naming the benchmark); only an SGLang
whose API shape is unsupported skips.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar, Literal, get_args

from .common import (
    FIDELITY_CHUNKED_PREFILL,
    FIDELITY_SPEC,
    bench_jobs,
    cache_settings,
    cached,
    delayer_metric,
    metric,
    require_sglang,
    save_run,
)

SpecName = Literal[
    "long-prompt-burst", "agentic-multiturn", "long-context-chat"
]  # target_kv_util ≥ 0.85
DpSize = Literal[2, 4, 8]
ChunkedPrefill = Literal[
    "default", "2x"
]  # global --chunked-prefill-size: SGLang's H200 8192, and 16384
DelayerMode = Literal["on", "off"]
CHUNK_SIZES = {"default": 8192, "2x": 16384}
HIGH_KV_REQUESTS = (
    128  # per run: 18 settings × len(SEEDS) runs in one setup_cache on a 2-core runner
)
SEEDS = (0, 1, 2)  # each track value is asv's median of these seeds, with asv's interval over them
SCALE_REQUESTS = 2000
# The twin drives both the adder and the delayer; an unknown shape of either skips.
TWIN_COMPONENTS = ("adder", "delayer")
DELAYER_ONLY = {  # metrics that exist only with the delayer on (absent, not 0, without it)
    "false_prefillable_reports_count",
    "false_report_mixed_steps_count",
    "delayer_delay_count",
}


def _key(spec: str, dp: int, chunk: str, delayer: str, seed: int) -> str:
    if spec not in get_args(SpecName):
        raise ValueError(f"spec must be one of {get_args(SpecName)}; found {spec!r}")
    if dp not in get_args(DpSize):
        raise ValueError(f"dp_size must be one of {get_args(DpSize)}; found {dp!r}")
    if chunk not in CHUNK_SIZES:
        raise ValueError(f"chunked_prefill must be one of {tuple(CHUNK_SIZES)}; found {chunk!r}")
    if delayer not in get_args(DelayerMode):
        raise ValueError(f"delayer must be one of {get_args(DelayerMode)}; found {delayer!r}")
    return f"{spec}-dp{dp}-chunk{CHUNK_SIZES[chunk]}-delayer_{delayer}-seed{seed}"


def _run(
    spec: str,
    dp: int,
    delayer: str,
    requests: int,
    *,
    chunk: int = 8192,
    seed: int | None = None,
    rank_mode: str = "threads",
) -> dict[str, Any]:
    from dpbench.twin.config import make_config
    from dpbench.twin.run import run_twin

    config = make_config(
        dp_size=dp,
        enable_prefill_delayer=delayer == "on",
        chunked_prefill_size=chunk,
        rank_mode=rank_mode,
        record_timeline=False,
        deadline_s=900.0,
    )
    return run_twin(spec, config, num_requests=requests, seed=seed)


def _scenario_key(spec: str, dp: int, delayer: str) -> str:
    return f"server-scenario-{spec}-dp{dp}-delayer_{delayer}"


class TwinHighKV:
    """Per (spec, DP size, chunk size, delayer), over SEEDS: DP-mixed steps, decode-rank time beside
    prefill, false reports, delayer verdicts, simulated TTFT/throughput.

    Each track returns ``{"samples": [one value per seed], "number": 1}``: asv 0.6.6 treats a
    result with ``samples`` and ``number`` like a timing (``asv.runner`` reads it, and
    ``asv_runner.statistics.compute_stats`` turns it into the median with a 99 % interval
    and quartiles), so the dashboard draws the seed spread and ``asv compare`` only calls a
    change whose intervals separate. A metric the run does not measure (the delayer's,
    with the delayer off) is NaN: asv shows n/a, never a 0.
    """

    # SGLang's H200 chunk size only: twice it is TwinHeadline's, on the full spec where the
    # pool fills (these 128-request runs seldom fill it), which keeps the main job's cost
    params: ClassVar[tuple[list[Any], ...]] = (
        list(get_args(SpecName)),
        list(get_args(DpSize)),
        ["default"],
        list(get_args(DelayerMode)),
    )
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "chunked_prefill", "delayer"]
    timeout = 3600
    # 3: batch_is_full reset after an extend with the chunked request; 4: the default chunk only
    version = "twin-high-kv-4"

    def setup_cache(self) -> dict[str, Any]:
        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one(spec: str, dp: int, chunk: str, delayer: str, seed: int) -> dict[str, Any]:
            result = _run(spec, dp, delayer, HIGH_KV_REQUESTS, chunk=CHUNK_SIZES[chunk], seed=seed)
            save_run("twin", _key(spec, dp, chunk, delayer, seed), result)
            return {"metrics": result["metrics"]}

        return cache_settings(
            ((_key(*k), lambda k=k: one(*k)) for k in itertools.product(*self.params, SEEDS)),
            jobs=bench_jobs(),
        )

    setup_cache.timeout = 7200

    def setup(self, cache, spec, dp_size, chunked_prefill, delayer) -> None:
        self.runs = [cached(cache, _key(spec, dp_size, chunked_prefill, delayer, s)) for s in SEEDS]
        self.delayer = delayer

    def _m(self, name: str) -> Any:
        if name in DELAYER_ONLY:
            values = [delayer_metric(r, name, self.delayer) for r in self.runs]
            if self.delayer == "off":
                return float("nan")  # not measured (delayer off): absent, never 0
            return {"samples": [float(v) for v in values], "number": 1}
        return {"samples": [float(metric(r, name)) for r in self.runs], "number": 1}

    def track_dp_mixed_step_fraction(self, *p) -> Any:
        return self._m("dp_mixed_step_fraction")

    track_dp_mixed_step_fraction.unit = "fraction of steps"

    def track_decode_rank_s_beside_prefill(self, *p) -> Any:
        return self._m("decode_rank_s_beside_prefill")

    track_decode_rank_s_beside_prefill.unit = "decode-rank s (simulated)"

    def track_decode_rank_time_beside_prefill_fraction(self, *p) -> Any:
        return self._m("decode_rank_time_beside_prefill_fraction")

    track_decode_rank_time_beside_prefill_fraction.unit = "fraction of decode-rank time"

    def track_false_prefillable_reports(self, *p) -> Any:
        return self._m("false_prefillable_reports_count")

    track_false_prefillable_reports.unit = "reports"

    def track_false_report_mixed_steps(self, *p) -> Any:
        return self._m("false_report_mixed_steps_count")

    track_false_report_mixed_steps.unit = "steps"

    def track_delay_passes(self, *p) -> Any:
        return self._m("delayer_delay_count")

    track_delay_passes.unit = "rank passes"

    def track_ttft_ms_p50(self, *p) -> Any:
        return self._m("ttft_ms_p50")

    track_ttft_ms_p50.unit = "ms (simulated)"

    def track_ttft_ms_p99(self, *p) -> Any:
        return self._m("ttft_ms_p99")

    track_ttft_ms_p99.unit = "ms (simulated)"

    def track_tpot_ms_p99(self, *p) -> Any:
        return self._m("tpot_ms_p99")

    track_tpot_ms_p99.unit = "ms (simulated)"

    def track_itl_ms_p99(self, *p) -> Any:
        return self._m("itl_ms_p99")

    track_itl_ms_p99.unit = "ms (simulated)"

    def track_goodput_requests_per_s(self, *p) -> Any:
        return self._m("goodput_requests_per_s")

    track_goodput_requests_per_s.unit = "req/s meeting TTFT ≤ 2 s and TPOT ≤ 100 ms (simulated)"

    def track_output_tokens_per_s(self, *p) -> Any:
        return self._m("output_tokens_per_s")

    track_output_tokens_per_s.unit = "tok/s (simulated)"

    def track_request_throughput(self, *p) -> Any:
        return self._m("request_throughput_req_per_s")

    track_request_throughput.unit = "req/s (simulated)"

    def track_kv_utilization_max(self, *p) -> Any:
        return self._m("kv_utilization_max")

    track_kv_utilization_max.unit = "fraction"

    def track_requests_finished_count(self, *p) -> Any:
        return self._m("requests_finished_count")

    # with kv_pool_occupied_max and the seed count, what regime a published setting shows
    track_requests_finished_count.unit = "requests finished per run"

    def track_kv_pool_occupied_max(self, *p) -> Any:
        return self._m("kv_pool_occupied_max")

    track_kv_pool_occupied_max.unit = "fraction (evictable entries included)"

    def track_retractions(self, *p) -> Any:
        return self._m("retractions_count")

    track_retractions.unit = "requests"

    def track_rank_tokens_imbalance(self, *p) -> Any:
        return self._m("rank_tokens_imbalance")

    track_rank_tokens_imbalance.unit = "max/mean over DP ranks"

    def track_rank_idle_while_others_wait_fraction(self, *p) -> Any:
        return self._m("rank_idle_while_others_wait_fraction")

    track_rank_idle_while_others_wait_fraction.unit = "fraction of working steps"


HEADLINE_SPEC = "long-prompt-burst"
# the whole spec: four bursts of 256 × 8k-token prompts, the pool at ~100 % for minutes, where
# the README's findings are made (128 requests, TwinHighKV's, never fill it)
HEADLINE_REQUESTS = 1024
# paired by seed between commits (the same seeds for every commit of this version): at the
# 20-seed sweep's per-seed spread, 5 seeds resolve its 0.5.16 → 0.5.17 changes
HEADLINE_SEEDS = (0, 1, 2, 3, 4)


class TwinHeadline(TwinHighKV):
    """The README's headline settings: the full long-prompt-burst (1,024 requests) at DP 4 and
    8, chunk 8192 and 16384, delayer on, 5 seeds. Every track returns the per-seed values in
    seed order, so two commits compare seed by seed (asv's --record-samples keeps them):
    the paired difference and its interval, as ``dpbench twin sweep`` gives. The pool
    utilisation each setting reached is a track too (``kv_pool_occupied_max``), so a page
    says which regime it shows. The main job runs it on the placement change's pair."""

    params: ClassVar[tuple[list[Any], ...]] = ([4, 8], list(get_args(ChunkedPrefill)))
    param_names: ClassVar[list[str]] = ["dp_size", "chunked_prefill"]
    timeout = 3600
    version = "twin-headline-1"

    def setup_cache(self) -> dict[str, Any]:
        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one(dp: int, chunk: str, seed: int) -> dict[str, Any]:
            result = _run(
                HEADLINE_SPEC, dp, "on", HEADLINE_REQUESTS, chunk=CHUNK_SIZES[chunk], seed=seed
            )
            key = f"headline-{_key(HEADLINE_SPEC, dp, chunk, 'on', seed)}"
            save_run("twin", key, result)
            return {"metrics": result["metrics"]}

        return cache_settings(
            (
                (f"{dp}-{chunk}-{seed}", lambda k=(dp, chunk, seed): one(*k))
                for dp, chunk, seed in itertools.product(
                    self.params[0], self.params[1], HEADLINE_SEEDS
                )
            ),
            jobs=bench_jobs(),
        )

    setup_cache.timeout = 7200

    def setup(self, cache, dp_size, chunked_prefill) -> None:
        self.runs = [cached(cache, f"{dp_size}-{chunked_prefill}-{s}") for s in HEADLINE_SEEDS]
        self.delayer = "on"


CAPACITY_SPEC = "long-context-chat"  # gamma arrivals: a load with an SLO edge (bursts have none)
CAPACITY_REQUESTS = 300
CAPACITY_SEEDS = (0, 1, 2)
CAPACITY_ATTAINMENT = 0.95  # of requests within dpbench.twin.capacity.BENCH_SLO
CAPACITY_RANGE = (1 / 16, 4.0, 4)  # lo, hi (× the spec's rate), bisection halvings


class TwinCapacity:
    """Capacity at SLO (dpbench.twin.capacity): the highest offered rate, as a multiple of
    long-context-chat's, at which 95 % of 300 requests meet TTFT ≤ 5 s and TPOT ≤ 250 ms, by
    bisection over the twin at DP 4 and 8, per seed (paired between commits); and what the
    search cost in wall time. The main job runs it on the placement change's pair."""

    params: ClassVar[list[list[int]]] = [[4, 8]]
    param_names: ClassVar[list[str]] = ["dp_size"]
    timeout = 3600
    version = "twin-capacity-1"  # the same seeds and numbers when searched per (DP, seed)

    def setup_cache(self) -> dict[str, Any]:
        import time

        from dpbench.twin.capacity import BENCH_SLO, capacity_release
        from dpbench.twin.sweep import arm_base_config

        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        lo, hi, steps = CAPACITY_RANGE

        def one(dp: int, seed: int) -> dict[str, Any]:
            t0 = time.perf_counter()
            found = capacity_release(
                CAPACITY_SPEC,
                seeds=[seed],
                dps=[dp],
                chunks=[8192],
                requests=CAPACITY_REQUESTS,
                base=arm_base_config(BENCH_SLO),
                attainment=CAPACITY_ATTAINMENT,
                lo=lo,
                hi=hi,
                steps=steps,
            )
            return {"rows": found["rows"], "wall_s": time.perf_counter() - t0}

        # one search per (DP, seed): the DP-8 searches are the long ones, so these share
        # the cores better than one setting per DP size
        return cache_settings(
            (
                (f"{dp}-{seed}", lambda k=(dp, seed): one(*k))
                for dp, seed in itertools.product(self.params[0], CAPACITY_SEEDS)
            ),
            jobs=bench_jobs(),
        )

    setup_cache.timeout = 7200

    def setup(self, cache, dp_size) -> None:
        searches = [cached(cache, f"{dp_size}-{seed}") for seed in CAPACITY_SEEDS]
        self.found = {
            "rows": [row for f in searches for row in f["rows"]],
            "wall_s": sum(f["wall_s"] for f in searches),
        }

    def track_capacity_at_slo(self, cache, dp_size) -> Any:
        caps = [r["capacity"] for r in self.found["rows"] if r["bound"] == "bracket"]
        if len(caps) != len(self.found["rows"]):  # an edge outside the range: not a number
            raise ValueError(
                f"capacity outside the searched range for seeds "
                f"{[r['seed'] for r in self.found['rows'] if r['bound'] != 'bracket']}: "
                f"{[r['bound'] for r in self.found['rows']]}; widen CAPACITY_RANGE"
            )
        return {"samples": caps, "number": 1}

    track_capacity_at_slo.unit = "× long-context-chat's rate (95 % within TTFT 5 s, TPOT 250 ms)"

    def track_capacity_search_wall_s(self, cache, dp_size) -> float:
        return self.found["wall_s"]

    track_capacity_search_wall_s.unit = "s (wall, summed over 3 seeds' searches of 6 runs)"


LOAD_RATES = [0.25, 0.5, 1.0, 2.0]  # × long-context-chat's rate


class TwinLoad(TwinHighKV):
    """Latency against offered load: long-context-chat (300 requests, DP 4, 3 seeds) at 0.25 …
    2 × its rate, TTFT p99, TPOT p99, goodput and SLO attainment per rate (the dashboard's
    latency-load chart: one line per commit, the SLO drawn: dpbench.twin.capacity.BENCH_SLO)."""

    params: ClassVar[list[list[float]]] = [LOAD_RATES]
    param_names: ClassVar[list[str]] = ["rate_scale"]
    timeout = 3600
    version = "twin-load-1"

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.twin.capacity import BENCH_SLO
        from dpbench.twin.config import make_config
        from dpbench.twin.run import run_twin

        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one(rate: float, seed: int) -> dict[str, Any]:
            config = make_config(
                dp_size=4,
                rate_scale=rate,
                rank_mode="threads",
                record_timeline=False,
                deadline_s=900.0,
                **BENCH_SLO,
            )
            result = run_twin(CAPACITY_SPEC, config, num_requests=CAPACITY_REQUESTS, seed=seed)
            save_run("twin", f"load-{CAPACITY_SPEC}-dp4-rate{rate:g}-seed{seed}", result)
            return {"metrics": result["metrics"]}

        return cache_settings(
            (
                (f"{rate}-{seed}", lambda k=(rate, seed): one(*k))
                for rate, seed in itertools.product(LOAD_RATES, CAPACITY_SEEDS)
            ),
            jobs=bench_jobs(),
        )

    setup_cache.timeout = 7200

    def setup(self, cache, rate_scale) -> None:
        self.runs = [cached(cache, f"{rate_scale}-{s}") for s in CAPACITY_SEEDS]
        self.delayer = "on"

    def track_slo_attainment(self, *p) -> Any:
        return self._m("slo_attainment")

    track_slo_attainment.unit = "fraction within TTFT 5 s and TPOT 250 ms"


FidelityDp = Literal[2, 4]


class TwinOnServerScenario(TwinHighKV):
    """The twin on exactly the simulated-forward server's asv scenario (spec and its own seed,
    DP size, global chunk size, delayer; one GPU per DP rank as the server's cost model), so
    the dashboard's fidelity view can put the two side by side per commit. One run each (the
    server runs the spec's seed once), so values are plain numbers, not seed sets.
    """

    params: ClassVar[tuple[list[Any], ...]] = (
        [FIDELITY_SPEC],
        list(get_args(FidelityDp)),
        list(get_args(DelayerMode)),
    )
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "delayer"]
    timeout = 1800
    version = "twin-on-server-scenario-2"  # 2: batch_is_full reset after a chunk (as SGLang)

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.twin.config import make_config
        from dpbench.twin.run import run_twin

        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one(dp: int, delayer: str) -> dict[str, Any]:
            config = make_config(
                dp_size=dp,
                tp_size=dp,
                enable_prefill_delayer=delayer == "on",
                chunked_prefill_size=FIDELITY_CHUNKED_PREFILL,
                rank_mode="threads",
                record_timeline=False,
                deadline_s=900.0,
            )
            result = run_twin(FIDELITY_SPEC, config)
            save_run("twin", _scenario_key(FIDELITY_SPEC, dp, delayer), result)
            return result

        return cache_settings(
            (
                (_scenario_key(FIDELITY_SPEC, dp, d), lambda dp=dp, d=d: one(dp, d))
                for dp in get_args(FidelityDp)
                for d in get_args(DelayerMode)
            ),
            jobs=bench_jobs(),
        )

    setup_cache.timeout = 1800

    def setup(self, cache, spec, dp_size, delayer) -> None:
        self.result = cached(cache, _scenario_key(spec, dp_size, delayer))
        self.delayer = delayer

    def _m(self, name: str) -> Any:
        if name in DELAYER_ONLY or name.startswith("delayer_"):
            return delayer_metric(self.result, name, self.delayer)
        return metric(self.result, name)

    def track_delayer_delay_fraction(self, *p) -> float:
        return self._m("delayer_delay_fraction")

    track_delayer_delay_fraction.unit = "fraction of outcomes"

    def track_delayer_delay_fraction_prefillable(self, *p) -> float:
        return self._m("delayer_delay_fraction_prefillable")

    track_delayer_delay_fraction_prefillable.unit = "fraction of outcomes with a prefillable rank"


RankMode = Literal["threads", "processes"]


class TwinScale:
    """4 ranks × 2,000 requests of long-prompt-burst in each rank mode: wall time, passes/s, and the
    pass's wall time over the ranks' summed own work (target ≤ 2 for threads; identical simulated
    numbers in both modes are a test, not a benchmark)."""

    params: ClassVar[list[list[str]]] = [list(get_args(RankMode))]
    param_names: ClassVar[list[str]] = ["rank_mode"]
    timeout = 1800
    version = "twin-scale-3"  # 3: batch_is_full reset after a chunk (as SGLang)

    def setup_cache(self) -> dict[str, Any]:
        try:
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        out: dict[str, Any] = {}
        for mode in get_args(RankMode):
            result = _run("long-prompt-burst", 4, "on", SCALE_REQUESTS, rank_mode=mode)
            save_run("twin", f"scale-long-prompt-burst-dp4-2000-{mode}", result)
            out[mode] = {"metrics": result["metrics"], "wall_time_s": result["wall_time_s"]}
        return out

    setup_cache.timeout = 1800

    def setup(self, cache: dict[str, Any], rank_mode: str) -> None:
        if "skip" in cache:
            raise NotImplementedError(cache["skip"])
        self.run = cache[rank_mode]

    def track_wall_time_s(self, cache: dict[str, Any], rank_mode: str) -> float:
        return self.run["wall_time_s"]

    track_wall_time_s.unit = "s (wall, incl. SGLang import)"

    def track_passes_per_s(self, cache: dict[str, Any], rank_mode: str) -> float:
        return metric(self.run, "passes_per_s")

    track_passes_per_s.unit = "lockstep passes/s (wall)"

    def track_pass_wall_over_rank_work(self, cache: dict[str, Any], rank_mode: str) -> float:
        return metric(self.run, "pass_wall_over_rank_work")

    track_pass_wall_over_rank_work.unit = "ratio (wall / summed rank CPU)"

    def track_scheduler_pass_us_p50(self, cache: dict[str, Any], rank_mode: str) -> float:
        return metric(self.run, "scheduler_pass_us_p50")

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


TraceDispatch = Literal["round_robin", "cache_aware"]
TRACE_SPEC = "mooncake-conversation"  # windows of the shared Mooncake trace
TRACE_WINDOWS = (0, 1, 2)  # disjoint 2-minute windows of the trace: a real trace's repeats
TRACE_REQUESTS = 96  # the first requests of each window, for a 2-core main job


class TwinProductionTrace(TwinHighKV):
    """Real traffic: windows of Mooncake's Kimi conversation trace (its arrivals, lengths and
    prefix sharing) at DP 4, dispatched round robin (SGLang's default) or cache-aware (SGLang's
    router in front), delayer on (``TwinProductionTraceDp8``: the same at DP 8). Samples are the
    windows, the same ones for every commit. Skips, naming the file and where to get it, where
    the trace is not on this machine.
    """

    params: ClassVar[tuple[list[Any], ...]] = ([4], list(get_args(TraceDispatch)))
    param_names: ClassVar[list[str]] = ["dp_size", "dispatch"]
    timeout = 3600
    version = "twin-production-trace-1"

    def setup_cache(self) -> dict[str, Any]:
        from dpbench.twin.config import make_config
        from dpbench.twin.run import run_twin

        from .workloads import trace_path

        try:
            trace_path("mooncake")
            require_sglang(TWIN_COMPONENTS)
        except NotImplementedError as exc:
            return {"skip": str(exc)}

        def one(dp: int, dispatch: str, window: int) -> dict[str, Any]:
            config = make_config(
                dp_size=dp,
                dispatch=dispatch,
                rank_mode="threads",
                record_timeline=False,
                deadline_s=900.0,
            )
            result = run_twin(TRACE_SPEC, config, num_requests=TRACE_REQUESTS, seed=window)
            save_run("twin", f"{TRACE_SPEC}-dp{dp}-{dispatch}-window{window}", result)
            return {"metrics": result["metrics"]}

        return cache_settings(
            (
                (f"{dp}-{d}-{w}", lambda k=(dp, d, w): one(*k))
                for dp, d, w in itertools.product(self.params[0], self.params[1], TRACE_WINDOWS)
            ),
            jobs=bench_jobs(),
        )

    setup_cache.timeout = 7200

    def setup(self, cache, dp_size, dispatch) -> None:
        self.runs = [cached(cache, f"{dp_size}-{dispatch}-{w}") for w in TRACE_WINDOWS]
        self.delayer = "on"

    def track_prefix_hit_rate(self, *p) -> Any:
        return self._m("prefix_hit_rate")

    track_prefix_hit_rate.unit = "fraction of prompt tokens found in the rank's radix cache"


class TwinProductionTraceDp8(TwinProductionTrace):
    """:class:`TwinProductionTrace` at DP 8 (2-3× its cost on two cores: the main job leaves it
    to ``asv run -b TwinProductionTraceDp8``)."""

    params: ClassVar[tuple[list[Any], ...]] = ([8], list(get_args(TraceDispatch)))
    version = "twin-production-trace-dp8-1"


# The published DeepSeek serving figures (dpbench/data/published-serving.yaml), by id; a test
# checks this list against the table.
PublishedFigure = Literal[
    "T1-req",
    "T1-out",
    "T1-total",
    "T1-user",
    "L1-1k",
    "L1-2k",
    "L1-4k",
    "L2",
    "L3",
    "D1-prefill",
    "D1-decode",
    "F1-bw",
    "F1-flops",
]
CostProfileName = Literal["roofline", "published-fit"]


class PublishedClock:
    """The twin's clock against published DeepSeek serving figures: the cost model run on each
    published set-up, predicted / published per figure and cost profile (``dpbench twin
    clock``; no SGLang). 1 is a perfect prediction; neither side of it is better."""

    params: ClassVar[tuple[list[Any], ...]] = (
        list(get_args(PublishedFigure)),
        list(get_args(CostProfileName)),
    )
    param_names: ClassVar[list[str]] = ["figure", "cost_profile"]
    version = "published-clock-1"

    def setup_cache(self) -> dict[str, dict[str, float]]:
        from dpbench.twin.clock import clock_rows

        return {r.figure: {p: r.ratio(p) for p in r.predicted} for r in clock_rows()}

    def setup(self, cache, figure, cost_profile) -> None:
        if figure not in cache:
            raise ValueError(f"figure must be one of {sorted(cache)}; found {figure!r}")
        if cost_profile not in get_args(CostProfileName):
            raise ValueError(
                f"cost_profile must be one of {get_args(CostProfileName)}; found {cost_profile!r}"
            )

    def track_predicted_over_published(self, cache, figure, cost_profile) -> float:
        return cache[figure][cost_profile]

    track_predicted_over_published.unit = "predicted / published"
