"""Rank balance under DP attention: one definition for the twin and the simulated-forward server.

Every DP rank runs one forward per step (an idle rank runs an IDLE one), so per step and
rank there is: whether the rank ran real work (an extend or a decode), how many tokens its
forward computed (extend tokens, or the decode batch size), how many requests were waiting
in its queue when its scheduler pass chose that forward, and the step's duration (the
slowest rank's, since the ranks meet at every collective). From those:

- ``rank_tokens_imbalance``: max / mean of the tokens each rank computed over the run;
- ``rank_busy_imbalance``: max / mean of each rank's busy time (the durations of the steps
  in which it ran real work);
- ``dispatch_imbalance``: max / mean of the requests each rank was given;
- ``rank_idle_while_others_wait_fraction``: of the steps in which some rank worked, those in
  which a rank ran no forward of its own while another rank had requests waiting: capacity
  left unused because the work sat on the other rank's queue (dispatch, or the delayer
  holding a prefill there).

A ratio of 1 is perfect balance. All are "lower is better"; per-rank totals go in the run
result's ``extra.rank_balance``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpbench.core.results import Metric


def _max_over_mean(values: np.ndarray) -> float:
    mean = float(values.mean()) if values.size else 0.0
    return float(values.max()) / mean if mean > 0 else float("nan")


def rank_balance(
    busy: np.ndarray,
    tokens: np.ndarray,
    step_s: np.ndarray,
    waiting: np.ndarray | None = None,
    requests: Sequence[int] | None = None,
) -> tuple[dict[str, Metric], list[dict[str, Any]]]:
    """Metrics and per-rank totals from ranks × steps arrays (``busy`` bool, ``tokens`` int,
    ``waiting`` int: the queue at the step's pass) and per-step ``step_s``. ``waiting`` or
    ``requests`` absent: their metrics are absent, never 0."""
    busy = np.asarray(busy, dtype=bool)
    tokens = np.asarray(tokens, dtype=np.float64)
    step_s = np.asarray(step_s, dtype=np.float64)
    if busy.ndim != 2 or tokens.shape != busy.shape or step_s.shape != busy.shape[1:]:
        raise ValueError(
            f"rank_balance wants ranks × steps arrays and one duration per step; got busy "
            f"{busy.shape}, tokens {tokens.shape}, step_s {step_s.shape}"
        )
    per_tokens = tokens.sum(axis=1)
    per_busy = (busy * step_s).sum(axis=1)
    m: dict[str, Metric] = {
        "rank_tokens_imbalance": Metric(_max_over_mean(per_tokens), "max/mean", "lower"),
        "rank_busy_imbalance": Metric(_max_over_mean(per_busy), "max/mean", "lower"),
    }
    table: list[dict[str, Any]] = [
        {"rank": r, "tokens": int(per_tokens[r]), "busy_s": float(per_busy[r])}
        for r in range(busy.shape[0])
    ]
    if requests is not None:
        req = np.asarray(requests, dtype=np.float64)
        if req.shape != (busy.shape[0],):
            raise ValueError(f"requests: one count per rank ({busy.shape[0]}), got {req.shape}")
        m["dispatch_imbalance"] = Metric(_max_over_mean(req), "max/mean", "lower")
        for row, n in zip(table, requests, strict=True):
            row["requests"] = int(n)
    if waiting is not None:
        wait = np.asarray(waiting) > 0
        if wait.shape != busy.shape:
            raise ValueError(f"waiting: ranks × steps {busy.shape}, got {wait.shape}")
        working = busy.any(axis=0)
        # per step and rank: the rank ran nothing while some *other* rank had requests waiting
        others_wait = (wait.sum(axis=0) - wait) > 0
        stranded = (~busy & others_wait).any(axis=0) & working
        if working.any():
            m["rank_idle_while_others_wait_fraction"] = Metric(
                float(stranded.sum() / working.sum()), "fraction of working steps", "lower"
            )
    return m, table
