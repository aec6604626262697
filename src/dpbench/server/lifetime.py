"""A running server's lifetime: start, readiness, measured loads, and its processes always reaped.

:func:`running_server` is the context manager every server run goes through: it starts
SGLang in a process group of its own (:class:`~dpbench.server.launcher.ServerProcess`),
waits for ``/health`` and a warm-up ``/generate``, and on leaving, whether the run ended,
failed, timed out or was interrupted (Ctrl-C, SIGTERM), stops the whole group.

:meth:`LiveServer.measure` runs one load against it: the server's counters scraped before
and after, ``/proc`` read around the load (this machine's CPU pressure, the server's
run-queue waits), and a watch that stops the server when one of its processes dies, so the
load ends instead of hanging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.core.procs import group_members
from dpbench.core.results import Metric
from dpbench.server.health import (
    cpu_pressure_fraction,
    cpu_pressure_total_us,
    process_title,
    run_delay_ns,
    run_queue_wait_fraction,
    waits_by_process,
)
from dpbench.server.launcher import ServerProcess
from dpbench.server.loadclock import WallClock
from dpbench.server.loadgen import LoadResult
from dpbench.server.metrics import Snapshot, scrape
from dpbench.sglang_compat.server import flush_cache


@dataclass(frozen=True)
class ProcReadings:
    """What ``/proc`` said about one load: this machine's contention and the server's waits."""

    pressure: float | None  # share of the load's wall time some task waited for a CPU (PSI)
    waited: float | None  # all threads summed, the most-waiting process
    waited_main: float | None  # main threads, the most-waiting process
    waits: list[dict[str, Any]]  # per process (health.waits_by_process)

    def as_metrics(self) -> dict[str, Metric]:
        """The instrument's readings as metrics (absent where ``/proc`` had none)."""
        metrics: dict[str, Metric] = {}
        if self.pressure is not None:  # this machine's contention during the load
            metrics["cpu_pressure_fraction"] = Metric(
                self.pressure, "fraction of wall time", "lower"
            )
        if self.waited is not None:  # all threads summed (gloo's many loop threads inflate it)
            metrics["server_run_queue_wait_fraction"] = Metric(
                self.waited, "fraction of wall time", "lower"
            )
        if self.waited_main is not None:  # how much the machine delayed the server's own loops
            metrics["server_main_thread_wait_fraction"] = Metric(
                self.waited_main, "fraction of wall time", "lower"
            )
        return metrics


class ProcProbe:
    """``/proc`` read at a load's start, at its end (:meth:`stop`), and turned into readings."""

    def __init__(self, pgid: int) -> None:
        self._psi_before = cpu_pressure_total_us()
        self._pids = group_members(pgid)
        self._titles = {pid: process_title(pid) for pid in self._pids}
        self._before = run_delay_ns(self._pids)
        self._main_before = run_delay_ns(self._pids, main_thread=True)
        self._after: dict[int, int] = {}
        self._main_after: dict[int, int] = {}

    def stop(self) -> None:
        """Read the server's run-queue waits at the load's end."""
        self._after = run_delay_ns(self._pids)
        self._main_after = run_delay_ns(self._pids, main_thread=True)

    def readings(self, wall_s: float) -> ProcReadings:
        """The waits since the start, and the CPU pressure read now, over ``wall_s``."""
        return ProcReadings(
            pressure=cpu_pressure_fraction(self._psi_before, cpu_pressure_total_us(), wall_s),
            waited=run_queue_wait_fraction(self._before, self._after, wall_s),
            waited_main=run_queue_wait_fraction(self._main_before, self._main_after, wall_s),
            waits=waits_by_process(
                self._titles, self._before, self._after, self._main_before, self._main_after, wall_s
            ),
        )


class RankWatch:
    """Notices a server process dying while the load runs, and stops the server so the load ends."""

    def __init__(self, server: ServerProcess, poll_s: float = 0.5) -> None:
        self.server = server
        self.poll_s = poll_s
        self.baseline = set(group_members(server.pgid))
        self.died: str | None = None
        self._titles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RankWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        for pid in self.baseline:  # now, while they live: a dead process has no cmdline
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                self._titles[pid] = raw.replace(b"\0", b" ").decode(errors="replace").strip()[:80]
            except OSError:
                self._titles[pid] = str(pid)
        while not self._stop.wait(self.poll_s):
            gone = sorted(self.baseline - set(group_members(self.server.pgid)))
            if gone:
                self.died = ", ".join(f"pid {p} ({self._titles.get(p, str(p))})" for p in gone)
                self.server.stop()  # in-flight requests fail now instead of hanging
                return


@dataclass(frozen=True)
class Measured:
    """One load against the running server, as measured around it."""

    load: LoadResult
    t_load: float  # the load clock's time just before the load started (monotonic or virtual)
    t_end: float  # and when it ended
    before: Snapshot  # the server's counters before the load
    after: Snapshot | None  # and after it (None: a process died, nothing to scrape)
    proc: ProcReadings
    died: str | None  # the server processes that died during the load
    wall_end: float | None = None  # monotonic, when it ended (None: as t_end, a wall clock)


@dataclass
class LiveServer:
    """A server that answered ``/health`` and a warm-up request."""

    process: ServerProcess
    base_url: str
    ready_s: float  # seconds from start to ready

    def flush(self) -> None:
        """Empty SGLang's caches (radix cache, KV pool, request slots); raises RuntimeError."""
        flush_cache(self.base_url)

    def measure(self, load: Callable[[], LoadResult], clock: WallClock | None = None) -> Measured:
        """Run ``load`` with the server's counters scraped and ``/proc`` read around it;
        ``t_load``/``t_end`` on the load's clock (monotonic, or the virtual clock's)."""
        clock = clock or WallClock()
        before = scrape(self.base_url)
        t_load = clock.begin()
        wall0 = time.monotonic()
        probe = ProcProbe(self.process.pgid)
        try:
            with RankWatch(self.process) as watch:
                result = load()
        finally:
            t_end = clock.end()
        probe.stop()
        after = scrape(self.base_url) if watch.died is None else None
        readings = probe.readings(time.monotonic() - wall0)
        return Measured(
            result, t_load, t_end, before, after, readings, watch.died, wall_end=time.monotonic()
        )


@contextmanager
def running_server(
    command: list[str],
    *,
    port: int,
    log: Path,
    env: dict[str, str] | None,
    startup_deadline_s: float,
) -> Iterator[LiveServer]:
    """Start the server, wait until it is ready, yield it; on leaving (also on an error, a
    timeout or Ctrl-C) stop its whole process group. Raises
    :class:`~dpbench.server.launcher.ServerStartError` when it never became ready."""
    base_url = f"http://127.0.0.1:{port}"
    with ServerProcess(command, base_url=base_url, log_path=log, env=env) as process:
        ready_s = process.wait_ready(deadline_s=startup_deadline_s)
        yield LiveServer(process, base_url, ready_s)
