"""Twin tier: SGLang's real PrefillAdder + PrefillDelayer on N DP ranks, simulated time (CPU only).

``TwinHighKV`` replays the shipped high-KV specs on 2, 4 and 8 ranks at SGLang's H200
chunked-prefill size (``TwinHeadline`` has twice it), with the delayer on and off, over a seed set
(in-process ranks: identical numbers to gloo processes, tested); ``TwinScale`` times
4 ranks × 2,000 requests of long-prompt-burst in both rank modes (threads and gloo
processes); ``SchedulerPass`` times one rank's scheduler pass on a saturated KV pool.
``PublishedClock`` holds the cost model against published DeepSeek serving figures
(predicted / published per figure and cost profile; no SGLang).
Each ``setup_cache`` is one call into :mod:`dpbench.twin.bench`. Scenario errors propagate
(``asv run`` fails naming the benchmark); only an SGLang whose API shape is unsupported skips.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal, get_args

from dpbench.twin import bench

from .common import (
    FIDELITY_CHUNKED_PREFILL,
    FIDELITY_SPEC,
    SUITE_SLO,
    OneRun,
    SeedRuns,
    Track,
    check_slo,
    entries,
    entry,
    goodput,
    require_sglang,
    slo_track,
    tracks,
)

SpecName = Literal[
    "long-prompt-burst", "agentic-multiturn", "long-context-chat"
]  # target_kv_util ≥ 0.85
DpSize = Literal[2, 4, 8]
ChunkedPrefill = Literal["default", "2x"]  # bench.CHUNK_SIZES: SGLang's H200 8192, and 16384
DelayerMode = Literal["on", "off"]
HIGH_KV_REQUESTS = (
    128  # per run: 18 settings × len(SEEDS) runs in one setup_cache on a 2-core runner
)
SEEDS = (0, 1, 2)  # each track value is asv's median of these seeds, with asv's interval over them
SIM = " (simulated)"


def seed_tracks() -> dict[str, Track]:
    """The twin's tracks per setting (the dashboard's and the README's metrics)."""
    return {
        "dp_mixed_step_fraction": Track("dp_mixed_step_fraction", "fraction of steps"),
        "decode_rank_s_beside_prefill": Track(
            "decode_rank_s_beside_prefill", "decode-rank s (simulated)"
        ),
        "decode_rank_time_beside_prefill_fraction": Track(
            "decode_rank_time_beside_prefill_fraction", "fraction of decode-rank time"
        ),
        "false_prefillable_reports": Track(
            "false_prefillable_reports_count", "reports", delayer_only=True
        ),
        "false_report_mixed_steps": Track(
            "false_report_mixed_steps_count", "steps", delayer_only=True
        ),
        "delay_passes": Track("delayer_delay_count", "rank passes", delayer_only=True),
        "ttft_ms_p50": Track("ttft_ms_p50", "ms" + SIM),
        "ttft_ms_p99": Track("ttft_ms_p99", "ms" + SIM),
        "tpot_ms_p99": Track("tpot_ms_p99", "ms" + SIM),
        "itl_ms_p99": Track("itl_ms_p99", "ms" + SIM),
        "goodput_requests_per_s": goodput(SUITE_SLO, SIM),
        "output_tokens_per_s": Track("output_tokens_per_s", "tok/s" + SIM),
        "request_throughput": Track("request_throughput_req_per_s", "req/s" + SIM),
        "kv_utilization_max": Track("kv_utilization_max", "fraction"),
        # with kv_pool_occupied_max and the seed count, what regime a published setting shows
        "requests_finished_count": Track("requests_finished_count", "requests finished per run"),
        "kv_pool_occupied_max": Track(
            "kv_pool_occupied_max", "fraction (evictable entries included)"
        ),
        "retractions": Track("retractions_count", "requests"),
        "rank_tokens_imbalance": Track("rank_tokens_imbalance", "max/mean over DP ranks"),
        "rank_idle_while_others_wait_fraction": Track(
            "rank_idle_while_others_wait_fraction", "fraction of working steps"
        ),
    }


@tracks(seed_tracks())
class TwinHighKV(SeedRuns):
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
        return bench.high_kv(self.params, SEEDS, requests=HIGH_KV_REQUESTS)

    setup_cache.timeout = 7200

    def setup(self, cache, spec, dp_size, chunked_prefill, delayer) -> None:
        self.runs = entries(cache, (spec, dp_size, chunked_prefill, delayer), SEEDS)
        self.delayer = delayer


HEADLINE_SPEC = "long-prompt-burst"
# the whole spec: four bursts of 256 × 8k-token prompts, the pool at ~100 % for minutes, where
# the README's findings are made (128 requests, TwinHighKV's, never fill it)
HEADLINE_REQUESTS = 1024
# paired by seed between commits (the same seeds for every commit of this version): at the
# 20-seed sweep's per-seed spread, 5 seeds resolve its 0.5.16 → 0.5.17 changes
HEADLINE_SEEDS = (0, 1, 2, 3, 4)


@tracks(seed_tracks())
class TwinHeadline(SeedRuns):
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
        return bench.headline(
            self.params, HEADLINE_SEEDS, spec=HEADLINE_SPEC, requests=HEADLINE_REQUESTS
        )

    setup_cache.timeout = 7200

    def setup(self, cache, dp_size, chunked_prefill) -> None:
        self.runs = entries(cache, (dp_size, chunked_prefill), HEADLINE_SEEDS)
        self.delayer = "on"


CAPACITY_SPEC = "long-context-chat"  # gamma arrivals: a load with an SLO edge (bursts have none)
CAPACITY_REQUESTS = 300
CAPACITY_SEEDS = (0, 1, 2)
CAPACITY_ATTAINMENT = 0.95  # of requests within the suite's SLO
CAPACITY_RANGE = (1 / 16, 4.0, 4)  # lo, hi (× the spec's rate), bisection halvings


@tracks(
    {
        "capacity_at_slo": slo_track(
            "capacity_at_slo", "× long-context-chat's rate (95 % within {slo})", SUITE_SLO
        ),
        "capacity_search_wall_s": Track(
            "capacity_search_wall_s", "s (wall, summed over 3 seeds' searches of 6 runs)"
        ),
    }
)
class TwinCapacity:
    """Capacity at SLO (dpbench.twin.capacity): the highest offered rate, as a multiple of
    long-context-chat's, at which 95 % of 300 requests meet the suite's SLO, by bisection over
    the twin at DP 4 and 8, per seed (paired between commits); and what the search cost in
    wall time. The main job runs it on the placement change's pair."""

    params: ClassVar[list[list[int]]] = [[4, 8]]
    param_names: ClassVar[list[str]] = ["dp_size"]
    timeout = 3600
    version = "twin-capacity-1"  # the same seeds and numbers when searched per (DP, seed)

    def setup_cache(self) -> dict[str, Any]:
        return bench.capacity(
            self.params,
            CAPACITY_SEEDS,
            spec=CAPACITY_SPEC,
            requests=CAPACITY_REQUESTS,
            attainment=CAPACITY_ATTAINMENT,
            rates=CAPACITY_RANGE,
        )

    setup_cache.timeout = 7200

    def setup(self, cache, dp_size) -> None:
        self.searches = entries(cache, (dp_size,), CAPACITY_SEEDS)

    def read(self, row: Track) -> Any:
        check_slo(row, self.searches)
        if row.metric == "capacity_at_slo":
            return {"samples": bench.capacity_samples(self.searches), "number": 1}
        return sum(s["wall_s"] for s in self.searches)


LOAD_RATES = [0.25, 0.5, 1.0, 2.0]  # × long-context-chat's rate


@tracks(
    {
        **seed_tracks(),
        "slo_attainment": slo_track("slo_attainment", "fraction within {slo}", SUITE_SLO),
    }
)
class TwinLoad(SeedRuns):
    """Latency against offered load: long-context-chat (300 requests, DP 4, 3 seeds) at 0.25 …
    2 × its rate, TTFT p99, TPOT p99, goodput and SLO attainment per rate (the dashboard's
    latency-load chart: one line per commit, the suite's SLO drawn)."""

    params: ClassVar[list[list[float]]] = [LOAD_RATES]
    param_names: ClassVar[list[str]] = ["rate_scale"]
    timeout = 3600
    version = "twin-load-1"

    def setup_cache(self) -> dict[str, Any]:
        return bench.load(
            self.params, CAPACITY_SEEDS, spec=CAPACITY_SPEC, dp=4, requests=CAPACITY_REQUESTS
        )

    setup_cache.timeout = 7200

    def setup(self, cache, rate_scale) -> None:
        self.runs = entries(cache, (rate_scale,), CAPACITY_SEEDS)
        self.delayer = "on"


FidelityDp = Literal[2, 4]


def scenario_tracks() -> dict[str, Track]:
    """:func:`seed_tracks` as plain numbers of one run, and the delayer's verdict fractions."""
    rows = {
        **seed_tracks(),
        "delayer_delay_fraction": Track("delayer_delay_fraction", "fraction of outcomes"),
        "delayer_delay_fraction_prefillable": Track(
            "delayer_delay_fraction_prefillable", "fraction of outcomes with a prefillable rank"
        ),
    }
    # a metric only the delayer produces: NaN (not measured) with it off
    return {
        name: replace(row, delayer_only=row.delayer_only or row.metric.startswith("delayer_"))
        for name, row in rows.items()
    }


@tracks(scenario_tracks())
class TwinOnServerScenario(OneRun):
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
        return bench.on_server_scenario(self.params, chunk=FIDELITY_CHUNKED_PREFILL)

    setup_cache.timeout = 1800

    def setup(self, cache, spec, dp_size, delayer) -> None:
        self.result = entry(cache, (spec, dp_size, delayer))
        self.delayer = delayer


RankMode = Literal["threads", "processes"]
SCALE_REQUESTS = 2000


@tracks(
    {
        "wall_time_s": Track("wall_time_s", "s (wall, incl. SGLang import)"),
        "passes_per_s": Track("passes_per_s", "lockstep passes/s (wall)"),
        "pass_wall_over_rank_work": Track(
            "pass_wall_over_rank_work", "ratio (wall / summed rank CPU)"
        ),
        "scheduler_pass_us_p50": Track("scheduler_pass_us_p50", "us (wall)"),
    }
)
class TwinScale(OneRun):
    """4 ranks × 2,000 requests of long-prompt-burst in each rank mode: wall time, passes/s, and the
    pass's wall time over the ranks' summed own work (target ≤ 2 for threads; identical simulated
    numbers in both modes are a test, not a benchmark)."""

    params: ClassVar[list[list[str]]] = [list(get_args(RankMode))]
    param_names: ClassVar[list[str]] = ["rank_mode"]
    timeout = 1800
    version = "twin-scale-3"  # 3: batch_is_full reset after a chunk (as SGLang)

    def setup_cache(self) -> dict[str, Any]:
        return bench.scale(self.params[0], spec="long-prompt-burst", dp=4, requests=SCALE_REQUESTS)

    setup_cache.timeout = 1800

    def setup(self, cache: dict[str, Any], rank_mode: str) -> None:
        self.result = entry(cache, (rank_mode,))


class SchedulerPass:
    """One rank's scheduler pass on a saturated KV pool: real PrefillAdder (NO_TOKEN) + real PrefillDelayer.

    The delayer negotiates over a one-process gloo group, so this is the pass's own
    cost without waiting on other ranks.
    """

    version = "scheduler-pass-1"
    timeout = 300

    def setup(self) -> None:
        require_sglang(bench.TWIN_COMPONENTS)
        from dpbench.twin.saturated import admission_pass, saturated_rank

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
TRACE_TRACKS = {
    **seed_tracks(),
    "prefix_hit_rate": Track(
        "prefix_hit_rate", "fraction of prompt tokens found in the rank's radix cache"
    ),
}


@tracks(TRACE_TRACKS)
class TwinProductionTrace(SeedRuns):
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
        return bench.production_trace(
            self.params, TRACE_WINDOWS, spec=TRACE_SPEC, requests=TRACE_REQUESTS
        )

    setup_cache.timeout = 7200

    def setup(self, cache, dp_size, dispatch) -> None:
        self.runs = entries(cache, (dp_size, dispatch), TRACE_WINDOWS)
        self.delayer = "on"


@tracks(TRACE_TRACKS)
class TwinProductionTraceDp8(TwinProductionTrace):
    """:class:`TwinProductionTrace` at DP 8 (2-3× its cost on two cores: the main job leaves it
    to ``asv run -b TwinProductionTraceDp8``). Its own cache (asv shares one per function)."""

    params: ClassVar[tuple[list[Any], ...]] = ([8], list(get_args(TraceDispatch)))
    version = "twin-production-trace-dp8-1"

    def setup_cache(self) -> dict[str, Any]:
        return bench.production_trace(
            self.params, TRACE_WINDOWS, spec=TRACE_SPEC, requests=TRACE_REQUESTS
        )

    setup_cache.timeout = 7200


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
        return bench.published_clock()

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
