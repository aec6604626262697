"""KV planner: peak concurrent KV demand per DP rank from a trace, and the pool size for a target.

Service model (a deliberate simplification, printed with every plan):

* A request starts at its ``arrival_s`` (closed loop: when one of the ``concurrency`` slots
  frees, in trace order) and goes to a DP rank by the dispatch policy:
  ``round_robin`` — request ``i`` (in start order) to rank ``i mod dp`` (SGLang's default
  ``--load-balance-method round_robin``); ``shortest_queue`` — to the rank with the fewest
  requests held at that moment, ties to the lowest rank (SGLang 0.5.16+ calls this
  ``total_requests``); ``total_tokens`` — to the rank with the fewest KV tokens held, ties by
  fewer requests then lower rank (SGLang's ``total_tokens``, which estimates from live load).
* It holds ``input_len − prefix_len + max_new_tokens`` KV tokens on that rank from its start
  until ``start + input_len / prefill_tokens_per_s + max_new_tokens / decode_tokens_per_s``
  (per-request rates: no queueing, no preemption, the whole output reserved from the start).
* A shared prefix (``prefix_len`` tokens of group ``g``) is held once per rank while any
  request of group ``g`` is held there (radix cache). A session's earlier turns are counted
  inside each turn's own tokens; cached but unreferenced tokens are evictable and not counted.
* An imported trace's requests carry KV block ids instead (``prefix_len`` 0): a block after a
  given run of blocks (a node of the radix tree, :mod:`.sharing`) is held once per rank while
  any request whose prompt starts with that run is held there. Outputs are each request's own.
  This counts a prefix shared from the moment both requests are held, also when the radix
  cache could not share it yet (two requests prefilled in the same batch compute it twice).
* A ``route`` given by the caller places the requests instead of a named policy: the twin
  passes SGLang's cache-aware router, fed the requests this model holds per rank as loads.

Then ``--max-total-tokens`` (one value for every rank, sized from the busiest) is
``ceil(max_rank_peak / target_util)`` rounded up to a multiple of the page size, and its memory
is ``max_total_tokens × kv_bytes_per_token`` bytes per rank (÷ 2³⁰ for GiB), where
``kv_bytes_per_token`` is ``(kv_lora_rank + qk_rope_head_dim) × layers × dtype bytes`` for MLA
and ``2 × kv_heads × head_dim × layers × dtype bytes`` otherwise.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import Any

import numpy as np

from dpbench.workload.models import ModelConfig, load_model_config
from dpbench.workload.sharing import SharedUnits, block_units, group_units, held_spans
from dpbench.workload.spec import (
    DISPATCH_POLICIES,
    KV_DTYPE_BYTES,
    ClosedLoopArrivals,
    WorkloadSpec,
    WorkloadSpecError,
)
from dpbench.workload.trace import TraceColumns, TraceRequest, columns_of

GIB = 2**30
Route = Callable[[TraceRequest, Sequence[int]], int]  # (request, requests held per rank) → rank

# dpbench dispatch policy → SGLang's --load-balance-method (0.5.16 … 0.5.23 spell them so)
SGLANG_LOAD_BALANCE_METHOD = {
    "round_robin": "round_robin",
    "shortest_queue": "total_requests",
    "total_tokens": "total_tokens",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class KVPlan:
    """A KV-pool plan; every input is kept so the arithmetic can be checked by hand."""

    workload: str
    model_name: str
    model_path: str
    is_mla: bool
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    dtype_bytes: int
    bytes_per_token: int
    dp_size: int
    dispatch: str
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    closed_loop_concurrency: int | None
    page_size: int
    target_util: float
    num_requests: int
    requests_per_rank: tuple[int, ...]
    peak_tokens_per_rank: tuple[int, ...]
    peak_time_s_per_rank: tuple[float, ...]
    peak_requests_per_rank: tuple[int, ...]
    max_total_tokens_per_rank: int
    gib_per_rank: float
    shared_by: str = "prefix groups"  # what the radix cache shares: prefix groups or KV blocks
    peak_tokens_unshared_per_rank: tuple[int, ...] = ()  # the peaks if nothing were shared

    @property
    def peak_tokens(self) -> int:
        """The busiest rank's peak: the number the pool is sized from."""
        return max(self.peak_tokens_per_rank)

    @property
    def busiest_rank(self) -> int:
        return int(np.argmax(self.peak_tokens_per_rank))

    @property
    def util_at_peak_per_rank(self) -> tuple[float, ...]:
        return tuple(p / self.max_total_tokens_per_rank for p in self.peak_tokens_per_rank)

    @property
    def planned_peak_util(self) -> float:
        """The KV utilization the plan expects at the busiest rank's peak (the target, less the
        rounding up of the pool): what a run's ``kv_utilization_max`` is compared with."""
        return self.peak_tokens / self.max_total_tokens_per_rank

    @property
    def bytes_per_rank(self) -> int:
        return self.max_total_tokens_per_rank * self.bytes_per_token

    def bytes_formula(self) -> str:
        if self.is_mla:
            return (
                f"(kv_lora_rank {self.kv_lora_rank} + qk_rope_head_dim {self.qk_rope_head_dim}) "
                f"× layers {self.num_hidden_layers} × {self.dtype_bytes} B = "
                f"{self.bytes_per_token:,} B/token"
            )
        return (
            f"2 × kv_heads {self.num_key_value_heads} × head_dim {self.head_dim} × layers "
            f"{self.num_hidden_layers} × {self.dtype_bytes} B = {self.bytes_per_token:,} B/token"
        )

    def service_assumption(self) -> str:
        start = (
            f"when one of {self.closed_loop_concurrency} closed-loop slots frees"
            if self.closed_loop_concurrency
            else "at its arrival_s"
        )
        blocks = self.shared_by == "KV blocks"
        holds = (
            "input_len + max_new_tokens" if blocks else "input_len − prefix_len + max_new_tokens"
        )
        return (
            f"each request starts {start}, goes to a rank by {self.dispatch}, and holds "
            f"{holds} KV tokens there until start + "
            f"input_len / {self.prefill_tokens_per_s:g} tok/s + max_new_tokens / "
            f"{self.decode_tokens_per_s:g} tok/s (no queueing, no preemption); "
            + (
                "a KV block after a given run of blocks (a radix-tree node) is held once per rank "
                "while any request whose prompt has that run is held there"
                if blocks
                else "a shared prefix is held once per rank while any request of its group is "
                "held there"
            )
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            peak_tokens=self.peak_tokens,
            busiest_rank=self.busiest_rank,
            util_at_peak_per_rank=list(self.util_at_peak_per_rank),
            planned_peak_util=self.planned_peak_util,
            bytes_per_rank=self.bytes_per_rank,
            bytes_formula=self.bytes_formula(),
            service_assumption=self.service_assumption(),
        )
        return data


def pool_tokens(peak: int, util: float, page_size: int = 1) -> int:
    """``ceil(peak / util)`` in exact decimal arithmetic (0.96 means 96/100, not the nearest
    binary float), rounded up to a multiple of ``page_size``."""
    ratio = Fraction(repr(float(util)))
    tokens = math.ceil(Fraction(peak) / ratio)
    return -(-tokens // page_size) * page_size


def closed_loop_starts(hold_s: np.ndarray, concurrency: int) -> np.ndarray:
    """Start times when ``concurrency`` slots serve requests in order, each for ``hold_s``."""
    slots = [0.0] * concurrency
    starts = np.empty(len(hold_s), dtype=np.float64)
    for i, hold in enumerate(hold_s.tolist()):
        start = heapq.heappop(slots)
        starts[i] = start
        heapq.heappush(slots, start + hold)
    return starts


def assign_ranks(
    starts: np.ndarray,
    ends: np.ndarray,
    dp_size: int,
    dispatch: str,
    tokens: np.ndarray | None = None,
    *,
    route: Callable[[int, list[int]], int] | None = None,
) -> np.ndarray:
    """The DP rank of each request (requests given in start order; ``tokens`` each holds, needed
    by ``total_tokens``). ``route(i, requests held per rank) → rank`` replaces the policy."""
    n = len(starts)
    if route is None and dispatch == "round_robin":
        return np.arange(n, dtype=np.int64) % dp_size
    if route is None and dispatch not in DISPATCH_POLICIES:
        raise ValueError(
            f"dispatch must be one of {', '.join(DISPATCH_POLICIES)}; found {dispatch!r}"
        )
    by_tokens = dispatch == "total_tokens"
    held = [0] * dp_size
    held_tokens = [0] * dp_size
    releases: list[tuple[float, int, int]] = []
    ranks = np.empty(n, dtype=np.int64)
    token_list = tokens.tolist() if tokens is not None else [0] * n
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        while releases and releases[0][0] <= start:
            _, rank, freed = heapq.heappop(releases)
            held[rank] -= 1
            held_tokens[rank] -= freed
        if route is not None:
            rank = route(i, list(held))
            if not 0 <= rank < dp_size:
                raise ValueError(
                    f"the route sent request {i} to rank {rank}; allowed: 0 … {dp_size - 1}"
                )
        elif by_tokens:
            rank = min(range(dp_size), key=lambda r: (held_tokens[r], held[r], r))
        else:
            rank = held.index(min(held))
        held[rank] += 1
        held_tokens[rank] += token_list[i]
        ranks[i] = rank
        heapq.heappush(releases, (end, rank, token_list[i]))
    return ranks


def _peak(times: np.ndarray, tokens: np.ndarray, counts: np.ndarray) -> tuple[int, float, int]:
    """Peak of Σ tokens over events (ends sort before starts at equal times)."""
    order = np.lexsort((tokens, times))
    level = np.cumsum(tokens[order])
    at = int(np.argmax(level))
    return int(level[at]), float(times[order][at]), int(np.cumsum(counts[order])[at])


def rank_peaks(
    own: np.ndarray,
    shared: SharedUnits | None,
    starts: np.ndarray,
    ends: np.ndarray,
    ranks: np.ndarray,
    dp_size: int,
) -> tuple[list[int], list[float], list[int]]:
    """Per rank: peak KV tokens held, when it happens, and how many requests are held then.

    Each request holds ``own`` tokens over [start, end); each shared unit is held once per rank
    over the union of its requests' intervals there (``shared``: None counts nothing shared)."""
    peaks, when, reqs = [], [], []
    for rank in range(dp_size):
        mine = ranks == rank
        if not mine.any():
            peaks.append(0)
            when.append(0.0)
            reqs.append(0)
            continue
        s, e, tok = starts[mine], ends[mine], own[mine]
        times = [s, e]
        deltas = [tok, -tok]
        counts = [np.ones_like(tok), -np.ones_like(tok)]
        if shared is not None:
            us, ue, length = held_spans(shared, starts, ends, mine)
            times += [us, ue]
            deltas += [length, -length]
            counts += [np.zeros(len(us), dtype=np.int64)] * 2
        peak, at, held = _peak(
            np.concatenate(times), np.concatenate(deltas), np.concatenate(counts)
        )
        peaks.append(peak)
        when.append(at)
        reqs.append(held)
    return peaks, when, reqs


def _checked_args(
    spec: WorkloadSpec,
    dp_size: int,
    dispatch: str,
    routed: bool,
    target_util: float | None,
    dtype_bytes: int | None,
) -> tuple[float, int]:
    """(target utilization, KV dtype bytes) after checking every argument."""
    if dp_size < 1:
        raise ValueError(f"dp_size must be ≥ 1; found {dp_size!r}")
    if not routed and dispatch not in DISPATCH_POLICIES:
        raise ValueError(
            f"dispatch must be one of {', '.join(DISPATCH_POLICIES)}; found {dispatch!r}"
        )
    util = spec.target_kv_util if target_util is None else target_util
    if not 0 < util <= 1:
        raise ValueError(f"target utilization must be in (0, 1]; found {util!r}")
    if dtype_bytes is None:
        dtype_bytes = spec.planner.kv_dtype_bytes
    elif dtype_bytes not in set(KV_DTYPE_BYTES.values()):
        raise ValueError(f"dtype_bytes must be 1 or 2; found {dtype_bytes!r}")
    return util, dtype_bytes


def shared_units(cols: TraceColumns, listed: Sequence[TraceRequest] | None) -> SharedUnits:
    """What the radix cache shares: the prompts' KV block trie where the requests carry block
    ids (imported traces), else their prefix groups (columns carry no block ids)."""
    if listed is not None and any(r.blocks is not None for r in listed):
        return block_units(listed)
    return group_units(cols.input_len, cols.prefix_group, cols.prefix_len, cols.max_new_tokens)


def plan_kv(
    spec: WorkloadSpec,
    reqs: Sequence[TraceRequest] | TraceColumns,
    dp_size: int,
    dispatch: str = "round_robin",
    *,
    target_util: float | None = None,
    dtype_bytes: int | None = None,
    model: ModelConfig | None = None,
    route: Route | None = None,
) -> KVPlan:
    """Plan ``--max-total-tokens`` per DP rank so the busiest rank's peak sits at ``target_util``.

    Defaults come from the spec: ``target_kv_util``, ``planner.kv_dtype``, ``planner.*`` rates,
    ``model``. ``reqs`` is a trace (``generate_trace``/``load_trace``) or its columns; only
    requests carry KV block ids, so pass them for an imported trace. ``route(request, requests
    held per rank) → rank`` places the requests instead of a named policy (the twin passes
    SGLang's cache-aware router); ``dispatch`` then only names it.
    """
    util, dtype_bytes = _checked_args(
        spec, dp_size, dispatch, route is not None, target_util, dtype_bytes
    )
    model = model or load_model_config(spec.model)
    listed = None if isinstance(reqs, TraceColumns) else list(reqs)
    cols = reqs if isinstance(reqs, TraceColumns) else columns_of(listed or ())
    if len(cols) == 0:
        raise WorkloadSpecError("cannot plan an empty trace")
    if route is not None and listed is None:
        raise ValueError("a route places requests: pass the trace's requests, not its columns")

    p = spec.planner
    concurrency = spec.arrival.concurrency if isinstance(spec.arrival, ClosedLoopArrivals) else None
    cols, listed, starts, ends = _in_start_order(spec, cols, listed, concurrency)
    whole = cols.input_len - cols.prefix_len + cols.max_new_tokens
    placed = None if route is None or listed is None else _by_index(route, listed)
    ranks = assign_ranks(starts, ends, dp_size, dispatch, whole, route=placed)
    shared = shared_units(cols, listed)
    peaks, when, held = rank_peaks(shared.own, shared, starts, ends, ranks, dp_size)
    whole_prompts = cols.input_len + cols.max_new_tokens
    unshared = rank_peaks(whole_prompts, None, starts, ends, ranks, dp_size)[0]
    pool = pool_tokens(max(peaks), util, p.page_size)
    return KVPlan(
        workload=spec.name,
        **_model_fields(model, dtype_bytes),
        dp_size=dp_size,
        dispatch=dispatch,
        prefill_tokens_per_s=p.prefill_tokens_per_s,
        decode_tokens_per_s=p.decode_tokens_per_s,
        closed_loop_concurrency=concurrency,
        page_size=p.page_size,
        target_util=util,
        num_requests=len(cols),
        requests_per_rank=tuple(np.bincount(ranks, minlength=dp_size).tolist()),
        peak_tokens_per_rank=tuple(peaks),
        peak_time_s_per_rank=tuple(when),
        peak_requests_per_rank=tuple(held),
        max_total_tokens_per_rank=pool,
        gib_per_rank=pool * model.kv_bytes_per_token(dtype_bytes) / GIB,
        shared_by=shared.source,
        peak_tokens_unshared_per_rank=tuple(unshared),
    )


def _in_start_order(
    spec: WorkloadSpec,
    cols: TraceColumns,
    listed: list[TraceRequest] | None,
    concurrency: int | None,
) -> tuple[TraceColumns, list[TraceRequest] | None, np.ndarray, np.ndarray]:
    """The trace (columns and requests) sorted by start, with each request's start and end."""
    p = spec.planner
    hold = cols.input_len / p.prefill_tokens_per_s + cols.max_new_tokens / p.decode_tokens_per_s
    starts = (
        closed_loop_starts(hold, concurrency) if concurrency else cols.arrival_s.astype(np.float64)
    )
    order = np.argsort(starts, kind="stable")
    if not np.array_equal(order, np.arange(len(order))):
        cols = TraceColumns(**{f.name: getattr(cols, f.name)[order] for f in fields(TraceColumns)})
        starts, hold = starts[order], hold[order]
        listed = None if listed is None else [listed[i] for i in order.tolist()]
    return cols, listed, starts, starts + hold


def _by_index(route: Route, listed: list[TraceRequest]) -> Callable[[int, list[int]], int]:
    return lambda i, held: route(listed[i], held)


def _model_fields(model: ModelConfig, dtype_bytes: int) -> dict[str, Any]:
    return {
        "model_name": model.name,
        "model_path": str(model.path),
        "is_mla": model.is_mla,
        "kv_lora_rank": model.kv_lora_rank,
        "qk_rope_head_dim": model.qk_rope_head_dim,
        "num_key_value_heads": model.num_key_value_heads,
        "head_dim": model.head_dim,
        "num_hidden_layers": model.num_hidden_layers,
        "dtype_bytes": dtype_bytes,
        "bytes_per_token": model.kv_bytes_per_token(dtype_bytes),
    }
