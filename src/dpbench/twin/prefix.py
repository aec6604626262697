"""Prefix-cache hits in a twin run, beside what the traffic offered.

Measured: the prompt tokens each request's first admission found in its rank's radix cache
(SGLang's ``#cached-token``), over the prompt tokens of the admitted requests — overall and per
rank. Offered, for traces with KV block ids (imported Mooncake windows): the block-level reuse
of the whole window with one unbounded cache, and of the requests each rank received with one
unbounded cache per rank (each DP rank keeps its own radix cache, so dispatch dilutes sharing).
The gap between a rank's offered and measured is what its pool size and timing lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpbench.core.results import Metric
from dpbench.twin.ranks import RankResult
from dpbench.workload.importers.reuse import block_reuse
from dpbench.workload.request import TraceRequest


def _rate(num: int, den: int) -> float:
    return num / den if den else float("nan")


def prefix_hits(
    results: Sequence[RankResult], ordered: Sequence[TraceRequest]
) -> tuple[dict[str, Metric], dict[str, Any]]:
    """Metrics (``prefix_hit_rate`` and, with block ids, ``prefix_reuse_*``) and the per-rank table."""
    if any(r.cached_tokens is None or r.prompt_tokens is None for r in results):
        return {}, {}
    rows = []
    hit_all = prompt_all = 0
    offered_all = 0
    has_blocks = bool(ordered) and all(q.blocks is not None for q in ordered)
    for r in results:
        assert r.cached_tokens is not None and r.prompt_tokens is not None
        admitted = [(c, p) for c, p in zip(r.cached_tokens, r.prompt_tokens, strict=True) if c >= 0]
        hit = sum(c for c, _ in admitted)
        prompt = sum(p for _, p in admitted)
        hit_all += hit
        prompt_all += prompt
        row: dict[str, Any] = {
            "rank": r.rank,
            "requests": len(r.requests),
            "admitted": len(admitted),
            "cached_tokens": hit,
            "prompt_tokens": prompt,
            "hit_rate": _rate(hit, prompt),
        }
        if has_blocks:
            mine = sorted(q[0] for q in r.requests)  # arrival order, as the rank received them
            reused, total = block_reuse([ordered[i] for i in mine])
            offered_all += reused
            row["offered_reuse"] = _rate(reused, total)
        rows.append(row)
    m = {"prefix_hit_rate": Metric(_rate(hit_all, prompt_all), "fraction", "higher")}
    if has_blocks:
        reused, total = block_reuse(ordered)
        m["prefix_reuse_trace"] = Metric(_rate(reused, total), "fraction", "none")
        m["prefix_reuse_per_rank_caches"] = Metric(
            _rate(offered_all, sum(q.input_len for q in ordered)), "fraction", "none"
        )
    return m, {"prefix_hits_by_rank": rows}
