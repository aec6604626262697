"""One DP rank's scheduler state and pass, mirroring SGLang's ``get_next_batch_to_run`` with its real adder and delayer.

A pass (:meth:`RankScheduler.plan`) does what ``Scheduler.get_new_batch_prefill``
does: build a ``PrefillDelayerSinglePassExecutor`` with the rank's token usage, build
SGLang's real ``PrefillAdder`` over the rank's state, continue the chunked request
with ``add_chunked_req``, offer the waiting queue (FCFS: SGLang's default policy)
to ``add_one_req`` until a non-``CONTINUE`` result, ``finalize`` the executor with the
admitted batch size, and update ``max_prefill_bs`` as the release does. With no
prefill batch, the rank decodes its running batch (``update_running_batch``:
retracting when the next decode does not fit in the KV pool) or idles.

The twin owns the stateful rest (:meth:`RankScheduler.complete`): KV allocated from
SGLang's real ``TokenToKVPoolAllocator`` for every admitted extend token and every
decoded token. With the radix cache on (SGLang's default) the rank keeps SGLang's real
``RadixCache`` filled as the scheduler does: a prefill's (or chunk's) tokens go into the
tree with their slots once its result is processed (``cache_unfinished_req``: duplicates
freed, the request's lock moved to the new node), a finished request's prompt and output
stay there as evictable entries (``cache_finished_req``), a retracted one frees only its
own slots; later requests match a cached prefix and extend only the rest, and LRU
entries are evicted before any allocation finds too few free slots
(``evict_from_tree_cache``). With it off, a request's KV is freed when it finishes or is
retracted. It never reads a clock: time stamps come from the caller (the tree's LRU
order comes from its own access stamps, which only order its nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpbench.sglang_compat.delayer import (
    MaxPrefillBs,
    Outcome,
    PassExecutor,
    RecordingCollector,
    ReqProgress,
    new_pass,
    scheduler_breaks_on_spent_budget,
)
from dpbench.sglang_compat.scheduling import (
    BATCH_IS_FULL_ALWAYS,
    FINISHED_FILTER_AT_DECODE,
    SchedulerDefaults,
    hide_delayer_from_chunked_req,
)
from dpbench.twin.config import SchedulerSettings
from dpbench.twin.lag import ResultLag

KIND_IDLE, KIND_DECODE, KIND_EXTEND = 0, 1, 2
KIND_NAMES = {KIND_IDLE: "idle", KIND_DECODE: "decode", KIND_EXTEND: "extend"}


@dataclass
class TrackedReq:
    """The twin's bookkeeping for one SGLang ``Req`` served by this rank."""

    index: int  # position in the trace
    req: Any  # SGLang's Req
    arrival_s: float
    max_new_tokens: int
    kv_slots: list[Any] = field(default_factory=list)  # allocator index tensors, in token order
    kv_tokens: int = 0  # tokens with KV (context attention reads), a cached prefix included
    protected: int = 0  # the first `protected` slots are the radix tree's (locked by the request)
    first_token_s: float | None = None
    finish_s: float | None = None
    retractions: int = 0
    # prompt tokens its first admission found in this rank's radix cache (SGLang's
    # ``#cached-token``); None until admitted, 0 without the radix cache
    cached_tokens: int | None = None
    # when each output token appeared: the end of the step that produced it (the caller
    # stamps them; dpbench.metrics.latency turns them into TTFT, ITL, TPOT, E2E)
    token_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Completed:
    """What a step's forward did on a rank: who got a first token, who finished (stamped by the caller)."""

    first_token: list[TrackedReq]
    finished: list[TrackedReq]
    emitted: list[TrackedReq] = field(default_factory=list)  # got an output token this step


@dataclass(kw_only=True)
class PassPlan:
    """What one rank runs this step, and what its delayer saw."""

    kind: int
    batch: list[TrackedReq]
    new_tokens: int  # extend tokens (extend) or batch size (decode)
    context_tokens: int  # KV tokens attention reads (after this step's tokens)
    attn_pairs: int  # query×key pairs of the extend attention (0 for decode)
    outcome: Outcome | None
    reported_prefillable: bool | None
    admitted: int  # requests the adder admitted this pass (0: no prefill)
    retracted: int
    continued_chunk: bool = False  # the pass continued a chunked prefill (add_chunked_req)
    seen: PassState | None = None  # what the pass started from (the divergence finder reads it)


@dataclass(frozen=True)
class PassState:
    """What a rank's pass started from, as the server's stand-in records it per pass
    (``passes-rank<N>.jsonl``): queue lengths, the chunked request, the delayer's input."""

    waiting: int
    running: int
    chunked: int  # trace index of the chunked request in flight, -1: none
    token_usage: float  # what the delayer executor was built with
    # running requests whose in-flight step emits their last token, which the pass's decode
    # leaves out (0.5.23's ``_reqs_finishing_inflight``); -1: the release decodes them once more
    finishing: int = -1
    # running requests already finished (KV freed) that the next decode filters out
    # (0.5.16/0.5.17 under the overlap lag)
    finished: int = 0


class RankScheduler:
    """One DP rank: waiting queue, running batch, chunked request, KV pool, and the real adder/delayer."""

    def __init__(
        self,
        *,
        kit: Any,
        settings: SchedulerSettings,
        defaults: SchedulerDefaults,
        kv_tokens: int,
        delayer: Any | None,
        collector: RecordingCollector | None,
    ) -> None:
        self.kit = kit
        self.settings = settings
        self.defaults = defaults
        self.allocator = kit.new_allocator(kv_tokens)
        # SGLang's RadixCache, on by default as in SGLang; disable=True is the tree-less
        # (ChunkCache-like) mode, where add_one_req hands ignore_eos requests to
        # add_one_req_ignore_eos and a request's KV is freed when it finishes.
        self.radix = settings.radix_cache
        self.tree_cache = kit.new_tree_cache(self.allocator, disable=not self.radix)
        self.kv_capacity = kv_tokens
        self.delayer = delayer
        self.collector = collector
        self.progress = ReqProgress(kit.api.Req)
        self.break_on_spent_budget = scheduler_breaks_on_spent_budget()
        self.max_prefill_bs = MaxPrefillBs()
        self.chunk_size = defaults.per_rank_chunked_prefill_size
        self.max_running = settings.per_rank_max_running_requests(defaults.dp_size)
        self.overlap = settings.overlap_schedule
        self.waiting: list[TrackedReq] = []
        self.running: list[TrackedReq] = []
        self.chunked: TrackedReq | None = None
        self.batch_is_full = False
        # the last forward was an extend whose batch held the chunked request still in flight
        self.chunk_in_last_extend = False
        # 0.5.16/0.5.17: finished requests (KV already freed) stay in the running batch until
        # this rank's next decode pass filters them out (update_running_batch)
        # the overlap lag (finished / prefilled last step) and 0.5.16/0.5.17's finished requests
        # still in the running batch: one object, its invariant in dpbench.twin.lag
        self.lag = ResultLag(
            overlap=self.overlap,
            filter_at_decode=defaults.finished_filter == FINISHED_FILTER_AT_DECODE,
            skip_finishing_decode=defaults.skip_finishing_decode,
        )
        # SGLang's NewTokenRatioTracker as the release builds it (conservativeness ×0.3 under DP attention).
        self.ratio_init = defaults.init_new_token_ratio
        self.ratio_min = defaults.min_new_token_ratio
        self.ratio_decay = defaults.new_token_ratio_decay
        self.retract_decode_steps = defaults.retract_decode_steps
        self.new_token_ratio = self.ratio_init
        self._by_req: dict[str, TrackedReq] = {}  # SGLang's rid → the twin's request

    # -- state --------------------------------------------------------------------------
    @property
    def kv_used(self) -> int:
        """KV tokens in use as SGLang's ``token_usage`` counts them (the delayer's input):
        pool − free − evictable (``pool_stats_observer._get_token_info``); tree entries no
        request holds do not count."""
        return self.kv_pool_occupied - int(self.tree_cache.evictable_size())

    @property
    def kv_pool_occupied(self) -> int:
        """Pool slots taken, evictable tree entries included: ``total − allocator.available_size()``."""
        return self.kv_capacity - int(self.allocator.available_size())

    @property
    def load(self) -> int:
        """Requests this rank holds (waiting + running + chunked): shortest-queue dispatch compares it."""
        return len(self.waiting) + len(self.running) + (self.chunked is not None)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.chunked is not None)

    def enqueue(self, tracked: TrackedReq) -> None:
        self._by_req[tracked.req.rid] = tracked
        self.waiting.append(tracked)

    # -- one pass -----------------------------------------------------------------------
    def plan(self) -> PassPlan:
        """Decide this rank's forward for the step (SGLang's ``get_next_batch_to_run``)."""
        executor: PassExecutor | None = None
        continuing = self.chunked is not None
        seen = PassState(
            waiting=len(self.waiting),
            running=len(self.running),
            chunked=self.chunked.index if self.chunked is not None else -1,
            token_usage=self.kv_used / self.kv_capacity,
            finishing=sum(map(self.lag.is_lagged, self.running))
            if self.lag.skips_finishing
            else -1,
            finished=len(self.lag.finished_in_running),  # all in the batch: ResultLag.check
        )
        self.max_prefill_bs.before_pass()
        if self.delayer is not None:
            executor = new_pass(
                self.delayer, self.collector, token_usage=self.kv_used / self.kv_capacity
            )
        batch, new_chunked = self._prefill_raw(executor)
        admitted = len(batch)
        outcome = None
        reported = None
        if executor is not None:
            observed, outcome = executor.finalize(admitted)
            reported = executor.reported_prefillable
            self.max_prefill_bs.after_pass(observed, admitted)
        else:
            self.max_prefill_bs.after_pass(admitted, admitted)
        if batch:
            self.chunked = new_chunked
            new_tokens = 0
            ctx = 0
            pairs = 0
            for t in batch:
                n = self.kit.extend_tokens(t.req)
                p = self.kit.computed_tokens(t.req)
                new_tokens += n
                ctx += p + n
                pairs += n * p + n * (n + 1) // 2
            return PassPlan(
                kind=KIND_EXTEND,
                batch=batch,
                new_tokens=new_tokens,
                context_tokens=ctx,
                attn_pairs=pairs,
                outcome=outcome,
                reported_prefillable=reported,
                admitted=admitted,
                retracted=0,
                continued_chunk=continuing,
                seen=seen,
            )
        retracted = self._make_room_for_decode()
        skipped = retracted is None  # 0.5.23 sat this step's decode out
        retracted = retracted or 0
        if self.running and not skipped:
            ctx = sum(t.kv_tokens + 1 for t in self.running)
            return PassPlan(
                kind=KIND_DECODE,
                batch=list(self.running),
                new_tokens=len(self.running),
                context_tokens=ctx,
                attn_pairs=0,
                outcome=outcome,
                reported_prefillable=reported,
                admitted=0,
                retracted=retracted,
                seen=seen,
            )
        return PassPlan(
            kind=KIND_IDLE,
            batch=[],
            new_tokens=0,
            context_tokens=0,
            attn_pairs=0,
            outcome=outcome,
            reported_prefillable=reported,
            admitted=0,
            retracted=retracted,
            seen=seen,
        )

    def _prefill_raw(
        self, executor: PassExecutor | None
    ) -> tuple[list[TrackedReq], TrackedReq | None]:
        """SGLang's ``_get_new_batch_prefill_raw``: the admitted batch and the next chunked request."""
        kit = self.kit
        if self.chunk_in_last_extend and self.settings.chunk_merge_resets_batch_is_full:
            # get_next_batch_to_run: last_batch.filter_batch(chunked_req_to_exclude=[the
            # chunked request]) shrinks the batch, and a shrunk batch resets batch_is_full
            self.batch_is_full = False
        if self.running == [] and self.batch_is_full:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return [], None
        running_bs = len(self.running)
        if self.max_running - running_bs <= 0 and self.chunked is None:
            self.batch_is_full = True
            return [], None
        running_batch = kit.new_running_batch(t.req for t in self.running)
        adder = kit.new_adder(
            allocator=self.allocator,
            tree_cache=self.tree_cache,
            running_batch=running_batch,
            rem_input_tokens=self.settings.max_prefill_tokens,
            rem_chunk_tokens=self.chunk_size,
            new_token_ratio=self.new_token_ratio,
            prefill_delayer_single_pass=executor,
            max_prefill_bs=self.max_prefill_bs.value,
            max_running_requests=self.max_running,
            waiting_queue_len=len(self.waiting),
        )
        continuing = self.chunked
        if continuing is not None:
            if self.settings.hide_delayer_from_chunked_req:
                with hide_delayer_from_chunked_req(adder):
                    left = kit.add_chunked_req(adder, continuing.req)
            else:
                left = kit.add_chunked_req(adder, continuing.req)
            self.chunked = continuing if left is not None else None
        result = kit.AddReqResult
        for tracked in self.waiting:
            if self.break_on_spent_budget and adder.budget_state() == result.OTHER:
                break
            if len(adder.can_run_list) >= self.max_running - running_bs:
                self.batch_is_full = True
            if self.batch_is_full:
                break
            res = kit.add_one_req(adder, tracked.req, has_chunked_req=self.chunked is not None)
            if res != result.CONTINUE:
                if res == result.NO_TOKEN:
                    if self.defaults.batch_is_full_on_no_token == BATCH_IS_FULL_ALWAYS:
                        self.batch_is_full = True
                    else:
                        self.batch_is_full = len(adder.can_run_list) > 0 or bool(self.running)
                break
        admitted = adder.can_run_list
        if not admitted:
            return [], self.chunked
        admitted_rids = {r.rid for r in admitted}
        self.waiting = [t for t in self.waiting if t.req.rid not in admitted_rids]
        batch = [self._by_req[r.rid] for r in admitted]
        new_chunked = self.chunked
        if adder.new_chunked_req is not None:
            new_chunked = self._by_req[adder.new_chunked_req.rid]
        return batch, new_chunked

    def _filter_finished(self) -> None:
        """``update_running_batch``'s ``filter_batch()``: finished requests leave; a batch that
        shrank (or emptied) resets ``batch_is_full``."""
        gone = self.lag.take_finished_in_running()
        if not gone:
            return
        self.running = [t for t in self.running if t.index not in gone]
        self.batch_is_full = False

    def _make_room_for_decode(self) -> int | None:
        """SGLang's ``update_running_batch``: retract until the next decode fits, else decay the
        ratio. Returns the number retracted, or None when the rank skips this step's decode
        (0.5.23: it does not fit while requests finishing in flight still hold KV)."""
        self._filter_finished()
        if not self.running:
            return 0
        finishing = False
        if self.lag.skips_finishing:  # _reqs_finishing_inflight: filter_batch(reqs_to_exclude)
            kept = [t for t in self.running if not self.lag.is_lagged(t)]
            finishing = len(kept) < len(self.running)
            self.running = kept
            if finishing:  # the batch shrank below its initial size: batch_is_full reset
                self.batch_is_full = False
            if not self.running:
                return 0
        fits = self._decode_fits(len(self.running))
        if not fits and finishing:
            # their KV is freed when the in-flight result is processed: decode next step
            self.batch_is_full = False
            return None
        if fits:
            self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.ratio_min)
            return 0
        # SGLang's retraction order: keep long outputs, retract short-output/long-input first.
        order = sorted(
            (i for i in range(len(self.running)) if not self.lag.is_lagged(self.running[i])),
            key=lambda i: (
                len(self.running[i].req.output_ids),
                -len(self.running[i].req.origin_input_ids),
            ),
            reverse=True,
        )
        retracted = []
        while len(order) > 1 and (not retracted or not self._decode_fits(len(order))):
            victim = self.running[order.pop()]
            self._release(victim, finished=False)
            # SGLang's release_req: use the newly evictable memory at once
            self._evict(len(order) * self.retract_decode_steps)
            victim.req.reset_for_retract()
            victim.retractions += 1
            retracted.append(victim)
        self.lag.retracted(retracted)
        keep = set(order)
        self.running = [t for i, t in enumerate(self.running) if i in keep or self.lag.is_lagged(t)]
        reqs = [t.req for t in self.running]
        decoded = sum(len(r.output_ids) for r in reqs)
        max_new = sum(r.sampling_params.max_new_tokens for r in reqs)
        self.new_token_ratio = min(
            1.0, (decoded + self.retract_decode_steps * len(reqs)) / (max_new + 1)
        )
        self.waiting.extend(retracted)
        self.batch_is_full = False
        return len(retracted)

    # -- effects of the step ------------------------------------------------------------
    def complete(self, plan: PassPlan) -> Completed:
        """Apply the step's forward to the rank's state; say who got a first token and who finished.

        It never reads a clock: the caller stamps both once the step's end time is known.

        With the overlap scheduler (SGLang's default) a request that finishes in step k is
        only known finished when step k's results are processed, after step k+1 was
        scheduled: it keeps its KV and its slot in the running batch (decoding once more,
        output discarded) through step k+1, and is released after it.
        """
        finished: list[TrackedReq] = []
        first: list[TrackedReq] = []
        emitted: list[TrackedReq] = []
        prefilled: list[tuple[TrackedReq, int]] = []
        self.chunk_in_last_extend = plan.kind == KIND_EXTEND and any(
            t is self.chunked for t in plan.batch
        )
        if plan.kind == KIND_EXTEND:
            self._evict(sum(self.kit.extend_tokens(t.req) for t in plan.batch))
            for t in plan.batch:
                if self.radix and t.kv_tokens == 0:  # admitted: its matched prefix is the tree's
                    prefix = self.kit.prefix_slots(t.req, self.tree_cache)
                    t.kv_slots = [prefix]
                    t.kv_tokens = t.protected = len(prefix)
                if t.cached_tokens is None:  # first admission (not a chunk's or a retry's)
                    t.cached_tokens = t.kv_tokens
                n = self.kit.extend_tokens(t.req)
                self._grow(t, n)
                if t is self.chunked:
                    # SGLang caches the chunk before the next pass (stash_chunked_request)
                    if self.radix:
                        self._cache_unfinished(t, t.kv_tokens)
                    self.progress.set_computed(t.req, self._slots(t))
                    continue  # mid-prompt: no token yet
                self.progress.set_computed(t.req, self._slots(t))
                if t.first_token_s is None:  # a retracted request keeps its first stamp
                    first.append(t)
                emitted.append(t)
                if self._emit_token(t):
                    finished.append(t)
                elif self.radix:
                    prefilled.append((t, t.kv_tokens))
                self.running.append(t)
        elif plan.kind == KIND_DECODE:
            self._evict(len(plan.batch))
            slots = self.allocator.alloc(len(plan.batch))
            if slots is None:
                raise RuntimeError(
                    f"decode of {len(plan.batch)} requests found {self.allocator.available_size()} free KV slots "
                    "after retraction"
                )
            for i, t in enumerate(plan.batch):
                t.kv_slots.append(slots[i : i + 1])
                t.kv_tokens += 1
                if self.lag.is_lagged(t):
                    continue  # finished last step: the overlap scheduler's extra decode
                emitted.append(t)
                if self._emit_token(t):
                    finished.append(t)
        # The step's results: with the overlap scheduler, processed after the next step is scheduled.
        release, cache = self.lag.step_done(finished, prefilled)
        for t, n in cache:
            self._cache_unfinished(t, n)
        if release:
            for t in release:  # its result is processed: KV back to the pool / tree
                self._release(t, finished=True)
                del self._by_req[t.req.rid]
            held = {t.index for t in self.running}
            # a request that already left the batch (its decode skipped) has nothing to filter
            if self.lag.released([t for t in release if t.index in held]):  # 0.5.23: now
                done = {t.index for t in release}
                before = len(self.running)
                self.running = [t for t in self.running if t.index not in done]
                if len(self.running) < before:  # a batch that shrank (0.5.23: if it held them)
                    self.batch_is_full = False
        if not self.has_work:
            self.new_token_ratio = self.ratio_init
        self.lag.check(self.running)
        return Completed(first_token=first, finished=finished, emitted=emitted)

    def _emit_token(self, t: TrackedReq) -> bool:
        """One output token for ``t``; True when it reaches max_new_tokens."""
        t.req.output_ids.append(0)
        return len(t.req.output_ids) >= t.max_new_tokens

    def _grow(self, t: TrackedReq, n: int) -> None:
        if n <= 0:
            return
        slots = self.allocator.alloc(n)
        if slots is None:
            raise RuntimeError(
                f"request {t.req.rid}: the adder admitted {n} extend tokens but the KV pool has "
                f"{self.allocator.available_size()} free slots"
            )
        t.kv_slots.append(slots)
        t.kv_tokens += n

    def _slots(self, t: TrackedReq) -> Any:
        import torch

        if len(t.kv_slots) > 1:
            t.kv_slots = [torch.cat(t.kv_slots)]
        return t.kv_slots[0] if t.kv_slots else torch.empty((0,), dtype=torch.int64)

    def _decode_fits(self, n: int) -> bool:
        """SGLang's ``check_decode_mem``: evict for the next decode's ``n`` slots, then compare."""
        self._evict(n)
        return int(self.allocator.available_size()) >= n

    def _evict(self, n: int) -> None:
        if self.radix:
            self.kit.evict(self.tree_cache, n)

    def _cache_unfinished(self, t: TrackedReq, n: int) -> None:
        """SGLang's ``cache_unfinished_req``: the first ``n`` tokens' KV go into the tree (now its slots)."""
        slots = self._slots(t)
        cached = self.kit.cache_unfinished_req(
            self.tree_cache, self.allocator, t.req, slots[:n], protected=t.protected
        )
        t.kv_slots = [cached, slots[n:]]
        t.protected = n

    def _release(self, t: TrackedReq, *, finished: bool) -> None:
        """The request gives its KV back: freed (radix off), kept in the tree (finished) or its own part freed (retracted)."""
        if not self.radix:
            if t.kv_slots:
                self.allocator.free(self._slots(t))
        elif finished:
            self.kit.cache_finished_req(
                self.tree_cache, self.allocator, t.req, self._slots(t), protected=t.protected
            )
        else:
            self.kit.release_unfinished(
                self.tree_cache, self.allocator, t.req, self._slots(t), protected=t.protected
            )
        t.kv_slots = []
        t.kv_tokens = 0
        t.protected = 0
