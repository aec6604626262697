"""Shared checks and result filing for the asv suites: skips, SGLang detection, run files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dpbench import results
from dpbench.paths import results_dir

# The scenario the simulated-forward server and the twin both run (the fidelity view pairs
# them): a CPU-sized high-KV spec at SGLang's H200 default global chunk size, the device
# the cost model models (SGLang's own CPU default would be 4096).
FIDELITY_SPEC = "long-prompt-burst-small"
FIDELITY_CHUNKED_PREFILL = 8192


def require_cuda(n: int = 1) -> int:
    """Skip (asv: NotImplementedError in setup) unless at least ``n`` CUDA GPUs are visible.

    torch failing to import is a broken environment (every tier's environment has it), so it
    propagates and fails the benchmark: only missing hardware skips."""
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < n:
        raise NotImplementedError(f"needs ≥{n} CUDA GPU(s); found {found}")
    return found


def require_sglang(components: tuple[str, ...] = ("adder", "delayer")) -> dict[str, Any]:
    """The installed SGLang's provenance (``{"sglang", "placement"}``); skip with the one-line difference if unsupported.

    ``components`` names what the benchmark drives (see ``generations.COMPONENTS``): a
    release whose delayer changed can still run benchmarks that only drive the adder. An
    SGLang whose own module or name is missing is an unsupported shape (a skip, naming it); any
    other import failure (``detect.BrokenEnvironment``) or error propagates and fails the benchmark.
    """
    from dpbench.sglang_compat.detect import UnsupportedSGLang
    from dpbench.sglang_compat.provenance import provenance

    try:
        return provenance(components)
    except UnsupportedSGLang as exc:
        raise NotImplementedError(str(exc)) from exc


def run_file(tier: str, name: str) -> Path:
    """results/runs/<commit>/<tier>/<name>.json, the commit being asv's (ASV_COMMIT) or 'local'."""
    commit = os.environ.get("ASV_COMMIT", "local")
    root = (
        Path(os.environ["ASV_CONF_DIR"]) / "results"
        if "ASV_CONF_DIR" in os.environ
        else results_dir()
    )
    safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)
    return root / "runs" / commit / tier / f"{safe}.json"


def save_run(tier: str, name: str, result: dict[str, Any]) -> Path:
    """File a run result beside asv's results (atomically), so the dashboard shows its detail."""
    return results.save(run_file(tier, name), result)


def metric(result: dict[str, Any], name: str) -> float:
    """A metric's value from a run result; a missing metric is an error naming what exists."""
    try:
        return result["metrics"][name]["value"]
    except KeyError:
        raise KeyError(
            f"metric {name!r} not in run result; has {sorted(result.get('metrics', {}))}"
        ) from None


def delayer_metric(result: dict[str, Any], name: str, delayer: str) -> float:
    """A metric only the delayer produces: NaN (not measured) with the delayer off; with it on a
    missing one fails the benchmark naming it (a renamed counter must not read as "not measured")."""
    if delayer == "off":
        found = result.get("metrics", {}).get(name)
        if found is not None:
            raise KeyError(f"metric {name!r} present in a delayer-off run; it is the delayer's")
        return float("nan")
    return metric(result, name)


def optional_metric(result: dict[str, Any], name: str) -> float:
    """A metric the run result may leave out because it was not measured: NaN (asv: no value) then.

    The run result's ``notes`` say why (e.g. "static analysis: unknown (…)").
    """
    found = result.get("metrics", {}).get(name)
    return float("nan") if found is None else found["value"]


class SettingFailed(RuntimeError):
    """One setting of a benchmark class's cache failed; the others were kept."""


def cache_settings(settings: Any) -> dict[str, Any]:
    """``{key: what run() returned}`` over ``settings`` (``(key, run)`` pairs), one at a time.

    A setting that fails is recorded as ``{"error": …}`` and the next ones still run; an
    unsupported API shape (``UnsupportedSGLang``, raised by the release, not by this suite)
    is recorded as ``{"skip": …}`` for that setting and every later one (the same SGLang
    will not grow the shape back). Completed settings are always kept. :func:`cached`
    turns an entry back into its benchmark's outcome: a result, a skip, or a failure.
    """
    import traceback

    from dpbench.sglang_compat.detect import UnsupportedSGLang

    out: dict[str, Any] = {}
    skip: str | None = None
    for key, run in settings:
        if skip is not None:
            out[key] = {"skip": skip}
            continue
        try:
            out[key] = run()
        except UnsupportedSGLang as exc:
            skip = str(exc)
            out[key] = {"skip": skip}
        except Exception as exc:
            tail = "".join(traceback.format_exception(exc)[-6:])
            out[key] = {"error": f"{type(exc).__name__}: {exc}\n{tail}"}
    return out


def cached(cache: dict[str, Any], key: str) -> dict[str, Any]:
    """A setting's entry from :func:`cache_settings`: the whole cache's skip, the setting's
    skip (asv: skipped), its failure (asv: failed, with the original error), or its result."""
    if "skip" in cache and isinstance(cache["skip"], str):
        raise NotImplementedError(cache["skip"])
    entry = cache[key]
    if "skip" in entry:
        raise NotImplementedError(entry["skip"])
    if "error" in entry:
        raise SettingFailed(f"setting {key} failed in setup_cache: {entry['error']}")
    return entry
