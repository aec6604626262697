"""SGLang's real DP-attention server (forward simulated) on a window of Mooncake's production
trace, against the twin replaying that run's arrivals: the CPU-sized window of
``mooncake-conversation-small`` through ``dpbench server fidelity`` (one server run a release)."""

from __future__ import annotations

import pytest

from dpbench.paths import shared_traces_dir

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SPEC = "mooncake-conversation-small"


@pytest.mark.parametrize("release", ["0.5.23", "0.5.16"])
def test_the_server_and_the_replayed_twin_agree_on_a_mooncake_window(release, tmp_path):
    from dpbench import results
    from dpbench.server import fidelity

    assert (shared_traces_dir() / "mooncake-fast25" / "conversation_trace.jsonl").is_file()
    inp = fidelity.Inputs(spec=SPEC, dp=2, release=release, chunked_prefill_size=8192)
    report = fidelity.run(inp, out_dir=tmp_path)
    server = results.load(report["server_results"][0])
    replay = results.load(report["twin_replay_results"][0])
    m = {k: v["value"] for k, v in server["metrics"].items()}
    assert m["requests_ok_total"] == 48 and m["errors_total"] == 0
    imported = server["extra"]["trace_import"]
    assert imported["requests"] == 48 and imported["truncated_overlong"] > 0  # counted, not silent
    rows = {r["metric"]: r for r in report["rows"]}
    # the targets the synthetic specs meet: DP-mixed ±2 points, delay verdicts ±3, TTFT p50 ±10 %
    assert abs(rows["DP-mixed step fraction"]["replay_diff"]) <= 0.02
    assert (
        abs(rows["delay-verdict fraction, passes with a prefillable rank"]["replay_diff"]) <= 0.03
    )
    # TTFT ±10 %: on the schedulers' clock unless the machine ran them late; as the client saw
    # it unless the path back to it was slow. A run the instrument spoiled is named and left
    # out (CI once read the client's TTFT p50 34 % above the replay, with no cause recorded)
    (health,) = report["server_health"]
    for label, scope in (("TTFT p50 at the scheduler", "scheduling"), ("TTFT p50", "client")):
        row = rows[label]
        if health[f"{scope}_valid"]:
            assert row["valid_runs"] == [True]
            assert abs(row["replay_rel"]) <= 0.10, (label, row, health)
        else:
            assert health["broken"] and row["valid_runs"] == [False]
            assert row["replay_rel"] != row["replay_rel"]  # left out: NaN, not a number
    # both caches hit the trace's sharing: SGLang's own cached_tokens and the twin's matches
    hit = rows["prefix-cache hit rate"]
    assert hit["server_runs"][0] > 0.05
    assert hit["server_runs"][0] == pytest.approx(hit["replay_runs"][0], abs=0.005)
    offered = replay["metrics"]["prefix_reuse_per_rank_caches"]["value"]
    assert hit["server_runs"][0] <= offered + 1e-9
    per_rank = server["extra"]["prefix_hits_by_rank"]
    assert len(per_rank) == 2 and all(r["cached_tokens"] > 0 for r in per_rank)


def test_cache_aware_routing_in_front_of_the_real_server(tmp_path):
    """The load client routes each request as SGLang's router does (routed_dp_rank): SGLang's
    DP controller sends every request where it was routed, the twin replaying the run agrees
    on the scheduling and the hit rate, and keeping conversations together on one rank's cache
    hits at least what round robin hits on this window (8.1 % at DP 2, docs/workloads.md)."""
    from dpbench import results
    from dpbench.server import fidelity

    inp = fidelity.Inputs(
        spec=SPEC, dp=2, release="0.5.23", chunked_prefill_size=8192, dispatch="cache_aware"
    )
    report = fidelity.run(inp, out_dir=tmp_path)
    assert "cache-aware" in report["server_results"][0]
    server = results.load(report["server_results"][0])
    assert server["extra"]["dispatch"] == "cache_aware"
    routed = server["extra"]["routed_dp_ranks"]
    arrived = server["extra"]["scheduler_arrivals"]
    assert len(routed) == 48 and {rid: rank for rid, (_, rank) in arrived.items()} == routed
    rows = {r["metric"]: r for r in report["rows"]}
    assert abs(rows["DP-mixed step fraction"]["replay_diff"]) <= 0.02
    hit = rows["prefix-cache hit rate"]
    assert hit["server_runs"][0] == pytest.approx(hit["replay_runs"][0], abs=0.005)
    assert hit["server_runs"][0] >= 0.08
