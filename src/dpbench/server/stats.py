"""Aggregate request outcomes into the client-side metrics of a run (computed here, printed elsewhere).

Every metric name carries its unit. Percentiles are numpy's (linear interpolation).
The latencies and goodput are :mod:`dpbench.metrics.latency`'s (one definition with the twin).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from dpbench.core.results import Metric
from dpbench.metrics.latency import PERCENTILES, RequestLatency, Slo, latency_metrics
from dpbench.server.client import ERROR_KINDS, RequestOutcome
from dpbench.server.loadgen import LoadResult

__all__ = ["PERCENTILES", "Slo", "per_rank_counts", "prefix_hits_by_rank", "summarize"]


def summarize(result: LoadResult, slo: Slo | None = None) -> dict[str, Metric]:
    """Throughput, latency percentiles, goodput, errors by kind, and the client's own overhead."""
    slo = slo or Slo()
    outs = result.outcomes
    ok = [o for o in outs if o.ok]
    dur = max(result.duration_s, 1e-9)
    m: dict[str, Metric] = {
        "requests_total": Metric(float(len(outs)), "requests"),
        "requests_ok_total": Metric(float(len(ok)), "requests", "higher"),
        "request_throughput_per_s": Metric(len(ok) / dur, "requests/s", "higher"),
        "output_tokens_per_s": Metric(sum(o.output_tokens for o in ok) / dur, "tokens/s", "higher"),
        "input_tokens_per_s": Metric(sum(o.input_tokens for o in ok) / dur, "tokens/s", "higher"),
        "duration_s": Metric(result.duration_s, "s"),
    }
    # TTFT/ITL/TPOT/E2E and goodput: dpbench.metrics.latency, the twin's definitions too
    m.update(
        latency_metrics(
            (RequestLatency(o.ttft_s, o.e2e_s, o.itl_s, o.output_tokens) for o in ok), dur, slo
        )
    )
    hit = [o for o in ok if o.cached_tokens is not None]
    if hit and len(hit) == len(ok):  # every completed request said: SGLang's prefix-cache hits
        m["prefix_hit_rate"] = Metric(
            sum(o.cached_tokens for o in hit) / max(sum(o.input_tokens for o in hit), 1),
            "fraction",
            "higher",
        )
    kinds = Counter(o.error_kind for o in outs if not o.ok)
    m["errors_total"] = Metric(float(sum(kinds.values())), "requests", "lower")
    for kind in ERROR_KINDS:
        m[f"errors_{kind}_total"] = Metric(float(kinds.get(kind, 0)), "requests", "lower")
    m["malformed_chunks_total"] = Metric(
        float(sum(o.malformed_chunks for o in outs)), "chunks", "lower"
    )
    lag = result.loop_lag.summary()
    m["client_loop_lag_ms_p50"] = Metric(lag["p50"], "ms", "lower")
    m["client_loop_lag_ms_p99"] = Metric(lag["p99"], "ms", "lower")
    m["client_loop_lag_ms_max"] = Metric(lag["max"], "ms", "lower")
    if result.send_lateness_s:
        late = np.asarray(result.send_lateness_s) * 1e3
        m["client_send_lateness_ms_p99"] = Metric(float(np.percentile(late, 99)), "ms", "lower")
        m["client_send_lateness_ms_max"] = Metric(float(late.max()), "ms", "lower")
    return m


def per_rank_counts(outs: Sequence[RequestOutcome]) -> dict[str, int]:
    """Completed requests per DP rank, where the server reports ``meta_info.dp_rank``."""
    c = Counter(str(o.dp_rank) for o in outs if o.ok and o.dp_rank is not None)
    return dict(sorted(c.items()))


def prefix_hits_by_rank(outs: Sequence[RequestOutcome]) -> list[dict[str, float | int]]:
    """Per DP rank: completed requests, their prompt and cached tokens (SGLang's
    ``meta_info.cached_tokens``) and the hit rate; empty where the server reports neither."""
    rows: dict[int, list[int]] = {}
    for o in outs:
        if o.ok and o.dp_rank is not None and o.cached_tokens is not None:
            row = rows.setdefault(o.dp_rank, [0, 0, 0])
            row[0] += 1
            row[1] += o.input_tokens
            row[2] += o.cached_tokens
    return [
        {
            "rank": r,
            "requests": n,
            "prompt_tokens": p,
            "cached_tokens": c,
            "hit_rate": c / p if p else float("nan"),
        }
        for r, (n, p, c) in sorted(rows.items())
    ]
