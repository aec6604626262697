"""The simulated-forward server's per-step records: read, line up across ranks, summarise.

Each DP rank's stand-in appends one record per forward to ``rank<N>.jsonl`` (see
:mod:`dpbench.sglang_compat.simforward.standin`). Under DP attention every rank runs
one forward per step (an idle rank runs an IDLE forward), so record ``i`` of every rank
is step ``i``. Definitions match the twin's (:mod:`dpbench.twin.metrics`):

- step kind: ``extend`` if every non-idle rank extends, ``decode`` if every non-idle
  rank decodes, ``mixed`` (DP-mixed) if some extend while others decode, ``idle`` else;
  ``dp_mixed_step_fraction`` = mixed / non-idle steps;
- a step's simulated time is the slowest rank's modelled time (ranks meet at the MLP
  sync); ``decode_rank_s_beside_prefill`` = Σ over mixed steps of step time × decoding
  ranks (rank-weighted), and its fraction of all decode-rank seconds;
- device idle before a step that decodes on some rank (requests were running, so work was
  pending when the previous step ended): the step's device start (the last rank's, since
  the ranks' collectives need all of them) minus the previous step's device end (the last
  rank's). With the virtual device this is the scheduler's CPU work that the overlap
  schedule did not hide; with the forward slept on the scheduler's thread
  (``virtual_device`` off) it is all of it. Gaps before extend-only steps are left out:
  they include waiting for requests to arrive (the pause between bursts), not CPU work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.core.results import Metric

KINDS = ("extend", "decode", "mixed", "idle")


class StepRecordError(RuntimeError):
    """The per-rank step files are missing or do not line up."""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """A rank's JSON-lines file; a truncated last line (a killed rank) is dropped."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def _per_rank(record_dir: str | Path, name: str, dp_size: int) -> Iterator[tuple[int, dict]]:
    """``(rank, record)`` from each rank's ``<name>-rank<N>.jsonl`` there is."""
    for r in range(dp_size):
        path = Path(record_dir) / f"{name}-rank{r}.jsonl"
        if path.is_file():
            for rec in _jsonl(path):
                yield r, rec


def read_records(record_dir: str | Path, dp_size: int) -> list[list[dict[str, Any]]]:
    """Per rank, its step records in step order."""
    out = []
    for r in range(dp_size):
        path = Path(record_dir) / f"rank{r}.jsonl"
        if not path.is_file():
            raise StepRecordError(f"no step records from DP rank {r} ({path} missing)")
        out.append(_jsonl(path))
    return out


def since_index(records: list[list[dict[str, Any]]], t0: float) -> int | None:
    """Index of the first step any rank started at or after monotonic time ``t0`` (None: none)."""
    return min(
        (i for rows in records for i, rec in enumerate(rows) if rec["t"] >= t0), default=None
    )


def since(records: list[list[dict[str, Any]]], t0: float) -> list[list[dict[str, Any]]]:
    """The steps from the first one any rank started at or after monotonic time ``t0``."""
    first = since_index(records, t0)
    if first is None:
        return [[] for _ in records]
    return [rows[first:] for rows in records]


# A replay after the first against one server sends its requests as ``<trace id>~<k>``
# (dpbench.server.run.execute_replays): the records keep each replay's requests apart; a
# run result's ``extra.replay`` says which suffix and window are its own.
REPLAY_RID_SEP = "~"


def replay_suffix(index: int) -> str:
    return f"{REPLAY_RID_SEP}{index}" if index else ""


def trace_id(rid: str, suffix: str) -> str:
    """The trace's request id of a replay's ``rid``."""
    return rid[: -len(suffix)] if suffix and rid.endswith(suffix) else rid


def replay_records_view(extra: dict[str, Any]) -> tuple[set[str], str, float | None]:
    """For a server run result's ``extra``: the request ids its records carry (its trace
    ids with its replay's suffix), that suffix, and where its window of records ends (None:
    at the end)."""
    replay = extra.get("replay") or {}
    suffix = replay.get("rid_suffix", "")
    return {i + suffix for i in extra.get("scheduler_arrivals") or ()}, suffix, replay.get("to_t")


def window(
    records: list[list[dict[str, Any]]], t0: float, t1: float | None = None
) -> list[list[dict[str, Any]]]:
    """The steps from the first one any rank started at or after ``t0`` up to (not including)
    the first one any rank started at or after ``t1`` (None: to the end): one replay's steps
    when several replays ran against one server."""
    first = since_index(records, t0)
    if first is None:
        return [[] for _ in records]
    last = since_index(records, t1) if t1 is not None else None
    return [rows[first:last] for rows in records]


def read_step_waiting(record_dir: str | Path, dp_size: int) -> list[list[int]] | None:
    """Per rank, per step record: the requests waiting when the pass that chose that step's
    forward began (``passes-rank<N>.jsonl``, its forward-running passes line up one to one
    with ``rank<N>.jsonl``). None when a rank has no pass records."""
    out = []
    for r in range(dp_size):
        path = Path(record_dir) / f"passes-rank{r}.jsonl"
        if not path.is_file():
            return None
        out.append([int(p["waiting"]) for p in _jsonl(path) if p["kind"] != "none"])
    return out


def rank_balance_of(
    records: list[list[dict[str, Any]]],
    waiting: list[list[int]] | None,
    requests: list[int] | None,
) -> tuple[dict[str, Metric], list[dict[str, Any]]]:
    """:func:`dpbench.metrics.balance.rank_balance` from the server's step records (already cut to the
    run), ``waiting`` cut the same way (absent: no idle-while-waiting metric)."""
    from dpbench.metrics.balance import rank_balance

    n = min(len(r) for r in records)
    rows = [r[:n] for r in records]
    busy = np.array([[rec["kind"] != "idle" for rec in r] for r in rows])
    tokens = np.array(
        [
            [
                rec["extend_tokens"]
                if rec["kind"] == "extend"
                else rec["bs"]
                if rec["kind"] == "decode"
                else 0
                for rec in r
            ]
            for r in rows
        ]
    )
    step_s = np.array([[rec["model_s"] for rec in r] for r in rows]).max(axis=0)
    wait = None
    if waiting is not None and all(len(w) >= n for w in waiting):
        wait = np.array([w[:n] for w in waiting])
    return rank_balance(busy, tokens, step_s, wait, requests)


def _start(rec: dict[str, Any]) -> float:
    """A forward's device start; records from before the virtual device started at launch."""
    return float(rec.get("start", rec["t"]))


def _kind_step(kinds: list[str]) -> str:
    ext = "extend" in kinds
    dec = "decode" in kinds
    return "mixed" if ext and dec else "extend" if ext else "decode" if dec else "idle"


def summarise(records: list[list[dict[str, Any]]]) -> tuple[dict[str, Metric], dict[str, Any]]:
    """Metrics (simulated executor) and the per-step table for the run result."""
    n = min((len(r) for r in records), default=0)
    lengths = [len(r) for r in records]
    if n == 0:
        raise StepRecordError(f"no complete steps in the records (steps per rank: {lengths})")
    if len(set(lengths)) > 1:  # DP ranks run one forward each per step: never truncate silently
        short = [r for r, k in enumerate(lengths) if k < max(lengths)]
        raise StepRecordError(
            f"DP rank(s) {', '.join(map(str, short))} wrote fewer step records than the others "
            f"(steps per rank: {lengths}); the ranks' steps do not line up"
        )
    kinds = [[records[r][i]["kind"] for r in range(len(records))] for i in range(n)]
    step_kind = [_kind_step(k) for k in kinds]
    model_s = np.array([[records[r][i]["model_s"] for r in range(len(records))] for i in range(n)])
    sleep_s = np.array([[records[r][i]["sleep_s"] for r in range(len(records))] for i in range(n)])
    start = np.array([[_start(records[r][i]) for r in range(len(records))] for i in range(n)])
    end = start + sleep_s
    step_s = model_s.max(axis=1)
    counts = {k: step_kind.count(k) for k in KINDS}
    active = n - counts["idle"]
    decoding = np.array([k.count("decode") for k in kinds])
    mixed = np.array([s == "mixed" for s in step_kind])
    beside = float((step_s * decoding)[mixed].sum())
    decode_rank_s = float((step_s * decoding).sum())
    busy = np.array([s != "idle" for s in step_kind])
    pending = busy[:-1] & (decoding[1:] > 0)  # the later step decodes: work was pending
    idle_ms = np.clip(start.max(axis=1)[1:] - end.max(axis=1)[:-1], 0.0, None)[pending] * 1e3
    m: dict[str, Metric] = {
        "dp_mixed_step_fraction": Metric(
            counts["mixed"] / active if active else float("nan"), "fraction", "lower"
        ),
        "steps_count": Metric(n, "steps", "none"),
        "steps_extend_count": Metric(counts["extend"], "steps", "none"),
        "steps_decode_count": Metric(counts["decode"], "steps", "none"),
        "steps_mixed_count": Metric(counts["mixed"], "steps", "lower"),
        "steps_idle_count": Metric(counts["idle"], "steps", "none"),
        "simulated_step_ms_p50": Metric(
            float(np.median(step_s[busy]) * 1e3) if busy.any() else float("nan"), "ms", "none"
        ),
        "simulated_busy_s": Metric(float(step_s[busy].sum()), "s", "none"),
        "decode_rank_s_beside_prefill": Metric(beside, "rank·s", "lower"),
    }
    if decode_rank_s > 0:
        m["decode_rank_time_beside_prefill_fraction"] = Metric(
            beside / decode_rank_s, "fraction", "lower"
        )
    # the pool as the stand-in reads it (max total − allocator free): evictable radix-cache
    # entries count as occupied (SGLang's token_usage, which the delayer sees, does not)
    kv_pool = np.array(
        [
            [
                records[r][i]["kv_used"] / max(records[r][i]["kv_total"], 1)
                for r in range(len(records))
            ]
            for i in range(n)
        ]
    )
    m["kv_pool_occupied_max"] = Metric(float(kv_pool.max()), "fraction", "none")
    m["kv_pool_occupied_p50"] = Metric(float(np.median(kv_pool)), "fraction", "none")
    if idle_ms.size:
        m["device_idle_ms_p50"] = Metric(float(np.percentile(idle_ms, 50)), "ms", "lower")
        m["device_idle_ms_p90"] = Metric(float(np.percentile(idle_ms, 90)), "ms", "lower")
        m["device_idle_fraction"] = Metric(
            float(idle_ms.sum() / (idle_ms.sum() + 1e3 * sleep_s.max(axis=1)[1:][pending].sum())),
            "fraction",
            "lower",
        )
    table = {
        "kinds": kinds,
        "step_kind": step_kind,
        "step_model_ms": [round(float(x) * 1e3, 4) for x in step_s],
        "bs": [[records[r][i]["bs"] for r in range(len(records))] for i in range(n)],
        "extend_tokens": [
            [records[r][i]["extend_tokens"] for r in range(len(records))] for i in range(n)
        ],
        "kv_used": [[records[r][i]["kv_used"] for r in range(len(records))] for i in range(n)],
        "kv_total": [records[r][0]["kv_total"] for r in range(len(records))],
        "steps_per_rank": lengths,
    }
    return m, table


def read_arrivals(
    record_dir: str | Path, dp_size: int, sent: dict[str, float], t0: float
) -> tuple[dict[str, list[float]], dict[str, Metric]]:
    """When each sent request reached its DP rank's scheduler, from ``arrivals-rank<N>.jsonl``.

    ``sent`` maps request id → client send time (monotonic); ``t0`` is the client's time
    zero. Returns ``{id: [seconds after t0, dp rank]}`` for the requests found (SGLang's
    own warm-up request is not in ``sent``) and the pick-up latency: client send → the
    scheduler takes the request in (HTTP, tokenizer manager, DP controller, and the wait
    for the scheduler's next loop iteration, which a long forward makes long).
    """
    found: dict[str, list[float]] = {}
    for r, rec in _per_rank(record_dir, "arrivals", dp_size):
        if rec["rid"] in sent:
            found[rec["rid"]] = [round(rec["t"] - t0, 6), r]
    pickup = np.array([(found[i][0] + t0 - sent[i]) * 1e3 for i in found])
    m: dict[str, Metric] = {}
    if pickup.size:
        m["pickup_ms_p50"] = Metric(float(np.percentile(pickup, 50)), "ms", "lower")
        m["pickup_ms_p99"] = Metric(float(np.percentile(pickup, 99)), "ms", "lower")
    return found, m


def read_first_tokens(record_dir: str | Path, dp_size: int) -> dict[str, float]:
    """When each request's first token was computed: the device end (monotonic) of the forward
    that ran the last of its prompt, from ``passes-rank<N>.jsonl`` and ``rank<N>.jsonl``.

    Every pass that ran a forward (``kind`` other than ``none``) is followed by exactly one
    step record on its rank, in order, so the two files line up one to one (a mismatch of
    kinds fails, naming the rank and the pass). A request in a pass's ``admitted`` whose
    prompt is not left as that pass's chunked request (``chunked_after``) finished its prefill
    in that forward; a retracted request's later admissions do not move its first token.
    Empty when the run has no pass records (an old run) or no forward with a device end."""
    first: dict[str, float] = {}
    for r in range(dp_size):
        passes_path = Path(record_dir) / f"passes-rank{r}.jsonl"
        steps_path = Path(record_dir) / f"rank{r}.jsonl"
        if not (passes_path.is_file() and steps_path.is_file()):
            return {}
        forwards = [p for p in _jsonl(passes_path) if p["kind"] != "none"]
        steps = _jsonl(steps_path)
        for p, step in zip(forwards, steps, strict=False):  # a killed rank's last may be cut
            if p["kind"] != step["kind"]:
                raise StepRecordError(
                    f"DP rank {r}: pass {p['pass']} ran forward kind {p['kind']!r} but its "
                    f"step record {step['step']} is {step['kind']!r}; the pass and step files "
                    "do not line up"
                )
            if "end" not in step:
                return {}
            for rid in p["admitted"]:
                if rid != p["chunked_after"] and rid not in first:
                    first[rid] = float(step["end"])
    return first


def scheduler_latency(
    first: dict[str, float], planned: dict[str, float], received: dict[str, float]
) -> dict[str, Metric]:
    """TTFT at the scheduler and the first token's way back to the client, in ms.

    ``first``: :func:`read_first_tokens`; ``planned``: each request's planned send (monotonic,
    the schedule's offset after the client's time zero; the actual send in a closed loop);
    ``received``: when the client read its first token. TTFT at the scheduler = first token
    computed − planned send: what the twin, replaying the run's arrivals, measures (it times
    from the same planned send), without the path back (scheduler → detokenizer → tokenizer
    manager → HTTP → client), which is the instrument's, not the scheduling's. The return
    path = received − computed: the health of that path on this machine. Absent where the
    records do not say (a run without pass records, a request not served)."""
    m: dict[str, Metric] = {}
    ids = [i for i in planned if i in first]
    if ids:
        ttft = np.array([(first[i] - planned[i]) * 1e3 for i in ids])
        m["scheduler_ttft_ms_p50"] = Metric(float(np.percentile(ttft, 50)), "ms", "lower")
        m["scheduler_ttft_ms_p99"] = Metric(float(np.percentile(ttft, 99)), "ms", "lower")
    back = np.array([(received[i] - first[i]) * 1e3 for i in received if i in first])
    if back.size:
        m["first_token_return_ms_p50"] = Metric(float(np.percentile(back, 50)), "ms", "lower")
        m["first_token_return_ms_p99"] = Metric(float(np.percentile(back, 99)), "ms", "lower")
    return m


def read_idle_passes(
    record_dir: str | Path, dp_size: int, t0: float, t1: float | None = None
) -> dict[str, Metric]:
    """How long SGLang's event loop took to come round when no rank ran a batch while one had
    requests waiting (``idle-passes-rank<N>.jsonl``, passes from ``t0`` on, before ``t1``
    when given): the twin's idle-pass time, measured. Absent when no such pass happened."""
    secs = [
        rec["s"]
        for _, rec in _per_rank(record_dir, "idle-passes", dp_size)
        if rec["t"] >= t0 and (t1 is None or rec["t"] < t1)
    ]
    if not secs:
        return {}
    ms = np.array(secs) * 1e3
    return {
        "idle_pass_ms_p50": Metric(float(np.percentile(ms, 50)), "ms", "none"),
        "idle_pass_ms_p90": Metric(float(np.percentile(ms, 90)), "ms", "none"),
        # a wait of length W holds W / mean passes: the twin's idle pass is this one
        "idle_pass_ms_mean": Metric(float(ms.mean()), "ms", "none"),
        "idle_passes_count": Metric(len(secs), "passes", "none"),
    }


def read_kv_utilization(
    record_dir: str | Path, dp_size: int, t0: float, t1: float | None = None
) -> dict[str, Metric]:
    """The twin's ``kv_utilization_max``, on the server: SGLang's ``token_usage`` (pool − free −
    evictable, over the pool) after each pass with work on a rank (``passes-rank<N>.jsonl``),
    its maximum over (rank, pass) from ``t0`` on, before ``t1`` when given. Absent when no
    pass was recorded there."""
    used = [
        rec["kv_used"] / rec["kv_total"]
        for _, rec in _per_rank(record_dir, "passes", dp_size)
        if rec["t"] >= t0 and (t1 is None or rec["t"] < t1) and rec.get("kv_total")
    ]
    return {"kv_utilization_max": Metric(max(used), "fraction", "none")} if used else {}


def first_arrival(record_dir: str | Path, dp_size: int, ids: set[str]) -> float | None:
    """Monotonic time the first of ``ids`` reached any scheduler (``arrivals-rank<N>.jsonl``)."""
    times = [rec["t"] for _, rec in _per_rank(record_dir, "arrivals", dp_size) if rec["rid"] in ids]
    return min(times) if times else None
