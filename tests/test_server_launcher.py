"""The launcher's process lifecycle: readiness, SIGTERM-ignoring children, Ctrl-C, parent death."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dpbench.core.procs import alive, free_port, group_members
from dpbench.server.launcher import (
    GpuRequirementError,
    ServerProcess,
    ServerStartError,
    check_gpus,
)

# A "server" that ignores SIGTERM and has a child (also ignoring SIGTERM) in its group.
STUBBORN = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    print("PIDS", os.getpid(), child.pid, flush=True)
    time.sleep(600)
    """
)


def _wait_for_line(path: Path, prefix: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith(prefix):
                    return line
        time.sleep(0.05)
    raise AssertionError(
        f"no {prefix!r} line in {path}: {path.read_text() if path.exists() else '(missing)'}"
    )


def test_a_child_that_ignores_sigterm_is_gone_after_stop(tmp_path):
    log = tmp_path / "server.log"
    with ServerProcess(
        [sys.executable, "-c", STUBBORN], base_url="http://127.0.0.1:1", log_path=log, grace_s=1.0
    ) as server:
        _, leader, child = _wait_for_line(log, "PIDS").split()
        pids = [int(leader), int(child)]
        assert all(alive(p) for p in pids)
        pgid = server.pgid
    assert server.stopped_with == "SIGKILL"
    assert not any(alive(p) for p in pids)
    assert group_members(pgid) == []


def test_protocol_double_as_server_becomes_ready_and_stops(tmp_path):
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "dpbench.server.protocol_double",
        "--port",
        str(port),
        "--first-token-delay-s",
        "0.01",
        "--itl-s",
        "0.001",
    ]
    with ServerProcess(
        cmd, base_url=f"http://127.0.0.1:{port}", log_path=tmp_path / "d.log"
    ) as server:
        took = server.wait_ready(deadline_s=60, poll_s=0.1)  # /health, then a warm-up /generate
        assert took < 60 and server.alive()
        pgid = server.pgid
    assert server.stopped_with == "SIGTERM"  # it exits on SIGTERM, no SIGKILL needed
    assert group_members(pgid) == []
    assert "dpbench: " in (tmp_path / "d.log").read_text()  # the command heads the streamed log


def test_a_server_that_exits_early_is_reported_with_its_log(tmp_path):
    cmd = [sys.executable, "-c", "print('CUDA error: no device'); raise SystemExit(3)"]
    with (
        ServerProcess(
            cmd, base_url=f"http://127.0.0.1:{free_port()}", log_path=tmp_path / "x.log"
        ) as server,
        pytest.raises(ServerStartError, match=r"exited \(status 3\)(.|\n)*CUDA error: no device"),
    ):
        server.wait_ready(deadline_s=30, poll_s=0.05)


def test_a_server_that_never_answers_misses_its_deadline(tmp_path):
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    with (
        ServerProcess(
            cmd, base_url=f"http://127.0.0.1:{free_port()}", log_path=tmp_path / "y.log"
        ) as server,
        pytest.raises(
            ServerStartError, match=r"did not answer 200 within 1 s(.|\n)*See the log at"
        ),
    ):
        server.wait_ready(deadline_s=1, poll_s=0.1)
    assert group_members(server.pgid) == []


# A whole run in a subprocess: launcher (stubborn child) + client load against a protocol double.
RUN_UNDER_SIGNAL = textwrap.dedent(
    """
    import asyncio, sys
    from dpbench.server.client import GenerateRequest
    from dpbench.server.launcher import ServerProcess
    from dpbench.server.loadgen import Schedule, drive
    from dpbench.server.protocol_double import DoubleConfig, DoubleThread
    stubborn, log = sys.argv[1], sys.argv[2]
    with DoubleThread(DoubleConfig(first_token_delay_s=0.01, itl_s=0.05)) as double:
        with ServerProcess([sys.executable, "-c", stubborn], base_url=double.base_url, log_path=log, grace_s=1.0):
            print("RUNNING", flush=True)
            reqs = [GenerateRequest(f"r{i}", [1, 2, 3], 10_000) for i in range(50)]
            asyncio.run(drive(reqs, Schedule.closed_loop(50), base_url=double.base_url))
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_leaves_no_process_behind(tmp_path, sig):
    log = tmp_path / "server.log"
    out = tmp_path / "run.out"
    with open(out, "w") as fh:
        run = subprocess.Popen(
            [sys.executable, "-c", RUN_UNDER_SIGNAL, STUBBORN, str(log)],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_line(out, "RUNNING")
        _, leader, child = _wait_for_line(log, "PIDS").split()
        pids = [int(leader), int(child)]
        time.sleep(0.5)  # requests in flight
        run.send_signal(sig)
        rc = run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert rc != 0  # interrupted, not finished
    assert not any(alive(p) for p in pids), out.read_text()
    assert group_members(pids[0]) == []


def test_the_server_dies_with_a_sigkilled_parent(tmp_path):
    """asv's second timeout signal is SIGKILL: PR_SET_PDEATHSIG takes the server leader down too."""
    log = tmp_path / "server.log"
    script = textwrap.dedent(
        f"""
        import sys, time
        from dpbench.server.launcher import ServerProcess
        s = ServerProcess([sys.executable, "-c", "import time; print('PIDS', __import__('os').getpid(), "
                           "flush=True); time.sleep(600)"], base_url="http://127.0.0.1:1", log_path={str(log)!r})
        s.start()
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        leader = int(_wait_for_line(log, "PIDS").split()[1])
        assert alive(leader)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while alive(leader) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(leader)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_gpu_check_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: zero GPUs
    with pytest.raises(GpuRequirementError, match=r"needs 8 CUDA GPUs on this node; found 0"):
        check_gpus(8)


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert json.dumps(port) and os.getpid()


def test_gpu_check_reads_count_and_free_memory(tmp_path, monkeypatch):
    # nvidia-smi's CSV as an 8×H200 node prints it, one GPU mostly taken by another process.
    smi = tmp_path / "nvidia-smi"
    rows = "\n".join(f"{i}, NVIDIA H200, 143771, {120000 if i == 3 else 5}" for i in range(8))
    smi.write_text(f"#!/bin/sh\ncat <<'CSV'\n{rows}\nCSV\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert len(check_gpus(8, min_free_gib=20)) == 8
    with pytest.raises(
        GpuRequirementError, match=r"needs 30.0 GiB free on each of 8 GPUs; GPU 3 23.2 GiB free"
    ):
        check_gpus(8, min_free_gib=30)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(
        GpuRequirementError,
        match=r"needs 8 CUDA GPUs on this node; found 2 \(NVIDIA H200, NVIDIA H200\)",
    ):
        check_gpus(8)
    assert [g.index for g in check_gpus(2, min_free_gib=100)] == [0, 1]
