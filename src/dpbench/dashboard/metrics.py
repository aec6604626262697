"""What each metric means for the question: its better direction, and which ones decide it.

asv has no direction field: ``asv compare`` and asv's regressions page treat every
benchmark as lower-is-better, which is right for ``time_``/``mem_``/``peakmem_``
benchmarks and says nothing about a ``track_``. Here every metric gets a direction
from ONE table (:data:`DIRECTIONS`), matched on the metric's name (the benchmark
method without its ``track_``/``time_`` prefix, or a run file's metric name):

- ``higher`` / ``lower``: which way is better;
- ``none``: deliberately no direction (a code, a descriptive count), with the reason;
- ``instrument``: the measuring instrument's health (client lateness, device idle, pick-up
  delay, loop speed): it says whether a run is valid and never gets a verdict, never gates
  ``dpbench compare`` and is listed after every SGLang-facing row;
- ``unknown``: no row matched. Such a metric is flagged on every page ("direction
  unknown") and never counted as better or worse: add a row here instead of guessing.

A run file's own ``better`` field is used only for a name this table does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ASV_LOWER_PREFIXES = ("time_", "mem_", "peakmem_")  # asv's own convention: smaller is better
# tiers whose numbers depend on wall-clock timing (a real server's event loop meets real
# arrivals): one run per side is no basis for "better" or "worse"
TIMING_TIERS = ("server",)
# tiers that probe the installed code deterministically (the AST of schedule_policy.py, the real
# PrefillAdder driven through fixed cases): one run per side is the answer, not a sample
DETERMINISTIC_TIERS = ("placement",)
# the comparison's rows, answer first: where the negotiation sits, the twin, SGLang's real
# scheduler, then the rest (dashboard.js TIER_ORDER)
TIER_ORDER = ("placement", "twin", "server")


def tier_rank(tier: str) -> int:
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER)


@dataclass(frozen=True)
class Direction:
    better: str  # "higher" | "lower" | "none" | "unknown"
    why: str


# (pattern on the metric name, better, why). First match wins; keep specific rows first.
DIRECTIONS: tuple[tuple[str, str, str], ...] = (
    # The measuring instrument's own health (the load client, the virtual device, this
    # machine's loop speed): whether a run is valid, never whether SGLang got better.
    (
        r"client_send_lateness|loop_lag|event_loop_lag|device_idle|pickup_ms|first_token_return|"
        r"cpu_pressure|run_queue_wait|main_thread_wait|"
        r"server_startup|"
        r"scheduler_pass_us|passes_per_s|pass_wall_over_rank_work",
        "instrument",
        "the measuring instrument's health (load client, virtual device, this machine): a "
        "validity check, never a verdict",
    ),
    (r"^placement_code", "none", "a category (early / post-kv / …), not a quantity"),
    (
        r"^predicted_over_published",
        "none",
        "the clock against a published figure: 1 is a perfect prediction, neither side better",
    ),
    (r"^pr31835_conforming_cases", "higher", "cases that behave as PR #31835 states"),
    (r"^chunked_negotiates", "higher", "PR #31835 makes add_chunked_req negotiate"),
    (r"^kv_exits_before_negotiation", "none", "describes the placement; no better value"),
    (r"false_prefillable_report", "lower", "a rank said 'prefillable', then prefilled nothing"),
    (r"false_report", "lower", "DP-mixed steps caused by a false prefillable report"),
    (r"dp_mixed|mixed_step|mixed_fraction", "lower", "DP-mixed forwards slow the decoding ranks"),
    (r"decode.*beside|beside.*prefill", "lower", "decode-rank time spent waiting on a prefill"),
    (
        r"delay_(passes|verdict|fraction|count)|delayer_delay",
        "none",
        "how often the delayer delays: a mechanism, not an outcome",
    ),
    (r"delayer_outcomes|outcomes", "none", "a count of delayer decisions, not an outcome"),
    (
        r"^delayer_\w+_(count|total)$",
        "none",
        "the server's delayer outcomes by reason: how the mechanism decided, not an outcome",
    ),
    (r"^dp_coop_\w+_total$", "none", "DP cooperation token counts: descriptive"),
    (
        r"^(steps|requests)(_\w+)?_(count|total)$",
        "none",
        "how many steps/requests a run had, by kind: the workload's size, descriptive",
    ),
    (r"imbalance$", "lower", "max / mean over DP ranks: 1 is perfect balance"),
    (r"capacity_search_wall", "lower", "what the capacity search cost: a duration"),
    (r"capacity_at_slo|slo_attainment", "higher", "load served within the SLO"),
    (
        r"idle_while_others_wait",
        "lower",
        "a rank ran nothing while another rank's requests waited: capacity left unused",
    ),
    (r"^prefix_reuse", "none", "the prefix reuse the traffic offered: descriptive"),
    (r"prefix_hit", "higher", "prompt tokens served from the radix cache"),
    (r"ttft_error|error_ms", "lower", "the load client's timing error"),
    (r"malformed_chunks", "lower", "stream chunks the client could not parse"),
    (r"cases_wrong", "lower", "kernel cases whose output was wrong"),
    (r"^idle_passes_count$", "none", "how many scheduler passes ran idle: descriptive"),
    (r"^prefill_delayer_wait", "lower", "how long a rank's prefill waited on the delayer"),
    (r"errors?$|errors?_", "lower", "failed requests"),
    (r"ttft|itl|tpot|e2e|latency", "lower", "a latency"),
    (r"retraction", "lower", "requests retracted for lack of KV"),
    (
        r"kv_(utilization|token_usage|pool_occupied)",
        "none",
        "set by the workload's KV target; descriptive",
    ),
    (
        r"throughput|tokens_per_s|tok_per_s|req_per_s|request_rate|goodput|per_s$",
        "higher",
        "a rate",
    ),
    (r"tflops|gbps|bandwidth|flop_fraction|bw_fraction", "higher", "achieved rate vs ceiling"),
    (r"wall_over|overhead", "lower", "wall time beyond the ranks' own work: overhead"),
    (r"wall_time|_us_|_ms_|_ms$|_us$|_s$|seconds", "lower", "a duration"),
)
_COMPILED = tuple((re.compile(p), b, w) for p, b, w in DIRECTIONS)


def metric_name(benchmark: str) -> str:
    """``twin.TwinHighKV.track_ttft_ms_p99`` → ``ttft_ms_p99``; a run-file name is returned as is."""
    method = benchmark.rsplit(".", 1)[-1]
    for prefix in ("track_", "time_", "mem_", "peakmem_"):
        if method.startswith(prefix):
            return method.removeprefix(prefix)
    return method


def direction(benchmark: str, declared: str | None = None) -> Direction:
    """The better direction of an asv benchmark (full name) or run-file metric (bare name)."""
    method = benchmark.rsplit(".", 1)[-1]
    if method.startswith(ASV_LOWER_PREFIXES):
        return Direction("lower", "asv time/memory benchmark: smaller is better")
    name = metric_name(benchmark)
    for pattern, better, why in _COMPILED:
        if pattern.search(name):
            return Direction(better, why)
    if declared in ("higher", "lower"):
        return Direction(declared, "declared by the tier's run file")
    return Direction("unknown", "not in dpbench.dashboard.metrics.DIRECTIONS")


@dataclass(frozen=True)
class Quantity:
    """What values a metric can take: its bounds (None: unbounded) and whether it counts events."""

    lo: float | None
    hi: float | None
    count: bool = False


# (pattern on the metric name, lo, hi, counts events). First match wins. A comparison clips
# intervals at these bounds (a count never below 0, a fraction never above 1), and a count
# with too few events is "too few to judge" (dpbench.dashboard.compare.MIN_COUNT_EVENTS).
QUANTITIES: tuple[tuple[str, float | None, float | None, bool], ...] = (
    (r"^placement_code", None, None, False),  # a category
    (r"^prefix_reuse", 0.0, None, False),  # a ratio of tokens
    (r"error_ms", None, None, False),  # the load client's signed timing error
    (r"imbalance$", 1.0, None, False),  # max / mean over ranks
    (r"^predicted_over_published$", 0.0, None, False),  # a ratio of two positive figures
    (
        r"fraction|_rate$|attainment|utilization|occupied|^chunked_negotiates",
        0.0,
        1.0,
        False,
    ),
    (
        r"_count$|_total$|reports$|_steps$|retractions$|^errors$|^delay_passes$|outcomes$|"
        r"^kv_exits|_cases$",
        0.0,
        None,
        True,
    ),
    (
        r"_ms_|_ms$|_us_|_us$|_s$|_s_|seconds|per_s$|throughput|bw|flop|wall|capacity_at_slo|"
        r"_passes_mean$",
        0.0,
        None,
        False,
    ),
)
_QUANTITY_COMPILED = tuple((re.compile(p), Quantity(lo, hi, c)) for p, lo, hi, c in QUANTITIES)


def quantity(benchmark: str) -> Quantity | None:
    """The bounds of an asv benchmark (full name) or run-file metric (bare name), or None when
    no row matches (then nothing is clipped; a test fails for such a metric of the suite)."""
    if benchmark.rsplit(".", 1)[-1].startswith(ASV_LOWER_PREFIXES):
        return Quantity(0.0, None)  # a time or a memory size
    name = metric_name(benchmark)
    for pattern, q in _QUANTITY_COMPILED:
        if pattern.search(name):
            return q
    return None


# The metrics that decide the question, in the order the summary shows them:
# (column key, heading, pattern on the metric name). First matching metric per tier wins.
KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("placement", "placement", r"^placement_code"),
    ("false_reports", "false prefillable reports", r"^false_prefillable_reports"),
    ("mixed", "DP-mixed fraction", r"dp_mixed_step_fraction|dp_mixed_fraction"),
    ("decode_beside", "decode-rank s beside prefill", r"decode.*beside|beside.*prefill"),
    ("delay", "delay verdicts", r"delay_(fraction|passes|verdict)|delayer_delay"),
    ("ttft_p50", "TTFT p50", r"^ttft(_ms|_s)?_p50"),
    ("ttft_p99", "TTFT p99", r"^ttft(_ms|_s)?_p99"),
    ("throughput", "throughput", r"request_throughput|^req_per_s|^requests_per_s"),
    ("tpot_p99", "TPOT p99", r"^tpot(_ms|_s)?_p99"),
    ("goodput", "goodput", r"^goodput"),
    ("capacity", "capacity at SLO", r"^capacity_at_slo"),
)
_KEY_COMPILED = tuple((k, h, re.compile(p)) for k, h, p in KEY_METRICS)

# What regime a summary row shows, beside its scenario (not compared, never a verdict): the
# requests a run finished and the KV pool's peak occupancy (with the seed count of its cells).
REGIME_METRICS: tuple[tuple[str, str], ...] = (
    ("requests", r"^requests_finished_count$"),
    ("pool", r"^kv_pool_occupied_max$"),
)
_REGIME_COMPILED = tuple((k, re.compile(p)) for k, p in REGIME_METRICS)


def regime_metric(name: str) -> str | None:
    """The regime a metric name tells (``requests``, ``pool``), or None."""
    for key, pattern in _REGIME_COMPILED:
        if pattern.search(name):
            return key
    return None


def key_metric(name: str) -> str | None:
    """The summary column a metric name fills, or None."""
    for key, _heading, pattern in _KEY_COMPILED:
        if pattern.search(name):
            return key
    return None


# The summary's sections, answer first: where the negotiation sits, then the twin at the
# README's headline settings (paired seeds), then SGLang's real scheduler (simulated forward),
# then everything else by name. (pattern on the section name, rank); first match wins.
SECTION_ORDER: tuple[tuple[str, int], ...] = (
    (r"^placement", 0),
    (r"TwinHeadline", 1),
    (r"^server", 2),
    (r"^twin", 3),
)


def section_rank(section: str) -> tuple[int, str]:
    for pattern, rank in SECTION_ORDER:
        if re.search(pattern, section):
            return (rank, section)
    return (len(SECTION_ORDER), section)


# The scenario the history page opens on: the twin's headline (benchmarks/twin.py TwinHeadline:
# HEADLINE_SPEC at DP 4 and SGLang's chunk size 8192, "default"), delayer on.
HEADLINE_SCENARIO = {
    "spec": "long-prompt-burst",
    "dp_size": "4",
    "chunked_prefill": "default",
    "delayer": "on",
}


def default_scenario(axes: dict[str, list[str]]) -> dict[str, str]:
    """Each scenario axis's first view: the headline's value where the axis has it, else the
    axis's first value."""
    return {
        axis: HEADLINE_SCENARIO[axis] if HEADLINE_SCENARIO.get(axis) in values else values[0]
        for axis, values in axes.items()
        if values
    }


# Parameter names that mean the same scenario axis across tiers (server: workload = twin: spec).
PARAM_ALIASES = {"workload": "spec", "dp": "dp_size", "chunk": "chunked_prefill_size"}
CONTROL_VALUES = {"off", "false", "0", "none"}


def scenario_axis(param_name: str) -> str:
    return PARAM_ALIASES.get(param_name, param_name)


def is_control(scenario: dict[str, str]) -> bool:
    """Delayer off: the placement of the negotiation cannot matter, so these rows are the control."""
    value = scenario.get("delayer")
    return value is not None and value.strip().lower() in CONTROL_VALUES
