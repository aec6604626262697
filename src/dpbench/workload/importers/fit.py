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
    trace_end_s: float  # the trace's last request, in the trace's seconds
    cut_short_s: float  # how much of the window lies past the trace's end (0: none)

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}

    def warning(self, window: str = "window") -> str | None:
        """One line when the trace ends before the window does (``window``: what the caller
        calls the window, e.g. ``--window``)."""
        if not self.cut_short_s or self.window_end_s is None:
            return None
        length = self.window_end_s - self.window_start_s
        return (
            f"{window} {self.window} ({self.window_start_s:g}–{self.window_end_s:g} s) runs past "
            f"the trace's end at {self.trace_end_s:g} s: {self.requests:,} requests from "
            f"{length - self.cut_short_s:.1f} s of a {length:g} s window"
        )

    def lines(self) -> list[str]:
        end = "end" if self.window_end_s is None else f"{self.window_end_s:g} s"
        out = [
            f"window {self.window}: {self.window_start_s:g} s – {end} of the trace, "
            f"{self.window_requests:,} of {self.trace_requests:,} requests; rate ×{self.rate_scale:g}",
        ]
        if self.cut_short_s:
            out.append(
                f"cut short: the trace ends at {self.trace_end_s:g} s, "
                f"{self.cut_short_s:.1f} s before the window does"
            )
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
    _check_window(raw, source, window, start, span)
    lo, hi = np.searchsorted(raw.arrival_s, [start, end], side="left")
    idx = np.arange(lo, hi)
    if not idx.size:
        raise TraceImportError(
            f"{{window}} {window} ({start:g}–{end:g} s) holds no request of {raw.path}; "
            f"allowed: a window with at least one"
        )
    window_requests = int(idx.size)
    capped = 0
    if source.max_requests is not None and idx.size > source.max_requests:
        capped = int(idx.size - source.max_requests)
        idx = idx[: source.max_requests]
    prompts = _fit_prompts(raw.input_len[idx], raw.output_len[idx], source, context_len)
    reqs = _to_requests(raw, idx, prompts, source.rate_scale)
    if not reqs:
        raise TraceImportError(
            f"every request of {{window}} {window} is over-long (prompts limited to "
            f"{int(prompts.limit.max())} tokens) and was dropped; allowed: {{overlong}} truncate, or a "
            f"larger {{max_input_len}}"
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
        dropped_overlong=prompts.dropped,
        truncated_overlong=prompts.truncated,
        truncated_tokens=prompts.cut_tokens,
        requests=len(reqs),
        context_len=context_len,
        max_input_len=source.max_input_len,
        trace_end_s=span,
        cut_short_s=max(0.0, end - span) if np.isfinite(end) else 0.0,
    )
    return reqs, report


@dataclass(frozen=True, slots=True)
class _Prompts:
    """A window's prompt lengths fitted to the limits, and what fitting them did."""

    input_len: np.ndarray  # after truncation
    keep: np.ndarray  # bool: not dropped
    limit: np.ndarray  # the longest prompt each request may have
    dropped: int
    truncated: int
    cut_tokens: int


def _fit_prompts(
    input_len: np.ndarray, output_len: np.ndarray, source: TraceSource, context_len: int | None
) -> _Prompts:
    """Each prompt within ``context_len − output`` and ``source.max_input_len``: kept, cut to
    fit or dropped (``source.overlong``)."""
    limit = np.full(input_len.size, np.iinfo(np.int64).max, dtype=np.int64)
    if context_len is not None:
        limit = np.minimum(limit, context_len - output_len)
    if source.max_input_len is not None:
        limit = np.minimum(limit, source.max_input_len)
    over = input_len > limit
    keep = ~over | ((source.overlong == "truncate") & (limit >= 1))
    cut = over & keep
    return _Prompts(
        input_len=np.where(cut, limit, input_len),
        keep=keep,
        limit=limit,
        dropped=int((~keep).sum()),
        truncated=int(cut.sum()),
        cut_tokens=int((input_len[cut] - limit[cut]).sum()),
    )


def _to_requests(
    raw: RawTrace, idx: np.ndarray, prompts: _Prompts, rate_scale: float
) -> list[TraceRequest]:
    """The kept rows ``idx`` of ``raw`` as trace requests, arrivals from the first one's,
    rescaled; a prompt's block ids cut to its (maybe truncated) length."""
    arrival = np.round((raw.arrival_s[idx] - raw.arrival_s[idx[0]]) / rate_scale, ARRIVAL_DECIMALS)
    ids = _request_ids(raw.line[idx])
    out_len = raw.output_len[idx]
    bs = raw.block_size
    reqs = []
    for j in np.flatnonzero(prompts.keep).tolist():
        n = int(prompts.input_len[j])
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
    return reqs


def _check_window(raw: RawTrace, source: TraceSource, window: int, start: float, span: float):
    """A window must start by the trace's last request: name the input that put it later."""
    if start <= span:
        return
    if source.window_start_s > span:
        raise TraceImportError(
            f"{{window_start_s}} {source.window_start_s:g} is past the end of {raw.path} (its "
            f"last request arrives at {span:g} s); allowed: 0 to {span:g}"
        )
    assert source.window_s is not None  # else the window starts at window_start_s
    last = int((span - source.window_start_s) // source.window_s)
    raise TraceImportError(
        f"{{window}} {window} starts at {start:g} s, past the end of {raw.path} (its last "
        f"request arrives at {span:g} s); allowed: {{window}} 0 to {last}"
    )
