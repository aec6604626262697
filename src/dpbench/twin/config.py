"""Configuration of one scheduler-twin run: frozen records, validated on construction, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from dpbench.metrics.latency import Slo
from dpbench.twin.profiles import COST_PROFILES, DEFAULT_PROFILE, CostProfile

Dispatch = Literal["round_robin", "shortest_queue", "cache_aware"]
DISPATCHES: tuple[str, ...] = get_args(Dispatch)
CostTopology = Literal["per-rank-gpu", "physical"]
COST_TOPOLOGIES: tuple[str, ...] = get_args(CostTopology)
RankMode = Literal["processes", "threads"]
RANK_MODES: tuple[str, ...] = get_args(RankMode)
StepExchange = Literal["shared_memory", "gloo"]
STEP_EXCHANGES: tuple[str, ...] = get_args(StepExchange)
# sglang_compat.scheduling's names for the NO_TOKEN → batch_is_full rules (kept equal, tested)
BatchIsFullRule = Literal["always", "if_admitted_or_running"]
BATCH_IS_FULL_RULES: tuple[str, ...] = get_args(BatchIsFullRule)
# ... and for when a finished request leaves the running batch
FinishedFilterRule = Literal["every_pass", "at_decode"]
FINISHED_FILTER_RULES: tuple[str, ...] = get_args(FinishedFilterRule)
MAX_DP_SIZE = 16


class TwinConfigError(ValueError):
    """A twin setting outside what the twin supports."""


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings:
    """The SGLang server flags the twin's ranks run with (per-rank values derived as SGLang does).

    Defaults are SGLang's for an H200 (140 GB class) with DP attention: a global
    ``--chunked-prefill-size`` of 8192 that SGLang divides by ``dp_size`` under DP
    attention, ``--max-prefill-tokens`` 16384, ``--page-size`` 1.
    """

    chunked_prefill_size: int = field(
        default=8192,
        metadata={"help": "global --chunked-prefill-size; per rank it is divided by dp_size"},
    )
    max_prefill_tokens: int = field(
        default=16384, metadata={"help": "--max-prefill-tokens (per pass)"}
    )
    max_running_requests: int = field(
        default=4096,
        metadata={"help": "global --max-running-requests; per rank it is divided by dp_size"},
    )
    page_size: int = field(default=1, metadata={"help": "--page-size"})
    enable_prefill_delayer: bool = field(
        default=True,
        metadata={"help": "--enable-prefill-delayer", "flag": "--delayer/--no-delayer"},
    )
    prefill_delayer_max_delay_passes: int = field(
        default=30, metadata={"help": "--prefill-delayer-max-delay-passes"}
    )
    prefill_delayer_token_usage_low_watermark: float | None = field(
        default=None, metadata={"help": "--prefill-delayer-token-usage-low-watermark"}
    )
    schedule_conservativeness: float | None = field(
        default=None,
        metadata={
            "help": "--schedule-conservativeness before SGLang's DP-attention scaling (None: the release's default)"
        },
    )
    radix_cache: bool = field(
        default=True,
        metadata={"help": "SGLang's radix cache", "flag": "--radix-cache/--disable-radix-cache"},
    )
    overlap_schedule: bool = field(
        default=True,
        metadata={
            "help": "the overlap scheduler's one-pass lag in freeing finished requests",
            "flag": "--overlap-schedule/--disable-overlap-schedule",
        },
    )
    batch_is_full_rule: BatchIsFullRule | None = field(
        default=None,
        metadata={
            "help": "how NO_TOKEN sets batch_is_full: 'always' (0.5.16/0.5.17) or "
            "'if_admitted_or_running' (0.5.23); None: the release's own rule"
        },
    )
    finished_filter_rule: FinishedFilterRule | None = field(
        default=None,
        metadata={
            "help": "when a finished request leaves the running batch (and resets batch_is_full): "
            "'every_pass' (0.5.23) or 'at_decode', at the rank's next decode pass (0.5.16/0.5.17); "
            "None: the release's own rule"
        },
    )
    skip_finishing_decode: bool | None = field(
        default=None,
        metadata={
            "help": "with the overlap scheduler, requests whose in-flight step emits their last "
            "token sit out the next decode, and a decode that does not fit while they hold KV "
            "is skipped rather than retracted (0.5.23's update_running_batch); None: the "
            "release's own rule",
        },
    )
    chunk_merge_resets_batch_is_full: bool = field(
        default=True,
        metadata={
            "help": "SGLang's get_next_batch_to_run merges the last extend batch without the "
            "chunked request in flight, and a batch that shrank resets batch_is_full, so a "
            "rank mid-chunk offers its waiting queue every pass (off: the twin before "
            "2026-12-02, which kept the flag until a request finished)",
            "flag": "--chunk-merge-reset/--no-chunk-merge-reset",
        },
    )
    hide_delayer_from_chunked_req: bool = field(
        default=False,
        metadata={
            "help": "ablation arm: add_chunked_req runs without the delayer (0.5.16's chunk reporting, "
            "the release's add_one_req placement)",
            "flag": "--hide-delayer-from-chunked-req",
        },
    )

    def __post_init__(self) -> None:
        for name in (
            "chunked_prefill_size",
            "max_prefill_tokens",
            "max_running_requests",
            "page_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise TwinConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.prefill_delayer_max_delay_passes < 1:
            raise TwinConfigError(
                f"prefill_delayer_max_delay_passes must be ≥ 1, got {self.prefill_delayer_max_delay_passes}"
            )
        if self.batch_is_full_rule not in (None, *BATCH_IS_FULL_RULES):
            raise TwinConfigError(
                f"batch_is_full_rule must be one of {BATCH_IS_FULL_RULES} or None, "
                f"got {self.batch_is_full_rule!r}"
            )
        if self.finished_filter_rule not in (None, *FINISHED_FILTER_RULES):
            raise TwinConfigError(
                f"finished_filter_rule must be one of {FINISHED_FILTER_RULES} or None, "
                f"got {self.finished_filter_rule!r}"
            )
        sc = self.schedule_conservativeness
        if sc is not None and not sc >= 0:
            raise TwinConfigError(f"schedule_conservativeness must be ≥ 0 or None, got {sc}")
        wm = self.prefill_delayer_token_usage_low_watermark
        if wm is not None and not 0.0 <= wm <= 1.0:
            raise TwinConfigError(
                f"prefill_delayer_token_usage_low_watermark must be in [0, 1] or None, got {wm}"
            )

    def per_rank_max_running_requests(self, dp_size: int) -> int:
        return max(self.max_running_requests // dp_size, 1)


@dataclass(frozen=True, kw_only=True)
class TwinConfig:
    """One twin run: how many ranks, how requests reach them, and the KV pool each holds."""

    dp_size: int = field(
        default=4, metadata={"help": f"DP ranks (processes), 2 … {MAX_DP_SIZE}", "flag": "--dp"}
    )
    tp_size: int | None = field(
        default=None,
        metadata={
            "help": "GPUs of the deployment (--tp-size); attention TP = tp_size / dp_size. None: max(8, dp_size), "
            "the smallest H200 count that holds DeepSeek-V3 FP8 (671 B params × 1 B ≈ 671 GB > 4 × 141 GB)",
            "flag": "--tp",
        },
    )
    dispatch: Dispatch = field(
        default="round_robin",
        metadata={
            "help": "how requests are spread over the DP ranks (cache_aware: SGLang's router in "
            "front, longest cached prefix unless the loads are imbalanced)"
        },
    )
    max_total_tokens_per_rank: int | None = field(
        default=None,
        metadata={
            "help": "KV pool size per rank in tokens; None: the workload planner's size for the spec",
            "flag": "--kv-tokens",
        },
    )
    replay_arrivals: str | None = field(
        default=None,
        metadata={
            "help": "a simulated-forward server's run result (or a JSON {id: [seconds, dp rank]}): "
            "each request arrives when and where it reached that server's scheduler, instead of "
            "at its trace time through the dispatch policy",
            "metavar": "FILE",
        },
    )
    rate_scale: float = field(
        default=1.0,
        metadata={
            "help": "offered load as a multiple of the spec's (or trace's) rate: every arrival "
            "time divided by this (2: twice as fast); the load axis of sweeps and the capacity "
            "search"
        },
    )
    slo: Slo = field(default_factory=Slo, metadata={"prefix": "slo_"})
    idle_pass_s: float | None = field(
        default=None,
        metadata={
            "help": "simulated seconds of a lockstep pass in which no rank runs a forward (SGLang's "
            "event loop spinning: receive, adder, the delayer's and MLP-sync all-gathers); None: "
            "the cost model's per-step overhead; 0: such a pass takes no simulated time, as on the "
            "simulated-forward server's virtual clock, which charges only forwards. It sets how "
            "many delay verdicts a wait yields"
        },
    )
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    step_exchange: StepExchange = field(
        default="shared_memory",
        metadata={
            "help": "how ranks all-gather what they ran each step (the twin's bookkeeping; the delayer's "
            "negotiation always uses SGLang's gloo all-gather): shared_memory (fast) or gloo"
        },
    )
    cost_topology: CostTopology = field(
        default="per-rank-gpu",
        metadata={
            "help": "per-rank-gpu: one GPU per DP rank (the original cost model); physical: tp_size GPUs, "
            "attention TP per rank, experts over all GPUs, and mixed steps charged the decode ranks' "
            "eager launches"
        },
    )
    cost_profile: CostProfile = field(
        default=DEFAULT_PROFILE,
        metadata={
            "help": "the cost model's efficiencies: roofline (assumed defaults) or published-fit "
            "(fitted to published DeepSeek serving figures; `dpbench twin clock`)"
        },
    )
    rank_mode: RankMode = field(
        default="processes",
        metadata={
            "help": "processes: one forked process per rank, the delayer over gloo; threads: ranks as threads "
            "of one process, the delayer's collective in-process (identical numbers, faster; sweeps' default)"
        },
    )
    deadline_s: float = field(
        default=600.0,
        metadata={"help": "hard wall-clock limit for the whole run, seconds", "flag": "--deadline"},
    )
    record_timeline: bool = field(
        default=True,
        metadata={
            "help": "keep per-step, per-rank records (--plot, the divergence finder)",
            "cli": False,
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.dp_size, int) or not 2 <= self.dp_size <= MAX_DP_SIZE:
            raise TwinConfigError(
                f"dp_size must be an integer in 2 … {MAX_DP_SIZE} (DP attention needs ≥ 2 ranks), got {self.dp_size!r}"
            )
        if self.tp_size is not None and (
            not isinstance(self.tp_size, int)
            or self.tp_size < self.dp_size
            or self.tp_size % self.dp_size
        ):
            raise TwinConfigError(
                f"tp_size must be a multiple of dp_size ({self.dp_size}) and ≥ it, or None; got {self.tp_size!r}"
            )
        if self.dispatch not in DISPATCHES:
            raise TwinConfigError(f"dispatch must be one of {DISPATCHES}, got {self.dispatch!r}")
        if not (isinstance(self.rate_scale, int | float) and 0 < self.rate_scale <= 1000):
            raise TwinConfigError(f"rate_scale must be in (0, 1000], got {self.rate_scale!r}")
        if self.replay_arrivals is not None and self.rate_scale != 1.0:
            raise TwinConfigError(
                "rate_scale must be 1 when replaying a server run's arrivals (they are that "
                f"run's own times), got {self.rate_scale}"
            )
        if self.idle_pass_s is not None and not 0 <= self.idle_pass_s <= 1.0:
            raise TwinConfigError(
                f"idle_pass_s must be in [0, 1] seconds or None, got {self.idle_pass_s!r}"
            )
        if self.max_total_tokens_per_rank is not None and self.max_total_tokens_per_rank < 16:
            raise TwinConfigError(
                f"max_total_tokens_per_rank must be ≥ 16 tokens or None, got {self.max_total_tokens_per_rank}"
            )
        if (
            self.scheduler.hide_delayer_from_chunked_req
            and not self.scheduler.enable_prefill_delayer
        ):
            raise TwinConfigError(
                "the ablation arm (hide the delayer from add_chunked_req) needs the delayer on"
            )
        if self.step_exchange not in STEP_EXCHANGES:
            raise TwinConfigError(
                f"step_exchange must be one of {STEP_EXCHANGES}, got {self.step_exchange!r}"
            )
        if self.cost_topology not in COST_TOPOLOGIES:
            raise TwinConfigError(
                f"cost_topology must be one of {COST_TOPOLOGIES}, got {self.cost_topology!r}"
            )
        if self.cost_profile not in COST_PROFILES:
            raise TwinConfigError(
                f"cost_profile must be one of {COST_PROFILES}, got {self.cost_profile!r}"
            )
        if self.rank_mode not in RANK_MODES:
            raise TwinConfigError(f"rank_mode must be one of {RANK_MODES}, got {self.rank_mode!r}")
        if not self.deadline_s > 0:
            raise TwinConfigError(f"deadline_s must be > 0, got {self.deadline_s}")

    @property
    def gpus(self) -> int:
        """--tp-size of the deployment (the default: max(8, dp_size) rounded up to a multiple of dp_size)."""
        if self.tp_size is not None:
            return self.tp_size
        n = max(8, self.dp_size)
        return -(-n // self.dp_size) * self.dp_size

    @property
    def attn_tp_size(self) -> int:
        return self.gpus // self.dp_size


@dataclass(frozen=True, kw_only=True)
class TwinInputs:
    """What one twin run is given beside its config: the trace's seed and size, the cost calibration."""

    seed: int | None = field(default=None, metadata={"help": "trace seed (None: the spec's)"})
    requests: int | None = field(
        default=None, metadata={"help": "override the spec's num_requests"}
    )
    calibration: str | None = field(
        default=None,
        metadata={"help": "kernel calibration JSON for the cost model (None: H200 roofline)"},
    )

    def __post_init__(self) -> None:
        if self.requests is not None and self.requests < 1:
            raise TwinConfigError(f"requests must be ≥ 1 or None, got {self.requests}")


def make_config(**values: object) -> TwinConfig:
    """A :class:`TwinConfig` from flat option values (``dp_size=2, enable_prefill_delayer=False``,
    nested scheduler settings included): the one builder every caller uses."""
    from dpbench.core.schema import SchemaError, build

    try:
        return build(TwinConfig, values)
    except SchemaError as exc:
        raise TwinConfigError(str(exc)) from None
