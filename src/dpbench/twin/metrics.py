"""The twin's metrics, computed in one place from the ranks' per-step and per-request records.

Definitions (simulated time unless the name says wall):

- A step's kind: ``extend`` if every non-idle rank extends, ``decode`` if every
  non-idle rank decodes, ``mixed`` (DP-mixed) if some ranks extend while others
  decode, ``idle`` if no rank runs a forward. ``dp_mixed_step_fraction`` = mixed /
  non-idle steps. An idle rank beside extending ranks does not make a step mixed:
  nothing of it waits on the prefill.
- ``decode_rank_s_beside_prefill``: rank-weighted simulated seconds that decoding ranks
  spent in steps where another rank extended (every DP-mixed step's duration × its
  decoding ranks): the decode time the delayer exists to save. A 1-extend/3-decode step
  weighs 3, a 3/1 step 1, where ``dp_mixed_step_fraction`` counts both once.
  ``decode_rank_time_beside_prefill_fraction`` divides it by all decode-rank seconds.
- A *false prefillable report*: a rank told the delayer ``local_prefillable=True``,
  the verdict allowed prefill, and the rank then admitted nothing (the PR #31835
  failure mode). ``false_report_mixed_steps`` counts the DP-mixed steps that had one.
- Delayer outcomes: the labels of SGLang's ``prefill_delayer_outcomes_total``
  (input_estimation × output_allow × output_reason × actual_execution), summed over
  ranks, one observation per rank per pass — as SGLang's collector counts them.
- TTFT, ITL, TPOT, E2E and goodput (:mod:`dpbench.metrics.latency`, the load client's definitions):
  each output token appears at the end of the step that produced it, so a request on a
  rank that extended (or waited beside an extending rank) sees that step as one long
  inter-token gap. Throughput: finished requests (output tokens) / (last finish − first
  arrival).
- KV utilization (``kv_utilization_*``): SGLang's ``token_usage``, the one the delayer
  reads: (pool − free − evictable) / pool per rank after each step, where evictable are
  radix-tree entries no request holds (finished requests' KV kept for prefix reuse);
  p50 over all (rank, step) samples, max over all. ``kv_pool_occupied_*``: (pool − free)
  / pool, evictable entries included: what the simulated server's per-step records read
  (``total − allocator.available_size()``). With the radix cache off the two agree.
  ``kv_utilization_planned`` (set by the run, where the KV planner sized the pool): the
  utilization the plan expects at the busiest rank's peak, to read beside ``kv_utilization_max``.
- Rank balance (:mod:`dpbench.metrics.balance`, the server's definitions too): tokens and busy time
  per rank, dispatch (requests per rank) as max / mean, and the fraction of working steps
  in which a rank ran nothing while another rank had requests waiting.
- ``scheduler_pass_us_p50``: real wall time of one rank's scheduler pass (SGLang's
  adder and delayer, the delayer's gloo all-gather included), median over all passes;
  ``passes_per_s``: lockstep steps per wall second of the loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpbench.core.results import Metric
from dpbench.metrics.balance import rank_balance
from dpbench.metrics.latency import RequestLatency, Slo, latency_metrics
from dpbench.metrics.outcomes import delay_fractions
from dpbench.twin.ranks import RankResult
from dpbench.twin.scheduler import KIND_DECODE, KIND_EXTEND, KIND_IDLE

STEP_KINDS = ("extend", "decode", "mixed", "idle")


def classify_steps(results: Sequence[RankResult]) -> np.ndarray:
    """Per step: 0 extend, 1 decode, 2 mixed, 3 idle (index into STEP_KINDS)."""
    kinds = np.stack([r.kind for r in results])  # ranks × steps
    any_extend = (kinds == KIND_EXTEND).any(axis=0)
    any_decode = (kinds == KIND_DECODE).any(axis=0)
    out = np.full(kinds.shape[1], 3, dtype=np.int8)
    out[any_extend & ~any_decode] = 0
    out[~any_extend & any_decode] = 1
    out[any_extend & any_decode] = 2
    return out


def decode_rank_seconds(results: Sequence[RankResult], steps: np.ndarray) -> tuple[float, float]:
    """(decode-rank seconds beside an extending rank, all decode-rank seconds), rank-weighted."""
    kinds = np.stack([r.kind for r in results])
    decoding = (kinds == KIND_DECODE).sum(axis=0)
    dur = np.asarray(results[0].step_dur_s, dtype=np.float64)
    beside = float((dur * decoding)[steps == 2].sum())
    return beside, float((dur * decoding).sum())


def false_reports(results: Sequence[RankResult]) -> np.ndarray:
    """ranks × steps booleans: reported prefillable, allowed, admitted nothing."""
    return np.stack([(r.reported == 1) & (r.allowed == 1) & (r.admitted == 0) for r in results])


def outcome_counts(results: Sequence[RankResult]) -> Counter[tuple[str, str, str, str]]:
    total: Counter[tuple[str, str, str, str]] = Counter()
    for r in results:
        valid = r.outcome[r.outcome >= 0]
        for idx, count in zip(*np.unique(valid, return_counts=True), strict=True):
            total[r.outcome_labels[int(idx)]] += int(count)
    return total


def _token_times(r: RankResult) -> list[list[float]]:
    if r.token_s is None:
        raise ValueError("a rank result without token times: the twin's ranks record them")
    return r.token_s


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def compute(
    results: Sequence[RankResult], *, delayer_on: bool, slo: Slo | None = None
) -> tuple[dict[str, Metric], dict[str, Any]]:
    """Metrics for the run result, and the detail tables for its ``extra``."""
    steps = classify_steps(results)
    counts = {name: int((steps == i).sum()) for i, name in enumerate(STEP_KINDS)}
    active = counts["extend"] + counts["decode"] + counts["mixed"]
    mixed_fraction = counts["mixed"] / active if active else float("nan")

    reqs = np.array([q for r in results for q in r.requests], dtype=np.float64).reshape(-1, 6)
    arrival, finish, out_tokens = reqs[:, 1], reqs[:, 3], reqs[:, 4]
    done = ~np.isnan(finish)
    span = float(np.nanmax(finish) - np.min(arrival)) if done.any() else float("nan")

    kv_util = np.concatenate([r.kv_used.astype(np.float64) / r.kv_capacity for r in results])
    # per-step pool occupancy, where the rank results carry it (RankScheduler.kv_pool_occupied)
    pool = [r.kv_pool_occupied for r in results]
    kv_pool = (
        np.concatenate(
            [p.astype(np.float64) / r.kv_capacity for p, r in zip(pool, results, strict=True)]
        )
        if all(p is not None for p in pool)
        else None
    )
    pass_us = np.concatenate([r.pass_us for r in results]).astype(np.float64)
    loop_wall = max(r.loop_wall_s for r in results)
    loop_cpu = sum(r.loop_cpu_s for r in results)
    n_steps = results[0].steps

    # TTFT, ITL, TPOT, E2E and goodput of the finished requests: dpbench.metrics.latency, as the
    # server's load client computes them (ITL from the steps each request got a token in)
    lat = latency_metrics(
        (
            RequestLatency.from_token_times(q[1], toks)
            for r in results
            for q, toks in zip(r.requests, _token_times(r), strict=True)
            if not np.isnan(q[3])
        ),
        span if span > 0 else 0.0,
        slo or Slo(),
    )
    beside_s, decode_s = decode_rank_seconds(results, steps)
    m: dict[str, Metric] = {
        "dp_mixed_step_fraction": Metric(mixed_fraction, "fraction", "lower"),
        "decode_rank_s_beside_prefill": Metric(beside_s, "rank·s", "lower"),
        "decode_rank_time_beside_prefill_fraction": Metric(
            beside_s / decode_s if decode_s > 0 else float("nan"), "fraction", "lower"
        ),
        "steps_count": Metric(n_steps, "steps", "none"),
        "steps_extend_count": Metric(counts["extend"], "steps", "none"),
        "steps_decode_count": Metric(counts["decode"], "steps", "none"),
        "steps_mixed_count": Metric(counts["mixed"], "steps", "lower"),
        "steps_idle_count": Metric(counts["idle"], "steps", "none"),
        **lat,
        "request_throughput_req_per_s": Metric(
            float(done.sum()) / span if span > 0 else float("nan"), "req/s", "higher"
        ),
        "output_tokens_per_s": Metric(
            float(out_tokens[done].sum()) / span if span > 0 else float("nan"), "tok/s", "higher"
        ),
        "simulated_duration_s": Metric(span, "s", "none"),
        "requests_finished_count": Metric(int(done.sum()), "requests", "none"),
        "kv_utilization_p50": Metric(_pct(kv_util, 50), "fraction", "none"),
        "kv_utilization_max": Metric(
            float(kv_util.max()) if kv_util.size else float("nan"), "fraction", "none"
        ),
        **(
            {
                "kv_pool_occupied_p50": Metric(_pct(kv_pool, 50), "fraction", "none"),
                "kv_pool_occupied_max": Metric(
                    float(kv_pool.max()) if kv_pool.size else float("nan"), "fraction", "none"
                ),
            }
            if kv_pool is not None
            else {}
        ),
        "retractions_count": Metric(sum(r.retractions for r in results), "requests", "lower"),
        "scheduler_pass_us_p50": Metric(_pct(pass_us, 50), "us", "lower"),
        "passes_per_s": Metric(
            n_steps / loop_wall if loop_wall > 0 else float("nan"), "passes/s", "higher"
        ),
        # wall time of a lockstep pass over the ranks' summed CPU time per pass (their own
        # adder, delayer and bookkeeping work): 1.0 = no overhead beyond the work itself
        "pass_wall_over_rank_work": Metric(
            loop_wall / loop_cpu if loop_cpu > 0 else float("nan"), "ratio", "lower"
        ),
    }
    extra: dict[str, Any] = {"step_kinds": STEP_KINDS}
    step_s = next((r.step_dur_s for r in results if r.step_dur_s is not None), None)
    if step_s is not None:  # rank balance: dpbench.metrics.balance, the server's definitions
        waiting = [r.waiting for r in results]
        balance, extra["rank_balance"] = rank_balance(
            np.stack([r.kind != KIND_IDLE for r in results]),
            np.stack([r.new_tokens for r in results]),
            step_s,
            np.stack(waiting) if all(w is not None for w in waiting) else None,
            [len(r.requests) for r in results],
        )
        m.update(balance)
    if delayer_on:
        fr = false_reports(results)
        mixed = steps == 2
        outcomes = outcome_counts(results)
        m["false_prefillable_reports_count"] = Metric(int(fr.sum()), "reports", "lower")
        m["false_report_mixed_steps_count"] = Metric(
            int((fr.any(axis=0) & mixed).sum()), "steps", "lower"
        )
        by_reason: Counter[str] = Counter()
        for (_, _, reason, _), c in outcomes.items():
            by_reason[reason or "none_prefillable"] += c
        for reason in (
            "no_wait",
            "wait_success",
            "delay",
            "wait_timeout",
            "token_watermark",
            "none_prefillable",
        ):
            m[f"delayer_{reason}_count"] = Metric(by_reason.get(reason, 0), "passes", "none")
        m.update(delay_fractions((k[0], k[1], c) for k, c in outcomes.items()))
        extra["prefill_delayer_outcomes_total"] = [
            {
                "input_estimation": k[0],
                "output_allow": k[1],
                "output_reason": k[2],
                "actual_execution": k[3],
                "count": c,
            }
            for k, c in sorted(outcomes.items())
        ]
    return m, extra
