"""Mooncake's trace format (FAST'25 release: ``conversation_trace.jsonl``, ``toolagent_trace.jsonl``).

One JSON object a line: ``timestamp`` (milliseconds from the trace's start), ``input_length``,
``output_length`` and ``hash_ids``: one id per 512-token block of the prompt, the last block
partial; equal ids are the same cached KV block (the ids chain: a block's id fixes every block
before it). Other keys are ignored. Upstream: github.com/kvcache-ai/Mooncake,
``FAST25-release/traces/`` (Apache-2.0); cite Qin et al., USENIX FAST 2025.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.workload.importers.base import RawTrace, TraceImportError, check_order, where

BLOCK_SIZE = 512
UPSTREAM_DIR = "github.com/kvcache-ai/Mooncake, FAST25-release/traces/"
UPSTREAM_FILES = ("conversation_trace.jsonl", "toolagent_trace.jsonl")
LICENCE = "Apache-2.0"
UPSTREAM = f"{UPSTREAM_DIR}{UPSTREAM_FILES[0]} ({LICENCE})"
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _is_int(v: Any) -> bool:
    return type(v) is int


def _check(obj: Any, path: Path, line: int) -> None:
    """The one-line error for a bad line (the slow path, reached only when something is off)."""
    if not isinstance(obj, dict):
        raise TraceImportError(
            f"{where(path, line)}: expected a JSON object with {', '.join(FIELDS)}; "
            f"found {type(obj).__name__}"
        )
    for key in FIELDS:
        if key not in obj:
            raise TraceImportError(
                f"{where(path, line, key)}: missing; each line needs {', '.join(FIELDS)}"
            )
    ts = obj["timestamp"]
    if not (isinstance(ts, int | float) and not isinstance(ts, bool)) or ts < 0 or ts != ts:
        raise TraceImportError(
            f"{where(path, line, 'timestamp')}: {ts!r}; allowed: milliseconds ≥ 0 (a number)"
        )
    for key in ("input_length", "output_length"):
        v = obj[key]
        if not _is_int(v) or v < 1:
            raise TraceImportError(
                f"{where(path, line, key)}: {v!r}; allowed: an integer ≥ 1 (tokens)"
            )
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(_is_int(b) and b >= 0 for b in ids):
        raise TraceImportError(
            f"{where(path, line, 'hash_ids')}: {str(ids)[:80]}; allowed: a list of integers ≥ 0"
        )
    need = -(-obj["input_length"] // BLOCK_SIZE)
    if len(ids) != need:
        raise TraceImportError(
            f"{where(path, line, 'hash_ids')}: {len(ids)} block ids for input_length "
            f"{obj['input_length']}; allowed: ceil(input_length / {BLOCK_SIZE}) = {need}"
        )


def read(path: Path) -> RawTrace:
    """Every request of a Mooncake trace file, checked (the first bad line is named)."""
    numbered = [
        (n, text)
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if text.strip()
    ]
    if not numbered:
        raise TraceImportError(
            f"{path}: empty file; allowed: a Mooncake trace, one JSON object a line"
        )
    try:  # one C-level parse; any problem → the line-by-line pass names the line
        objs = json.loads("[" + ",".join(text for _, text in numbered) + "]")
        ok = len(objs) == len(numbered)
    except json.JSONDecodeError:
        ok = False
    if not ok:
        objs = []
        for n, text in numbered:
            try:
                objs.append(json.loads(text))
            except json.JSONDecodeError as exc:
                raise TraceImportError(f"{where(path, n)}: not valid JSON ({exc.msg})") from None
    lines = np.fromiter((n for n, _ in numbered), np.int64, len(numbered))
    try:
        ts = np.array([o["timestamp"] for o in objs], dtype=np.float64)
        inp = np.array([o["input_length"] for o in objs])
        out = np.array([o["output_length"] for o in objs])
        blocks = [o["hash_ids"] for o in objs]
        good = (
            inp.dtype.kind == "i"
            and out.dtype.kind == "i"
            and all(type(o["timestamp"]) in (int, float) for o in objs)
            and bool((ts >= 0).all())
            and bool((inp >= 1).all() and (out >= 1).all())
            and all(type(b) is list for b in blocks)
            and bool((np.fromiter(map(len, blocks), np.int64) == -(-inp // BLOCK_SIZE)).all())
        )
        good = good and all(type(b) is int and b >= 0 for bl in blocks for b in bl)
    except (KeyError, TypeError, ValueError):
        good = False
    if not good:
        for (n, _), obj in zip(numbered, objs, strict=True):
            _check(obj, path, n)
        raise AssertionError("a Mooncake line failed the column checks but no line check")
    arrival = ts / 1000.0
    check_order(path, arrival, lines, "timestamp")
    return RawTrace(
        path=path,
        arrival_s=arrival - arrival[0],
        input_len=inp.astype(np.int64),
        output_len=out.astype(np.int64),
        line=lines,
        blocks=[tuple(b) for b in blocks],
        block_size=BLOCK_SIZE,
    )
