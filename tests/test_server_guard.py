"""The server guard (dpbench.server.guard) on plain commands: no SGLang needed.

It hands its command a Prometheus folder of its own and removes it however the command ends.
SGLang, left to itself, makes a /tmp/tmpXXXXXXXX folder that a killed server never removes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpbench.core.procs import group_members

# the command writes one counter file into the folder it was given and names the folder
WRITE = 'd="$PROMETHEUS_MULTIPROC_DIR"; touch "$d/counter_1.db" && echo "$d"'


def _guard(cmd: str, tmp: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dpbench.server.guard", "--", "sh", "-c", cmd],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp,
        env={**os.environ, **env},
        start_new_session=True,  # the guard takes its whole group down, never the test's
    )


def _named_folder(proc: subprocess.Popen[str]) -> Path:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the command printed no folder"
    return Path(line)


def test_the_commands_counters_folder_is_its_own_and_gone_after_it_exits(tmp_path):
    proc = _guard(f"{WRITE}; exit 3", tmp_path)
    folder = _named_folder(proc)
    assert proc.wait(timeout=60) == 3  # the command's status
    assert folder.name.startswith("dpbench-prometheus-")
    assert not folder.exists()


def test_a_callers_prometheus_folder_holds_the_commands_and_is_kept(tmp_path):
    mine = tmp_path / "metrics"
    mine.mkdir()
    proc = _guard(WRITE, tmp_path, PROMETHEUS_MULTIPROC_DIR=str(mine))
    folder = _named_folder(proc)
    assert proc.wait(timeout=60) == 0
    assert folder.parent == mine and not folder.exists()
    assert mine.is_dir() and not any(mine.iterdir())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_guard_removes_the_folder_and_leaves_no_process(tmp_path, sig):
    proc = _guard(f"{WRITE}; exec sleep 600", tmp_path)
    folder = _named_folder(proc)
    assert (folder / "counter_1.db").is_file()  # in use while the command runs
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert not folder.exists()
    deadline = time.monotonic() + 10
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_members(proc.pid)


def test_a_server_sigkilled_by_its_launcher_leaves_no_folder(tmp_path):
    """The launcher SIGKILLs the whole group, guard included, when a server outlasts its grace."""
    from dpbench.server.launcher import ServerProcess

    log = tmp_path / "server.log"
    cmd = ["sh", "-c", f"trap '' TERM; {WRITE}; sleep 600"]
    server = ServerProcess(cmd, base_url="http://127.0.0.1:9", log_path=log, grace_s=1.0)
    server.start()
    deadline = time.monotonic() + 30
    while "dpbench-prometheus-" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    folder = Path(log.read_text().splitlines()[-1].strip())
    assert (folder / "counter_1.db").is_file()
    server.stop()
    assert server.stopped_with == "SIGKILL"  # the command ignored SIGTERM
    assert not folder.exists()


def test_the_guard_refuses_an_option_it_does_not_know(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dpbench.server.guard", "--grace", "3", "--", "true"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "usage" in done.stderr
