"""Shared checks and result filing for the asv suites: skips, SGLang detection, run files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dpbench import results
from dpbench.paths import results_dir


def require_cuda(n: int = 1) -> int:
    """Skip (asv: NotImplementedError in setup) unless at least ``n`` CUDA GPUs are visible."""
    try:
        import torch
    except ImportError as exc:
        raise NotImplementedError(
            f"needs ≥{n} CUDA GPU(s); torch is not importable ({exc})"
        ) from exc
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < n:
        raise NotImplementedError(f"needs ≥{n} CUDA GPU(s); found {found}")
    return found


def require_sglang(components: tuple[str, ...] = ("adder", "delayer")) -> dict[str, Any]:
    """The installed SGLang's version/commit/API generation; skip with what differs if unsupported.

    ``components`` names what the benchmark drives (see ``detect.COMPONENTS``): a release
    whose delayer changed can still run benchmarks that only drive the adder.
    """
    try:
        import dpbench.sglang_compat.detect as detect
    except ImportError as exc:
        raise NotImplementedError(f"dpbench.sglang_compat unavailable: {exc}") from exc
    try:
        return detect.sglang_info(components=components)
    except ImportError as exc:
        raise NotImplementedError(f"SGLang is not importable here: {exc}") from exc
    except detect.UnsupportedSGLang as exc:
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
