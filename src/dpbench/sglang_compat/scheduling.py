"""The installed SGLang's scheduler defaults and loop rules, resolved the way the release resolves them (twin only).

The scheduler twin (``dpbench.twin``) runs SGLang's real ``PrefillAdder`` and
``PrefillDelayer``; the loop around them (``Scheduler.get_next_batch_to_run``) is the
twin's. Every number and rule of that loop which differs between releases, or which
SGLang derives from its server arguments, comes from here, never from a constant in
the twin:

=============================  ===============================================================
value                          where it comes from
=============================  ===============================================================
schedule_conservativeness      the release's ``ServerArgs`` after its own DP-attention
                               handler (``ServerArgs._handle_data_parallelism``: ×0.3 under DP
                               attention, 0.5.14–0.5.18; ``arg_groups.parallel_hook`` read
                               through ``resolved_view`` on 0.5.19–0.5.23); checked on every
                               release 0.5.14–0.5.23: 1.0 → 0.3, 8192 → 8192 // dp
per-rank chunked prefill size  the same handler (``chunked_prefill_size // dp_size``)
new-token ratio (init, min,    ``NewTokenRatioTracker.from_server_args`` of the release (or the
decay), retract decode steps   same formula over its ``envs``): init = SGLANG_INIT_NEW_TOKEN_RATIO
                               × conservativeness, min = init × SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
                               decay = (init − min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
batch_is_full on NO_TOKEN      read from the installed ``scheduler.py`` (it does not import on
                               CPU): ``always`` (0.5.14–0.5.21, hierarchical cache off) or
                               ``if_admitted_or_running`` (0.5.22, 0.5.23)
overlap scheduler, radix cache ``ServerArgs`` defaults (``disable_overlap_schedule``,
                               ``disable_radix_cache``)
=============================  ===============================================================

API::

    d = resolve_scheduler_defaults(dp_size=4, tp_size=8, chunked_prefill_size=8192)
    d.per_rank_chunked_prefill_size, d.init_new_token_ratio, d.as_dict()
    release_info()                    # {"version", "commit", "generation", "delayer_generation"}
    hide_delayer_from_chunked_req(adder)  # context manager: the ablation arm

Nothing here imports SGLang at import time.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpbench.sglang_compat.detect import UnsupportedSGLang, own_module_missing

BATCH_IS_FULL_ALWAYS = "always"
BATCH_IS_FULL_IF_ADMITTED_OR_RUNNING = "if_admitted_or_running"
# When a finished request leaves the running batch (its KV is freed earlier, when its result
# is processed): at the start of every pass (0.5.23), or only at the rank's next decode pass,
# in update_running_batch's filter_batch (0.5.16, 0.5.17: a rank that keeps extending keeps
# counting it, and its batch_is_full is reset only then, after that pass's prefill attempt).
FINISHED_FILTER_EVERY_PASS = "every_pass"
FINISHED_FILTER_AT_DECODE = "at_decode"


@dataclass(frozen=True)
class SchedulerDefaults:
    """What the installed release's scheduler would run with for these server flags (per DP rank)."""

    dp_size: int
    tp_size: int
    chunked_prefill_size: int  # global flag
    per_rank_chunked_prefill_size: int
    schedule_conservativeness: float  # after the release's DP-attention scaling
    init_new_token_ratio: float
    min_new_token_ratio: float
    new_token_ratio_decay: float
    retract_decode_steps: int
    batch_is_full_on_no_token: str
    finished_filter: str
    skip_finishing_decode: bool
    overlap_schedule_default: bool
    radix_cache_default: bool
    sources: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _scheduler_source() -> str:
    spec = importlib.util.find_spec("sglang.srt.managers.scheduler")
    if spec is None or spec.origin is None:
        raise UnsupportedSGLang("sglang.srt.managers.scheduler is not installed")
    return Path(spec.origin).read_text()


_NO_TOKEN_RE = re.compile(
    r"if res == AddReqResult\.NO_TOKEN:\s*\n(?P<body>(?:[ \t]+.*\n){1,6})", re.MULTILINE
)


def batch_is_full_rule(source: str | None = None) -> str:
    """How the installed scheduler sets ``batch_is_full`` when ``add_one_req`` returns ``NO_TOKEN`` (hicache off)."""
    text = _scheduler_source() if source is None else source
    m = _NO_TOKEN_RE.search(text)
    if m is None:
        raise UnsupportedSGLang(
            "scheduler.py has no `if res == AddReqResult.NO_TOKEN:` block; cannot tell its batch_is_full rule"
        )
    code = [
        ln.strip()
        for ln in m.group("body").splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]
    first = code[0] if code else ""
    if first == "if (" and len(code) > 1:  # 0.5.20-0.5.21: the condition spans lines
        first = "if " + code[1]
    if first.startswith("if self.enable_hierarchical_cache"):
        return BATCH_IS_FULL_ALWAYS  # the twin runs without hierarchical cache: the else branch
    if first.startswith(
        "running_batch.batch_is_full = len(adder.can_run_list) > 0"
    ) or first.startswith("self.running_batch.batch_is_full = len(adder.can_run_list) > 0"):
        return BATCH_IS_FULL_IF_ADMITTED_OR_RUNNING
    if re.match(r"(self\.)?running_batch\.batch_is_full = True", first):
        return BATCH_IS_FULL_ALWAYS
    raise UnsupportedSGLang(
        f"scheduler.py sets batch_is_full on NO_TOKEN as {first!r}; not a known rule"
    )


_EVERY_PASS_FILTER_RE = re.compile(
    r"running_bs = running_batch\.batch_size\(\)\s*\n\s*running_batch\.filter_batch\(\)\s*\n"
    r"\s*if running_batch\.batch_size\(\) < running_bs:"
)


def finished_filter_rule(source: str | None = None) -> str:
    """When the installed scheduler drops finished requests from the running batch
    (``FINISHED_FILTER_*``), read from ``get_next_batch_to_run``'s source."""
    text = _scheduler_source() if source is None else source
    if "def update_running_batch" not in text:
        raise UnsupportedSGLang(
            "scheduler.py has no update_running_batch; cannot tell when it drops finished requests"
        )
    if _EVERY_PASS_FILTER_RE.search(text):
        return FINISHED_FILTER_EVERY_PASS
    return FINISHED_FILTER_AT_DECODE


def skip_finishing_decode_rule(source: str | None = None) -> bool:
    """Whether the installed overlap scheduler leaves requests whose in-flight step emits their
    last token out of the next decode (0.5.23: ``update_running_batch`` filters
    ``_reqs_finishing_inflight`` and, when the decode does not fit while such requests exist,
    skips the decode instead of retracting), read from ``scheduler.py``'s source."""
    text = _scheduler_source() if source is None else source
    if "def update_running_batch" not in text:
        raise UnsupportedSGLang(
            "scheduler.py has no update_running_batch; cannot tell how it decodes finishing requests"
        )
    has = "def _reqs_finishing_inflight" in text
    used = (
        "reqs_to_exclude=finishing_reqs" in text
        and "self.enable_skip_finishing_decode = True" in text
    )
    if has != used:
        raise UnsupportedSGLang(
            "scheduler.py defines or uses _reqs_finishing_inflight but not both as 0.5.23 does; "
            "cannot tell whether its overlap loop skips finishing requests' decode"
        )
    return has


def _apply_dp_handler(args: Any) -> str:
    """Run the release's own DP-attention adjustment on ``args``; returns where it came from."""
    if getattr(args, "cuda_graph_config", "absent") is None:
        # dummy-model ServerArgs skip the CUDA-graph resolution the DP handler reads; give it
        # the release's own defaults (the handler only re-clamps the prefill graph's max_bs)
        cg = importlib.import_module("sglang.srt.model_executor.cuda_graph_config")
        args.cuda_graph_config = cg.default_cuda_graph_config()
    handler = getattr(args, "_handle_data_parallelism", None)
    if handler is not None:
        handler()
        return "ServerArgs._handle_data_parallelism"
    try:
        hook = importlib.import_module("sglang.srt.arg_groups.parallel_hook")
    except ImportError as exc:
        if not own_module_missing(exc):
            raise
        raise UnsupportedSGLang(
            "ServerArgs has no _handle_data_parallelism and sglang.srt.arg_groups.parallel_hook is missing; "
            "cannot resolve the DP-attention scheduler defaults"
        ) from exc
    fn = getattr(hook, "handle_data_parallelism", None)
    if fn is None:
        raise UnsupportedSGLang(
            "sglang.srt.arg_groups.parallel_hook has no handle_data_parallelism; "
            f"it has {sorted(n for n in dir(hook) if n.startswith('handle'))}"
        )
    legacy = getattr(hook, "handle_deprecated_dp_attention", None)
    if legacy is not None:  # --dp N --enable-dp-attention → --attn-dp-size N (0.5.23)
        legacy(args)
    fn(args)  # declares its resolutions; resolved_view(args) reads them
    return "arg_groups.parallel_hook.handle_data_parallelism"


def _resolved(args: Any) -> Any:
    """``args`` as the release resolves it: its ``resolved_view`` where declared resolutions exist (0.5.23)."""
    try:
        hook = importlib.import_module("sglang.srt.arg_groups.parallel_hook")
    except ImportError as exc:
        if not own_module_missing(exc):
            raise  # a dependency failing is a broken environment, not an older layout
        return args
    view = getattr(hook, "resolved_view", None)
    return args if view is None else view(args)


def resolve_scheduler_defaults(
    *,
    dp_size: int,
    tp_size: int,
    chunked_prefill_size: int,
    schedule_conservativeness: float | None = None,
) -> SchedulerDefaults:
    """The scheduler values the installed release derives for a DP-attention server with these flags."""
    from sglang.srt.environ import envs
    from sglang.srt.server_args import ServerArgs

    kw: dict[str, Any] = {}
    if schedule_conservativeness is not None:
        kw["schedule_conservativeness"] = schedule_conservativeness
    args = ServerArgs(
        model_path="dummy",
        tp_size=tp_size,
        dp_size=dp_size,
        enable_dp_attention=True,
        chunked_prefill_size=chunked_prefill_size,
        **kw,
    )
    flag_conservativeness = float(args.schedule_conservativeness)
    source = _apply_dp_handler(args)
    resolved = _resolved(args)
    conservativeness = float(resolved.schedule_conservativeness)
    per_rank_chunk = int(resolved.chunked_prefill_size)
    tracker_source = "NewTokenRatioTracker's formula over the release's envs"
    init = min(envs.SGLANG_INIT_NEW_TOKEN_RATIO.get() * conservativeness, 1.0)
    min_ratio = min(init * envs.SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR.get(), 1.0)
    decay = (init - min_ratio) / envs.SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS.get()
    try:
        mod = importlib.import_module(
            "sglang.srt.managers.scheduler_components.new_token_ratio_tracker"
        )
    except ImportError as exc:
        if not own_module_missing(exc):
            raise
        mod = None  # older layout: the formula above over the release's envs is what the scheduler computes
    tracker_cls = getattr(mod, "NewTokenRatioTracker", None)
    build = getattr(tracker_cls, "from_server_args", None) or getattr(
        tracker_cls, "from_config", None
    )
    if build is not None:
        if inspect.signature(build).parameters:  # from_server_args(args) / from_config(args)
            t = build(resolved)
        else:  # 0.5.23: from_config() reads the process's runtime context (get_schedule())
            from sglang.srt import runtime_context

            runtime_context.publish(args, role="test")
            t = build()
        init, min_ratio, decay = float(t.init), float(t.min), float(t.decay)
        tracker_source = f"NewTokenRatioTracker.{build.__name__}"
    return SchedulerDefaults(
        dp_size=dp_size,
        tp_size=tp_size,
        chunked_prefill_size=chunked_prefill_size,
        per_rank_chunked_prefill_size=per_rank_chunk,
        schedule_conservativeness=conservativeness,
        init_new_token_ratio=init,
        min_new_token_ratio=min_ratio,
        new_token_ratio_decay=decay,
        retract_decode_steps=int(envs.SGLANG_RETRACT_DECODE_STEPS.get()),
        batch_is_full_on_no_token=batch_is_full_rule(),
        finished_filter=finished_filter_rule(),
        skip_finishing_decode=skip_finishing_decode_rule(),
        overlap_schedule_default=not bool(resolved.disable_overlap_schedule),
        radix_cache_default=not bool(resolved.disable_radix_cache),
        sources={
            "schedule_conservativeness": f"{flag_conservativeness} (flag) → {conservativeness} by {source}",
            "per_rank_chunked_prefill_size": source,
            "new_token_ratio": tracker_source,
            "batch_is_full_on_no_token": "scheduler.py source",
            "finished_filter": "scheduler.py source (get_next_batch_to_run)",
            "skip_finishing_decode": "scheduler.py source (update_running_batch, event_loop_overlap)",
            "overlap_schedule_default": "ServerArgs.disable_overlap_schedule default",
            "radix_cache_default": "ServerArgs.disable_radix_cache default",
        },
    )


def release_info() -> dict[str, Any]:
    """The run result's ``sglang`` and ``placement`` blocks (:func:`.provenance.provenance`), plus the
    delayer's constructor generation (``sglang.delayer_generation``)."""
    from dpbench.sglang_compat.delayer import detect_generation
    from dpbench.sglang_compat.detect import COMPONENTS
    from dpbench.sglang_compat.provenance import provenance

    out = provenance(COMPONENTS)
    out["sglang"]["delayer_generation"] = detect_generation(prefill_delayer_class())
    return out


def prefill_delayer_class() -> type:
    from sglang.srt.managers import prefill_delayer as pd

    return pd.PrefillDelayer


def delayer_needs_runtime_context() -> bool:
    from dpbench.sglang_compat.delayer import detect_generation, needs_runtime_context

    return needs_runtime_context(detect_generation(prefill_delayer_class()))


@contextlib.contextmanager
def hide_delayer_from_chunked_req(adder: Any) -> Iterator[None]:
    """Ablation arm: ``add_chunked_req`` runs without the pass's delayer executor (the adder keeps it otherwise).

    On 0.5.17+ ``add_chunked_req`` reports the rank prefillable to the delayer; hiding the
    executor for that call only restores 0.5.16's chunk behaviour while keeping 0.5.17's
    post-KV placement in ``add_one_req``, so the two changes can be measured apart.
    """
    name = "prefill_delayer_single_pass"
    if not hasattr(adder, name):
        raise UnsupportedSGLang("PrefillAdder has no prefill_delayer_single_pass attribute to hide")
    saved = getattr(adder, name)
    setattr(adder, name, None)
    try:
        yield
    finally:
        setattr(adder, name, saved)


def chunked_req_reports_to_delayer() -> bool:
    """Whether the installed ``PrefillAdder.add_chunked_req`` negotiates with the delayer (0.5.17+)."""
    import inspect

    from sglang.srt.managers.schedule_policy import PrefillAdder

    return "prefill_delayer" in inspect.getsource(PrefillAdder.add_chunked_req)
