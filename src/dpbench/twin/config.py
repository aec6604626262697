"""Configuration of one scheduler-twin run: frozen records, validated on construction, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

Dispatch = Literal["round_robin", "shortest_queue"]
DISPATCHES: tuple[str, ...] = get_args(Dispatch)
StepExchange = Literal["shared_memory", "gloo"]
STEP_EXCHANGES: tuple[str, ...] = get_args(StepExchange)
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
        default=True, metadata={"help": "--enable-prefill-delayer"}
    )
    prefill_delayer_max_delay_passes: int = field(
        default=30, metadata={"help": "--prefill-delayer-max-delay-passes"}
    )
    prefill_delayer_token_usage_low_watermark: float | None = field(
        default=None, metadata={"help": "--prefill-delayer-token-usage-low-watermark"}
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
        wm = self.prefill_delayer_token_usage_low_watermark
        if wm is not None and not 0.0 <= wm <= 1.0:
            raise TwinConfigError(
                f"prefill_delayer_token_usage_low_watermark must be in [0, 1] or None, got {wm}"
            )

    def per_rank_chunked_prefill_size(self, dp_size: int) -> int:
        return max(self.chunked_prefill_size // dp_size, self.page_size)

    def per_rank_max_running_requests(self, dp_size: int) -> int:
        return max(self.max_running_requests // dp_size, 1)


@dataclass(frozen=True, kw_only=True)
class TwinConfig:
    """One twin run: how many ranks, how requests reach them, and the KV pool each holds."""

    dp_size: int = field(default=4, metadata={"help": f"DP ranks (processes), 2 … {MAX_DP_SIZE}"})
    dispatch: Dispatch = field(default="round_robin", metadata={"help": f"one of {DISPATCHES}"})
    max_total_tokens_per_rank: int | None = field(
        default=None,
        metadata={
            "help": "KV pool size per rank in tokens; None: the workload planner's size for the spec"
        },
    )
    max_requests: int | None = field(
        default=None, metadata={"help": "replay only the first N requests of the trace (None: all)"}
    )
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    step_exchange: StepExchange = field(
        default="shared_memory",
        metadata={
            "help": "how ranks all-gather what they ran each step (the twin's bookkeeping; the delayer's "
            "negotiation always uses SGLang's gloo all-gather): shared_memory (fast) or gloo"
        },
    )
    deadline_s: float = field(
        default=600.0, metadata={"help": "hard wall-clock limit for the whole run"}
    )
    record_timeline: bool = field(
        default=True, metadata={"help": "keep per-step, per-rank records for --plot"}
    )

    def __post_init__(self) -> None:
        if not isinstance(self.dp_size, int) or not 2 <= self.dp_size <= MAX_DP_SIZE:
            raise TwinConfigError(
                f"dp_size must be an integer in 2 … {MAX_DP_SIZE} (DP attention needs ≥ 2 ranks), got {self.dp_size!r}"
            )
        if self.dispatch not in DISPATCHES:
            raise TwinConfigError(f"dispatch must be one of {DISPATCHES}, got {self.dispatch!r}")
        if self.max_total_tokens_per_rank is not None and self.max_total_tokens_per_rank < 16:
            raise TwinConfigError(
                f"max_total_tokens_per_rank must be ≥ 16 tokens or None, got {self.max_total_tokens_per_rank}"
            )
        if self.max_requests is not None and self.max_requests < 1:
            raise TwinConfigError(f"max_requests must be ≥ 1 or None, got {self.max_requests}")
        if self.step_exchange not in STEP_EXCHANGES:
            raise TwinConfigError(
                f"step_exchange must be one of {STEP_EXCHANGES}, got {self.step_exchange!r}"
            )
        if not self.deadline_s > 0:
            raise TwinConfigError(f"deadline_s must be > 0, got {self.deadline_s}")
