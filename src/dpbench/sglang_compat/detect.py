"""Which SGLang API generation is installed, told from signatures and attributes, not version strings.

An SGLang *generation* is a span of releases (or unreleased commits) whose scheduler
API has one shape: how ``PrefillAdder`` is built and keeps its KV budget, how ``Req``,
``TokenToKVPoolAllocator`` and the ``PrefillDelayer`` are constructed, and what the
delayer's single-pass executor takes. :func:`observe` reads those shapes off the
installed classes; :func:`detect` matches them against :data:`GENERATIONS`. A commit
between releases whose shape matches a known generation is accepted whatever its
version string says; a shape matching none raises :class:`UnsupportedSGLang`, naming
what differs and what is supported.

Shapes are compared per *component* (``adder``, ``delayer``), so a tier that needs
only the admission side (the placement tier) can ask for just that:
``detect(components=("adder",))``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

COMPONENTS = ("adder", "delayer")
# Keyword arguments AdderKit.new_adder passes to PrefillAdder, as the scheduler does.
ADDER_KEYWORDS = (
    "max_prefill_bs",
    "max_running_requests",
    "prefill_delayer_single_pass",
    "waiting_queue_len",
)


class UnsupportedSGLang(RuntimeError):
    """The installed SGLang's API shape matches no generation this suite knows."""


@dataclass(frozen=True)
class Generation:
    """One API shape of SGLang's scheduler, with the releases it was verified on."""

    name: str
    releases: str = field(
        metadata={"help": "releases verified (by running) to have this whole shape"}
    )
    description: str
    # feature -> expected value; each feature belongs to one component (see FEATURE_COMPONENT).
    features: dict[str, str]
    # the components detect() compared to pick this generation (all, unless a tier asked for fewer)
    compared: tuple[str, ...] = COMPONENTS
    adder_releases: str = field(
        default="",
        metadata={
            "help": "further releases whose adder half alone has this shape (placement probe run)"
        },
    )

    def __str__(self) -> str:
        also = f"; adder half also {self.adder_releases}" if self.adder_releases else ""
        return f"{self.name} (SGLang {self.releases}{also})"


# Which component each observed feature belongs to.
FEATURE_COMPONENT: dict[str, str] = {
    "PrefillAdder.__init__ required": "adder",
    "PrefillAdder.__init__ keywords": "adder",
    "PrefillAdder.add_one_req": "adder",
    "PrefillAdder.add_chunked_req": "adder",
    "PrefillAdder budget": "adder",
    "TokenToKVPoolAllocator.__init__": "adder",
    "Req.__init__ leading": "adder",
    "Req.init_next_round_input": "adder",
    "RadixCache.create_simulated": "adder",
    "PrefillDelayer.__init__ required": "delayer",
    "PrefillDelayerSinglePassExecutor.__init__": "delayer",
    "PrefillDelayerSinglePassExecutor.finalize": "delayer",
    "PrefillDelayerSinglePassExecutor.negotiate_should_allow_prefill": "delayer",
}

_ADDER_COMMON = {
    "PrefillAdder.__init__ required": (
        "page_size, tree_cache, token_to_kv_pool_allocator, running_batch, "
        "new_token_ratio, rem_input_tokens, rem_chunk_tokens"
    ),
    "PrefillAdder.__init__ keywords": "has " + ", ".join(ADDER_KEYWORDS),
    "PrefillAdder.add_one_req": "req, has_chunked_req, truncation_align_size",
    "PrefillAdder.add_chunked_req": "req",
    "TokenToKVPoolAllocator.__init__": "size, dtype, device, kvcache, need_sort",
    "Req.__init__ leading": "rid, origin_input_text, origin_input_ids, sampling_params",
    "Req.init_next_round_input": "tree_cache=, cow_mamba=",
    "RadixCache.create_simulated": "disable=, mock_allocator=, page_size=",
}
_EXECUTOR_COMMON = {
    "PrefillDelayerSinglePassExecutor.__init__": "prefill_delayer, token_usage",
    "PrefillDelayerSinglePassExecutor.negotiate_should_allow_prefill": (
        "local_prefillable, running_batch=, max_prefill_bs=, max_running_requests=, waiting_queue_len="
    ),
}

GENERATIONS: tuple[Generation, ...] = (
    Generation(
        name="g2026_07",
        releases="0.5.16-0.5.17",
        adder_releases="0.5.19",
        description=(
            "PrefillAdder keeps its KV budget in rem_total_token_offset/cur_rem_token_offset; "
            "PrefillDelayer takes dp_size, attn_tp_size, cpu_group and server_args; "
            "finalize(*, actual_prefill)"
        ),
        features={
            **_ADDER_COMMON,
            **_EXECUTOR_COMMON,
            "PrefillAdder budget": "adder offsets (no create_prefill_budget)",
            "PrefillDelayer.__init__ required": (
                "dp_size, attn_tp_size, cpu_group, server_args, max_delay_passes, token_usage_low_watermark"
            ),
            "PrefillDelayerSinglePassExecutor.finalize": "actual_prefill",
        },
    ),
    Generation(
        name="g2026_10",
        releases="0.5.23",
        adder_releases="0.5.21",
        description=(
            "PrefillAdder delegates its KV budget to token_to_kv_pool_allocator.create_prefill_budget "
            "(PrefillBudget); PrefillDelayer reads the group from runtime_context; "
            "finalize(*, actual_prefill_bs)"
        ),
        features={
            **_ADDER_COMMON,
            **_EXECUTOR_COMMON,
            "PrefillAdder budget": "allocator.create_prefill_budget",
            "PrefillDelayer.__init__ required": "max_delay_passes, token_usage_low_watermark",
            "PrefillDelayerSinglePassExecutor.finalize": "actual_prefill_bs",
        },
    ),
)


def _params(func: Any, *, skip_self: bool = True) -> list[inspect.Parameter]:
    params = list(inspect.signature(func).parameters.values())
    if skip_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _fmt(params: Iterable[inspect.Parameter]) -> str:
    return ", ".join(p.name + ("=" if p.default is not p.empty else "") for p in params)


def _required(func: Any) -> str:
    return ", ".join(
        p.name for p in _params(func) if p.default is p.empty and p.kind is not p.KEYWORD_ONLY
    )


def _safe(fn: Any) -> str:
    try:
        return fn()
    except AttributeError as exc:
        return f"missing ({exc})"
    except (TypeError, ValueError) as exc:
        return f"no signature ({exc})"


def load_api() -> SimpleNamespace:
    """Import the installed SGLang's scheduler classes the suite drives (about 10 s on first import)."""
    policy = importlib.import_module("sglang.srt.managers.schedule_policy")
    batch = importlib.import_module("sglang.srt.managers.schedule_batch")
    delayer = importlib.import_module("sglang.srt.managers.prefill_delayer")
    token = importlib.import_module("sglang.srt.mem_cache.allocator.token")
    radix = importlib.import_module("sglang.srt.mem_cache.radix_cache")
    return SimpleNamespace(
        PrefillAdder=policy.PrefillAdder,
        AddReqResult=policy.AddReqResult,
        Req=batch.Req,
        PrefillDelayer=delayer.PrefillDelayer,
        PrefillDelayerSinglePassExecutor=delayer.PrefillDelayerSinglePassExecutor,
        TokenToKVPoolAllocator=token.TokenToKVPoolAllocator,
        RadixCache=radix.RadixCache,
    )


def observe(api: Any) -> dict[str, str]:
    """The installed API's shape: one normalised string per feature in FEATURE_COMPONENT.

    ``api`` is any object with the class attributes :func:`load_api` returns (tests pass fakes).
    """
    adder, alloc, req = api.PrefillAdder, api.TokenToKVPoolAllocator, api.Req
    delayer, executor = api.PrefillDelayer, api.PrefillDelayerSinglePassExecutor

    def adder_budget() -> str:
        return (
            "allocator.create_prefill_budget"
            if hasattr(alloc, "create_prefill_budget")
            else "adder offsets (no create_prefill_budget)"
        )

    def finalize() -> str:
        return ", ".join(
            p.name for p in _params(executor.finalize) if p.kind is p.KEYWORD_ONLY
        ) or ("no keyword-only parameter: " + _fmt(_params(executor.finalize)))

    def adder_keywords() -> str:
        names = {p.name for p in _params(adder.__init__)}
        missing = [k for k in ADDER_KEYWORDS if k not in names]
        return f"missing {', '.join(missing)}" if missing else "has " + ", ".join(ADDER_KEYWORDS)

    return {
        "PrefillAdder.__init__ required": _safe(lambda: _required(adder.__init__)),
        "PrefillAdder.__init__ keywords": _safe(adder_keywords),
        "PrefillAdder.add_one_req": _safe(lambda: _fmt(_params(adder.add_one_req))),
        "PrefillAdder.add_chunked_req": _safe(lambda: _fmt(_params(adder.add_chunked_req))),
        "PrefillAdder budget": adder_budget(),
        "TokenToKVPoolAllocator.__init__": _safe(lambda: _fmt(_params(alloc.__init__))),
        "Req.__init__ leading": _safe(lambda: ", ".join(p.name for p in _params(req.__init__)[:4])),
        "Req.init_next_round_input": _safe(lambda: _fmt(_params(req.init_next_round_input)[:2])),
        "RadixCache.create_simulated": _safe(
            lambda: _fmt(_params(api.RadixCache.create_simulated, skip_self=False)[:3])
        ),
        "PrefillDelayer.__init__ required": _safe(lambda: _required(delayer.__init__)),
        "PrefillDelayerSinglePassExecutor.__init__": _safe(
            lambda: _fmt(_params(executor.__init__))
        ),
        "PrefillDelayerSinglePassExecutor.finalize": _safe(finalize),
        "PrefillDelayerSinglePassExecutor.negotiate_should_allow_prefill": _safe(
            lambda: _fmt(_params(executor.negotiate_should_allow_prefill))
        ),
    }


def _differences(gen: Generation, seen: dict[str, str], components: tuple[str, ...]) -> list[str]:
    return [
        f"{feat}: expected ({want}), found ({seen.get(feat, 'not observed')})"
        for feat, want in gen.features.items()
        if FEATURE_COMPONENT[feat] in components and seen.get(feat) != want
    ]


def detect(api: Any | None = None, *, components: Iterable[str] = COMPONENTS) -> Generation:
    """The generation whose shape the installed SGLang (or ``api``) has; UnsupportedSGLang if none.

    ``components`` limits the comparison to what a caller drives (``("adder",)`` for the
    placement tier): a commit whose delayer changed shape can still be probed for placement.
    """
    comps = tuple(components)
    bad = [c for c in comps if c not in COMPONENTS]
    if bad:
        raise ValueError(f"unknown component(s) {bad}; allowed: {list(COMPONENTS)}")
    if api is None:
        try:
            api = load_api()
        except ImportError as exc:
            raise UnsupportedSGLang(
                f"cannot import SGLang's scheduler classes ({exc}); supported: {supported()}"
            ) from exc
    seen = observe(api)
    diffs = {g.name: _differences(g, seen, comps) for g in GENERATIONS}
    for gen in GENERATIONS:
        if not diffs[gen.name]:
            return replace(gen, compared=comps)
    closest = min(GENERATIONS, key=lambda g: len(diffs[g.name]))
    version = _installed_version()
    raise UnsupportedSGLang(
        f"SGLang {version or '(version unknown)'} has an API shape this suite does not support "
        f"(compared: {', '.join(comps)}). Closest generation {closest}; differs in: "
        + "; ".join(diffs[closest.name])
        + f". Supported: {supported()}."
    )


def supported() -> str:
    return ", ".join(str(g) for g in GENERATIONS)


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed_commit() -> str | None:
    """The git commit SGLang was built from: its _version.py, else pip's direct_url.json (git installs)."""
    try:
        mod = importlib.import_module("sglang._version")
        commit = getattr(mod, "commit_id", None) or getattr(mod, "__commit_id__", None)
        if commit:
            return str(commit)
    except Exception:  # any failure here just means "no commit recorded"
        pass
    try:
        text = importlib.metadata.distribution("sglang").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if text:
        vcs = json.loads(text).get("vcs_info") or {}
        return vcs.get("commit_id")
    return None


def sglang_info(
    generation: Generation | None = None, *, components: Iterable[str] = COMPONENTS
) -> dict[str, Any]:
    """``{"version", "commit", "generation"}`` of the installed SGLang, for run results.

    ``generation`` is detected over ``components`` unless given; an unsupported shape
    raises :class:`UnsupportedSGLang` (benchmarks turn it into an asv skip).
    """
    if generation is None:
        generation = detect(components=components)
    return {
        "version": _installed_version(),
        "commit": _installed_commit(),
        "generation": generation.name,
        # a generation matched on fewer components says nothing about the others
        "generation_compared": list(generation.compared),
    }
