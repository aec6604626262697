"""Build the installed SGLang's real ``PrefillAdder`` on CPU, with its real allocator, radix cache and ``Req``.

This is the one place that knows how each API generation (see :mod:`.detect`) builds
the admission side of SGLang's scheduler. Everything it hands out is SGLang's own
object except the running batch, which in SGLang is a GPU ``ScheduleBatch``:

=====================  ====================================================================
piece                  what it is
=====================  ====================================================================
allocator              ``TokenToKVPoolAllocator(size, dtype, "cpu", None, False)``: SGLang's
                       real token allocator on CPU tensors (no KV buffer behind it; admission
                       only reads its free counts). From 0.5.21 on the adder asks it for the
                       real ``PrefillBudget`` through ``create_prefill_budget``.
tree cache             SGLang's real ``RadixCache`` (``create_simulated(mock_allocator=...)``:
                       no req-to-token pool, otherwise the real tree, locks and evictable
                       counts); ``disable=True`` gives the tree-less mode.
request                SGLang's real ``Req`` (``SamplingParams`` included); the prefix match
                       is SGLang's ``req.init_next_round_input(tree_cache)``.
running batch          :class:`RunningBatch`, a stand-in: the adder reads only ``.reqs`` and
                       ``.batch_size()`` from it (a real ``ScheduleBatch`` needs GPU tensors).
server args            SGLang reads a few process-wide settings while admitting
                       (context-parallel, exec feature flags); :meth:`AdderKit.__init__`
                       publishes a default ``ServerArgs(model_path="dummy")`` unless the
                       process has published its own.
=====================  ====================================================================

API (also used by the scheduler twin)::

    kit = AdderKit()                      # detects the generation; UnsupportedSGLang if unknown
    alloc = kit.new_allocator(4096)       # KV pool of 4096 token slots
    tree = kit.new_tree_cache(alloc)      # real RadixCache over that pool
    kit.insert_prefix(tree, alloc, ids)   # cache a finished request's tokens (evictable KV)
    req = kit.new_req("r0", ids, max_new_tokens=128, ignore_eos=True)
    adder = kit.new_adder(allocator=alloc, tree_cache=tree, running_batch=kit.new_running_batch(),
                          rem_input_tokens=8192, rem_chunk_tokens=None,
                          prefill_delayer_single_pass=executor_or_None)
    result = kit.add_one_req(adder, req)  # matches the prefix first, as the scheduler does
    kit.AddReqResult.NO_TOKEN             # the release's own enum
    kit.budget(adder)                     # {"rem_total_tokens", "cur_rem_tokens", ...}
    kit.extend_tokens(req)                # tokens admitted for req this pass
    kit.complete_extend(req, alloc)       # stand-in for the forward: take the extend's KV slots,
                                          # advance req's computed prefix (next chunk starts there)
    kit.computed_tokens(req)              # tokens of req whose KV is in the pool
    kit.add_chunked_req(adder, req)       # next pass: continue the in-flight chunked request

``add_one_req`` / ``add_chunked_req`` call SGLang's methods unchanged; what the adder
admitted is in ``adder.can_run_list`` and ``adder.new_chunked_req``, as in the scheduler.

A request's life in the radix tree (the scheduler twin, radix cache on)::

    slots = kit.prefix_slots(req, tree)   # after admission: the matched prefix's KV slots (the tree's)
    kit.evict(tree, n)                    # SGLang's evict_from_tree_cache before allocating n slots
    slots = kit.cache_unfinished_req(tree, alloc, req, slots, protected=p)   # after a prefill/chunk
    kit.cache_finished_req(tree, alloc, req, slots, protected=p)             # on finish
    kit.release_unfinished(tree, alloc, req, slots, protected=p)             # on retraction

These mirror SGLang's own ``cache_unfinished_req`` / ``cache_finished_req`` (0.5.14-0.5.20),
``insert_req`` (0.5.21) and ``checkpoint`` + ``release_kv_cache`` (0.5.22 on) step by step
through the release's ``RadixCache.insert`` / ``match_prefix`` / ``evict`` and lock methods:
SGLang's versions read the request's slots from a ``ReqToTokenPool`` row (GPU-sized, with
per-release bookkeeping on ``req.kv``) that the twin does not build. Hit counts and
priorities (read only by the LFU/priority eviction policies; SGLang's default is LRU) are
left at the tree's defaults. ``slots`` are the request's KV slots in token order; the
first ``protected`` of them belong to the tree (locked by the request), the rest to the
request.
"""

from __future__ import annotations

import importlib
import inspect
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpbench.sglang_compat.detect import Generation, detect, load_api, variant


@dataclass
class RunningBatch:
    """Stand-in for the scheduler's running ``ScheduleBatch``: the adder reads ``reqs`` and ``batch_size()``."""

    reqs: list[Any] = field(default_factory=list)

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs


def ensure_server_args(server_args: Any | None = None) -> None:
    """Publish ``server_args`` (default ``ServerArgs(model_path="dummy")``) unless the process already has some.

    How is the table's ``server args`` feature (:mod:`.generations`):
    ``runtime_context.publish(args, role=...)`` (0.5.17 on),
    ``get_context().set_server_args(args)`` (0.5.15, 0.5.16) or
    ``server_args.set_global_server_args_for_scheduler(args)`` (0.5.14, whose
    ``RuntimeContext`` has no server-args slot). Reading them back raises ValueError
    while unset: ``get_context().server_args`` (0.5.15 on; 0.5.23 retired
    ``get_global_server_args``), ``get_global_server_args()`` on 0.5.14.
    """
    how = variant("server args")
    sa = importlib.import_module("sglang.srt.server_args")
    rc = importlib.import_module("sglang.srt.runtime_context")
    if server_args is None:
        try:
            current = (
                sa.get_global_server_args()
                if how == "global_setter"
                else rc.get_context().server_args
            )
            if current is not None:
                return
        except ValueError:  # "Global server args is not set yet!"
            pass
        server_args = sa.ServerArgs(model_path="dummy")
    if how == "publish":
        rc.publish(server_args, role="test")
    elif how == "context_setter":
        rc.get_context().set_server_args(server_args)
    else:  # global_setter
        sa.set_global_server_args_for_scheduler(server_args)


class AdderKit:
    """Factory for the installed SGLang's real admission objects; one per process is enough."""

    def __init__(
        self, generation: Generation | None = None, *, page_size: int = 1, server_args: Any = None
    ):
        self.api = load_api()
        self.generation = generation or detect(self.api, components=("adder",))
        self.page_size = page_size
        ensure_server_args(server_args)
        self._torch = importlib.import_module("torch")
        self._sampling = importlib.import_module("sglang.srt.sampling.sampling_params")
        self._radix = importlib.import_module("sglang.srt.mem_cache.radix_cache")
        self._base_cache = importlib.import_module("sglang.srt.mem_cache.base_prefix_cache")
        self._mem_common = importlib.import_module("sglang.srt.mem_cache.common")
        # 0.5.20 on, finishing a request re-inserts its prompt so that the leaf splits at the
        # prompt boundary (LRU then drops the output's KV before the prompt's). A behaviour
        # inside RadixCache, not an API shape: read off its source, as ReqProgress reads Req's.
        self.splits_finished_prompt = "prompt_key" in inspect.getsource(self.api.RadixCache)

    # -- SGLang's own types ------------------------------------------------------------
    @property
    def AddReqResult(self) -> Any:  # mirrors SGLang's enum name
        return self.api.AddReqResult

    @property
    def uses_prefill_budget(self) -> bool:
        """True where the allocator owns the KV budget (``PrefillAdder budget`` variant ``prefill_budget``, 0.5.21 on)."""
        return self.generation.variant("PrefillAdder budget") == "prefill_budget"

    # -- construction ------------------------------------------------------------------
    def new_allocator(self, size: int) -> Any:
        """SGLang's ``TokenToKVPoolAllocator`` with ``size`` token slots on CPU."""
        if size <= 0:
            raise ValueError(f"allocator size must be a positive number of tokens, got {size}")
        return self.api.TokenToKVPoolAllocator(size, self._torch.float16, "cpu", None, False)

    def new_tree_cache(self, allocator: Any, *, disable: bool = False) -> Any:
        """SGLang's ``RadixCache`` over ``allocator`` (``disable=True``: no prefix sharing)."""
        return self.api.RadixCache.create_simulated(
            disable=disable, mock_allocator=allocator, page_size=self.page_size
        )

    def insert_prefix(self, tree_cache: Any, allocator: Any, token_ids: Sequence[int]) -> int:
        """Cache ``token_ids`` in the tree as a finished request would leave them: slots taken, evictable.

        Returns how many new tokens the tree now holds (0 if all were cached already).
        """
        ids = [int(t) for t in token_ids]
        slots = allocator.alloc(len(ids))
        if slots is None:
            raise ValueError(
                f"the allocator has {allocator.available_size()} free slots; cannot cache {len(ids)} tokens"
            )
        key = self._radix.RadixKey(token_ids=array("q", ids), extra_key=None)
        result = tree_cache.insert(self._base_cache.InsertParams(key=key, value=slots))
        already = int(getattr(result, "prefix_len", 0) or 0)
        if already:  # the tree kept its own copy of the first `already` tokens
            allocator.free(slots[:already])
        return len(ids) - already

    def new_running_batch(self, reqs: Iterable[Any] = ()) -> RunningBatch:
        return RunningBatch(list(reqs))

    def new_req(
        self, rid: str, input_ids: Sequence[int], max_new_tokens: int, ignore_eos: bool = True
    ) -> Any:
        """SGLang's ``Req`` for a tokenised prompt (no text, greedy defaults)."""
        if not input_ids:
            raise ValueError(f"request {rid!r} needs at least one input token")
        params = self._sampling.SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
        return self.api.Req(rid, "", array("q", [int(t) for t in input_ids]), params)

    def new_adder(
        self,
        *,
        allocator: Any,
        tree_cache: Any,
        running_batch: Any,
        rem_input_tokens: int,
        rem_chunk_tokens: int | None,
        new_token_ratio: float = 1.0,
        prefill_delayer_single_pass: Any = None,
        max_prefill_bs: int = 0,
        max_running_requests: int | None = None,
        waiting_queue_len: int = 0,
    ) -> Any:
        """SGLang's ``PrefillAdder`` for one scheduling pass, built as ``Scheduler`` builds it."""
        return self.api.PrefillAdder(
            self.page_size,
            tree_cache,
            allocator,
            running_batch,
            new_token_ratio,
            rem_input_tokens,
            rem_chunk_tokens,
            max_prefill_bs=max_prefill_bs,
            max_running_requests=max_running_requests,
            prefill_delayer_single_pass=prefill_delayer_single_pass,
            waiting_queue_len=waiting_queue_len,
        )

    # -- one scheduling pass -----------------------------------------------------------
    def match_prefix(self, req: Any, tree_cache: Any) -> None:
        """SGLang's prefix match for a waiting request (``req.init_next_round_input(tree_cache)``)."""
        req.init_next_round_input(tree_cache)

    def add_one_req(
        self, adder: Any, req: Any, *, has_chunked_req: bool = False, match: bool = True
    ) -> Any:
        """Offer a waiting request to the adder, as ``Scheduler._get_new_batch_prefill_raw`` does.

        ``match=True`` first runs the prefix match against the adder's tree cache.
        Returns the release's ``AddReqResult``.
        """
        if match:
            self.match_prefix(req, adder.tree_cache)
        return adder.add_one_req(req, has_chunked_req=has_chunked_req, truncation_align_size=None)

    def add_chunked_req(self, adder: Any, req: Any) -> Any:
        """Continue the scheduler's in-flight chunked request: the request again if unfinished, else None."""
        req.init_next_round_input()
        return adder.add_chunked_req(req)

    def extend_tokens(self, req: Any) -> int:
        """Tokens the adder admitted for ``req`` this pass (the table's ``Req admitted extend``:
        ``extend_range`` 0.5.15-0.5.21, ``extend_end`` 0.5.22 on, ``extend_input_len`` 0.5.14)."""
        if self.generation.variant("Req admitted extend") == "extend_input_len":
            return int(req.extend_input_len)
        rng = getattr(req, "extend_range", None)
        if rng is not None:
            return int(rng.end - rng.start)
        if getattr(req, "extend_end", None) is not None:
            return int(req.extend_end - req.prefix_len)
        raise ValueError(
            f"request {req.rid!r} has no admitted extend (neither extend_range nor extend_end is set)"
        )

    def computed_tokens(self, req: Any) -> int:
        """Tokens of ``req`` whose KV is already in the pool (``prefix_len`` or ``len(prefix_indices)``)."""
        if isinstance(vars(req).get("prefix_len"), int):
            return int(req.prefix_len)
        return len(req.prefix_indices)

    def complete_extend(self, req: Any, allocator: Any) -> int:
        """What a forward leaves for the next pass: the admitted extend's KV slots taken, the computed prefix advanced.

        Stands in for the GPU forward and ``cache_unfinished_req`` between two passes of a
        chunked prefill. Returns the number of tokens computed.
        """
        n = self.extend_tokens(req)
        slots = allocator.alloc(n)
        if slots is None:
            raise ValueError(
                f"the allocator has {allocator.available_size()} free slots; the extend needs {n}"
            )
        if isinstance(vars(req).get("prefix_len"), int):
            req.prefix_len += n
        else:
            req.prefix_indices = self._torch.cat([req.prefix_indices, slots])
        return n

    # -- the radix tree across a request's life (see the module docstring) ----------------
    @property
    def _holds_tree_lock(self) -> bool:
        """Where the Req keeps its tree lock (the table's ``Req computed prefix``, same releases).

        ``prefix_indices`` (0.5.14-0.5.21): the adder ran ``inc_lock_ref(req.last_node)``, SGLang
        releases with ``dec_lock_ref(req.last_node)`` (0.5.20-0.5.21 also keep a receipt that
        ``RadixCache`` ignores). ``prefix_len`` (0.5.22 on): ``req.lock = tree.lock(req.last_node)``,
        released with ``tree.unlock(req.lock)``.
        """
        return self.generation.variant("Req computed prefix") == "prefix_len"

    def prefix_slots(self, req: Any, tree_cache: Any) -> Any:
        """KV slots of the prefix the match found for ``req`` (the tree's; the adder locked them on admission)."""
        if self._holds_tree_lock:  # 0.5.22 on: the Req keeps only the length
            return tree_cache.prefix_device_indices(req)
        return req.prefix_indices

    def evict(self, tree_cache: Any, num_tokens: int) -> None:
        """SGLang's ``evict_from_tree_cache``: evict LRU unlocked tree entries when the allocator has
        fewer than ``num_tokens`` free slots (0.5.14-0.5.20 evict ``num_tokens``, 0.5.21 on the
        shortfall, each release by its own rule). Called before every extend/decode allocation."""
        self._mem_common.evict_from_tree_cache(tree_cache, num_tokens)

    def token_ids(self, req: Any, n: int) -> array:
        """The first ``n`` of the request's prompt + output token ids (what its KV slots hold)."""
        return (array("q", req.origin_input_ids) + array("q", req.output_ids))[:n]

    def _insert(self, tree_cache: Any, allocator: Any, req: Any, slots: Any, protected: int) -> Any:
        """Insert the request's tokens with ``slots``; free the slots the tree already held a copy of."""
        key = self._radix.RadixKey(token_ids=self.token_ids(req, len(slots)), extra_key=None)
        result = tree_cache.insert(self._base_cache.InsertParams(key=key, value=slots))
        allocator.free(slots[protected : int(result.prefix_len)])
        return key

    def _unlock(self, tree_cache: Any, req: Any) -> None:
        if self._holds_tree_lock:
            tree_cache.unlock(req.lock)
            req.lock = None
        else:
            tree_cache.dec_lock_ref(req.last_node)

    def cache_unfinished_req(
        self, tree_cache: Any, allocator: Any, req: Any, slots: Any, *, protected: int
    ) -> Any:
        """SGLang's ``cache_unfinished_req`` / ``checkpoint`` after a prefill or a chunk: the request's
        computed tokens go into the tree, the duplicates the tree held already are freed, the lock
        moves to the new last node. Returns the tree's slots for those tokens (they replace ``slots``;
        all of them are now protected)."""
        key = self._insert(tree_cache, allocator, req, slots, protected)
        match = tree_cache.match_prefix(self._base_cache.MatchPrefixParams(key=key))
        node = match.last_device_node
        self._unlock(tree_cache, req)
        req.last_node = node
        if self._holds_tree_lock:  # 0.5.22 on: MatchResult has a length; the indices are the path's
            req.lock = tree_cache.lock(node)
            indices = tree_cache.path_device_indices(node)
        else:
            tree_cache.inc_lock_ref(node)
            indices = match.device_indices
        if len(indices) != len(slots):
            raise RuntimeError(
                f"request {req.rid!r}: the tree holds {len(indices)} of its {len(slots)} cached tokens"
            )
        return indices

    def cache_finished_req(
        self, tree_cache: Any, allocator: Any, req: Any, slots: Any, *, protected: int
    ) -> None:
        """SGLang's ``cache_finished_req`` / ``insert_req`` / ``release_kv_cache(checkpoint=True)``:
        the finished request's tokens (prompt + outputs with KV) stay in the tree as evictable
        entries, the duplicates (and any slot past its tokens) are freed, its lock is released."""
        key = self._insert(tree_cache, allocator, req, slots, protected)
        allocator.free(slots[len(key) :])
        prompt = len(req.origin_input_ids)
        if self.splits_finished_prompt and 0 < prompt < len(key):
            prompt_key = self._radix.RadixKey(token_ids=key.token_ids[:prompt], extra_key=None)
            tree_cache.insert(self._base_cache.InsertParams(key=prompt_key, value=slots[:prompt]))
        self._unlock(tree_cache, req)

    def release_unfinished(
        self, tree_cache: Any, allocator: Any, req: Any, slots: Any, *, protected: int
    ) -> None:
        """SGLang's retraction (``release_kv_cache`` without insert): the request's own slots are
        freed, its locked prefix stays in the tree (evictable once unlocked)."""
        allocator.free(slots[protected:])
        self._unlock(tree_cache, req)

    def budget(self, adder: Any) -> dict[str, Any]:
        """The adder's remaining budgets (tokens), read through SGLang's own properties."""
        return {
            "rem_total_tokens": int(adder.rem_total_tokens),
            "cur_rem_tokens": int(adder.cur_rem_tokens),
            "rem_input_tokens": int(adder.rem_input_tokens),
            "rem_chunk_tokens": None
            if adder.rem_chunk_tokens is None
            else int(adder.rem_chunk_tokens),
            "evictable_tokens": int(adder.tree_cache.evictable_size()),
            "free_slots": int(adder.token_to_kv_pool_allocator.available_size()),
        }
