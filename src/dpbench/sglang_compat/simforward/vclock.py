"""Virtual time for the simulated-forward server: one shared clock that jumps only when nothing can happen.

In ``clock: virtual`` runs no process waits on wall time for the simulated device. Every
time the stand-in records and the load client measures is read from one shared float,
``now``, in a small file every process of the run maps (:class:`VirtualClock`). ``now``
never moves on its own. It jumps, and only when every party that could make something
happen before the jump's target is blocked:

- each DP rank's scheduler is blocked on its device (``WAIT`` with a target: a forward's
  results, or the charge for its own work; while it waits it reads its socket, and every
  request dispatched to it must have been read) or has nothing at all to do (``IDLE``: no
  request waiting, running or chunked, no result pending, nothing dispatched to it that it
  has not taken in);
- the load client, when attached, has nothing in flight: every request it sent has reached
  a scheduler's socket (the DP controller's dispatch count), and it has read every output
  token the schedulers sent towards it;
- the target is the earliest of the ranks' device targets and the client's next send.

Runs repeat exactly: the client sends only when the clock is quiescent (every rank
blocked, nothing on its way), all requests due at one time together, and a scheduler's
receive first waits until every request sent has been dispatched, then takes in all of
its own. So a request reaches its scheduler at the same point of its loop in every run.

So a scheduler never sees a request before its virtual arrival (the client sends only at
``now`` ≥ its arrival), the clock never passes a request still on its way to a scheduler,
and never passes an output token still on its way to the client. CPU work (SGLang's
scheduler, tokenizer, HTTP, the client) takes no virtual time unless a charge is set.

Ranks that wait on their device wait for the step's *group* end (the latest rank's end),
as a DP-attention forward's per-layer collectives make every rank finish together. This
is what keeps the clock deadlock-free: a rank blocked inside one of SGLang's collectives is
never waiting on a rank whose device target lies further ahead.

Writes are single-writer per slot (8-byte aligned doubles, atomic on the platforms SGLang
supports); jumps are serialised by ``flock`` on the file. Nothing here imports SGLang.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ACTIVE, WAIT, IDLE = 0.0, 1.0, 2.0
_STATE_NAMES = {ACTIVE: "active", WAIT: "wait", IDLE: "idle"}

# header: now, attached, next send, sent, consumed, jumps
_NOW, _ATTACHED, _NEXT, _SENT, _CONSUMED, _JUMPS = range(6)
_HEADER = 8
# per rank: state, target, dispatched (controller), arrived (read off the scheduler's socket),
# received (taken in by the scheduler's loop), emitted tokens, measured charges published and
# the last one's cost (pass_charge "measured")
_STATE, _TARGET, _DISPATCHED, _ARRIVED, _RECEIVED, _EMITTED, _CHARGES, _COST = range(8)
_PER_RANK = 8

# How long a waiter polls between looks at the clock (wall seconds), and how long the clock
# may stand still for a waiter before it reports a stall (a bug: something holds it).
# 2 ms, not 0.3: the waiters' looks take CPU from the ranks still working. The full
# long-prompt-burst at DP 8 (0.5.17, 2,246 steps, the same numbers) replayed in 160 s and
# 295 busy core-seconds at 0.3 ms, 139 s and 243 at 2 ms, 135 s and 231 at 5 ms; DP 4 in
# 96 s and 158, then 92 s and 141 at 2 ms (2026-12-07, 2-core VM, nothing beside).
POLL_S = 0.002
STALL_S = 300.0


class ClockStalled(RuntimeError):
    """Virtual time could not advance for :data:`STALL_S` wall seconds while a party waited."""


class VirtualClock:
    """The shared clock of one simulated-forward server (``dp_size`` ranks, one client)."""

    def __init__(self, path: str | Path, dp_size: int, *, create: bool = False) -> None:
        if dp_size < 1:
            raise ValueError(f"dp_size must be ≥ 1, got {dp_size}")
        self.path, self.n = Path(path), dp_size
        size = (_HEADER + _PER_RANK * dp_size) * 8
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self._fd = os.open(self.path, flags, 0o644)
        if create:
            os.ftruncate(self._fd, size)
        elif os.fstat(self._fd).st_size != size:
            raise ValueError(
                f"{self.path} is not a virtual clock of {dp_size} ranks "
                f"({os.fstat(self._fd).st_size} bytes, expected {size})"
            )
        self._map = mmap.mmap(self._fd, size)
        self._d = memoryview(self._map).cast("d")
        if create:
            self._d[_NOW] = time.monotonic()  # an origin like the real runs' (monotonic seconds)
            self._d[_NEXT] = math.inf

    # -- reading ------------------------------------------------------------------------
    def now(self) -> float:
        return self._d[_NOW]

    def _slot(self, rank: int, field: int) -> int:
        if not 0 <= rank < self.n:
            raise ValueError(f"rank {rank} is outside this clock's {self.n} ranks")
        return _HEADER + rank * _PER_RANK + field

    def snapshot(self) -> dict[str, Any]:
        """Everything the clock knows, for diagnostics and tests."""
        d = self._d
        ranks = []
        for r in range(self.n):
            base = _HEADER + r * _PER_RANK
            ranks.append(
                {
                    "state": _STATE_NAMES.get(d[base + _STATE], str(d[base + _STATE])),
                    "target": d[base + _TARGET],
                    "dispatched": int(d[base + _DISPATCHED]),
                    "arrived": int(d[base + _ARRIVED]),
                    "received": int(d[base + _RECEIVED]),
                    "emitted": int(d[base + _EMITTED]),
                    "charges": int(d[base + _CHARGES]),
                    "cost": d[base + _COST],
                }
            )
        return {
            "now": d[_NOW],
            "attached": bool(d[_ATTACHED]),
            "next_send": d[_NEXT],
            "sent": int(d[_SENT]),
            "consumed": int(d[_CONSUMED]),
            "jumps": int(d[_JUMPS]),
            "ranks": ranks,
        }

    # -- a scheduler's side -------------------------------------------------------------
    def set_state(self, rank: int, state: float, target: float = 0.0) -> None:
        self._d[self._slot(rank, _TARGET)] = target
        self._d[self._slot(rank, _STATE)] = state

    def add(self, rank: int, what: str, n: int) -> None:
        """Count ``n`` more ``dispatched`` (the DP controller), ``arrived``, ``received`` or
        ``emitted`` (the rank's scheduler) for ``rank``: each slot has one writer."""
        field = {
            "dispatched": _DISPATCHED,
            "arrived": _ARRIVED,
            "received": _RECEIVED,
            "emitted": _EMITTED,
        }[what]
        self._d[self._slot(rank, field)] += n

    def not_arrived(self, rank: int) -> int:
        """Requests dispatched to ``rank`` not yet read off its scheduler's socket."""
        return int(self._d[self._slot(rank, _DISPATCHED)] - self._d[self._slot(rank, _ARRIVED)])

    def wait_until(self, rank: int, target: float, on_poll: Any = None) -> None:
        """Block ``rank`` until virtual time reaches ``target``, jumping it there when nothing
        else can happen first; ``on_poll()`` runs at every look (the rank reads its socket).
        Raises :class:`ClockStalled` when the clock stands still too long."""
        if self.now() >= target:
            return
        self.set_state(rank, WAIT, target)
        try:
            self._wait(
                lambda: self.now() >= target, f"rank {rank} waiting for {target:.6f}", on_poll
            )
        finally:
            self.set_state(rank, ACTIVE)

    def charge_all(
        self, rank: int, cost_s: float, on_poll: Any = None, timeout_s: float = 60.0
    ) -> float:
        """A measured charge, rank-identical: publish what ``rank``'s own work cost since it
        last waited, wait (wall clock) until every rank has published this same charge, and
        return the largest cost. Every rank charges on the same passes (after SGLang's MLP-sync
        all-gather), and none can publish its next one before all have read this one: each
        stays ACTIVE until it reads, and the clock cannot pass a charge while a rank is ACTIVE.
        Raises :class:`ClockStalled` when a rank does not charge within ``timeout_s``."""
        if not (cost_s >= 0 and math.isfinite(cost_s)):
            raise ValueError(f"a charge's cost must be a finite number ≥ 0, got {cost_s}")
        d, mine = self._d, self._slot(rank, _CHARGES)
        n = d[mine] + 1
        d[self._slot(rank, _COST)] = cost_s
        d[mine] = n  # the cost first: a rank that sees the count reads this cost
        counts = range(_HEADER + _CHARGES, _HEADER + self.n * _PER_RANK, _PER_RANK)
        deadline = time.monotonic() + timeout_s
        while min(d[i] for i in counts) < n:
            if time.monotonic() > deadline:
                raise ClockStalled(
                    f"rank {rank}'s charge {int(n)}: not every rank charged within "
                    f"{timeout_s:.0f} s (the ranks' charges are not in lockstep): {self.snapshot()}"
                )
            if on_poll is not None:
                on_poll()
            time.sleep(POLL_S)
        return max(d[_HEADER + r * _PER_RANK + _COST] for r in range(self.n))

    def _wait(self, done: Any, who: str, on_poll: Any = None) -> None:
        last, stalled_since = self.now(), time.monotonic()
        while not done():
            if on_poll is not None:
                on_poll()
            if not self.try_advance():
                time.sleep(POLL_S)
            now = self.now()
            if now != last:
                last, stalled_since = now, time.monotonic()
            elif time.monotonic() - stalled_since > STALL_S:
                raise ClockStalled(
                    f"virtual time stood still for {STALL_S:.0f} s while {who}: {self.snapshot()}"
                )

    # -- the load client's side ---------------------------------------------------------
    def attach(self, gap_s: float = 1e-3) -> float:
        """Start counting the client's requests and tokens from the server's totals (what came
        before, such as SGLang's warm-up, is not the client's). Moves the clock ``gap_s`` on,
        so two replays' windows never touch. Returns the virtual time of the attach."""
        with self._locked():
            d = self._d
            d[_SENT] = sum(d[_HEADER + r * _PER_RANK + _DISPATCHED] for r in range(self.n))
            d[_CONSUMED] = sum(d[_HEADER + r * _PER_RANK + _EMITTED] for r in range(self.n))
            d[_NEXT] = math.inf
            d[_NOW] = d[_NOW] + gap_s
            d[_ATTACHED] = 1.0
            return d[_NOW]

    def detach(self) -> None:
        self._d[_ATTACHED] = 0.0
        self._d[_NEXT] = math.inf

    def set_next_send(self, t: float) -> None:
        self._d[_NEXT] = t

    def add_sent(self, n: int = 1) -> None:
        self._d[_SENT] += n

    def add_consumed(self, n: int) -> None:
        self._d[_CONSUMED] += n

    # -- the jump -----------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Any:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def jump_target(self) -> float | None:
        """Where the clock may jump now, or None when some party could still act before any
        target (see the module's rules)."""
        d, now = self._d, self._d[_NOW]
        dispatched = emitted = 0.0
        targets, idle = [], 0
        for r in range(self.n):
            base = _HEADER + r * _PER_RANK
            state, target = d[base + _STATE], d[base + _TARGET]
            dispatched += d[base + _DISPATCHED]
            emitted += d[base + _EMITTED]
            if state == WAIT:
                if target <= now or d[base + _DISPATCHED] > d[base + _ARRIVED]:
                    return None  # about to wake, or a request not yet in its socket's hands
                targets.append(target)
            elif state == IDLE:
                if d[base + _DISPATCHED] > d[base + _RECEIVED]:
                    return None  # an idle rank with a request to take in
                idle += 1
            else:
                return None
        if targets and idle:
            return None  # an idle rank is about to join the waiting ranks' next step
        if d[_ATTACHED]:
            if d[_SENT] != dispatched or d[_CONSUMED] != emitted:
                return None  # a request or an output token is on its way
            targets.append(d[_NEXT])
        target = min(targets, default=math.inf)
        return target if math.isfinite(target) and target > now else None

    def quiescent(self) -> bool:
        """Every rank blocked (waiting ahead of now, or idle with nothing to take in) and no
        request on its way: the client sends only then, so each request reaches a scheduler
        at the same point of its loop in every run (virtual runs repeat exactly)."""
        d, now = self._d, self._d[_NOW]
        dispatched = 0.0
        for r in range(self.n):
            base = _HEADER + r * _PER_RANK
            state = d[base + _STATE]
            dispatched += d[base + _DISPATCHED]
            if state == WAIT:
                if d[base + _TARGET] <= now or d[base + _DISPATCHED] > d[base + _ARRIVED]:
                    return False
            elif state != IDLE or d[base + _DISPATCHED] > d[base + _RECEIVED]:
                return False
        return not d[_ATTACHED] or d[_SENT] == dispatched

    def all_dispatched(self) -> bool:
        """Every request the attached client sent has reached a rank's socket."""
        d = self._d
        if not d[_ATTACHED]:
            return True
        return d[_SENT] == sum(d[_HEADER + r * _PER_RANK + _DISPATCHED] for r in range(self.n))

    def try_advance(self) -> bool:
        """Jump to :meth:`jump_target` if there is one; True when the clock moved."""
        if self.jump_target() is None:  # cheap look without the lock first
            return False
        with self._locked():
            target = self.jump_target()
            if target is None:
                return False
            self._d[_NOW] = target
            self._d[_JUMPS] += 1
            return True

    def close(self) -> None:
        self._d.release()
        self._map.close()
        os.close(self._fd)
