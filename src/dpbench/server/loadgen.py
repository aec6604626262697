"""Drive many requests at once: open-loop at precomputed arrival times, or closed-loop at a concurrency.

The arrival schedule is computed up front (from a trace's ``arrival_s``, or Poisson
gaps from an explicit ``numpy.random.Generator``) and the dispatcher sleeps to absolute
deadlines ``start + offset[i]``, so send times cannot drift. How late each send was is
recorded, and a monitor task measures the event loop's own lag (the client's overhead).
Python's cyclic garbage collector is paused during a run (collected before and after).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import numpy as np

from dpbench.server.client import (
    GenerateRequest,
    RequestFunc,
    RequestOutcome,
    make_session,
    sglang_generate,
)
from dpbench.server.loadclock import CURRENT, WallClock

T = TypeVar("T")


class ScheduleError(ValueError):
    pass


@dataclass(frozen=True)
class Schedule:
    """Either ``offsets_s`` (open loop: send request i at start + offsets_s[i]) or ``concurrency`` (closed loop)."""

    offsets_s: np.ndarray | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if (self.offsets_s is None) == (self.concurrency is None):
            raise ScheduleError(
                "a schedule is either arrival offsets (open loop) or a concurrency (closed loop)"
            )
        if self.concurrency is not None and self.concurrency < 1:
            raise ScheduleError(f"concurrency must be ≥ 1, got {self.concurrency}")
        if self.offsets_s is not None:
            if self.offsets_s.ndim != 1 or not np.all(np.isfinite(self.offsets_s)):
                raise ScheduleError("arrival offsets must be a 1-D array of finite seconds")
            if np.any(np.diff(self.offsets_s) < 0) or (
                self.offsets_s.size and self.offsets_s[0] < 0
            ):
                raise ScheduleError("arrival offsets must be non-negative and sorted")

    @classmethod
    def from_arrivals(cls, arrivals_s: Sequence[float]) -> Schedule:
        """Replay arrival times (seconds, any origin): shifted so the first request goes at 0."""
        arr = np.asarray(arrivals_s, dtype=np.float64)
        if arr.size and np.any(np.diff(arr) < 0):
            raise ScheduleError("trace arrival times must be sorted ascending")
        return cls(offsets_s=arr - (arr[0] if arr.size else 0.0))

    @classmethod
    def poisson(cls, n: int, rate_per_s: float, rng: np.random.Generator) -> Schedule:
        if rate_per_s <= 0:
            raise ScheduleError(f"rate must be > 0 requests/s, got {rate_per_s}")
        gaps = rng.exponential(1.0 / rate_per_s, size=n)
        gaps[0] = 0.0
        return cls(offsets_s=np.cumsum(gaps))

    @classmethod
    def closed_loop(cls, concurrency: int) -> Schedule:
        return cls(concurrency=concurrency)

    @property
    def kind(self) -> str:
        return "open-loop" if self.offsets_s is not None else "closed-loop"


@dataclass
class LoopLag:
    """How late the event loop woke a 10 ms ticker: the client's own scheduling overhead."""

    samples_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        if not self.samples_ms:
            return {"p50": 0.0, "p99": 0.0, "max": 0.0}
        a = np.asarray(self.samples_ms)
        return {
            "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99)),
            "max": float(a.max()),
        }


async def _monitor_lag(lag: LoopLag, stop: asyncio.Event, interval_s: float = 0.01) -> None:
    loop = asyncio.get_running_loop()
    expected = loop.time() + interval_s
    while not stop.is_set():
        await asyncio.sleep(max(0.0, expected - loop.time()))
        now = loop.time()
        lag.samples_ms.append(max(0.0, (now - expected) * 1e3))
        expected = now + interval_s


@dataclass
class LoadResult:
    outcomes: list[RequestOutcome]
    duration_s: float  # first send to last completion
    schedule_kind: str
    send_lateness_s: list[float]  # open loop: actual send minus planned send
    loop_lag: LoopLag
    t0: float  # the load clock's time at the start of the run (perf_counter, or virtual)


def run_load(coro: Coroutine[Any, Any, T]) -> T:
    """Run a load coroutine to completion on uvloop when installed (a faster loop: less client overhead)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


async def drive(
    requests: Sequence[GenerateRequest],
    schedule: Schedule,
    *,
    base_url: str,
    session: aiohttp.ClientSession | None = None,
    request_func: RequestFunc = sglang_generate,
    on_done: Callable[[RequestOutcome], None] | None = None,
    read_timeout_s: float | None = None,
    clock: WallClock | None = None,
) -> LoadResult:
    """Send ``requests`` per ``schedule`` over one shared session; return every outcome in request order.

    ``read_timeout_s``: how long a request may go without a byte (default: bench_serving's 6 h).
    ``clock``: the load's clock (:mod:`dpbench.server.loadclock`; default the wall clock)."""
    if schedule.offsets_s is not None and len(schedule.offsets_s) != len(requests):
        raise ScheduleError(f"{len(requests)} requests but {len(schedule.offsets_s)} arrival times")
    clock = clock or WallClock()
    if clock.virtual and schedule.offsets_s is None:
        raise ScheduleError(
            "the virtual clock replays arrival times (open loop); a closed-loop schedule runs "
            "on the wall clock"
        )
    CURRENT.set(clock)
    own_session = session is None
    session = session or make_session(
        **({} if read_timeout_s is None else {"read_timeout_s": read_timeout_s})
    )
    base_url = base_url.rstrip("/")
    outcomes: list[RequestOutcome | None] = [None] * len(requests)
    lateness: list[float] = []
    lag = LoopLag()
    stop = asyncio.Event()
    monitor = asyncio.create_task(_monitor_lag(lag, stop))

    async def one(i: int) -> None:
        out = await request_func(session, base_url, requests[i])
        outcomes[i] = out
        if on_done is not None:
            on_done(out)

    # Collection pauses would land in the measured latencies (100+ ms loop stalls at 1,000
    # streams): collect now, freeze what exists (as vLLM's benchmark does), pause the
    # collector for the run and restore it afterwards.
    gc.collect()
    gc.freeze()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    t0 = clock.now()
    try:
        if schedule.offsets_s is not None:
            due = [t0 + float(off) for off in schedule.offsets_s]
            tasks = []
            for i, t in enumerate(due):
                await clock.sleep_until(t)
                lateness.append(max(0.0, clock.now() - t))
                clock.sending(due[i + 1] if i + 1 < len(due) else None)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        else:
            assert schedule.concurrency is not None
            next_index = 0

            async def worker() -> None:
                nonlocal next_index
                while next_index < len(requests):
                    i = next_index
                    next_index += 1
                    await one(i)

            await asyncio.gather(
                *(worker() for _ in range(min(schedule.concurrency, len(requests))))
            )
    finally:
        if gc_was_enabled:
            gc.enable()
        gc.unfreeze()
        stop.set()
        await monitor
        if own_session:
            await session.close()
    duration = clock.now() - t0
    return LoadResult(
        outcomes=[o for o in outcomes if o is not None],
        duration_s=duration,
        schedule_kind=schedule.kind,
        send_lateness_s=lateness,
        loop_lag=lag,
        t0=t0,
    )
