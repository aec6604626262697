"""Two "nodes" on loopback serve as one DP-2 simulated-forward server (real wheels): SGLang's
own multi-node launch, node 1 by ``dpbench server launch`` and node 0 by ``dpbench server
run``.

Node 0 starts once node 1 is past its port checks (both check the same ports on one host).
Node 0 cannot see node 1's processes: if node 1 dies, node 0's SGLang waits for it (the
rendezvous, or requests routed to its rank) far past any test limit. So the test watches both
and, when one ends early or the pair runs past its limit, stops both and fails with both logs.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from simserver import DPBENCH, SPEC

from dpbench.core import results
from dpbench.core.procs import free_port_with
from dpbench.sglang_compat.server import DERIVED_PORT_OFFSETS, SERVER_PORT_RANGE

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

LIMIT_S = 600.0  # the pair's whole run (alone: ~50 s; four pytest workers: a few minutes)
GRACE_S = 120.0  # node 0's own wrap-up once node 1 has gone (its shutdown stops node 1 first)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


def _oom_kills() -> str:
    """The kernel's OOM-kill lines, where dmesg can be read (a node lost to memory says so)."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(dmesg: {exc})"
    kills = [ln for ln in out.splitlines() if "Killed process" in ln or "oom-kill" in ln]
    return "\n".join(kills[-10:]) or "(none in dmesg)"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # dpbench stops its SGLang's whole process group
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_past_port_checks(node1: subprocess.Popen, log: Path, limit_s: float = 300.0) -> None:
    """Wait until node 1's SGLang has checked its ports (it logs ``server_args=`` right after).

    On one host both nodes check the same derived ports (dist-init port + 1 …): node 1 must be
    past its check before node 0 binds them, or it waits 30 s and exits (seen in a fresh-clone
    `make test`: "port_base at 19149 is not available in 30 seconds", held by node 0). Two real
    hosts each check their own ports, so only the loopback needs this order."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if "server_args=" in (log.read_text(errors="replace") if log.exists() else ""):
            return
        if node1.poll() is not None:
            pytest.fail(f"node 1 exited ({node1.returncode}) starting up:\n{_tail(log)}")
        time.sleep(0.5)
    _stop(node1)
    pytest.fail(f"node 1 did not pass its port checks in {limit_s:.0f} s:\n{_tail(log)}")


def test_two_nodes_on_loopback_serve_as_one_dp_2_server(tmp_path):
    """SGLang's own --nnodes/--node-rank/--dist-init-addr: node 1 by `server launch`, node 0 by `server run`."""
    # SGLang derives its inter-node ZMQ ports from the dist-init port: keep the whole block
    # free and outside the kernel's ephemeral range (an outgoing socket once took one).
    low, high = SERVER_PORT_RANGE  # below the ports SGLang draws for itself
    addr = f"127.0.0.1:{free_port_with(range(1, 64), low=low, high=high)}"
    steps = tmp_path / "steps"  # one directory both "nodes" write their ranks' records to
    common = ["--dp", "2", "--simulate-forward", "--sglang", "0.5.23", "--nnodes", "2",
              "--dist-init-addr", addr, "--step-records-dir", str(steps)]  # fmt: skip
    node1_log, node0_out = tmp_path / "node1.log", tmp_path / "node0.out"
    node1_port = str(free_port_with(DERIVED_PORT_OFFSETS, low=low, high=high))
    node1_args = ["--node-rank", "1", "--log", str(node1_log), "--port", node1_port]
    node1 = subprocess.Popen(
        [DPBENCH, "server", "launch", SPEC, *common, *node1_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    node0_args = ["--node-rank", "0", "--log-dir", str(tmp_path), "-o", str(tmp_path / "run.json"),
                  "--startup-deadline-s", "400", "--client-read-timeout-s", "300"]  # fmt: skip
    _wait_past_port_checks(node1, node1_log)
    with node0_out.open("w") as out:
        node0 = subprocess.Popen(
            [DPBENCH, "server", "run", SPEC, *common, *node0_args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + LIMIT_S
        while node0.poll() is None and node1.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0)
        if node1.poll() is not None:  # node 0's run ending stops node 1 first: let node 0 finish
            deadline = min(deadline, time.monotonic() + GRACE_S)
            while node0.poll() is None and time.monotonic() < deadline:
                time.sleep(1.0)
        if node0.poll() is None:  # node 1 ended and node 0 hung on, or the pair ran past its limit
            why = (
                f"node 1 exited ({node1.returncode}) and node 0 still ran {GRACE_S:.0f} s later"
                if node1.poll() is not None
                else f"the pair ran past {LIMIT_S:.0f} s"
            )
            _stop(node0)
            node0_logs = sorted(tmp_path.glob("sim-smoke-*.log"))
            pytest.fail(
                f"{why}\n--- node 1's log ---\n{_tail(node1_log)}\n--- node 0's output ---\n"
                f"{_tail(node0_out)}\n--- node 0's server log ---\n"
                + (_tail(node0_logs[-1]) if node0_logs else "(none)")
                + f"\n--- the kernel's OOM kills ---\n{_oom_kills()}"
            )
        assert node0.returncode == 0, _tail(node0_out)
        result = results.load(tmp_path / "run.json")
        m = result["metrics"]
        assert m["requests_ok_total"]["value"] == 24 and m["errors_total"]["value"] == 0
        assert m["delayer_outcomes_total"]["value"] > 0
        assert (
            result["extra"]["steps"]["steps_per_rank"][0]
            == result["extra"]["steps"]["steps_per_rank"][1]
            > 0
        )
        node1.wait(timeout=120)  # node 1's SGLang exits once node 0's is gone
    finally:
        _stop(node0)
        _stop(node1)
