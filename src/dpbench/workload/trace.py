"""Deterministic request traces: generate from a spec and seed, write/load JSONL, materialise ids.

One JSON object a line, keys in this order::

    {"id":"r000000","arrival_s":0.0,"input_len":2560,"prefix_group":3,"prefix_len":2048,
     "max_new_tokens":384,"ignore_eos":true,"session":null,"turn":null}

``input_len`` is the whole prompt, shared prefix included. Token ids are not stored by
default: ``TraceRequest.token_ids(vocab_size)`` rebuilds them, identically everywhere, from a
counter-based hash (splitmix64), so the first ``prefix_len`` ids of every request in a prefix
group are the same, and turn ``t`` of a session begins with the whole prompt of turn ``t-1``.
``write_trace(..., vocab_size=V)`` adds them as ``"input_ids"``.

An imported production trace (:mod:`dpbench.workload.importers`) carries its prefix sharing as
KV blocks instead: ``"blocks"`` (one id per ``"block_size"`` prompt tokens, the last block
partial) and ``"block_size"``, written only when present. Block ``h`` is the token stream of
``h``, so two requests share exactly the leading blocks they share ids for, and a partial
block is a prefix of the same block read whole.

Same spec and seed → byte-identical file (for a given numpy version: arrivals and lengths come
from ``numpy.random.Generator``; token ids do not depend on numpy at all).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.core.atomic import atomic_open
from dpbench.workload.arrivals import arrival_offsets
from dpbench.workload.distributions import mean_length, sample_lengths, sample_seconds
from dpbench.workload.importers.load import import_trace
from dpbench.workload.models import load_model_config
from dpbench.workload.request import (
    ARRIVAL_DECIMALS,
    TraceRequest,
)
from dpbench.workload.spec import WorkloadSpec, WorkloadSpecError

OnProgress = Callable[[int], None]  # called with how many more requests are done

_CHUNK = 10_000


class TraceFormatError(ValueError):
    """A trace file line that is not a valid request."""


@dataclass(frozen=True, slots=True)
class TraceColumns:
    """A trace as numpy columns (−1 where a request has no prefix group / session / turn)."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    prefix_group: np.ndarray
    prefix_len: np.ndarray
    max_new_tokens: np.ndarray
    session: np.ndarray
    turn: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


def _rngs(seed: int, count: int) -> list[np.random.Generator]:
    """Independent generators per concern, so changing one distribution leaves the others."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(count)]


def _session_turns(spec: WorkloadSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Turns per session, enough to cover ``n`` requests; the last session is cut short."""
    assert spec.sessions is not None
    batch = max(16, math.ceil(n / max(mean_length(spec.sessions.turns), 1.0) * 1.1) + 16)
    drawn: list[np.ndarray] = []
    total = 0
    while total < n:
        part = sample_lengths(spec.sessions.turns, rng, batch)
        drawn.append(part)
        total += int(part.sum())
    turns = np.concatenate(drawn)
    ends = np.cumsum(turns)
    count = int(np.searchsorted(ends, n)) + 1
    turns = turns[:count].copy()
    turns[-1] -= int(ends[count - 1]) - n
    return turns


def import_spec_trace(
    spec: WorkloadSpec, seed: int | None = None
) -> tuple[list[TraceRequest], Any]:
    """A ``trace:`` spec's requests: window ``seed`` (default the spec's) of its production
    trace, fitted to the spec's model; and the import's report
    (:class:`dpbench.workload.importers.fit.ImportReport`)."""
    assert spec.trace is not None
    model = load_model_config(spec.model)
    return import_trace(
        spec.trace,
        window=spec.seed if seed is None else seed,
        context_len=model.max_position_embeddings or None,
    )


def generate_columns(spec: WorkloadSpec, seed: int | None = None) -> TraceColumns:
    """The trace for ``spec`` as numpy columns, sorted by arrival (ties keep generation order)."""
    seed = spec.seed if seed is None else seed
    if not 0 <= seed < 2**63:
        raise WorkloadSpecError(f"seed must be an integer in 0..2**63-1; found {seed!r}")
    if spec.trace is not None:
        return columns_of(import_spec_trace(spec, seed)[0])
    assert spec.input_len is not None and spec.output_len is not None and spec.arrival is not None
    assert spec.num_requests is not None
    n = spec.num_requests
    rng_arrival, rng_input, rng_output, rng_prefix, rng_turns, rng_think = _rngs(seed, 6)
    user = sample_lengths(spec.input_len, rng_input, n)
    out = sample_lengths(spec.output_len, rng_output, n)

    if spec.sessions is None:
        units = n  # prefix groups are drawn per request
        session = np.full(n, -1, dtype=np.int64)
        turn = np.full(n, -1, dtype=np.int64)
        history = np.zeros(n, dtype=np.int64)
        arrivals = arrival_offsets(spec.arrival, rng_arrival, n)
        unit_of = np.arange(n)
    else:
        turns = _session_turns(spec, rng_turns, n)
        units = len(turns)  # prefix groups are drawn per session
        unit_of = np.repeat(np.arange(units), turns)
        first = np.cumsum(turns) - turns  # index of each session's first turn
        session = unit_of.astype(np.int64)
        turn = np.arange(n, dtype=np.int64) - first[unit_of]
        # turn t resends earlier prompts and (stand-in) replies: Σ_{k<t} (user_k + out_k)
        step = user + out
        before = np.cumsum(step) - step
        history = before - before[first][unit_of]
        think = sample_seconds(spec.sessions.think_time_s, rng_think, n)
        think[first] = 0.0
        waited = np.cumsum(think)
        waited -= waited[first][unit_of]
        starts = arrival_offsets(spec.arrival, rng_arrival, units)
        arrivals = starts[unit_of] + waited

    if spec.shared_prefix is not None:
        sp = spec.shared_prefix
        has = rng_prefix.random(units) < sp.share
        group_of_unit = np.where(has, rng_prefix.integers(0, sp.groups, size=units), -1)
        prefix_group = group_of_unit[unit_of].astype(np.int64)
        prefix_len = np.where(prefix_group >= 0, sp.prefix_len, 0).astype(np.int64)
    else:
        prefix_group = np.full(n, -1, dtype=np.int64)
        prefix_len = np.zeros(n, dtype=np.int64)

    input_len = prefix_len + history + user
    arrivals = np.round(arrivals, ARRIVAL_DECIMALS)
    order = np.argsort(arrivals, kind="stable")
    cols = TraceColumns(
        arrival_s=arrivals[order],
        input_len=input_len[order],
        prefix_group=prefix_group[order],
        prefix_len=prefix_len[order],
        max_new_tokens=out[order],
        session=session[order],
        turn=turn[order],
    )
    _check_context(spec, cols)
    return cols


def _check_context(spec: WorkloadSpec, cols: TraceColumns) -> None:
    model = load_model_config(spec.model)
    if not model.max_position_embeddings or not len(cols):
        return
    total = cols.input_len + cols.max_new_tokens
    worst = int(np.argmax(total))
    if total[worst] > model.max_position_embeddings:
        raise WorkloadSpecError(
            f"{spec.name}: a request needs {int(total[worst])} tokens of context "
            f"(input_len {int(cols.input_len[worst])} + max_new_tokens "
            f"{int(cols.max_new_tokens[worst])}) but {model.name} allows "
            f"max_position_embeddings = {model.max_position_embeddings}; lower the `max` of "
            f"`input_len`/`output_len` or the session `turns`"
        )


def _request_ids(n: int) -> list[str]:
    width = max(6, len(str(max(n - 1, 0))))
    return [f"r{i:0{width}d}" for i in range(n)]


def to_requests(
    cols: TraceColumns, *, ignore_eos: bool = True, on_progress: OnProgress | None = None
) -> list[TraceRequest]:
    """TraceRequest objects for columns (ids ``r000000``… in arrival order)."""
    n = len(cols)
    ids = _request_ids(n)
    arrival = cols.arrival_s.tolist()
    input_len = cols.input_len.tolist()
    group = [None if g < 0 else g for g in cols.prefix_group.tolist()]
    prefix_len = cols.prefix_len.tolist()
    out = cols.max_new_tokens.tolist()
    session = [None if s < 0 else s for s in cols.session.tolist()]
    turn = [None if t < 0 else t for t in cols.turn.tolist()]
    reqs: list[TraceRequest] = []
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        reqs.extend(
            TraceRequest(
                ids[i],
                arrival[i],
                input_len[i],
                group[i],
                prefix_len[i],
                out[i],
                ignore_eos,
                session[i],
                turn[i],
            )
            for i in range(lo, hi)
        )
        if on_progress is not None:
            on_progress(hi - lo)
    return reqs


def generate_trace(
    spec: WorkloadSpec, seed: int | None = None, *, on_progress: OnProgress | None = None
) -> list[TraceRequest]:
    """The requests of ``spec`` (with ``seed`` instead of ``spec.seed`` when given; for a
    ``trace:`` spec the seed is the window)."""
    if spec.trace is not None:
        reqs = import_spec_trace(spec, seed)[0]
        if on_progress is not None:
            on_progress(len(reqs))
        return reqs
    return to_requests(
        generate_columns(spec, seed), ignore_eos=spec.ignore_eos, on_progress=on_progress
    )


def columns_of(reqs: Iterable[TraceRequest]) -> TraceColumns:
    """Numpy columns for a list of requests (the inverse of ``to_requests``)."""
    reqs = list(reqs)

    def col(values: Iterable[object], dtype: type) -> np.ndarray:
        return np.fromiter(values, dtype=dtype, count=len(reqs))

    return TraceColumns(
        arrival_s=col((r.arrival_s for r in reqs), np.float64),
        input_len=col((r.input_len for r in reqs), np.int64),
        prefix_group=col(
            (-1 if r.prefix_group is None else r.prefix_group for r in reqs), np.int64
        ),
        prefix_len=col((r.prefix_len for r in reqs), np.int64),
        max_new_tokens=col((r.max_new_tokens for r in reqs), np.int64),
        session=col((-1 if r.session is None else r.session for r in reqs), np.int64),
        turn=col((-1 if r.turn is None else r.turn for r in reqs), np.int64),
    )


# ---- JSONL ------------------------------------------------------------------------------------


def _opt(value: int | None) -> str:
    return "null" if value is None else str(value)


def _line(r: TraceRequest, ids: list[int] | None) -> str:
    extra = ""
    if r.blocks is not None:
        extra += f',"blocks":[{",".join(map(str, r.blocks))}],"block_size":{r.block_size}'
    if ids is not None:
        extra += ',"input_ids":[' + ",".join(map(str, ids)) + "]"
    return (
        f'{{"id":{json.dumps(r.id)},"arrival_s":{r.arrival_s!r},"input_len":{r.input_len},'
        f'"prefix_group":{_opt(r.prefix_group)},"prefix_len":{r.prefix_len},'
        f'"max_new_tokens":{r.max_new_tokens},"ignore_eos":{"true" if r.ignore_eos else "false"},'
        f'"session":{_opt(r.session)},"turn":{_opt(r.turn)}{extra}}}\n'
    )


def write_trace(
    reqs: list[TraceRequest],
    path: str | os.PathLike[str],
    *,
    vocab_size: int | None = None,
    on_progress: OnProgress | None = None,
) -> Path:
    """Write ``reqs`` as JSONL, atomically (a failure leaves any previous file as it was).

    With ``vocab_size`` each line also carries ``"input_ids"`` (large for long prompts).
    """
    target = Path(path)
    with atomic_open(target, "w", encoding="utf-8", newline="\n") as fh:
        for lo in range(0, len(reqs), _CHUNK):
            chunk = reqs[lo : lo + _CHUNK]
            fh.write(
                "".join(
                    _line(r, None if vocab_size is None else r.token_ids(vocab_size)) for r in chunk
                )
            )
            if on_progress is not None:
                on_progress(len(chunk))
    return target


_FIELDS: dict[str, tuple[type, bool]] = {  # name → (type, may be null)
    "id": (str, False),
    "arrival_s": (float, False),
    "input_len": (int, False),
    "prefix_group": (int, True),
    "prefix_len": (int, False),
    "max_new_tokens": (int, False),
    "ignore_eos": (bool, False),
    "session": (int, True),
    "turn": (int, True),
}


def _parse_line(text: str, where: str) -> TraceRequest:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, found {type(obj).__name__}")
    values = {}
    for key, (kind, nullable) in _FIELDS.items():
        if key not in obj:
            raise TraceFormatError(
                f"{where}: missing key {key!r}; each line needs {', '.join(_FIELDS)}"
            )
        value = obj[key]
        if value is None and nullable:
            values[key] = None
            continue
        ok = (
            isinstance(value, int | float) and not isinstance(value, bool)
            if kind is float
            else isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        )
        if not ok or (kind is int and value < 0):
            allowed = {
                int: "a non-negative integer",
                float: "a number",
                bool: "true or false",
                str: "a string",
            }[kind] + (" or null" if nullable else "")
            raise TraceFormatError(f"{where}: {key!r} is {value!r}; allowed: {allowed}")
        values[key] = float(value) if kind is float else value
    values.update(_parse_blocks(obj, values["input_len"], where))
    req = TraceRequest(**values)
    if req.input_len < 1 or req.prefix_len > req.input_len or req.max_new_tokens < 1:
        raise TraceFormatError(
            f"{where}: need input_len ≥ 1, prefix_len ≤ input_len and max_new_tokens ≥ 1; found "
            f"input_len={req.input_len}, prefix_len={req.prefix_len}, max_new_tokens={req.max_new_tokens}"
        )
    ids = obj.get("input_ids")
    if ids is not None and len(ids) != req.input_len:
        raise TraceFormatError(
            f"{where}: input_ids has {len(ids)} ids but input_len is {req.input_len}"
        )
    return req


def _parse_blocks(obj: dict[str, Any], input_len: int, where: str) -> dict[str, Any]:
    """The optional ``blocks``/``block_size`` pair of an imported trace's line."""
    if "blocks" not in obj and "block_size" not in obj:
        return {}
    blocks, size = obj.get("blocks"), obj.get("block_size")
    if type(size) is not int or size < 1:
        raise TraceFormatError(
            f"{where}: 'block_size' is {size!r}; allowed: a positive integer, with 'blocks'"
        )
    if not isinstance(blocks, list) or any(type(b) is not int or b < 0 for b in blocks):
        raise TraceFormatError(
            f"{where}: 'blocks' is {blocks!r}; allowed: a list of non-negative integers"
        )
    if len(blocks) != -(-input_len // size):
        raise TraceFormatError(
            f"{where}: {len(blocks)} blocks of {size} tokens for input_len {input_len}; "
            f"allowed: ceil(input_len / block_size) = {-(-input_len // size)}"
        )
    return {"blocks": tuple(blocks), "block_size": size}


_NONE = type(None)
_COLUMN_TYPES: dict[str, set[type]] = {
    "id": {str},
    "arrival_s": {int, float},
    "input_len": {int},
    "prefix_group": {int, _NONE},
    "prefix_len": {int},
    "max_new_tokens": {int},
    "ignore_eos": {bool},
    "session": {int, _NONE},
    "turn": {int, _NONE},
}


def _fast_requests(objs: list[object]) -> list[TraceRequest] | None:
    """Column-wise checks and construction; None when anything is off (the slow path then
    finds and names the first bad line)."""
    if not objs or any(type(o) is not dict for o in objs):
        return None
    if any("blocks" in o or "block_size" in o for o in objs):  # type: ignore[operator]
        return None  # an imported trace: the line-by-line path checks its blocks
    try:
        cols = {key: [o[key] for o in objs] for key in _FIELDS}  # type: ignore[index]
    except KeyError:
        return None
    for key, allowed in _COLUMN_TYPES.items():
        if not set(map(type, cols[key])) <= allowed:
            return None
    ints = {
        k: np.array([-1 if v is None else v for v in cols[k]], dtype=np.int64)
        for k in ("input_len", "prefix_len", "max_new_tokens", "prefix_group", "session", "turn")
    }
    if (
        any(a.min() < -1 for a in ints.values())
        or ints["prefix_len"].min() < 0
        or ints["input_len"].min() < 1
        or ints["max_new_tokens"].min() < 1
        or (ints["prefix_len"] > ints["input_len"]).any()
    ):
        return None
    if any(
        "input_ids" in o and len(o["input_ids"]) != o["input_len"]  # type: ignore[index, operator]
        for o in objs
    ):
        return None
    arrival = [float(v) for v in cols["arrival_s"]]
    return [
        TraceRequest(*row)
        for row in zip(
            cols["id"],
            arrival,
            cols["input_len"],
            cols["prefix_group"],
            cols["prefix_len"],
            cols["max_new_tokens"],
            cols["ignore_eos"],
            cols["session"],
            cols["turn"],
            strict=True,
        )
    ]


def load_trace(path: str | os.PathLike[str]) -> list[TraceRequest]:
    """Read a JSONL trace written by ``write_trace`` (``input_ids``, if present, are checked for
    length and otherwise left out: ``token_ids`` rebuilds them)."""
    source = Path(path)
    numbered = [
        (lineno, text)
        for lineno, text in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1)
        if text.strip()
    ]
    try:  # one C-level parse of the whole file; any problem → the line-by-line path names it
        objs = json.loads("[" + ",".join(text for _, text in numbered) + "]")
    except json.JSONDecodeError:
        objs = None
    if objs is not None and len(objs) == len(numbered):
        fast = _fast_requests(objs)
        if fast is not None:
            return fast
    return [_parse_line(text, f"{source}:{lineno}") for lineno, text in numbered]
