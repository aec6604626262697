"""Trace summaries for people: length percentiles, arrival rate, prefix and session reuse."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpbench.workload.trace import TraceColumns

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class LengthStats:
    mean: float
    p50: float
    p90: float
    p99: float
    min: int
    max: int

    @classmethod
    def of(cls, values: np.ndarray) -> LengthStats:
        p50, p90, p99 = np.percentile(values, PERCENTILES).tolist()
        return cls(float(values.mean()), p50, p90, p99, int(values.min()), int(values.max()))

    def line(self) -> str:
        return (
            f"mean {self.mean:,.0f}  p50 {self.p50:,.0f}  p90 {self.p90:,.0f}  "
            f"p99 {self.p99:,.0f}  min {self.min:,}  max {self.max:,}"
        )


@dataclass(frozen=True, slots=True)
class TraceSummary:
    requests: int
    span_s: float
    mean_rate_per_s: float | None
    input_len: LengthStats
    output_len: LengthStats
    prefix_share: float
    prefix_groups: int
    sessions: int
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int


def summarize(cols: TraceColumns) -> TraceSummary:
    span = float(cols.arrival_s.max() - cols.arrival_s.min()) if len(cols) else 0.0
    grouped = cols.prefix_group >= 0
    return TraceSummary(
        requests=len(cols),
        span_s=span,
        mean_rate_per_s=(len(cols) - 1) / span if span > 0 else None,
        input_len=LengthStats.of(cols.input_len),
        output_len=LengthStats.of(cols.max_new_tokens),
        prefix_share=float(grouped.mean()),
        prefix_groups=int(np.unique(cols.prefix_group[grouped]).size),
        sessions=int(np.unique(cols.session[cols.session >= 0]).size),
        prompt_tokens=int(cols.input_len.sum()),
        output_tokens=int(cols.max_new_tokens.sum()),
        shared_prefix_tokens=int(cols.prefix_len.sum()),
    )
