"""The simulated-forward server's process lifecycle on this CPU (real wheels): servers started
through the CLI and signalled, a taken port, a server dying at start-up or a rank dying
mid-run (two nodes on loopback: ``test_server_two_nodes.py``, a file of its own so that
pytest's workers run it beside these). No SGLang process may outlive any of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from simserver import (
    cli_args,
    cli_run,
    server_processes,
    server_sessions,
    sim_options,
    wait_until,
)

from dpbench.server.prepare import free_server_port
from dpbench.server.run import RunIncomplete, ServerRunError, execute, prepare

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _started(tmp, parent: subprocess.Popen, sig: signal.Signals) -> bool:
    """SGLang's leader, DP controller and schedulers are up; a parent that ended before
    them fails the test at once, with what it printed (not after the whole wait)."""
    if parent.poll() is not None:
        out = parent.stdout.read().decode(errors="replace") if parent.stdout else ""
        raise AssertionError(
            f"the {sig.name} run's parent exited ({parent.returncode}) before SGLang started:\n"
            + out[-3000:]
        )
    return len(server_processes(str(tmp))) >= 4


def test_no_sglang_process_survives_sigterm_ctrl_c_or_sigkill_of_the_parent(tmp_path):
    # Three parents at once (the start-ups overlap); each is signalled as soon as SGLang has
    # started its scheduler processes (leader + DP controller/schedulers share the marker).
    runs = {}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        tmp = tmp_path / sig.name
        tmp.mkdir()
        # the port as `dpbench server run` draws its own: with the kernel's choice, SGLang's
        # derived ZMQ ports (+233 up) fell in the ephemeral range, and one was taken
        runs[sig] = (tmp, cli_run(tmp, free_server_port()))
    try:
        sessions: dict[signal.Signals, set[int]] = {}
        for sig, (tmp, parent) in runs.items():
            wait_until(
                lambda t=tmp, p=parent, s=sig: _started(t, p, s),
                300,
                f"SGLang's processes ({sig.name})",
            )
            sessions[sig] = server_sessions(str(tmp))
            parent.send_signal(sig)
        for sig, (tmp, parent) in runs.items():
            parent.wait(timeout=90)
            wait_until(
                lambda t=tmp, s=sig: not server_processes(str(t), sessions[s]),
                60,
                f"every SGLang process gone after {sig.name}",
            )
    finally:
        for _, parent in runs.values():
            if parent.poll() is None:
                parent.kill()
                parent.wait()


def test_a_taken_port_is_one_clear_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerRunError, match=rf"port {port} on 127.0.0.1 is taken"):
            prepare(sim_options("0.5.23", tmp_path, port=port))


def test_a_server_dying_at_start_up_names_the_failure_and_the_log(tmp_path):
    proc = subprocess.run(
        cli_args(tmp_path, "--sglang-arg", "--max-running-requests=abc"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1
    out = " ".join(proc.stderr.split())
    assert "the server exited (status 2)" in out and f"server log: {tmp_path}" in out, out
    assert "invalid int value: 'abc'" in out, out
    assert server_processes(str(tmp_path)) == []


def test_a_rank_dying_mid_run_stops_the_run_and_keeps_a_partial_result(tmp_path):
    prep = prepare(sim_options("0.5.23", tmp_path))
    killed = []
    sessions: set[int] = set()

    def kill_a_rank(outcome) -> None:
        if killed:
            return
        sessions.update(server_sessions(str(tmp_path)))
        # rank 1's scheduler process, as its own step records name it
        records = sorted(tmp_path.glob("*/steps/rank1.jsonl"))
        pid = json.loads(records[0].read_text().splitlines()[0])["pid"]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    with pytest.raises(RunIncomplete) as info:
        execute(prep, on_done=kill_a_rank)
    assert killed, "no scheduler process found to kill"
    msg = str(info.value)
    assert "\n" not in msg and "server log:" in msg and "partial result kept" in msg
    assert info.value.result["extra"]["incomplete"].startswith("server process died")
    assert server_processes(str(tmp_path), sessions) == []
