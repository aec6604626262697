"""The KV tokens a trace's requests share in a radix cache, for the KV planner.

A *unit* is a run of prompt tokens that a DP rank's radix cache holds once while any request
that references it is held on that rank. Each request holds its other tokens alone. Two
sources of units:

- prefix groups (synthetic specs): the ``prefix_len`` leading tokens of group ``g`` are one
  unit; everything else a request holds is its own.
- KV block ids (imported traces): the trie of the prompts' block sequences. A trie node is a
  block after a given chain of blocks, as SGLang's radix tree holds a run of tokens after a
  given prefix, so only a shared leading run is shared. A block that one prompt holds cut
  short (its partial last block) and another holds whole is split at each length seen: the
  cut copy shares its leading tokens. Outputs are each request's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpbench.workload.request import TraceRequest


@dataclass(frozen=True, slots=True)
class SharedUnits:
    """Who references which unit: one row per (request, unit) reference."""

    own: np.ndarray  # per request: KV tokens it holds alone (its outputs included)
    request: np.ndarray  # per reference: the request's index
    unit: np.ndarray  # per reference: the unit's id
    tokens: np.ndarray  # per reference: the unit's tokens (a span takes its first reference's)
    source: str  # what the units are: "prefix groups" or "KV blocks"


def group_units(
    input_len: np.ndarray, prefix_group: np.ndarray, prefix_len: np.ndarray, max_new: np.ndarray
) -> SharedUnits:
    """Units from prefix groups (−1: none): each group's prefix is one unit."""
    grouped = np.flatnonzero(prefix_group >= 0)
    return SharedUnits(
        own=input_len - prefix_len + max_new,
        request=grouped,
        unit=prefix_group[grouped],
        tokens=prefix_len[grouped],
        source="prefix groups",
    )


def _block_sizes(req: TraceRequest) -> list[int]:
    assert req.blocks is not None and req.block_size is not None
    bs = req.block_size
    return [min(bs, req.input_len - j * bs) for j in range(len(req.blocks))]


def block_units(reqs: Sequence[TraceRequest]) -> SharedUnits:
    """Units from the prompts' KV block ids (every request must carry them)."""
    missing = [r.id for r in reqs if r.blocks is None or r.block_size is None]
    if missing:
        raise ValueError(
            f"{len(missing)} of {len(reqs)} requests have no KV block ids (first: {missing[0]}); "
            "a trace plans by block ids only when every request carries them"
        )
    node_of: dict[tuple[int, int], int] = {}  # (parent node, block id) → trie node
    lengths: list[set[int]] = []  # per node: the lengths prompts hold it at
    paths: list[list[tuple[int, int]]] = []  # per request: (node, tokens held of it)
    for r in reqs:
        parent, path = -1, []
        for block, size in zip(r.blocks or (), _block_sizes(r), strict=True):
            node = node_of.setdefault((parent, block), len(node_of))
            if node == len(lengths):
                lengths.append(set())
            lengths[node].add(size)
            path.append((node, size))
            parent = node
        paths.append(path)
    # a node held at lengths l1 < l2 < … is the units (0, l1], (l1, l2], …, numbered in a row
    cuts = [sorted(seen) for seen in lengths]
    first_unit = np.cumsum([0] + [len(c) for c in cuts]).tolist()
    req_ix, unit, tokens = [], [], []
    for i, path in enumerate(paths):
        for node, size in path:
            low = 0
            for k, cut in enumerate(cuts[node]):
                if cut > size:
                    break
                req_ix.append(i)
                unit.append(first_unit[node] + k)
                tokens.append(cut - low)
                low = cut
    held = np.bincount(np.asarray(req_ix, dtype=np.int64), tokens, minlength=len(reqs))
    return SharedUnits(
        own=np.array([r.input_len + r.max_new_tokens for r in reqs], dtype=np.int64)
        - held.astype(np.int64),
        request=np.asarray(req_ix, dtype=np.int64),
        unit=np.asarray(unit, dtype=np.int64),
        tokens=np.asarray(tokens, dtype=np.int64),
        source="KV blocks",
    )


def held_spans(
    shared: SharedUnits, starts: np.ndarray, ends: np.ndarray, mine: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, tokens) of the disjoint spans in which each unit is held by the requests
    ``mine`` selects: per unit, the union of its requests' [start, end) (touching ones stay
    apart), units in id order, spans in time order; a span's tokens are its first reference's."""
    ref = np.flatnonzero(mine[shared.request])
    if ref.size == 0:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty, np.empty(0, dtype=np.int64)
    req, unit, tok = shared.request[ref], shared.unit[ref], shared.tokens[ref]
    s, e = starts[req], ends[req]
    order = np.lexsort((s, unit))
    unit, tok, s, e = unit[order], tok[order], s[order], e[order]
    # a running maximum of ends within each unit, on exact integer ranks of the times: each
    # unit's ranks are lifted above every earlier unit's, so one accumulate serves them all
    times, rank = np.unique(np.concatenate([s, e]), return_inverse=True)
    s_rank, e_rank = rank[: s.size], rank[s.size :]
    lift = np.unique(unit, return_inverse=True)[1] * (times.size + 1)
    reach = np.maximum.accumulate(e_rank + lift) - lift
    begins = np.ones(s.size, dtype=bool)
    begins[1:] = (unit[1:] != unit[:-1]) | (s_rank[1:] >= reach[:-1])
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], times[reach[last]], tok[first]
