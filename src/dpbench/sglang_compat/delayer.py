"""Build the installed SGLang's real PrefillDelayer on a gloo group, one adapter per API generation.

The scheduler twin (``dpbench.twin``) runs SGLang's own ``PrefillDelayer`` and
``PrefillDelayerSinglePassExecutor`` on every DP rank, so the negotiation is
SGLang's all-gather over a real ``torch.distributed`` gloo group. What changes
between releases, and is absorbed here (detected from signatures and attributes,
not version strings):

The shapes, with the releases each was read off, are the table's features
(:mod:`.generations`): ``PrefillDelayer.__init__`` (``args`` 0.5.14-0.5.18,
``sizes_group`` 0.5.19-0.5.20, ``group`` 0.5.21, ``runtime_context`` 0.5.22-0.5.23),
``PrefillDelayer DP-attention flag`` (from the runtime context from 0.5.18 on: then
:func:`publish_runtime_context` must run first), ``PrefillDelayerSinglePassExecutor.finalize``
(``actual_prefill`` / ``actual_prefill_bs``) and ``max_prefill_bs bookkeeping``
(``running_max`` / ``decayed_max``, ``*= 0.998`` read from ``scheduler.py`` /
``recent_window``, the real ``RecentPrefillBatchSizeTracker``).

Wall clock: the delayer reads ``time.perf_counter`` only (a) for the
``wait_seconds`` histogram, which the twin does not report, and (b) for the
queue-based trigger's ``max_delay_ms`` cap, which is evaluated only when
``prefill_delayer_queue_min_ratio`` is set. The twin leaves that trigger off
(SGLang's default), so no wall-clock reading reaches a verdict, and simulated
metrics stay deterministic; :func:`build_delayer` refuses a delayer whose queue
trigger came out enabled.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpbench.sglang_compat.detect import UnsupportedSGLang

GENERATION_ARGS = "args"
GENERATION_SIZES_GROUP = "sizes_group"
GENERATION_GROUP = "group"
GENERATION_RUNTIME_CONTEXT = "runtime_context"


def _unsupported(message: str) -> RuntimeError:
    return UnsupportedSGLang(message)


@dataclass(frozen=True)
class DelayerSettings:
    """The delayer's server flags, as SGLang's own defaults have them."""

    max_delay_passes: int = field(
        default=30, metadata={"help": "--prefill-delayer-max-delay-passes"}
    )
    token_usage_low_watermark: float | None = field(
        default=None, metadata={"help": "--prefill-delayer-token-usage-low-watermark (None: off)"}
    )


@dataclass(frozen=True)
class Outcome:
    """One pass's delayer outcome, labelled as ``sglang:prefill_delayer_outcomes_total``."""

    input_estimation: str
    output_allow: bool
    output_reason: str
    actual_execution: bool
    wait_forward_passes: int

    def labels(self) -> tuple[str, str, str, str]:
        return (
            self.input_estimation,
            str(self.output_allow).lower(),
            self.output_reason,
            str(self.actual_execution).lower(),
        )


class RecordingCollector:
    """Stands in for SGLang's ``SchedulerMetricsCollector``: records each delayer outcome it is told.

    SGLang's executor calls ``observe_prefill_delayer_outcome`` once per pass from
    ``finalize``; the real collector increments ``prefill_delayer_outcomes_total``
    with exactly these labels. ``wait_seconds`` is wall-clock and dropped here.
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str, str]] = Counter()
        self.last: Outcome | None = None

    def observe_prefill_delayer_outcome(
        self,
        forward_passes: int,
        wait_seconds: float,
        input_estimation: str,
        output_allow: bool,
        output_reason: str,
        actual_execution: bool,
    ) -> None:
        del wait_seconds  # wall clock: never part of simulated results
        self.last = Outcome(
            input_estimation=input_estimation,
            output_allow=bool(output_allow),
            output_reason=output_reason,
            actual_execution=bool(actual_execution),
            wait_forward_passes=int(forward_passes),
        )
        self.counts[self.last.labels()] += 1


@dataclass(frozen=True)
class _ArgsGenerationServerArgs:
    """The four ``server_args`` fields generation ``"args"`` reads (checked against its source)."""

    enable_dp_attention: bool = True
    disable_overlap_schedule: bool = False
    prefill_delayer_queue_min_ratio: float | None = None
    prefill_delayer_max_delay_ms: float | None = None


def detect_generation(delayer_cls: type) -> str:
    """The ``PrefillDelayer.__init__`` variant of :mod:`.generations` that ``delayer_cls`` has."""
    from dpbench.sglang_compat.detect import _required
    from dpbench.sglang_compat.generations import feature

    init = feature("PrefillDelayer.__init__")
    shape = _required(delayer_cls.__init__)
    found = init.by_shape(shape)
    if found is None:
        raise _unsupported(
            f"PrefillDelayer.__init__ is ({shape}), a shape this suite does not know; known: {init.known()}"
        )
    return found.name


class _GroupHandle:
    """What 0.5.22+'s delayer reads from ``get_parallel().tp_group``: the gloo group, no device group."""

    def __init__(self, cpu_group: Any) -> None:
        self.cpu_group = cpu_group
        self.device_group = None
        self.device = "cpu"


def needs_runtime_context(generation: str) -> bool:
    """Whether this generation's delayer reads flags or sizes from ``sglang.srt.runtime_context``.

    0.5.18 still takes ``server_args`` (the ``args`` shape) but reads DP attention from the
    runtime context: the table's ``PrefillDelayer DP-attention flag``.
    """
    from dpbench.sglang_compat.detect import variant

    return (
        generation != GENERATION_ARGS
        or variant("PrefillDelayer DP-attention flag") == "runtime_context"
    )


def publish_runtime_context(dp_size: int, settings: DelayerSettings) -> None:
    """Publish SGLang's process-wide config for a DP-attention engine with the delayer on (0.5.19+).

    Call once in the parent before forking the ranks: the published context is
    inherited by every child.
    """
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(
        model_path="dummy",
        tp_size=dp_size,
        dp_size=dp_size,
        enable_dp_attention=True,
        enable_prefill_delayer=True,
        prefill_delayer_max_delay_passes=settings.max_delay_passes,
        prefill_delayer_token_usage_low_watermark=settings.token_usage_low_watermark,
    )
    runtime_context.publish(args, role="test")


def build_delayer(
    *,
    dp_size: int,
    cpu_group: Any,
    settings: DelayerSettings,
    metrics_collector: RecordingCollector,
) -> Any:
    """The installed SGLang's real ``PrefillDelayer`` gathering over ``cpu_group`` (gloo) for ``dp_size`` ranks."""
    from sglang.srt.managers import prefill_delayer as mod

    generation = detect_generation(mod.PrefillDelayer)
    if generation == GENERATION_ARGS:
        delayer = mod.PrefillDelayer(
            dp_size=dp_size,
            attn_tp_size=1,
            cpu_group=cpu_group,
            server_args=_ArgsGenerationServerArgs(),
            max_delay_passes=settings.max_delay_passes,
            token_usage_low_watermark=settings.token_usage_low_watermark,
            metrics_collector=metrics_collector,
            device="cpu",
            device_group=None,
        )
    elif generation == GENERATION_SIZES_GROUP:
        delayer = mod.PrefillDelayer(
            dp_size=dp_size,
            attn_tp_size=1,
            cpu_group=cpu_group,
            max_delay_passes=settings.max_delay_passes,
            token_usage_low_watermark=settings.token_usage_low_watermark,
            metrics_collector=metrics_collector,
            device="cpu",
            device_group=None,
            debug_log_enabled=False,
        )
    elif generation == GENERATION_GROUP:
        delayer = mod.PrefillDelayer(
            cpu_group=cpu_group,
            max_delay_passes=settings.max_delay_passes,
            token_usage_low_watermark=settings.token_usage_low_watermark,
            metrics_collector=metrics_collector,
            device="cpu",
            device_group=None,
            debug_log_enabled=False,
        )
    else:
        from sglang.srt.runtime_context import get_parallel

        overrides = {"tp_group": _GroupHandle(cpu_group)}
        with get_parallel().override(**overrides):
            delayer = mod.PrefillDelayer(
                max_delay_passes=settings.max_delay_passes,
                token_usage_low_watermark=settings.token_usage_low_watermark,
                metrics_collector=metrics_collector,
                debug_log_enabled=False,
            )
    ranks_seen = getattr(delayer, "num_dp_ranks", getattr(delayer, "dp_size", dp_size))
    dp_enabled = getattr(delayer, "attn_dp_enabled", getattr(delayer, "enable_dp_attention", True))
    # One rank (the pass-timing benchmark): SGLang's ServerArgs turns DP attention off at
    # dp_size 1, and the delayer then gathers a (1, 1, fields) buffer, the same as one DP rank.
    if ranks_seen != dp_size or (dp_size > 1 and not dp_enabled):
        raise _unsupported(
            f"PrefillDelayer came up for {ranks_seen} DP ranks (DP attention "
            f"{getattr(delayer, 'attn_dp_enabled', getattr(delayer, 'enable_dp_attention', '?'))}), expected "
            f"{dp_size} with DP attention: publish_runtime_context({dp_size}, ...) must run first"
        )
    if getattr(delayer, "_queue_trigger_enabled", False):
        raise RuntimeError(
            "PrefillDelayer came up with its queue trigger enabled; it reads wall-clock time "
            "(max_delay_ms), which would make simulated results non-deterministic"
        )
    return delayer


@dataclass
class PassExecutor:
    """One pass's ``PrefillDelayerSinglePassExecutor`` plus the release's ``finalize`` call shape."""

    executor: Any
    collector: RecordingCollector
    reported_prefillable: bool | None = None

    def negotiate_should_allow_prefill(self, local_prefillable: bool, **kwargs: Any) -> bool:
        """What ``PrefillAdder`` calls: forwarded unchanged; the first report is remembered."""
        if self.reported_prefillable is None:
            self.reported_prefillable = bool(local_prefillable)
        return self.executor.negotiate_should_allow_prefill(
            local_prefillable=local_prefillable, **kwargs
        )

    def finalize(self, actual_prefill_bs: int) -> tuple[int, Outcome]:
        """Finalize as the installed scheduler does; returns (observed prefill bs, the pass's outcome)."""
        if self.reported_prefillable is None:
            self.reported_prefillable = False  # finalize negotiates local_prefillable=False
        params = _finalize_params(type(self.executor))
        if "actual_prefill_bs" in params:
            observed = int(self.executor.finalize(actual_prefill_bs=actual_prefill_bs))
        elif "actual_prefill" in params:
            self.executor.finalize(actual_prefill=actual_prefill_bs > 0)
            observed = actual_prefill_bs
        else:
            raise _unsupported(
                f"PrefillDelayerSinglePassExecutor.finalize{inspect.signature(self.executor.finalize)} "
                "takes neither actual_prefill (seen on 0.5.16, 0.5.17) nor actual_prefill_bs (seen on 0.5.23)"
            )
        if self.collector.last is None:
            raise RuntimeError("PrefillDelayerSinglePassExecutor.finalize recorded no outcome")
        outcome, self.collector.last = self.collector.last, None
        return observed, outcome


_FINALIZE_PARAMS: dict[type, frozenset[str]] = {}


def _finalize_params(executor_cls: type) -> frozenset[str]:
    found = _FINALIZE_PARAMS.get(executor_cls)
    if found is None:
        found = frozenset(inspect.signature(executor_cls.finalize).parameters)
        _FINALIZE_PARAMS[executor_cls] = found
    return found


def new_pass(delayer: Any, collector: RecordingCollector, token_usage: float) -> PassExecutor:
    from sglang.srt.managers.prefill_delayer import PrefillDelayerSinglePassExecutor

    return PassExecutor(
        PrefillDelayerSinglePassExecutor(delayer, token_usage=token_usage), collector
    )


class MaxPrefillBs:
    """The scheduler's ``max_prefill_bs`` bookkeeping as the installed release does it.

    ``before_pass()`` runs where the scheduler runs its per-pass decay (before the
    executor is built); ``after_pass(observed_bs, admitted_bs)`` where it updates
    the watermark. ``value`` is what the scheduler passes to ``PrefillAdder``.
    """

    def __init__(self) -> None:
        from sglang.srt.managers import prefill_delayer as mod

        tracker_cls = getattr(mod, "RecentPrefillBatchSizeTracker", None)
        self.kind: str
        self._tracker = None
        self._value: float = 0.0
        self._decay = 1.0
        if tracker_cls is not None:
            from sglang.srt.environ import envs

            self.kind = "recent_window"
            self._tracker = tracker_cls(
                window_size=envs.SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE.get()
            )
        else:
            decay = scheduler_max_prefill_bs_decay()
            self.kind = "decayed_max" if decay is not None else "running_max"
            self._decay = decay if decay is not None else 1.0

    @property
    def value(self) -> int:
        return int(self._value)

    def before_pass(self) -> None:
        if self._decay != 1.0:
            self._value *= self._decay

    def after_pass(self, observed_bs: int, admitted_bs: int) -> None:
        if self._tracker is not None:
            if observed_bs > 0:
                self._value = self._tracker.observe_attempt(observed_bs)
        elif admitted_bs > 0:
            self._value = max(self._value, admitted_bs)


_DECAY_RE = re.compile(r"self\.max_prefill_bs\s*\*=\s*([0-9.]+)")


def scheduler_max_prefill_bs_decay() -> float | None:
    """The per-pass decay factor of ``max_prefill_bs`` in the installed ``scheduler.py``, if it has one.

    Read from the source text: importing ``scheduler.py`` pulls in the model runner,
    which does not import on a CPU-only machine.
    """
    spec = importlib.util.find_spec("sglang.srt.managers.scheduler")
    if spec is None or spec.origin is None:
        return None
    found = _DECAY_RE.findall(Path(spec.origin).read_text())
    if len(found) > 1 and len(set(found)) > 1:
        raise _unsupported(
            f"scheduler.py decays max_prefill_bs by several factors {found}; expected one"
        )
    return float(found[0]) if found else None


# --- Twin-specific request progress and scheduler-loop shape --------------------------------
# Not delayer API, but version-specific and needed by the twin only; AdderKit (adder.py) does
# not cover what happens to a request after admission. Candidates to move into adder.py.


class ReqProgress:
    """After a forward, record on the installed ``Req`` how many of its tokens are in the KV pool.

    What SGLang's cache does between passes (ChunkCache's ``cache_unfinished_req``):
    ``req.prefix_indices = <the request's KV slots>`` (0.5.16 – 0.5.17) or
    ``req.prefix_len = n`` (0.5.23). ``AdderKit.complete_extend`` advances the prefix too,
    but allocates the slots itself and does not hand them back; the twin needs them to
    free the request's KV when it finishes or is retracted, so it allocates and sets here.
    """

    def __init__(self, req_cls: type) -> None:
        src = inspect.getsource(req_cls.__init__)
        self.uses_prefix_indices = "self.prefix_indices" in src
        if not self.uses_prefix_indices and "self.prefix_len" not in src:
            raise _unsupported(
                "Req keeps neither prefix_indices nor prefix_len; cannot track computed KV"
            )

    def set_computed(self, req: Any, kv_slots: Any) -> None:
        """The request's first ``len(kv_slots)`` tokens are in the KV pool, in these slots."""
        if self.uses_prefix_indices:
            req.prefix_indices = kv_slots
        else:
            req.prefix_len = int(kv_slots.numel())


def scheduler_breaks_on_spent_budget() -> bool:
    """Whether the installed scheduler stops offering requests once ``adder.budget_state()`` is OTHER (0.5.23).

    Read from ``scheduler.py``'s source (it does not import on CPU); it decides whether
    a rank whose pass budget a continuing chunk spent reaches ``add_one_req`` at all.
    """
    spec = importlib.util.find_spec("sglang.srt.managers.scheduler")
    if spec is None or spec.origin is None:
        raise _unsupported("sglang.srt.managers.scheduler is not installed")
    return "adder.budget_state() == AddReqResult.OTHER" in Path(spec.origin).read_text()
