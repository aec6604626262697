"""Start an SGLang server as its own process group, wait until it serves, and always stop all of it.

:class:`ServerProcess` is a context manager::

    with ServerProcess(cmd, base_url=..., log_path=...) as server:
        server.wait_ready(deadline_s=900)     # /health, then one warm-up /generate
        ...                                   # drive load at server.base_url
    # here every process of the server's group is gone

Stopping sends SIGTERM to the whole process group, waits ``grace_s``, then SIGKILLs
the group, and waits until no member is left. It runs on normal exit, on exceptions,
on Ctrl-C (KeyboardInterrupt) and on SIGTERM to this process (converted to an
exception while a server is up). The server runs under :mod:`dpbench.server.guard`,
the group's leader: if this process is SIGKILLed (asv's second timeout signal), the
guard gets SIGTERM through ``PR_SET_PDEATHSIG`` and takes the whole group down, also
SGLang processes still importing (they set their own parent-death signal only later).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO

from dpbench.core.procs import die_with_parent, group_members
from dpbench.server.guard import new_metrics_dir


class ServerStartError(RuntimeError):
    """The server exited or did not become ready before its deadline."""


class GpuRequirementError(RuntimeError):
    """Fewer (or smaller) CUDA GPUs than the run config needs."""


class TerminatedBySignal(SystemExit):
    """SIGTERM arrived while a server was running (asv timeout, `kill`): unwind and stop it.

    A SystemExit, because asyncio re-raises only SystemExit and KeyboardInterrupt out of
    its callbacks; any other BaseException raised by the signal handler while the event
    loop runs a callback would be logged and swallowed, and the run would go on.
    """


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int


def visible_gpus() -> list[GpuInfo]:
    """CUDA GPUs this process may use: nvidia-smi's list filtered by CUDA_VISIBLE_DEVICES."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    proc = subprocess.run(
        [smi, "--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return []
    gpus = []
    for line in proc.stdout.strip().splitlines():
        idx, name, total, used = (p.strip() for p in line.split(","))
        gpus.append(GpuInfo(int(idx), name, int(float(total)), int(float(used))))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if all(w.isdigit() for w in wanted):
            by_index = {g.index: g for g in gpus}
            gpus = [by_index[int(w)] for w in wanted if int(w) in by_index]
    return gpus


def check_gpus(required: int, *, min_free_gib: float = 0.0) -> list[GpuInfo]:
    """Raise GpuRequirementError unless ``required`` GPUs with ``min_free_gib`` free each are visible."""
    gpus = visible_gpus()
    if len(gpus) < required:
        raise GpuRequirementError(
            f"needs {required} CUDA GPUs on this node; found {len(gpus)}"
            + (
                f" ({', '.join(g.name for g in gpus)})"
                if gpus
                else " (nvidia-smi missing or lists none)"
            )
            + ". Lower --tp, or run where more GPUs are visible (check CUDA_VISIBLE_DEVICES)."
        )
    short = [
        g for g in gpus[:required] if (g.memory_total_mib - g.memory_used_mib) / 1024 < min_free_gib
    ]
    if short:
        detail = ", ".join(
            f"GPU {g.index} {(g.memory_total_mib - g.memory_used_mib) / 1024:.1f} GiB free"
            for g in short
        )
        raise GpuRequirementError(
            f"needs {min_free_gib:.1f} GiB free on each of {required} GPUs; {detail}. "
            f"Another process holds GPU memory (see nvidia-smi)."
        )
    return gpus[:required]


def _http_status(url: str, *, data: bytes | None = None, timeout: float = 5.0) -> int | None:
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


class ServerProcess:
    """One launched server: its process group, log file and base URL (a context manager)."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        base_url: str,
        log_path: str | os.PathLike[str],
        env: dict[str, str] | None = None,
        grace_s: float = 15.0,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.cmd = list(cmd)
        self.base_url = base_url.rstrip("/")
        self.log_path = Path(log_path)
        self.env = env
        self.grace_s = grace_s
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._old_sigterm: object = None
        self._metrics_dir: str | None = None
        self.stopped_with: str | None = None  # "exited", "SIGTERM" or "SIGKILL"

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> ServerProcess:
        if self.proc is not None:
            raise RuntimeError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        self._log.write(f"# dpbench: {' '.join(self.cmd)}\n".encode())
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        # SGLang's Prometheus counters: a folder the guard and stop() remove (dpbench.server.guard)
        self._metrics_dir = new_metrics_dir(env)
        # through the guard: it takes the whole group down if this process dies
        guarded = [sys.executable, "-m", "dpbench.server.guard",
                   "--metrics-dir", self._metrics_dir, "--", *self.cmd]  # fmt: skip
        try:
            self.proc = subprocess.Popen(
                guarded,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,  # own process group: one killpg reaches every child
                preexec_fn=die_with_parent,
            )
        except BaseException:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
            self._metrics_dir = None
            raise
        self._install_sigterm()
        return self

    @property
    def pgid(self) -> int:
        if self.proc is None:
            raise RuntimeError("server not started")
        return self.proc.pid  # session leader: pgid == pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the group, wait ``grace_s``, SIGKILL the group, wait until it is empty. Idempotent."""
        if self.proc is None or self.stopped_with is not None:
            return
        try:
            pgid = self.pgid
            if not group_members(pgid) and self.proc.poll() is not None:
                self.stopped_with = "exited"
            else:
                self._signal_group(signal.SIGTERM)
                self.stopped_with = "SIGTERM"
                if not self._wait_group_empty(self.grace_s):
                    self._signal_group(signal.SIGKILL)
                    self.stopped_with = "SIGKILL"
                    if not self._wait_group_empty(30.0):
                        raise RuntimeError(
                            f"processes {group_members(pgid)} of group {pgid} survived SIGKILL"
                        )
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5.0)
        finally:
            self._restore_sigterm()
            if self._metrics_dir is not None:
                shutil.rmtree(self._metrics_dir, ignore_errors=True)
                self._metrics_dir = None
            if self._log is not None:
                self._log.close()
                self._log = None

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _wait_group_empty(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            self.proc.poll()  # reap the leader so it does not linger as a zombie
            if not group_members(self.pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    # -- SIGTERM while a server is up: unwind through stop() -----------------------------
    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            raise TerminatedBySignal(
                f"signal {signum} while the server at {self.base_url} was running"
            )

        signal.signal(signal.SIGTERM, on_sigterm)
        self._old_sigterm = previous

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)  # type: ignore[arg-type]
            self._old_sigterm = None

    # -- readiness -----------------------------------------------------------------------
    def log_tail(self, n_lines: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n_lines:])

    def _check_alive(self, what: str) -> None:
        if not self.alive():
            code = None if self.proc is None else self.proc.returncode
            raise ServerStartError(
                f"the server exited (status {code}) while {what}. Last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def wait_ready(
        self, *, deadline_s: float = 900.0, warmup: bool = True, poll_s: float = 1.0
    ) -> float:
        """Wait for ``/health`` = 200, then (``warmup``) one short ``/generate``; return seconds taken."""
        t0 = time.monotonic()
        deadline = t0 + deadline_s
        while True:
            self._check_alive("waiting for /health")
            if _http_status(f"{self.base_url}/health", timeout=5.0) == 200:
                break
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"{self.base_url}/health did not answer 200 within {deadline_s:.0f} s. Is the server still "
                    f"loading (raise the deadline)? Is the port right? See the log at {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(poll_s)
        if warmup:
            body = json.dumps(
                {
                    "input_ids": list(range(1, 17)),
                    "sampling_params": {"max_new_tokens": 4, "temperature": 0},
                }
            ).encode()
            while True:
                self._check_alive("warming up")
                left = deadline - time.monotonic()
                status = _http_status(
                    f"{self.base_url}/generate", data=body, timeout=max(5.0, left)
                )
                if status == 200:
                    break
                if time.monotonic() >= deadline:
                    raise ServerStartError(
                        f"the warm-up /generate at {self.base_url} answered {status} before the "
                        f"{deadline_s:.0f} s deadline; see the log at {self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(poll_s)
        return time.monotonic() - t0

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> ServerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
