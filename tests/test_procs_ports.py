"""Ports for servers that derive more ports from the one they are given (SGLang's gRPC port)."""

from __future__ import annotations

import socket
from pathlib import Path

from dpbench.core.procs import free_port_with
from dpbench.sglang_compat.server import DERIVED_PORT_OFFSETS, SERVER_PORT_RANGE


def test_derived_ports_stay_valid_and_free():
    for _ in range(20):
        port = free_port_with(DERIVED_PORT_OFFSETS)
        assert 20000 <= port < 30000
        for offset in (0, *DERIVED_PORT_OFFSETS):
            assert port + offset <= 65535
            with socket.socket() as s:  # free: binding it works
                s.bind(("127.0.0.1", port + offset))


def test_a_taken_derived_port_is_avoided():
    # hold every derived port of a narrow range: only the one free pair can come back
    held = []
    try:
        for p in range(21000, 21010):
            if p == 21004:
                continue
            s = socket.socket()
            s.bind(("127.0.0.1", p + 10000))
            held.append(s)
        assert free_port_with((10000,), low=21000, high=21010) == 21004
    finally:
        for s in held:
            s.close()


def test_a_server_port_is_drawn_below_the_ports_sglang_draws_for_itself(tmp_path):
    """0.5.23 draws its torch.distributed store's port from [22000, 29999], the kernel from
    its ephemeral range: a server's --port must come from neither."""
    from simserver import sim_options

    from dpbench.server.run import prepare

    low, high = SERVER_PORT_RANGE
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert high <= 22000 and high + max(DERIVED_PORT_OFFSETS) <= ephemeral_low
    ports = {prepare(sim_options("0.5.23", tmp_path)).config.port for _ in range(5)}
    assert all(low <= p < high for p in ports)
