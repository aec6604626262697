"""Cache-aware routing in front of a DP server, as SGLang's router (sgl-router / SMG,
``--policy cache_aware``) does it, for the twin's dispatcher.

The router keeps, per DP rank, an approximate tree of the prompts it routed there (not the
rank's real cache: the router cannot see evictions) and, per request:

1. if the ranks' loads are imbalanced — ``max − min > balance_abs`` and ``max > balance_rel ×
   min`` (in-flight requests) — sends it to the least-loaded rank;
2. else, if some rank's tree holds at least ``cache_threshold`` of its prompt as a prefix, to the
   rank with the longest such match;
3. else to the rank whose tree is smallest (the most cache room);

and adds the prompt to the chosen rank's tree. Defaults are the router's own (0.3, 64, 1.5).
Prompts are compared in blocks (:func:`prefix_keys`): a trace's own KV block ids where it has
them, else chained hashes of 512-token runs of its token ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dpbench.workload.request import TraceRequest

CACHE_THRESHOLD = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5
KEY_BLOCK = 512


def prefix_keys(req: TraceRequest, vocab_size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(block keys, tokens per block) of a prompt; equal leading keys = an equal prefix."""
    if req.blocks is not None:
        assert req.block_size is not None
        n = req.input_len
        sizes = tuple(min(req.block_size, n - j * req.block_size) for j in range(len(req.blocks)))
        return tuple(req.blocks), sizes
    ids = np.asarray(req.token_ids(vocab_size), dtype=np.int64)
    keys, sizes = [], []
    h = hashlib.blake2b(digest_size=8)
    for lo in range(0, ids.size, KEY_BLOCK):
        part = ids[lo : lo + KEY_BLOCK]
        h.update(part.tobytes())
        keys.append(int.from_bytes(h.copy().digest(), "little") >> 1)
        sizes.append(int(part.size))
    return tuple(keys), tuple(sizes)


class CacheAwareRouter:
    """The router's per-rank trees (sets of block keys) and its decision rule."""

    def __init__(
        self,
        dp_size: int,
        *,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs: int = BALANCE_ABS,
        balance_rel: float = BALANCE_REL,
    ) -> None:
        self.trees: list[set[int]] = [set() for _ in range(dp_size)]
        self.tree_tokens = [0] * dp_size
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel

    def route(self, keys: Sequence[int], sizes: Sequence[int], loads: Sequence[int]) -> int:
        n = len(self.trees)
        lo, hi = min(loads), max(loads)
        if hi - lo > self.balance_abs and hi > self.balance_rel * lo:
            target = min(range(n), key=lambda r: (loads[r], r))
        else:
            matched = []
            for tree in self.trees:
                m = 0
                for k, s in zip(keys, sizes, strict=True):
                    if k not in tree:
                        break
                    m += s
                matched.append(m)
            total = sum(sizes)
            best = max(range(n), key=lambda r: (matched[r], -loads[r], -r))
            if total and matched[best] / total > self.cache_threshold:
                target = best
            else:
                target = min(range(n), key=lambda r: (self.tree_tokens[r], loads[r], r))
        tree = self.trees[target]
        for k, s in zip(keys, sizes, strict=True):
            if k not in tree:
                tree.add(k)
                self.tree_tokens[target] += s
        return target


def planner_route(
    dp_size: int, keys: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]]
) -> Callable[[TraceRequest, Sequence[int]], int]:
    """The router as the KV planner's ``route``: its own trees, fed in the planner's start
    order, with the requests the planner holds per rank as its loads (``keys``: each request's
    :func:`prefix_keys` by id). Its loads are not the server's queues, so where the balance
    rule or a tie on loads decides, the plan may place a request elsewhere than a run does."""
    router = CacheAwareRouter(dp_size)
    return lambda req, held: router.route(*keys[req.id], held)
