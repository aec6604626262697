"""In-process rank mode: the DP ranks as threads of one process, taking turns; SGLang's delayer collective served in-process.

Why: with one process per rank, a lockstep pass on a 2-core machine is dominated by the
gloo all-gather between processes that outnumber the cores (~4 ms per pass at DP 4),
while SGLang's own adder and delayer work is well under 1 ms per rank.

How: every rank is a thread running the same :func:`dpbench.twin.ranks.lockstep`, but only
one runs at a time (a baton, :class:`Baton`): rank r runs until its next collective,
leaves its contribution, and hands the baton to rank r+1; the last rank hands it back to
rank 0, by which time every contribution is in. So there is no contention for the GIL or
the cores, and a hand-off is one semaphore release/acquire. Both collectives use it:

- SGLang's delayer calls ``torch.distributed.all_gather_into_tensor(..., group=G)`` on the
  group it was built with; here ``G`` is :class:`BatonGroup`, a ``torch.distributed.ProcessGroup``
  subclass whose ``all_gather_single`` gathers through the baton (torch dispatches the call to
  it; the result is wrapped in a completed ``Work``);
- the twin's own end-of-step exchange is :class:`BatonExchange`.

Every rank computes exactly what it computes as a process (same inputs, same SGLang code,
same order), so the simulated results are identical (tested against the gloo processes);
only the wall-clock metrics differ.

A failing rank, the deadline or Ctrl-C aborts the baton, which wakes every rank with
:class:`BatonAborted`; the run then raises :class:`~dpbench.twin.ranks.TwinRankError` naming
the rank that failed.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from dpbench.twin.ranks import Progress, TwinRankError, lockstep

RANK_MODES = ("threads", "processes")


class BatonAborted(RuntimeError):
    """Another rank failed, the deadline passed or the run was interrupted."""


class BatonUnavailable(RuntimeError):
    """This torch cannot host the in-process group (its private Work constructor is gone)."""


class Baton:
    """Ranks take turns; :meth:`gather` is an all-gather at which the turn passes on.

    Contributions are double-buffered by each rank's collective count: rank r can only
    write buffer ``k % 2`` again at its collective ``k + 2``, after every other rank took a
    turn, i.e. read collective ``k``.

    The contract, asserted: every rank issues the same collectives in the same order (as
    with gloo, where a mismatch would hang or mix payloads). Each contribution carries its
    collective's tag (``"delayer"``, ``"step"``); a rank reading a collective whose ranks
    gave different tags aborts the run naming them, and :meth:`counts` must agree at the
    end (:func:`run_rank_threads` checks).
    """

    def __init__(self, n: int, timeout_s: float) -> None:
        self.n = n
        # a plain lock per rank as a binary semaphore (C-level acquire/release; any thread may
        # release it): a rank's turn begins when its lock is released to it
        self._turn = [threading.Lock() for _ in range(n)]
        for r in range(1, n):
            self._turn[r].acquire()
        self._slots: list[list[Any]] = [[None] * n, [None] * n]
        self._count = [0] * n
        self._timeout = timeout_s
        self.aborted: str | None = None

    def begin(self, rank: int) -> None:
        """Wait for this rank's first turn."""
        self._wait(rank)

    def end(self, rank: int) -> None:
        """This rank is done: pass the turn on for good (all ranks run the same collectives)."""
        self._turn[(rank + 1) % self.n].release()

    def gather(self, rank: int, item: Any, tag: str = "") -> list[Any]:
        k = self._count[rank]
        buf = self._slots[k % 2]
        self._count[rank] += 1
        buf[rank] = (tag, item)
        self._turn[(rank + 1) % self.n].release()
        self._wait(rank)
        tags = [t for t, _ in buf]
        if len(set(tags)) != 1:
            why = f"ranks issued different collectives as their collective {k}: " + ", ".join(
                f"rank {r} {t or '?'}" for r, t in enumerate(tags)
            )
            self.abort(why)
            raise BatonAborted(why)
        return [x for _, x in buf]

    def counts(self) -> list[int]:
        """Collectives each rank issued so far."""
        return list(self._count)

    def _wait(self, rank: int) -> None:
        if self.aborted is not None:
            raise BatonAborted(self.aborted)
        if not self._turn[rank].acquire(timeout=self._timeout):
            self.abort(f"rank {rank} waited {self._timeout:g} s for its turn")
        if self.aborted is not None:
            raise BatonAborted(self.aborted)

    def abort(self, why: str) -> None:
        if self.aborted is None:
            self.aborted = why
        for lock in self._turn:
            with contextlib.suppress(RuntimeError):  # already released by its owner's turn
                lock.release()


class BatonExchange:
    """The twin's end-of-step all-gather between rank threads."""

    name = "threads"

    def __init__(self, baton: Baton) -> None:
        self.baton = baton

    def all_gather(self, rank: int, row: Sequence[int], group: Any) -> list[list[int]]:
        del group
        return [list(r) for r in self.baton.gather(rank, list(row), "step")]


def baton_group(baton: Baton, rank: int) -> Any:
    """A ``torch.distributed.ProcessGroup`` for ``rank`` whose all-gather goes through ``baton``."""
    import torch
    import torch.distributed as dist
    from torch.futures import Future

    try:  # private: the one way to hand a Python-made Work back through torch's dispatch
        from torch._C._distributed_c10d import _create_work_from_future
    except ImportError as exc:
        raise BatonUnavailable(
            f"rank_mode='threads' needs torch's _create_work_from_future, which torch "
            f"{torch.__version__} lacks ({exc}); run with rank_mode='processes' (gloo, "
            "identical numbers, slower)"
        ) from exc

    class BatonGroup(dist.ProcessGroup):
        def size(self) -> int:
            return baton.n

        def rank(self) -> int:
            return rank

        def getBackendName(self) -> str:
            return "dpbench-baton"

        def all_gather_single(self, output: Any, input: Any, opts: Any = None) -> Any:
            parts = baton.gather(rank, input.detach().clone(), "delayer")
            output.view(-1).copy_(torch.cat([p.reshape(-1) for p in parts]))
            fut = Future()
            fut.set_result([output])
            return _create_work_from_future(fut)

        def allgather(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(
                "the twin's in-process group serves all_gather_into_tensor only"
            )

    return BatonGroup(rank, baton.n)


class _Progress:
    """What ``lockstep`` sends progress to (a pipe, for processes); here a call."""

    def __init__(self, on_progress: Any) -> None:
        self._fn = on_progress

    def send(self, msg: Progress) -> None:
        if self._fn is not None:
            self._fn(msg.finished, msg.steps, msg.sim_s)


def run_rank_threads(job: Any, *, on_progress: Any = None) -> list[Any]:
    """Run ``dp_size`` ranks as threads of this process, taking turns; results in rank order."""
    n = job.config.dp_size
    if not isinstance(job.exchange, BatonExchange):
        raise ValueError(f"thread ranks need a BatonExchange, got {type(job.exchange).__name__}")
    baton = job.exchange.baton
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}

    def main(rank: int) -> None:
        try:
            baton.begin(rank)
            results[rank] = lockstep(
                rank,
                job,
                baton_group(baton, rank),
                progress=_Progress(on_progress) if rank == 0 else None,
            )
            baton.end(rank)
        except BatonAborted:
            pass
        except BaseException as exc:  # reported below with its traceback
            errors[rank] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            baton.abort(f"rank {rank} failed")

    threads = [
        threading.Thread(target=main, args=(r,), name=f"dpbench-twin-rank{r}", daemon=True)
        for r in range(n)
    ]
    _join_by_deadline(threads, baton, job.config.deadline_s, results)
    return _in_order(results, errors, baton, n)


def _join_by_deadline(
    threads: list[threading.Thread], baton: Baton, deadline_s: float, results: dict[int, Any]
) -> None:
    """Start the rank threads and join them; past the deadline or on Ctrl-C abort the baton
    (every rank stops at its next turn) and join them before raising."""
    deadline = time.monotonic() + deadline_s
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    baton.abort("deadline")
                    for u in threads:
                        u.join(timeout=10)
                    running = [r for r in range(len(threads)) if r not in results]
                    raise TwinRankError(
                        f"deadline of {deadline_s:g} s passed; ranks {running} were still running",
                        rank=running[0] if running else None,
                    )
                t.join(timeout=min(left, 0.5))
    except KeyboardInterrupt:
        baton.abort("interrupted")
        for t in threads:
            t.join(timeout=10)
        raise


def _in_order(results: dict[int, Any], errors: dict[int, str], baton: Baton, n: int) -> list[Any]:
    """The ranks' results in rank order, or the error that names what went wrong."""
    if errors:
        r = min(errors)
        raise TwinRankError(f"rank {r} failed: {errors[r].strip()}", rank=r)
    if len(results) < n:
        missing = [r for r in range(n) if r not in results]
        raise TwinRankError(f"ranks {missing} stopped without a result", rank=missing[0])
    counts = baton.counts()
    if len(set(counts)) != 1:
        raise TwinRankError(
            f"ranks issued different numbers of collectives ({counts}): the lockstep contract "
            "(same collectives, same order on every rank) was broken",
            rank=counts.index(min(counts)),
        )
    return [results[r] for r in range(n)]
