"""SGLang's real DP-attention server (forward simulated) behind cache-aware routing on a window
of Mooncake's production trace, replayed twice against one server with its caches flushed
between (a file of its own: pytest's workers take files, so it runs beside the fidelity
runs of ``test_server_production_trace.py`` instead of after them)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SPEC = "mooncake-conversation-small"


def test_cache_aware_routing_reaches_the_ranks_it_chose_in_each_flushed_replay(tmp_path):
    """The load client routes as SGLang's router does (routed_dp_rank) and SGLang's DP
    controller sends every request there; run as two replays against one server with its
    caches flushed between (``flush_replays``: how the main job repeats a setting). Not a
    fidelity target: behind cache-aware routing the replayed twin missed the delay-verdict
    target with a healthy instrument (fresh-clone run 2026-12-02; +4.1 points in an earlier
    run), a departure still to be found.

    A flushed server replays like a fresh one where the flush matters: the second replay
    sends the same prompts again, so a radix cache (or a router) that kept the first
    replay's would hit far more than the trace's own sharing; both replays hit exactly what
    the twin, fresh for each, hits on the same arrivals."""
    from dpbench import results
    from dpbench.server import fidelity

    inp = fidelity.Inputs(
        spec=SPEC,
        dp=2,
        release="0.5.23",
        chunked_prefill_size=8192,
        dispatch="cache_aware",
        repeats=2,
        flush_replays=True,
    )
    report = fidelity.run(inp, out_dir=tmp_path)
    servers = [results.load(p) for p in report["server_results"]]
    assert [s["extra"]["replay"]["flushed_before"] for s in servers] == [False, True]
    assert [s["extra"]["replay"]["rid_suffix"] for s in servers] == ["", "~1"]
    assert servers[0]["metrics"]["server_startup_s"] == servers[1]["metrics"]["server_startup_s"]
    for server in servers:
        m = {k: v["value"] for k, v in server["metrics"].items()}
        assert m["requests_ok_total"] == 48 and m["errors_total"] == 0
        assert server["extra"]["dispatch"] == "cache_aware"
        routed = server["extra"]["routed_dp_ranks"]
        arrived = server["extra"]["scheduler_arrivals"]  # by trace id in every replay
        assert len(routed) == 48 and {rid: rank for rid, (_, rank) in arrived.items()} == routed
        assert m["steps_count"] > 0  # each replay has its own window of step records
    hit = {r["metric"]: r for r in report["rows"]}["prefix-cache hit rate"]
    assert 0.05 < hit["server_runs"][0] < 0.2  # the trace's sharing (8 %), not a whole replay's
    assert hit["server_runs"][1] == pytest.approx(hit["server_runs"][0], abs=0.005)
    for server_hit, twin_hit in zip(hit["server_runs"], hit["replay_runs"], strict=True):
        assert server_hit == pytest.approx(twin_hit, abs=0.005)
