"""Fit a read production trace to a run: one window, a rate scale, a request cap, and prompts
that fit the model (and the KV pool, if given) — every request dropped or cut is counted."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpbench.workload.importers.base import RawTrace, TraceImportError
from dpbench.workload.importers.source import TraceSource
from dpbench.workload.request import ARRIVAL_DECIMALS, TraceRequest


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import kept and changed; printed by the CLI, recorded in run results."""

    format: str
    path: str
    window: int
    window_start_s: float
    window_end_s: float | None  # None: to the trace's end
    rate_scale: float
    trace_requests: int  # in the whole file
    window_requests: int  # in the window, before the cap
    capped: int  # left out by max_requests
    dropped_overlong: int
    truncated_overlong: int
    truncated_tokens: int
    requests: int  # imported
    context_len: int | None  # the model's context: prompt + output must fit
    max_input_len: int | None  # the source's limit on a prompt

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}

    def lines(self) -> list[str]:
        end = "end" if self.window_end_s is None else f"{self.window_end_s:g} s"
        out = [
            f"window {self.window}: {self.window_start_s:g} s – {end} of the trace, "
            f"{self.window_requests:,} of {self.trace_requests:,} requests; rate ×{self.rate_scale:g}",
        ]
        if self.capped:
            out.append(f"capped: {self.capped:,} requests past max_requests left out")
        if self.dropped_overlong or self.truncated_overlong:
            limits = [f"context {self.context_len:,} with the output"] if self.context_len else []
            if self.max_input_len is not None:
                limits.append(f"max_input_len {self.max_input_len:,}")
            out.append(
                f"over-long prompts (past {' or '.join(limits)}): {self.dropped_overlong:,} "
                f"dropped, {self.truncated_overlong:,} truncated ({self.truncated_tokens:,} tokens cut)"
            )
        out.append(f"imported: {self.requests:,} requests")
        return out


def _request_ids(lines: np.ndarray) -> list[str]:
    width = max(6, len(str(int(lines.max())))) if len(lines) else 6
    return [f"r{n:0{width}d}" for n in lines.tolist()]


def fit(
    raw: RawTrace, source: TraceSource, *, window: int, context_len: int | None
) -> tuple[list[TraceRequest], ImportReport]:
    """The requests of window ``window`` of ``raw``, rescaled, capped and fitted.

    A prompt may be as long as ``context_len − output`` (the model's context, when known) and
    ``source.max_input_len``; a longer one is dropped or truncated (``source.overlong``)."""
    start, end = source.window(window)
    span = float(raw.arrival_s[-1])
    if start > span:
        raise TraceImportError(
            f"{raw.path}: window {window} starts at {start:g} s but the trace's last request "
            f"arrives at {span:g} s; allowed windows: 0.."
            f"{int((span - source.window_start_s) // source.window_s) if source.window_s else 0}"
        )
    lo, hi = np.searchsorted(raw.arrival_s, [start, end], side="left")
    idx = np.arange(lo, hi)
    if not idx.size:
        raise TraceImportError(
            f"{raw.path}: no request arrives in window {window} ({start:g}–{end:g} s)"
        )
    window_requests = int(idx.size)
    capped = 0
    if source.max_requests is not None and idx.size > source.max_requests:
        capped = int(idx.size - source.max_requests)
        idx = idx[: source.max_requests]
    out_len = raw.output_len[idx]
    in_len = raw.input_len[idx].copy()
    limit = np.full(idx.size, np.iinfo(np.int64).max, dtype=np.int64)
    if context_len is not None:
        limit = np.minimum(limit, context_len - out_len)
    if source.max_input_len is not None:
        limit = np.minimum(limit, source.max_input_len)
    over = in_len > limit
    keep = ~over | ((source.overlong == "truncate") & (limit >= 1))
    dropped = int((~keep).sum())
    truncated = int((over & keep).sum())
    cut = int((in_len[over & keep] - limit[over & keep]).sum())
    in_len = np.where(over & keep, limit, in_len)
    arrival = np.round(
        (raw.arrival_s[idx] - raw.arrival_s[idx[0]]) / source.rate_scale, ARRIVAL_DECIMALS
    )
    ids = _request_ids(raw.line[idx])
    bs = raw.block_size
    reqs = []
    for j in np.flatnonzero(keep).tolist():
        n = int(in_len[j])
        blocks = None
        if raw.blocks is not None:
            assert bs is not None
            blocks = raw.blocks[int(idx[j])][: -(-n // bs)]
        reqs.append(
            TraceRequest(
                ids[j],
                float(arrival[j]),
                n,
                None,
                0,
                int(out_len[j]),
                True,
                None,
                None,
                blocks,
                bs if blocks is not None else None,
            )
        )
    if not reqs:
        raise TraceImportError(
            f"{raw.path}: every request of window {window} was dropped as over-long "
            f"(prompts limited to {int(limit.max())} tokens); use overlong=truncate or a larger "
            f"max_input_len"
        )
    report = ImportReport(
        format=source.format,
        path=str(raw.path),
        window=window,
        window_start_s=start,
        window_end_s=None if not np.isfinite(end) else end,
        rate_scale=source.rate_scale,
        trace_requests=len(raw),
        window_requests=window_requests,
        capped=capped,
        dropped_overlong=dropped,
        truncated_overlong=truncated,
        truncated_tokens=cut,
        requests=len(reqs),
        context_len=context_len,
        max_input_len=source.max_input_len,
    )
    return reqs, report
