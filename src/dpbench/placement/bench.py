"""The run behind the placement tier's asv benchmark (``benchmarks/placement.py``)."""

from __future__ import annotations

from typing import Any

from dpbench.core.asvcache import save_run, skipped


def placement() -> dict[str, Any]:
    """The placement probe's run result for the installed SGLang, filed beside asv's results
    (per-case detail included); a skip where its API shape is unsupported."""
    from dpbench.core.faults import inject_if_requested
    from dpbench.placement.probe import build_result
    from dpbench.sglang_compat.detect import UnsupportedSGLang

    inject_if_requested("placement")
    try:
        result = build_result()
    except UnsupportedSGLang as exc:
        return skipped(str(exc))
    save_run("placement", "placement", result)
    return result
