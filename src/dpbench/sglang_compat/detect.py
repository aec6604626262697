"""Which SGLang API shape is installed, told from signatures and attributes, not version strings.

:func:`observe` reads one normalised string per feature of
:data:`dpbench.sglang_compat.generations.FEATURES` off the installed classes;
:func:`detect` maps each to a known variant and returns the :class:`Generation` they
make. A commit between releases whose shapes are all known is accepted whatever its
version string says; a shape matching no variant raises :class:`UnsupportedSGLang`
with one line naming the feature, what was found and what is known.

Shapes are compared per *component* (``adder``, ``delayer``), so a tier that drives
only the admission side (the placement tier) asks for just that:
``detect(components=("adder",))``. Adapters ask for one feature's variant:
``variant("PrefillDelayer.__init__")`` → ``"args"`` / ``"sizes_group"`` / ….

This module is also the one place that reads the installed SGLang's version and commit.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import json
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from dpbench.sglang_compat.generations import (
    ADDER_KEYWORDS,
    COMPONENTS,
    FEATURES,
    Generation,
    feature,
    features_of,
    generation_for,
    generations,
)
from dpbench.sglang_compat.source import (
    max_prefill_bs_decay,
    scheduler_source,
    sglang_package_dir,
    version_file_commit,
)

__all__ = [
    "ADDER_KEYWORDS",
    "COMPONENTS",
    "GENERATIONS",
    "BrokenEnvironment",
    "Generation",
    "UnsupportedSGLang",
    "detect",
    "installed_commit",
    "installed_version",
    "load_api",
    "observe",
    "own_module_missing",
    "sglang_info",
    "variant",
]

# The generations over both components, oldest first (derived from the table).
GENERATIONS: tuple[Generation, ...] = generations()
# Which component each observed feature belongs to.
FEATURE_COMPONENT: dict[str, str] = {f.key: f.component for f in FEATURES}


class UnsupportedSGLang(RuntimeError):
    """The installed SGLang's API shape matches no variant this suite knows; the message is one line."""


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
    except OSError as exc:  # inspect.getsource on a class without source
        return f"no source ({exc})"


DELAYER_MODULE = "sglang.srt.managers.prefill_delayer"


def load_api() -> SimpleNamespace:
    """Import the installed SGLang's scheduler classes the suite drives (about 10 s on first import).

    ``PrefillDelayer`` and its executor are None where SGLang has no
    ``sglang.srt.managers.prefill_delayer`` (releases before the delayer existed).
    """
    policy = importlib.import_module("sglang.srt.managers.schedule_policy")
    batch = importlib.import_module("sglang.srt.managers.schedule_batch")
    token = importlib.import_module("sglang.srt.mem_cache.allocator.token")
    radix = importlib.import_module("sglang.srt.mem_cache.radix_cache")
    has_delayer = importlib.util.find_spec(DELAYER_MODULE) is not None
    delayer = importlib.import_module(DELAYER_MODULE) if has_delayer else None
    return SimpleNamespace(
        PrefillAdder=policy.PrefillAdder,
        AddReqResult=policy.AddReqResult,
        Req=batch.Req,
        PrefillDelayer=getattr(delayer, "PrefillDelayer", None),
        PrefillDelayerSinglePassExecutor=getattr(delayer, "PrefillDelayerSinglePassExecutor", None),
        TokenToKVPoolAllocator=token.TokenToKVPoolAllocator,
        RadixCache=radix.RadixCache,
        delayer_module=delayer,
        runtime_context=importlib.import_module("sglang.srt.runtime_context"),
        server_args=importlib.import_module("sglang.srt.server_args"),
        scheduler_source=scheduler_source(),
    )


ABSENT = "absent (no sglang.srt.managers.prefill_delayer)"


def _server_args_shape(api: Any) -> str:
    rc = getattr(api, "runtime_context", None)
    if rc is not None and hasattr(rc, "publish"):
        return "runtime_context.publish"
    if rc is not None and hasattr(getattr(rc, "RuntimeContext", None), "set_server_args"):
        return "RuntimeContext.set_server_args"
    if hasattr(getattr(api, "server_args", None), "set_global_server_args_for_scheduler"):
        return "server_args.set_global_server_args_for_scheduler"
    return (
        "none of runtime_context.publish, RuntimeContext.set_server_args, "
        "server_args.set_global_server_args_for_scheduler"
    )


def _computed_prefix_shape(req: Any) -> str:
    src = inspect.getsource(req.__init__)
    if "self.prefix_indices" in src:
        return "self.prefix_indices"
    if "self.prefix_len" in src:
        return "self.prefix_len"
    return "Req.__init__ sets neither prefix_indices nor prefix_len"


def _admitted_extend_shape(req: Any) -> str:
    if hasattr(req, "set_extend_range"):
        return "Req.set_extend_range"
    if "self.extend_end" in inspect.getsource(req):
        return "Req.extend_end"
    if hasattr(req, "set_extend_input_len"):
        return "Req.set_extend_input_len"
    return "Req has none of set_extend_range, extend_end, set_extend_input_len"


def _dp_flag_shape(delayer: Any) -> str:
    src = inspect.getsource(delayer.__init__)
    if "server_args.enable_dp_attention" in src:
        return "server_args.enable_dp_attention"
    if "get_parallel" in src or "parallel." in src:
        return "runtime_context.get_parallel()"
    return "PrefillDelayer.__init__ reads DP attention from neither server_args nor get_parallel()"


def _max_prefill_bs_shape(api: Any) -> str:
    if api.PrefillDelayer is None:
        return ABSENT
    if hasattr(getattr(api, "delayer_module", None), "RecentPrefillBatchSizeTracker"):
        return "RecentPrefillBatchSizeTracker"
    text = getattr(api, "scheduler_source", None)
    if text is None:
        return "scheduler.py not found"
    factors = max_prefill_bs_decay(text)
    if len(set(factors)) > 1:
        return f"scheduler.py decays max_prefill_bs by several factors {factors}"
    return "scheduler running maximum decayed per pass" if factors else "scheduler running maximum"


def observe(api: Any) -> dict[str, str]:
    """The installed API's shape: one normalised string per feature of the table.

    ``api`` is any object with the attributes :func:`load_api` returns (tests pass fakes;
    ``runtime_context``, ``server_args``, ``delayer_module`` and ``scheduler_source`` may
    be missing there).
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
        if "prefill_delayer_single_pass" not in names:
            return "no prefill_delayer_single_pass"
        missing = [k for k in ADDER_KEYWORDS if k not in names]
        return f"missing {', '.join(missing)}" if missing else "has " + ", ".join(ADDER_KEYWORDS)

    seen = {
        "server args": _server_args_shape(api),
        "PrefillAdder.__init__ required": _safe(lambda: _required(adder.__init__)),
        "PrefillAdder.__init__ keywords": _safe(adder_keywords),
        "PrefillAdder.add_one_req": _safe(lambda: _fmt(_params(adder.add_one_req))),
        "PrefillAdder.add_chunked_req": _safe(lambda: _fmt(_params(adder.add_chunked_req))),
        "PrefillAdder budget": adder_budget(),
        "TokenToKVPoolAllocator.__init__": _safe(lambda: _fmt(_params(alloc.__init__))),
        "Req.__init__ leading": _safe(lambda: ", ".join(p.name for p in _params(req.__init__)[:4])),
        "Req.init_next_round_input": _safe(lambda: _fmt(_params(req.init_next_round_input)[:2])),
        "Req computed prefix": _safe(lambda: _computed_prefix_shape(req)),
        "Req admitted extend": _safe(lambda: _admitted_extend_shape(req)),
        "RadixCache.create_simulated": _safe(
            lambda: _fmt(_params(api.RadixCache.create_simulated, skip_self=False)[:3])
        ),
        "max_prefill_bs bookkeeping": _max_prefill_bs_shape(api),
    }
    if delayer is None or executor is None:
        seen.update({f.key: ABSENT for f in FEATURES if f.component == "delayer"})
        return seen
    seen.update(
        {
            "PrefillDelayer.__init__": _safe(lambda: _required(delayer.__init__)),
            "PrefillDelayer DP-attention flag": _safe(lambda: _dp_flag_shape(delayer)),
            "PrefillDelayerSinglePassExecutor.__init__": _safe(
                lambda: _fmt(_params(executor.__init__))
            ),
            "PrefillDelayerSinglePassExecutor.finalize": _safe(finalize),
            "PrefillDelayerSinglePassExecutor.negotiate_should_allow_prefill": _safe(
                lambda: _fmt(_params(executor.negotiate_should_allow_prefill))
            ),
        }
    )
    return seen


def _unknown(key: str, seen: str) -> str:
    f = feature(key)
    return f"{key} is ({seen}); known: {f.known()}"


def detect(api: Any | None = None, *, components: Iterable[str] = COMPONENTS) -> Generation:
    """The generation the installed SGLang (or ``api``) has over ``components``; UnsupportedSGLang if any shape is unknown.

    ``components`` limits the comparison to what a caller drives (``("adder",)`` for the
    placement tier): a commit whose delayer changed shape can still be probed for placement.
    """
    comps = tuple(components)
    feats = features_of(comps)
    if api is None:
        api = _installed_api()
    seen = observe(api)
    variants: dict[str, str] = {}
    unknown: list[str] = []
    for f in feats:
        v = f.by_shape(seen[f.key])
        if v is None:
            unknown.append(_unknown(f.key, seen[f.key]))
        else:
            variants[f.key] = v.name
    if unknown:
        version = installed_version() if api is _INSTALLED.get("api") else None
        raise UnsupportedSGLang(
            f"SGLang {version or '(this build)'} has an API shape this suite does not support: "
            + " | ".join(unknown)
        )
    return generation_for(variants, comps)


def variant(key: str, api: Any | None = None) -> str:
    """The variant name of one feature in the installed SGLang (or ``api``); UnsupportedSGLang if unknown."""
    f = feature(key)
    if api is None:
        api = _installed_api()
    seen = observe(api)[key]
    v = f.by_shape(seen)
    if v is None:
        version = installed_version() if api is _INSTALLED.get("api") else None
        raise UnsupportedSGLang(f"SGLang {version or '(this build)'}: " + _unknown(key, seen))
    return v.name


_INSTALLED: dict[str, Any] = {}


class BrokenEnvironment(RuntimeError):
    """SGLang's scheduler does not import for a reason that is not its API shape (SGLang itself
    missing, a dependency missing or failing to import): a failure, never a skip."""


def own_module_missing(exc: ImportError) -> bool:
    """True when ``exc`` says a module or name of SGLang's own is not there (an API shape),
    False for anything else (a dependency failing: a broken environment)."""
    name = getattr(exc, "name", None) or ""
    if not name.startswith("sglang."):
        return False
    return isinstance(exc, ModuleNotFoundError) or "cannot import name" in str(exc)


def _import_failure(exc: ImportError) -> Exception:
    """What an ImportError while importing SGLang's scheduler classes means.

    Only a module or name *of SGLang's own* that is not there (``sglang.srt.…`` moved or
    renamed: ``ModuleNotFoundError`` with ``name`` under ``sglang.``, or ``cannot import name X
    from sglang.…``) is an API shape this suite does not know: :class:`UnsupportedSGLang`.
    SGLang not installed at all, or any other module (torch, torchvision, a compiled
    extension) failing, is a broken environment: :class:`BrokenEnvironment`.
    """
    name = getattr(exc, "name", None) or ""
    own = name.startswith("sglang.")
    if isinstance(exc, ModuleNotFoundError) and own:
        return UnsupportedSGLang(
            f"SGLang has no module {name} ({exc}); supported: "
            + ", ".join(str(g) for g in GENERATIONS)
        )
    if not isinstance(exc, ModuleNotFoundError) and own and "cannot import name" in str(exc):
        return UnsupportedSGLang(
            f"SGLang's {name} lacks a name the suite drives ({exc}); supported: "
            + ", ".join(str(g) for g in GENERATIONS)
        )
    what = "SGLang is not installed" if name == "sglang" else f"importing SGLang failed: {exc!r}"
    return BrokenEnvironment(
        f"{what} (a broken environment, not an unsupported SGLang: fix the install)"
    )


def _installed_api() -> Any:
    """The installed SGLang's classes, imported once per process; UnsupportedSGLang if a module
    or name of SGLang's own is missing, BrokenEnvironment for any other import failure."""
    if "api" not in _INSTALLED:
        try:
            _INSTALLED["api"] = load_api()
        except ImportError as exc:
            raise _import_failure(exc) from exc
    return _INSTALLED["api"]


def supported() -> str:
    return ", ".join(str(g) for g in GENERATIONS)


def installed_version() -> str | None:
    """The installed SGLang's version (package metadata; SGLang is not imported), None if not installed."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


# Written into the package by dpbench.changes.apply when a change is laid over a release.
CHANGE_MARKER = "_dpbench_change.json"


def installed_change() -> dict[str, Any] | None:
    """The change laid over the installed SGLang (name, base, patch sha256, files), read from
    its marker file (SGLang is not imported); None for a release as shipped."""
    try:  # a bare package module (the kernel tier's kernel-modules-only import) has no spec
        marker = sglang_package_dir() / CHANGE_MARKER
    except FileNotFoundError:
        return None
    return json.loads(marker.read_text()) if marker.is_file() else None


def installed_commit() -> str | None:
    """The git commit SGLang was built from: its ``_version.py`` (read, not imported), else
    pip's direct_url.json for git installs, else None.

    Release wheels record none (``commit_id = None``); their commit in the release-history
    repository is asv's.
    """
    from_file = version_file_commit()
    if from_file:
        return from_file
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
    """``{"version", "commit", "generation", "generation_compared", "variants"}`` of the installed SGLang.

    ``generation`` is detected over ``components`` unless given; an unsupported shape
    raises :class:`UnsupportedSGLang` (benchmarks turn it into an asv skip). Prefer
    :func:`dpbench.sglang_compat.provenance.provenance`, which adds the detected placement.
    """
    if generation is None:
        generation = detect(components=components)
    return {
        "version": installed_version(),
        "commit": installed_commit(),
        "generation": generation.name,
        # a generation matched on fewer components says nothing about the others
        "generation_compared": list(generation.compared),
        "variants": dict(generation.variants),
    }
