"""Prefix reuse of an imported trace, two ways that must agree at block granularity.

- :func:`block_reuse`: from the trace's own block ids — each request reuses its longest leading
  run of blocks that an earlier request already had (an unbounded cache; Mooncake's ids chain,
  so a seen block means its whole prefix was seen).
- :func:`token_reuse`: from the token ids the importer produced — each request's longest common
  prefix with any earlier prompt (an unbounded token-level cache, as a radix tree holds),
  counted in whole blocks (the partial last block counts when the whole prompt matched).

Both return reused and total prompt tokens; applied to the requests one DP rank received, they
give what that rank's own cache could hit at best.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from dpbench.workload.request import TraceRequest


def _block_tokens(req: TraceRequest, run: int) -> int:
    assert req.block_size is not None
    return min(run * req.block_size, req.input_len)


def block_reuse(reqs: Sequence[TraceRequest]) -> tuple[int, int]:
    """(reused, total) prompt tokens by the trace's block ids, requests taken in order."""
    seen: set[int] = set()
    reused = total = 0
    for r in reqs:
        if r.blocks is None:
            raise ValueError(f"request {r.id} has no block ids (not an imported Mooncake trace)")
        run = 0
        for b in r.blocks:
            if b not in seen:
                break
            run += 1
        reused += _block_tokens(r, run)
        total += r.input_len
        seen.update(r.blocks)
    return reused, total


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def token_reuse(reqs: Sequence[TraceRequest], vocab_size: int) -> tuple[int, int]:
    """(reused, total) prompt tokens measured on the produced token ids, in whole blocks."""
    keys: list[tuple[int, ...]] = []  # earlier prompts, sorted: the longest common prefix with
    arrays: list[np.ndarray] = []  # any of them is with a sorted neighbour of the new one
    reused = total = 0
    for r in reqs:
        ids = np.asarray(r.token_ids(vocab_size), dtype=np.int64)
        key = tuple(ids.tolist())
        at = bisect.bisect_left(keys, key)
        best = max((_lcp(ids, arrays[i]) for i in (at - 1, at) if 0 <= i < len(keys)), default=0)
        if best < r.input_len:
            bs = r.block_size or 1
            best = best // bs * bs
        reused += best
        total += r.input_len
        keys.insert(at, key)
        arrays.insert(at, ids)
    return reused, total
