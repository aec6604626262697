"""Behavioural placement: drive SGLang's real ``PrefillAdder`` through PR #31835's five cases with a recording delayer.

Each case builds SGLang's own allocator, radix cache, ``Req`` and ``PrefillAdder``
(through :class:`dpbench.sglang_compat.adder.AdderKit`) and hands the adder a
:class:`RecordingDelayer` in place of the ``PrefillDelayerSinglePassExecutor``. The
recorder is the one stand-in: it writes down every ``negotiate_should_allow_prefill``
call SGLang makes (checking the arguments bind to the installed executor's signature)
and answers with a scripted verdict, so what SGLang *tells* the delayer is observed,
not assumed.

Cases (PR #31835's unit tests, rebuilt on the real objects):

``kv_budget_reject``
    The request does not fit the KV pool at all: ``add_one_req`` returns ``NO_TOKEN``.
``lock_recheck_reject``
    The request fits only while its own cached prefix counts as evictable. Locking the
    prefix (``_lock_node``, an eviction-protection refcount) removes those tokens from
    the evictable budget, so the re-check under the lock rejects it. The construction is
    measured, not assumed: the case records the adder's ``rem_total_tokens`` with and
    without the lock and is reported "not constructible" if the lock does not move it.
``chunked``
    Pass 1 admits the first chunk of a long prompt (``new_chunked_req``); its forward is
    represented by :meth:`AdderKit.complete_extend` (the chunk's KV slots taken from the
    pool, the request's computed prefix advanced); pass 2 offers the request through
    ``add_chunked_req`` with a *delay* verdict. A mid-chunk request must continue.
``delay_verdict_blocks``
    Ample KV, verdict "delay": the request must not be admitted.
``allow_verdict_admits``
    Ample KV, verdict "allow": the request is admitted.

A **false prefillable report** is a case where the delayer heard
``local_prefillable=True`` and the same request was then rejected with ``NO_TOKEN``.
When nothing negotiates during a pass the real executor's ``finalize()`` reports
``local_prefillable=False``; each case records that as its ``pass_report``.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field
from typing import Any

from dpbench.sglang_compat.adder import AdderKit

CASES = (
    "kv_budget_reject",
    "lock_recheck_reject",
    "chunked",
    "delay_verdict_blocks",
    "allow_verdict_admits",
)

# Sizes (tokens) chosen so each case's outcome is decided by the gate it names.
PROMPT_TOKENS = 500
MAX_NEW_TOKENS = 100
AMPLE_POOL = 100_000
TIGHT_POOL = 300  # < PROMPT_TOKENS: no admission possible
CACHED_PREFIX = 400
CHUNK_TOKENS = 256


class RecordingDelayer:
    """Stand-in for ``PrefillDelayerSinglePassExecutor``: records what SGLang tells it, answers ``verdict``."""

    def __init__(self, verdict: bool, executor_cls: Any):
        self.verdict = verdict
        self.calls: list[dict[str, Any]] = []
        self._signature = inspect.signature(executor_cls.negotiate_should_allow_prefill)

    def negotiate_should_allow_prefill(self, *args: Any, **kwargs: Any) -> bool:
        try:
            bound = self._signature.bind(self, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"SGLang called negotiate_should_allow_prefill with arguments its own executor "
                f"does not accept ({exc}): args={args} kwargs={kwargs}"
            ) from exc
        bound.apply_defaults()
        call = {k: v for k, v in bound.arguments.items() if k != "self"}
        call["verdict"] = self.verdict
        self.calls.append(call)
        return self.verdict


@dataclass
class CaseRecord:
    case: str
    constructible: bool = True
    reason: str = ""
    verdict: bool | None = None
    result: str | None = None  # AddReqResult name, or "continues"/"finished" for add_chunked_req
    admitted: bool | None = None
    negotiations: list[dict[str, Any]] = field(default_factory=list)
    pass_report: bool | None = None  # local_prefillable the delayer ends up with for this pass
    false_prefillable_report: bool = False
    conforms_to_pr31835: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def record_outcome(rec: CaseRecord, delayer: RecordingDelayer) -> CaseRecord:
    """Copy what the delayer heard into ``rec`` and score it: pass report, false prefillable report."""
    rec.negotiations = [dict(c) for c in delayer.calls]
    rec.pass_report = bool(delayer.calls[0]["local_prefillable"]) if delayer.calls else False
    told_true = any(c["local_prefillable"] for c in delayer.calls)
    rec.false_prefillable_report = told_true and rec.result == "NO_TOKEN"
    return rec


class Probe:
    """Runs the five cases against the installed SGLang."""

    def __init__(self, kit: AdderKit | None = None):
        self.kit = kit or AdderKit()
        self.executor_cls = self.kit.api.PrefillDelayerSinglePassExecutor

    def _delayer(self, verdict: bool) -> RecordingDelayer:
        return RecordingDelayer(verdict, self.executor_cls)

    def _adder(
        self, alloc: Any, tree: Any, delayer: RecordingDelayer | None, chunk: int | None = None
    ) -> Any:
        return self.kit.new_adder(
            allocator=alloc,
            tree_cache=tree,
            running_batch=self.kit.new_running_batch(),
            rem_input_tokens=AMPLE_POOL,
            rem_chunk_tokens=chunk,
            prefill_delayer_single_pass=delayer,
        )

    def _offer(
        self, name: str, pool: int, verdict: bool, prefix: list[int] | None = None
    ) -> CaseRecord:
        kit = self.kit
        alloc = kit.new_allocator(pool)
        tree = kit.new_tree_cache(alloc)
        if prefix:
            kit.insert_prefix(tree, alloc, prefix)
        delayer = self._delayer(verdict)
        adder = self._adder(alloc, tree, delayer)
        prompt = (prefix or []) + list(range(10_000, 10_000 + PROMPT_TOKENS))
        req = kit.new_req(name, prompt, MAX_NEW_TOKENS, ignore_eos=False)
        rec = CaseRecord(name, verdict=verdict)
        rec.detail["budget_before"] = kit.budget(adder)
        rec.result = kit.add_one_req(adder, req).name
        rec.admitted = any(r is req for r in adder.can_run_list)
        return record_outcome(rec, delayer)

    def kv_budget_reject(self) -> CaseRecord:
        rec = self._offer("kv_budget_reject", TIGHT_POOL, True)
        rec.detail["setup"] = (
            f"{PROMPT_TOKENS}-token prompt, {TIGHT_POOL}-slot KV pool, verdict allow"
        )
        rec.conforms_to_pr31835 = rec.result == "NO_TOKEN" and not rec.false_prefillable_report
        return rec

    def lock_recheck_reject(self) -> CaseRecord:
        kit = self.kit
        prefix = list(range(1, CACHED_PREFIX + 1))
        # need = prompt + max_new + one page; pool chosen so need fits with the prefix
        # evictable (pool) but not once it is locked (pool - prefix).
        need = PROMPT_TOKENS + MAX_NEW_TOKENS + kit.page_size
        pool = need + CACHED_PREFIX // 2
        # Measure the construction on a twin of the case's state with SGLang's own lock.
        alloc = kit.new_allocator(pool)
        tree = kit.new_tree_cache(alloc)
        kit.insert_prefix(tree, alloc, prefix)
        probe_adder = self._adder(alloc, tree, None)
        req = kit.new_req(
            "measure", prefix + list(range(10_000, 10_000 + PROMPT_TOKENS)), MAX_NEW_TOKENS, False
        )
        kit.match_prefix(req, tree)
        lock = getattr(probe_adder, "_lock_node", None)
        if lock is None:
            return CaseRecord(
                "lock_recheck_reject",
                constructible=False,
                reason="PrefillAdder has no _lock_node: no lock to re-check under",
            )
        unlocked = int(probe_adder.rem_total_tokens)
        with lock(req.last_node):
            locked = int(probe_adder.rem_total_tokens)
        measured = {
            "need_tokens": need,
            "pool_tokens": pool,
            "cached_prefix_tokens": CACHED_PREFIX,
            "rem_total_unlocked": unlocked,
            "rem_total_locked": locked,
        }
        if not (locked <= need < unlocked):
            return CaseRecord(
                "lock_recheck_reject",
                constructible=False,
                detail=measured,
                reason=f"locking the matched prefix moved rem_total_tokens {unlocked} -> {locked}; "
                f"cannot place a {need}-token request between them",
            )
        rec = self._offer("lock_recheck_reject", pool, True, prefix=prefix)
        rec.detail.update(measured)
        rec.detail["setup"] = (
            f"{CACHED_PREFIX}-token cached prefix + {PROMPT_TOKENS} new tokens; fits only "
            f"while the prefix is evictable ({locked} <= {need} < {unlocked}); verdict allow"
        )
        rec.conforms_to_pr31835 = rec.result == "NO_TOKEN" and not rec.false_prefillable_report
        return rec

    def chunked(self) -> CaseRecord:
        kit = self.kit
        alloc = kit.new_allocator(AMPLE_POOL)
        tree = kit.new_tree_cache(alloc)
        req = kit.new_req(
            "chunked", list(range(10_000, 10_000 + 4 * CHUNK_TOKENS)), MAX_NEW_TOKENS, False
        )
        first = self._delayer(True)
        adder1 = self._adder(alloc, tree, first, chunk=CHUNK_TOKENS)
        res1 = kit.add_one_req(adder1, req).name
        rec = CaseRecord("chunked", verdict=False)
        if adder1.new_chunked_req is not req:
            rec.constructible = False
            rec.reason = f"pass 1 did not start a chunked prefill (add_one_req -> {res1})"
            return rec
        computed = kit.complete_extend(req, alloc)  # pass 1's forward: the first chunk's KV
        delayer = self._delayer(False)
        adder2 = self._adder(alloc, tree, delayer, chunk=CHUNK_TOKENS)
        out = kit.add_chunked_req(adder2, req)
        rec.result = "continues" if out is req else "finished"
        rec.admitted = any(r is req for r in adder2.can_run_list)
        rec.detail["computed_after_pass1"] = computed
        rec.detail["pass2_extend_from"] = kit.computed_tokens(req)
        rec.detail["pass2_extend_tokens"] = kit.extend_tokens(req) if rec.admitted else 0
        rec.detail["setup"] = (
            f"{4 * CHUNK_TOKENS}-token prompt, chunk {CHUNK_TOKENS}; pass 1 ({res1}) admitted "
            f"the first chunk ({computed} tokens computed), pass 2 offers the request to "
            "add_chunked_req with verdict delay"
        )
        rec.detail["pass1_negotiations"] = [dict(c) for c in first.calls]
        record_outcome(rec, delayer)
        rec.conforms_to_pr31835 = bool(rec.admitted) and any(
            c["local_prefillable"] for c in delayer.calls
        )
        return rec

    def delay_verdict_blocks(self) -> CaseRecord:
        rec = self._offer("delay_verdict_blocks", AMPLE_POOL, False)
        rec.detail["setup"] = f"{PROMPT_TOKENS}-token prompt, {AMPLE_POOL}-slot pool, verdict delay"
        rec.conforms_to_pr31835 = not rec.admitted and len(rec.negotiations) >= 1
        return rec

    def allow_verdict_admits(self) -> CaseRecord:
        rec = self._offer("allow_verdict_admits", AMPLE_POOL, True)
        rec.detail["setup"] = f"{PROMPT_TOKENS}-token prompt, {AMPLE_POOL}-slot pool, verdict allow"
        rec.conforms_to_pr31835 = bool(rec.admitted) and len(rec.negotiations) >= 1
        return rec

    def run(self) -> list[CaseRecord]:
        return [getattr(self, name)() for name in CASES]

    def objects(self) -> dict[str, str]:
        """The class of every object the cases use: SGLang's own except the two stand-ins."""
        kit = self.kit
        alloc = kit.new_allocator(16)
        tree = kit.new_tree_cache(alloc)
        batch = kit.new_running_batch()
        delayer = self._delayer(True)
        found = {
            "allocator": alloc,
            "tree_cache": tree,
            "req": kit.new_req("x", [1], 1),
            "adder": self._adder(alloc, tree, delayer),
            "running_batch": batch,
            "delayer": delayer,
        }
        if kit.uses_prefill_budget:
            found["prefill_budget"] = found["adder"].memory_budget
        return {k: f"{type(v).__module__}.{type(v).__qualname__}" for k, v in found.items()}


@dataclass(frozen=True)
class BehaviouralPlacement:
    cases: list[CaseRecord]
    objects: dict[str, str] = field(default_factory=dict)

    @property
    def false_prefillable_reports(self) -> int:
        return sum(c.false_prefillable_report for c in self.cases)

    @property
    def chunked_negotiates(self) -> bool | None:
        case = next(c for c in self.cases if c.case == "chunked")
        return bool(case.negotiations) if case.constructible else None

    @property
    def not_constructible(self) -> list[str]:
        return [c.case for c in self.cases if not c.constructible]

    @property
    def conforming(self) -> int:
        return sum(bool(c.conforms_to_pr31835) for c in self.cases)


def probe(kit: AdderKit | None = None) -> BehaviouralPlacement:
    """Run the five cases on the installed SGLang."""
    runner = Probe(kit)
    return BehaviouralPlacement(runner.run(), runner.objects())
