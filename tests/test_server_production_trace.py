"""SGLang's real DP-attention server (forward simulated) on a window of Mooncake's production
trace, against the twin replaying that run's arrivals: the CPU-sized window of
``mooncake-conversation-small`` through ``dpbench server fidelity`` on 0.5.16, one fresh
server. 0.5.23's round-robin run shares its server with the cache-aware replays
(``test_server_routing_replays.py``), a file of its own so pytest's workers run the two
servers side by side."""

from __future__ import annotations

import pytest
from mooncake_window import SPEC, check_round_robin_report, trace_is_there

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def test_the_server_and_the_replayed_twin_agree_on_a_mooncake_window_0516(tmp_path):
    """Behind SGLang's own round robin, on a server started for this run alone."""
    from dpbench.server import fidelity

    trace_is_there()
    inp = fidelity.Inputs(spec=SPEC, dp=2, release="0.5.16", chunked_prefill_size=8192)
    report = fidelity.run(inp, out_dir=tmp_path)
    check_round_robin_report(report)
    assert "server_shared_with" not in report
