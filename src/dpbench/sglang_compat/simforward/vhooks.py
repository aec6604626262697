"""The virtual clock's side of the hooks: this process's clock, and what it counts.

Every SGLang process of a ``clock: virtual`` server opens the run's clock file
(:mod:`.vclock`) on first use; :func:`now` is the time every record of the stand-in
carries (``time.monotonic`` under the real clock). Three hooks keep the clock's counts:

- the DP controller's dispatch (:func:`count_dispatch`): a request that reached a rank's
  socket;
- a scheduler's socket (:class:`Inbox`, :func:`held_first`): a request that arrived there,
  read while the rank waits on its device;
- a scheduler's receive (:func:`drain_receive`): a request the scheduler took in. Under
  the virtual clock the receive first waits (on the wall clock) for every request already
  dispatched to it, so a request the clock has passed is never left for a later pass;
- a scheduler's output to the detokenizer (:func:`count_emitted`): output tokens on their
  way to the client.

Under the real clock the hooks call SGLang's originals and count nothing.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections import deque
from types import ModuleType
from typing import Any

from dpbench.sglang_compat.simforward.config import SimForwardConfig
from dpbench.sglang_compat.simforward.vclock import ACTIVE, IDLE, VirtualClock

_GENERATE = "TokenizedGenerateReqInput"
_TOKEN_OUTPUT = "BatchTokenIDOutput"
# how long a scheduler's receive waits for a request already dispatched to it (wall seconds)
DRAIN_TIMEOUT_S = 30.0


class _Process:
    """This process's config, clock and DP rank, read once."""

    def __init__(self) -> None:
        self.config = SimForwardConfig.from_env()
        self.clock = (
            VirtualClock(self.config.clock_file, self.config.dp_size)
            if self.config.clock == "virtual"
            else None
        )
        self._rank: int | None = None
        self.last_tokens: dict[str, int] = {}  # rid -> completion tokens already counted
        self.in_flight = 0  # forwards launched whose results SGLang has not processed yet
        self.rank_state: Any = None  # the stand-in's RankState, once the first forward ran

    @property
    def rank(self) -> int:
        if self._rank is None:
            from dpbench.sglang_compat.simforward.dprank import dp_rank_reader

            self._rank = int(dp_rank_reader()())
        return self._rank


_PROC: _Process | None = None


def proc() -> _Process:
    global _PROC
    if _PROC is None:
        _PROC = _Process()
    return _PROC


def virtual() -> VirtualClock | None:
    """This process's virtual clock, or None under the real clock."""
    return proc().clock


def now() -> float:
    """The time every record carries: virtual seconds, or ``time.monotonic()``."""
    clock = proc().clock
    return clock.now() if clock is not None else time.monotonic()


# wall time at which this scheduler last waited on the virtual clock (or ended a pass with
# nothing to do): what it worked since then is a measured charge's cost
_RESTED = [time.perf_counter()]


def _rested() -> None:
    _RESTED[0] = time.perf_counter()


def mark_pass(busy: bool, in_flight: int) -> None:
    """After a scheduler pass: IDLE when it ran no batch, has no work and no result pending."""
    clock = proc().clock
    if clock is not None:
        idle = not (busy or in_flight)
        clock.set_state(proc().rank, IDLE if idle else ACTIVE)
        if idle:
            _rested()


def charge_pass() -> float | None:
    """Where a pass is charged (before a forward's launch, and on a pass the delayer holds):
    wait the charge for the scheduler's own work on the virtual clock. Fixed: the configured
    time. Measured: the wall time this scheduler worked since it last waited, the largest
    over the ranks (:meth:`VirtualClock.charge_all`). Returns the charge (None: real clock)."""
    p = proc()
    if p.clock is None:
        return None
    if p.config.pass_charge == "measured":
        charge = p.clock.charge_all(p.rank, time.perf_counter() - _RESTED[0], INBOX.pull)
    else:
        charge = p.config.pass_charge_s
    if charge > 0:
        p.clock.wait_until(p.rank, p.clock.now() + charge, INBOX.pull)
        _rested()
    return charge


def wait_device(ready: float) -> None:
    """Wait on the virtual clock until a forward's results are ready, reading the socket."""
    p = proc()
    assert p.clock is not None
    p.clock.wait_until(p.rank, ready, INBOX.pull)
    _rested()


# -- the DP controller ---------------------------------------------------------------------
_WORKER_RANK: dict[int, int] = {}  # id(socket) -> DP rank, from the controller's workers


def note_workers(controller: Any) -> None:
    """Remember which socket reaches which DP rank (the controller's ``workers`` list)."""
    for rank, sock in enumerate(getattr(controller, "workers", None) or []):
        if sock is not None:
            _WORKER_RANK[id(sock)] = rank


def count_dispatch(original: Any, module: ModuleType) -> Any:
    """The DP controller's ``sock_send``: count each generate request sent to a rank."""

    @functools.wraps(original)
    def sock_send(socket: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(socket, obj, *args, **kwargs)
        clock = proc().clock
        if clock is not None and type(obj).__name__ == _GENERATE:
            rank = _WORKER_RANK.get(id(socket))
            if rank is None:
                raise RuntimeError(
                    "the DP controller sent a request on a socket that is not one of its "
                    "workers: the virtual clock cannot tell which rank it went to"
                )
            clock.add(rank, "dispatched", 1)
        return out

    return sock_send


# -- a scheduler ---------------------------------------------------------------------------
class Inbox:
    """Requests read off a scheduler's socket ahead of SGLang's own receive.

    While a rank waits on its device it reads what reached its socket (:meth:`pull`), so the
    clock knows each dispatched request is in the scheduler's hands; SGLang's next receive
    then gets them first (the hooked ``sock_recv``), in order, before anything newer."""

    def __init__(self) -> None:
        self.socket: Any = None  # the scheduler's socket from the DP controller
        self.read: Any = None  # SGLang's original sock_recv
        self.held: deque[Any] = deque()

    def pull(self) -> None:
        """Read everything waiting on the socket (never blocks)."""
        if self.socket is None or self.read is None:
            return
        import zmq

        while True:
            try:
                obj = self.read(self.socket, zmq.NOBLOCK)
            except zmq.ZMQError:
                return
            self.held.append(obj)
            _count_arrival(obj)

    def wait_for(self, deadline: float) -> None:
        """Read until every request dispatched to this rank has arrived (wall clock)."""
        p = proc()
        while p.clock is not None and p.clock.not_arrived(p.rank) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"DP rank {p.rank}: {p.clock.not_arrived(p.rank)} request(s) dispatched to "
                    f"it did not arrive within {DRAIN_TIMEOUT_S:.0f} s: {p.clock.snapshot()}"
                )
            self.socket.poll(timeout=10)
            self.pull()


INBOX = Inbox()


def _count_arrival(obj: Any) -> None:
    p = proc()
    if p.clock is not None and type(obj).__name__ == _GENERATE:
        p.clock.add(p.rank, "arrived", 1)


def held_first(original: Any, module: ModuleType) -> Any:
    """The receiver's ``sock_recv``: requests the inbox already read come first."""
    INBOX.read = original

    @functools.wraps(original)
    def sock_recv(socket: Any, *args: Any, **kwargs: Any) -> Any:
        if socket is INBOX.socket and INBOX.held:
            return INBOX.held.popleft()
        obj = original(socket, *args, **kwargs)
        if socket is INBOX.socket:
            _count_arrival(obj)
        return obj

    return sock_recv


def drain_receive(original: Any, module: ModuleType) -> Any:
    """A scheduler's ``recv_requests``: under the virtual clock, first wait until every request
    the client sent has been dispatched and every one dispatched here has arrived, so the
    receive takes them all in; count what it took in. SGLang's receive runs once, as always
    (it holds a collective across the DP ranks)."""

    @functools.wraps(original)
    def recv_requests(self: Any, *args: Any, **kwargs: Any) -> Any:
        p = proc()
        if p.clock is None:
            return original(self, *args, **kwargs)
        if INBOX.socket is None:
            INBOX.socket = getattr(self, "recv_from_tokenizer", None)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not p.clock.all_dispatched():  # a group sent at one time arrives as one
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"DP rank {p.rank}: requests the client sent were not dispatched within "
                    f"{DRAIN_TIMEOUT_S:.0f} s: {p.clock.snapshot()}"
                )
            time.sleep(0.0002)
        if INBOX.socket is not None:
            INBOX.wait_for(deadline)
        reqs = original(self, *args, **kwargs)
        got = sum(type(r).__name__ == _GENERATE for r in reqs or [])
        if got:
            p.clock.set_state(p.rank, ACTIVE)
            p.clock.add(p.rank, "received", got)
        return reqs

    return recv_requests


def count_emitted(original: Any, module: ModuleType) -> Any:
    """A scheduler's ``send_output``: count the output tokens it sends towards the client."""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def send_output(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        p = proc()
        if p.clock is None:
            return out
        output = sig.bind(self, *args, **kwargs).arguments["output"]
        if type(output).__name__ == _TOKEN_OUTPUT and getattr(self, "socket", None) is not None:
            new = 0
            seen = p.last_tokens
            finished = getattr(output, "finished_reasons", None) or []
            for i, (rid, n) in enumerate(zip(output.rids, output.completion_tokens, strict=True)):
                n = int(n)
                new += max(0, n - seen.get(rid, 0))
                if i < len(finished) and finished[i] is not None:
                    seen.pop(rid, None)
                else:
                    seen[rid] = max(n, seen.get(rid, 0))
            if new:
                p.clock.add(p.rank, "emitted", new)
        return out

    return send_output
