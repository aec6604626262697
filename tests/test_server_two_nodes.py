"""Two "nodes" on loopback serve as one DP-2 simulated-forward server (real wheels): SGLang's
own multi-node launch, node 1 by ``dpbench server launch`` and node 0 by ``dpbench server
run``."""

from __future__ import annotations

import signal
import subprocess

import pytest
from simserver import DPBENCH, SPEC

from dpbench.core import results
from dpbench.core.procs import free_port_with
from dpbench.sglang_compat.server import DERIVED_PORT_OFFSETS, SERVER_PORT_RANGE

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def test_two_nodes_on_loopback_serve_as_one_dp_2_server(tmp_path):
    """SGLang's own --nnodes/--node-rank/--dist-init-addr: node 1 by `server launch`, node 0 by `server run`."""
    # SGLang derives its inter-node ZMQ ports from the dist-init port: keep the whole block
    # free and outside the kernel's ephemeral range (an outgoing socket once took one).
    low, high = SERVER_PORT_RANGE  # below the ports SGLang draws for itself
    addr = f"127.0.0.1:{free_port_with(range(1, 64), low=low, high=high)}"
    steps = tmp_path / "steps"  # one directory both "nodes" write their ranks' records to
    common = ["--dp", "2", "--simulate-forward", "--sglang", "0.5.23", "--nnodes", "2",
              "--dist-init-addr", addr, "--step-records-dir", str(steps)]  # fmt: skip
    node1 = subprocess.Popen(
        [
            DPBENCH,
            "server",
            "launch",
            SPEC,
            *common,
            "--node-rank",
            "1",
            "--port",
            str(free_port_with(DERIVED_PORT_OFFSETS, low=low, high=high)),
            "--log",
            str(tmp_path / "node1.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        node0 = subprocess.run(
            [
                DPBENCH,
                "server",
                "run",
                SPEC,
                *common,
                "--node-rank",
                "0",
                "--log-dir",
                str(tmp_path),
                "-o",
                str(tmp_path / "run.json"),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert node0.returncode == 0, node0.stderr[-3000:]
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
        if node1.poll() is None:
            node1.send_signal(signal.SIGINT)
            node1.wait(timeout=120)
