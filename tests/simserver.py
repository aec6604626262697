"""Shared by the simulated-forward server tests: the smoke spec, run options, and how to find
(and prove gone) the processes a server started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from dpbench.server.run import RunOptions

SPEC = str(Path(__file__).parent / "data" / "sim-smoke.yaml")
DPBENCH = str(Path(sys.executable).parent / "dpbench")


def sim_options(release: str, tmp: Path, **kw) -> RunOptions:
    return RunOptions(
        spec=SPEC,
        dp_size=2,
        simulate_forward=True,
        sglang=release,
        log_dir=str(tmp),
        # delays time out after one pass: a rank then prefills beside a decoding one, so the
        # trace shows all three step kinds with the delayer's counters moving
        delayer_max_delay_passes=1,
        chunked_prefill_size=4096,  # SGLang's CPU default, given so a replay can use it
        **kw,
    )


def proc_stat(pid: str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def server_sessions(marker: str) -> set[int]:
    """Sessions of the servers whose environment names ``marker`` (the guard's is never retitled)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        stat = proc_stat(entry)
        if stat and marker.encode() in env and stat[0] != "Z":
            found.add(int(stat[3]))  # session id
    return found


def in_sessions(sessions: set[int]) -> list[int]:
    """Live processes of those sessions: SGLang retitles its processes (setproctitle overwrites
    /proc/PID/environ), but they stay in the session the launcher's guard leads."""
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and (st := proc_stat(e)) and st[0] != "Z" and int(st[3]) in sessions
    ]


def server_processes(marker: str, sessions: set[int] | None = None) -> list[int]:
    return in_sessions((sessions or set()) | server_sessions(marker))


def cli_args(tmp: Path, *extra: str) -> list[str]:
    """``dpbench server run`` of the smoke spec on 0.5.23, simulated forward, logs in ``tmp``."""
    return [DPBENCH, "server", "run", SPEC, "--dp", "2", "--simulate-forward",
            "--sglang", "0.5.23", "--log-dir", str(tmp), *extra]  # fmt: skip


def cli_run(tmp: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        cli_args(tmp, "--port", str(port), "-o", str(tmp / "run.json")),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
