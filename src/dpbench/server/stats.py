"""Aggregate request outcomes into the client-side metrics of a run (computed here, printed elsewhere).

Every metric name carries its unit. Percentiles are numpy's (linear interpolation).
Goodput counts completed requests that met both SLOs (TTFT and TPOT), per second.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dpbench.results import Metric
from dpbench.server.client import ERROR_KINDS, RequestOutcome
from dpbench.server.loadgen import LoadResult

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Slo:
    """Service-level objectives for goodput (milliseconds)."""

    ttft_ms: float = field(
        default=2000.0, metadata={"help": "goodput's TTFT SLO, ms", "flag": "--ttft-slo-ms"}
    )
    tpot_ms: float = field(
        default=100.0, metadata={"help": "goodput's TPOT SLO, ms", "flag": "--tpot-slo-ms"}
    )

    def __post_init__(self) -> None:
        if self.ttft_ms <= 0 or self.tpot_ms <= 0:
            raise ValueError(
                f"SLOs must be > 0 ms, got ttft_ms={self.ttft_ms}, tpot_ms={self.tpot_ms}"
            )

    def met(self, o: RequestOutcome) -> bool:
        if not o.ok or o.ttft_s is None or o.ttft_s * 1e3 > self.ttft_ms:
            return False
        tpot = o.tpot_s
        return tpot is None or tpot * 1e3 <= self.tpot_ms


def _dist(name: str, values_s: Sequence[float], out: dict[str, Metric]) -> None:
    """name_ms_{mean,p50,p90,p99} (lower is better); nothing if no values."""
    if not len(values_s):
        return
    a = np.asarray(values_s, dtype=np.float64) * 1e3
    out[f"{name}_ms_mean"] = Metric(float(a.mean()), "ms", "lower")
    for p, v in zip(PERCENTILES, np.percentile(a, PERCENTILES), strict=True):
        out[f"{name}_ms_p{p}"] = Metric(float(v), "ms", "lower")


def summarize(result: LoadResult, slo: Slo = Slo()) -> dict[str, Metric]:
    """Throughput, latency percentiles, goodput, errors by kind, and the client's own overhead."""
    outs = result.outcomes
    ok = [o for o in outs if o.ok]
    dur = max(result.duration_s, 1e-9)
    m: dict[str, Metric] = {
        "requests_total": Metric(float(len(outs)), "requests"),
        "requests_ok_total": Metric(float(len(ok)), "requests", "higher"),
        "request_throughput_per_s": Metric(len(ok) / dur, "requests/s", "higher"),
        "output_tokens_per_s": Metric(sum(o.output_tokens for o in ok) / dur, "tokens/s", "higher"),
        "input_tokens_per_s": Metric(sum(o.input_tokens for o in ok) / dur, "tokens/s", "higher"),
        "goodput_requests_per_s": Metric(sum(slo.met(o) for o in ok) / dur, "requests/s", "higher"),
        "duration_s": Metric(result.duration_s, "s"),
    }
    _dist("ttft", [o.ttft_s for o in ok if o.ttft_s is not None], m)
    _dist("itl", [x for o in ok for x in o.itl_s], m)
    _dist("tpot", [t for o in ok if (t := o.tpot_s) is not None], m)
    _dist("e2e", [o.e2e_s for o in ok if o.e2e_s is not None], m)
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
