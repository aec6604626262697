"""The load client's clock: the wall clock, or the simulated-forward server's virtual clock.

:func:`~dpbench.server.loadgen.drive` and the request functions read time and pace sends
through a :class:`LoadClock`. :class:`WallClock` is ``time.perf_counter`` and
``asyncio.sleep``. :class:`VirtualLoadClock` is the client's side of a ``--clock virtual``
server (:mod:`dpbench.sglang_compat.simforward.vclock`): every time it gives is virtual, a
send waits until the shared clock reaches its arrival (jumping it there when nothing else
can happen first), and it counts what it sends and the output tokens it reads, so the clock
never passes a request or a token on its way.

The clock a request function uses is :data:`CURRENT` (a context variable ``drive`` sets).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from pathlib import Path

from dpbench.sglang_compat.simforward.vclock import POLL_S, STALL_S, ClockStalled, VirtualClock


class WallClock:
    """Real time: ``perf_counter`` seconds and ``asyncio.sleep``."""

    virtual = False

    def now(self) -> float:
        return time.perf_counter()

    def begin(self) -> float:
        """A load starts: the time it starts at (monotonic, for the step records' windows)."""
        return time.monotonic()

    def end(self) -> float:
        return time.monotonic()

    async def sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            await asyncio.sleep(delay)

    def sending(self, next_send: float | None) -> None:
        """A request is about to be sent; ``next_send``: when the one after it is due."""

    def tokens(self, n: int) -> None:
        """``n`` more output tokens read from the server."""


class VirtualLoadClock(WallClock):
    """The load client's side of a virtual-clock server (see the module's docstring)."""

    virtual = True

    def __init__(self, path: str | Path, dp_size: int) -> None:
        self.clock = VirtualClock(path, dp_size)

    def now(self) -> float:
        return self.clock.now()

    def begin(self) -> float:
        return self.clock.attach()

    def end(self) -> float:
        self.clock.detach()
        return self.clock.now()

    async def sleep_until(self, t: float) -> None:
        """Wait until the clock reaches ``t`` and is quiescent (see ``VirtualClock.quiescent``)."""
        self.clock.set_next_send(t)
        last, since = self.clock.now(), time.monotonic()
        while self.clock.now() < t or not self.clock.quiescent():
            if not self.clock.try_advance():
                await asyncio.sleep(POLL_S)
            now = self.clock.now()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > STALL_S:
                raise ClockStalled(
                    f"virtual time stood still for {STALL_S:.0f} s while the client waited to "
                    f"send at {t:.6f}: {self.clock.snapshot()}"
                )

    def sending(self, next_send: float | None) -> None:
        self.clock.add_sent(1)
        self.clock.set_next_send(math.inf if next_send is None else next_send)

    def tokens(self, n: int) -> None:
        self.clock.add_consumed(n)

    def close(self) -> None:
        self.clock.close()


_WALL = WallClock()
CURRENT: contextvars.ContextVar[WallClock] = contextvars.ContextVar(
    "dpbench_load_clock",
    default=_WALL,
)
