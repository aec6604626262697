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
``bench_serving`` the same way, for comparison. Each ``setup_cache`` is one call into
:mod:`dpbench.server.bench`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

from dpbench.server import bench

from .common import (
    FIDELITY_CHUNKED_PREFILL,
    SUITE_SLO,
    OneRun,
    Replays,
    Track,
    entry,
    goodput,
    tracks,
)

Workload = Literal["long-prompt-burst", "balanced-baseline"]
DpSize = Literal[2, 8]
DelayerMode = Literal["on", "off"]


@tracks(
    {
        "request_throughput_per_s": Track("request_throughput_per_s", "req/s"),
        "output_tokens_per_s": Track("output_tokens_per_s", "tok/s"),
        "goodput_requests_per_s": goodput(SUITE_SLO),
        "ttft_ms_p50": Track("ttft_ms_p50", "ms"),
        "ttft_ms_p99": Track("ttft_ms_p99", "ms"),
        "itl_ms_p99": Track("itl_ms_p99", "ms"),
        "e2e_ms_p99": Track("e2e_ms_p99", "ms"),
        "errors": Track("errors_total", "requests"),
        # absent without delayer outcomes (delayer off): NaN, never 0
        "delayer_delay_fraction": Track(
            "delayer_delay_fraction", "fraction of outcomes", delayer_only=True
        ),
        "delayer_delay_fraction_prefillable": Track(
            "delayer_delay_fraction_prefillable", "fraction of outcomes with a prefillable rank"
        ),
        "delayer_outcomes": Track("delayer_outcomes_total", "outcomes"),
    }
)
class ServeThroughput(OneRun):
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
        return bench.serve_throughput(self.params)

    setup_cache.timeout = 14400

    def setup(self, cache: dict[str, Any], workload: str, dp_size: int, delayer: str) -> None:
        self.result = entry(cache, (workload, dp_size, delayer))
        self.delayer = delayer


CLIENT_TRACKS = {
    "request_rate_per_s": Track("request_rate_per_s", "req/s"),
    "ttft_error_ms_mean": Track("ttft_error_ms_mean", "ms"),
    "ttft_error_ms_p99": Track("ttft_error_ms_p99", "ms"),
}


class ClientRow:
    """Reads a track from the client comparison's row (``setup_cache``'s result)."""

    def setup(self, row: dict[str, Any]) -> None:
        if "skip" in row:
            raise NotImplementedError(row["skip"])
        self.row = row

    def read(self, row: Track) -> float:
        return self.row[row.metric]


@tracks(CLIENT_TRACKS)
class ClientOverhead(ClientRow):
    """This suite's client, 1,000 streams vs the protocol test double: request rate and TTFT error."""

    timeout = 600
    version = "server-client-1"

    def setup_cache(self) -> dict[str, Any]:
        return bench.client_overhead()

    setup_cache.timeout = 600


@tracks(CLIENT_TRACKS)
class BenchServingReference(ClientRow):
    """SGLang's own bench_serving, same double and load as ClientOverhead: the reference to beat."""

    timeout = 900
    version = "server-client-1"

    def setup_cache(self) -> dict[str, Any]:
        return bench.bench_serving_reference()

    setup_cache.timeout = 900


# --- simulated-forward server (CPU) ------------------------------------------------------
SimSpec = Literal[
    "long-prompt-burst-small"
]  # = common.FIDELITY_SPEC  # high-KV (target_kv_util 0.98), CPU-sized
SimDp = Literal[2, 4]
# Each (DP, delayer) is one SGLang start-up (~30-40 s on 2 idle cores, most of a run's
# cost). Fixed parameters (never read from the environment): other DP sizes are
# `dpbench server run SPEC --dp N --simulate-forward`.
SIM_DP_SIZES = list(get_args(SimDp))
# Each published server setting is replayed SIM_REPLAYS times against one SGLang start-up,
# its caches flushed between replays (dpbench.server.run.execute_replays): a start-up costs
# as much as a replay on two cores, and one run's spread is as large as the effects. asv
# keeps each replay's value (--record-samples); comparisons treat them as repeats (Welch),
# never as seeds to pair. The delayer-off control runs on demand (SimulatedRooflineServeControl).
SIM_REPLAYS = 3


SIM_TRACKS = {
    "dp_mixed_step_fraction": Track("dp_mixed_step_fraction", "fraction"),
    "decode_rank_s_beside_prefill": Track("decode_rank_s_beside_prefill", "rank·s"),
    "decode_rank_time_beside_prefill_fraction": Track(
        "decode_rank_time_beside_prefill_fraction", "fraction", optional=True
    ),
    "dp_coop_decode_tokens_beside_prefill_fraction": Track(
        "dp_coop_decode_tokens_beside_prefill_fraction", "fraction", optional=True
    ),
    # the delayer's own counts: NaN with it off
    "delayer_outcomes": Track("delayer_outcomes_total", "outcomes", delayer_only=True),
    "delayer_delay_fraction": Track(
        "delayer_delay_fraction", "fraction of outcomes", delayer_only=True
    ),
    "delayer_delay_fraction_prefillable": Track(
        "delayer_delay_fraction_prefillable",
        "fraction of outcomes with a prefillable rank",
        delayer_only=True,
    ),
    "ttft_ms_p50": Track("ttft_ms_p50", "ms"),
    "ttft_ms_p99": Track("ttft_ms_p99", "ms"),
    "tpot_ms_p99": Track("tpot_ms_p99", "ms"),
    "itl_ms_p99": Track("itl_ms_p99", "ms"),
    "goodput_requests_per_s": goodput(SUITE_SLO),
    "request_throughput_per_s": Track("request_throughput_per_s", "req/s"),
    "output_tokens_per_s": Track("output_tokens_per_s", "tok/s"),
    "errors": Track("errors_total", "requests"),
    "kv_pool_occupied_max": Track("kv_pool_occupied_max", "fraction (evictable entries included)"),
    "device_idle_fraction": Track(
        "device_idle_fraction", "fraction (virtual device idle between busy steps)", optional=True
    ),
    "pickup_ms_p50": Track(
        "pickup_ms_p50", "ms (client send → the scheduler takes the request in)", optional=True
    ),
    "simulated_step_ms_p50": Track("simulated_step_ms_p50", "ms"),
    "scheduler_ttft_ms_p50": Track(
        "scheduler_ttft_ms_p50",
        "ms (first token computed − planned send: the twin's TTFT)",
        optional=True,
    ),
    "first_token_return_ms_p99": Track(
        "first_token_return_ms_p99",
        "ms (first token computed → read by the client)",
        optional=True,
    ),
    "rank_tokens_imbalance": Track(
        "rank_tokens_imbalance", "max/mean over DP ranks", optional=True
    ),
    "rank_idle_while_others_wait_fraction": Track(
        "rank_idle_while_others_wait_fraction", "fraction of working steps", optional=True
    ),
}


@tracks(SIM_TRACKS)
class SimulatedRooflineServe(Replays):
    """executor: simulated, cost model: roofline. SGLang's real DP-attention server on a CPU
    (HTTP, tokenizer manager, DP controller, schedulers, PrefillDelayer, radix cache,
    metrics, gloo MLP sync), only the forward simulated, per (spec, DP size, delayer).

    Tracks client latencies and throughput (in the simulated forward's time on a virtual
    device, plus whatever scheduler CPU work the overlap schedule did not hide, measured
    as device idle), the server's own delayer outcomes and DP
    cooperation counters, and the stand-in's per-step DP-mixed ground truth. A metric a
    run did not measure (the delayer's, with it off) is NaN, never 0. Each is asv samples
    over the replays whose instrument was healthy for it (dpbench.server.health).
    """

    params: ClassVar[tuple[list[Any], ...]] = (list(get_args(SimSpec)), SIM_DP_SIZES, ["on"])
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "delayer"]
    timeout = 3600
    # 3: virtual device (overlap hides CPU work); 4: SIM_REPLAYS replays against one server
    # (caches flushed between), asv samples over the healthy ones; delayer on only
    version = "server-simulated-roofline-4"

    def setup_cache(self) -> dict[str, Any]:
        return bench.simulated(self.params, replays=SIM_REPLAYS, chunk=FIDELITY_CHUNKED_PREFILL)

    setup_cache.timeout = 3600

    def setup(self, cache: dict[str, Any], spec: str, dp_size: int, delayer: str) -> None:
        self.runs = entry(cache, (spec, dp_size, delayer))["runs"]
        self.delayer = delayer


@tracks(SIM_TRACKS)
class SimulatedRooflineServeControl(SimulatedRooflineServe):
    """The delayer-off control of ``SimulatedRooflineServe`` (same settings, SGLang's
    PrefillDelayer off): run on demand, `asv run -b SimulatedRooflineServeControl`; the main
    job's delayer-off controls are the twin's. Its own cache (asv shares one per function)."""

    params: ClassVar[tuple[list[Any], ...]] = (list(get_args(SimSpec)), SIM_DP_SIZES, ["off"])
    version = "server-simulated-roofline-control-1"

    def setup_cache(self) -> dict[str, Any]:
        return bench.simulated(self.params, replays=SIM_REPLAYS, chunk=FIDELITY_CHUNKED_PREFILL)

    setup_cache.timeout = 3600


# SGLang's real scheduler at the headline's scale in virtual time (docs/virtual-time.md): the
# full long-prompt-burst (1,024 requests), DP 4 and DP 8, global chunk 8192, three workload
# seeds per setting (the twin's SEEDS), each its own start-up. Virtual time charges nothing for
# the scheduler's CPU work, so a run's numbers do not depend on the runner's cores or load.
VirtualDp = Literal[4, 8]
VIRTUAL_SEEDS = (0, 1, 2)
# what a virtual-time run reports: the wall-timed instrument checks (device idle, pick-up) are
# not virtual, and SGLang's delayer outcomes also count the passes that run no forward while
# the ranks wait, as many as the wall clock allows (the same seed's steps repeat exactly, these
# counts do not): left out. The delay fraction over prefillable passes stays.
VIRTUAL_TRACKS = {
    k: v
    for k, v in SIM_TRACKS.items()
    if k
    not in (
        "device_idle_fraction",
        "pickup_ms_p50",
        "first_token_return_ms_p99",
        "delayer_outcomes",
        "delayer_delay_fraction",
    )
}


@tracks(VIRTUAL_TRACKS)
class SimulatedVirtualHeadline(Replays):
    """executor: simulated, clock: virtual. SGLang's real DP-attention server (as
    ``SimulatedRooflineServe``) on the full ``long-prompt-burst`` at DP 4 and DP 8, chunk 8192,
    in virtual time: the real scheduler's answer to the headline question per commit. Samples
    are per workload seed (VIRTUAL_SEEDS; a seed's run repeats exactly), compared between
    commits as runs (Welch), never paired."""

    params: ClassVar[tuple[list[Any], ...]] = (
        ["long-prompt-burst"],
        list(get_args(VirtualDp)),
        ["on"],
    )
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "delayer"]
    timeout = 7200
    version = "server-simulated-virtual-1"

    def setup_cache(self) -> dict[str, Any]:
        return bench.simulated_virtual(
            self.params, seeds=VIRTUAL_SEEDS, chunk=FIDELITY_CHUNKED_PREFILL
        )

    setup_cache.timeout = 7200

    def setup(self, cache: dict[str, Any], spec: str, dp_size: int, delayer: str) -> None:
        self.runs = entry(cache, (spec, dp_size, delayer))["runs"]
        self.delayer = delayer


TRACE_SIM_SPEC = "mooncake-conversation-small"  # 48 requests of a Mooncake window, DP 2


@tracks(
    {
        **SIM_TRACKS,
        "prefix_hit_rate": Track(
            "prefix_hit_rate", "fraction of prompt tokens SGLang found cached", optional=True
        ),
    }
)
class SimulatedProductionTrace(Replays):
    """executor: simulated. The simulated-forward server (as ``SimulatedRooflineServe``) on a
    CPU-sized window of Mooncake's production trace at DP 2, delayer on, behind SGLang's own
    round robin: the placement's effect on real traffic per commit, with SGLang's own prefix
    hit rate. Skips, naming the file and its upstream, where the trace is not on this machine.
    The main job runs it on the placement change's pair (one SGLang start-up per commit)."""

    params: ClassVar[tuple[list[Any], ...]] = ([TRACE_SIM_SPEC], [2], ["on"])
    param_names: ClassVar[list[str]] = ["spec", "dp_size", "delayer"]
    timeout = 3600
    version = "server-simulated-production-trace-2"  # 2: SIM_REPLAYS flushed replays

    def setup_cache(self) -> dict[str, Any]:
        return bench.simulated_production_trace(
            self.params, replays=SIM_REPLAYS, chunk=FIDELITY_CHUNKED_PREFILL
        )

    setup_cache.timeout = 3600

    def setup(self, cache: dict[str, Any], spec: str, dp_size: int, delayer: str) -> None:
        self.runs = entry(cache, (spec, dp_size, delayer))["runs"]
        self.delayer = delayer
