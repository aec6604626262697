"""One replay's simulated-step metrics, from the step records its window of the run holds.

A simulated-forward server's ranks record every forward, every request's arrival at its
scheduler, every first token and every idle pass (:mod:`dpbench.server.steps` reads them).
:func:`step_window` cuts one replay's window out of them, from its first request's send to
the next replay's, and derives what the client cannot see: step kinds and DP-mixed steps,
the scheduler's own latency (pick-up, TTFT at the scheduler), idle passes, and rank balance
with the twin's definitions (:mod:`dpbench.metrics.balance`). Everything here is derived
offline from the records and the client's outcomes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpbench.core.results import Metric
from dpbench.server.loadgen import LoadResult, Schedule
from dpbench.server.steps import (
    StepRecordError,
    rank_balance_of,
    read_arrivals,
    read_first_tokens,
    read_idle_passes,
    read_kv_utilization,
    read_records,
    read_step_waiting,
    scheduler_latency,
    since_index,
    summarise,
    trace_id,
    window,
)


@dataclass
class StepWindow:
    """What one replay's window of the step records gave: metrics, result extras, notes."""

    metrics: dict[str, Metric] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WindowSpec:
    """Where the records are and which part of them, and of the load, is this replay's."""

    records_dir: Path
    dp_size: int
    nnodes: int
    t_load: float  # monotonic: the replay's first send
    until: float | None  # the next replay's first send (None: to the end)
    suffix: str  # what this replay appended to each trace id
    died: str | None  # a server process that died during the replay


def step_window(
    win: WindowSpec, load: LoadResult, schedule: Schedule, request_ids: list[str]
) -> StepWindow:
    """The replay's step metrics, scheduler latency, idle passes and rank balance."""
    out = StepWindow()
    steps = _steps(win, out)
    arrivals = _scheduler_latency(win, load, schedule, request_ids, out)
    if steps is not None:
        _rank_balance(win, steps, arrivals, out)
    out.extra["step_records_dir"] = str(win.records_dir)
    return out


@dataclass(frozen=True)
class _Steps:
    records: list[list[dict[str, Any]]]  # per rank, the window's records
    first: int | None  # the window's first step index (all ranks' records)
    last: int | None  # one past its last (None: to the end)


def _steps(win: WindowSpec, out: StepWindow) -> _Steps | None:
    """The window's records and their summary; None where they cannot be read (a dead rank,
    or another node's ranks), which only a run that lost a process or spans nodes forgives."""
    try:
        all_records = read_records(win.records_dir, win.dp_size)
        first = since_index(all_records, win.t_load)
        last = since_index(all_records, win.until) if win.until is not None else None
        records = window(all_records, win.t_load, win.until)
        metrics, table = summarise(records)
    except StepRecordError as exc:
        if win.died is None and win.nnodes == 1:
            raise
        # a dead rank's or another node's records: the step metrics stay absent
        out.extra["steps_error"] = str(exc)
        if win.nnodes > 1:
            out.notes.append(
                f"step metrics absent: {exc} (other nodes write their ranks' records "
                f"locally unless every node is given one shared --step-records-dir)"
            )
        return None
    out.metrics.update(metrics)
    out.extra["steps"] = table
    return _Steps(records, first, last)


def _scheduler_latency(
    win: WindowSpec,
    load: LoadResult,
    schedule: Schedule,
    request_ids: list[str],
    out: StepWindow,
) -> dict[str, Any]:
    """Pick-up, idle passes and TTFT at the scheduler; returns each request's arrival at its
    scheduler and rank (by the id the replay sent)."""
    sent = {o.id: o.start_s for o in load.outcomes if o.start_s}
    arrivals, pickup = read_arrivals(win.records_dir, win.dp_size, sent, load.t0)
    out.metrics.update(pickup)
    out.metrics.update(read_idle_passes(win.records_dir, win.dp_size, win.t_load, win.until))
    out.metrics.update(read_kv_utilization(win.records_dir, win.dp_size, win.t_load, win.until))
    offsets = schedule.offsets_s
    planned = (
        {rid: load.t0 + float(off) for rid, off in zip(request_ids, offsets, strict=True)}
        if offsets is not None
        else sent
    )
    received = {
        o.id: o.start_s + o.ttft_s for o in load.outcomes if o.start_s and o.ttft_s is not None
    }
    first = read_first_tokens(win.records_dir, win.dp_size)
    out.metrics.update(scheduler_latency(first, planned, received))
    # when each request reached its scheduler and which DP rank (by trace id): the twin can
    # replay these
    out.extra["scheduler_arrivals"] = {trace_id(i, win.suffix): v for i, v in arrivals.items()}
    return arrivals


def _rank_balance(
    win: WindowSpec, steps: _Steps, arrivals: dict[str, Any], out: StepWindow
) -> None:
    """Rank balance (:mod:`dpbench.metrics.balance`): the twin's definitions on the window."""
    waiting = read_step_waiting(win.records_dir, win.dp_size)
    if waiting is not None and steps.first is not None:
        waiting = [w[steps.first : steps.last] for w in waiting]
    given = Counter(rank for _, rank in arrivals.values())
    balance, out.extra["rank_balance"] = rank_balance_of(
        steps.records, waiting, [given.get(r, 0) for r in range(win.dp_size)]
    )
    out.metrics.update(balance)
