"""SGLang 0.5.23's real DP-attention server (forward simulated) on a window of Mooncake's
production trace: SGLang's own round robin (against the twin replaying its arrivals, as
``test_server_production_trace.py`` checks 0.5.16), then twice behind cache-aware routing, as
flushed replays on one start-up (``fidelity.run_on_one_server``). The two settings need two
servers: a cache-aware run's KV pool is planned as the client routes (2026-12-04).

Both servers run in virtual time (``--clock virtual``): the replays do not wait out the
simulated device, and their numbers do not depend on this machine's load. The real clock's
own check on production traffic is ``test_server_production_trace.py`` (0.5.16)."""

from __future__ import annotations

import pytest
from mooncake_window import SPEC, check_round_robin_report, trace_is_there

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from dpbench.server import fidelity

    trace_is_there()
    common = dict(spec=SPEC, dp=2, release="0.5.23", chunked_prefill_size=8192, clock="virtual")
    round_robin = fidelity.Inputs(**common, flush_replays=True)
    routed = fidelity.Inputs(**common, dispatch="cache_aware", repeats=2, flush_replays=True)
    out = tmp_path_factory.mktemp("mooncake-0.5.23")
    return [
        *fidelity.run_on_one_server([round_robin], out_dir=out),
        *fidelity.run_on_one_server([routed], out_dir=out),
    ]


def test_the_server_and_the_replayed_twin_agree_on_a_mooncake_window_0523(shared):
    """Behind SGLang's own round robin, on a server fresh from start-up."""

    report, _ = shared
    check_round_robin_report(report)
    assert not report.get("server_shared_with")  # a server of its own (its pool is its plan's)


def test_cache_aware_routing_reaches_the_ranks_it_chose_in_each_flushed_replay(shared):
    """The load client routes as SGLang's router does (routed_dp_rank) and SGLang's DP
    controller sends every request there; two replays on a server of its own, its caches flushed before the second
    (``flush_replays``: how the main job repeats a setting). Not a fidelity target: behind cache-aware routing the replayed twin
    missed the delay-verdict target with a healthy instrument (fresh-clone run 2026-12-02;
    +4.1 points in an earlier run), a departure still to be found.

    A flushed server replays like a fresh one where the flush matters: each replay sends the
    same prompts the one before sent, so a radix cache (or a router) that kept them would hit
    far more than the trace's own sharing; both replays hit exactly what the twin, fresh for
    each, hits on the same arrivals."""
    from dpbench.core import results

    _, report = shared
    servers = [results.load(p) for p in report["server_results"]]
    # two replays on one start-up of its own: the second after a flush
    assert [s["extra"]["replay"]["flushed_before"] for s in servers] == [False, True]
    suffixes = [s["extra"]["replay"]["rid_suffix"] for s in servers]
    assert len(set(suffixes)) == 2  # each replay's request ids its own
    assert [s["extra"]["replay"]["of"] for s in servers] == [2, 2]
    startup = servers[0]["metrics"]["server_startup_s"]
    assert [s["metrics"]["server_startup_s"] for s in servers] == [startup, startup]  # one start-up
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
