"""SGLang's real DP-attention server (forward simulated) on a window of Mooncake's production
trace, against the twin replaying that run's arrivals: the CPU-sized window of
``mooncake-conversation-small`` through ``dpbench server fidelity`` (one server run a release)."""

from __future__ import annotations

import pytest

from dpbench.paths import shared_traces_dir

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SPEC = "mooncake-conversation-small"


@pytest.fixture(
    params=[("0.5.23", "round_robin"), ("0.5.16", "round_robin")], ids=lambda p: "-".join(p)
)
def setting(request):
    """(release, dispatch). One file, so its two servers run one after the other: the one
    time they were split over two of pytest's workers (2026-12-03), three Mooncake-window
    servers at once on two cores with the cache-aware replays', the 0.5.23 run lost 2 of 48
    requests to client connect errors (the cause was not recorded; runs keep the client's
    words for each failed request since)."""
    return request.param


def test_the_server_and_the_replayed_twin_agree_on_a_mooncake_window(setting, tmp_path):
    """Behind SGLang's own round robin (cache-aware routing, where the load client routes as
    SGLang's router does and sends routed_dp_rank, is ``test_server_routing_replays.py``)."""
    release, dispatch = setting
    from dpbench import results
    from dpbench.server import fidelity

    assert (shared_traces_dir() / "mooncake-fast25" / "conversation_trace.jsonl").is_file()
    inp = fidelity.Inputs(
        spec=SPEC, dp=2, release=release, chunked_prefill_size=8192, dispatch=dispatch
    )
    report = fidelity.run(inp, out_dir=tmp_path)
    server = results.load(report["server_results"][0])
    replay = results.load(report["twin_replay_results"][0])
    m = {k: v["value"] for k, v in server["metrics"].items()}
    assert m["requests_ok_total"] == 48 and m["errors_total"] == 0
    imported = server["extra"]["trace_import"]
    assert imported["requests"] == 48 and imported["truncated_overlong"] > 0  # counted, not silent
    rows = {r["metric"]: r for r in report["rows"]}
    # The targets the synthetic specs meet (DP-mixed ±2 points, delay verdicts ±3, TTFT p50
    # ±10 %), checked where the instrument was healthy for what each row needs: a contended
    # machine (device idle, CPU pressure) runs the steps late against their simulated clock,
    # so the replay meets the run's arrivals at other steps; a slow way back to the client
    # spoils only the client's TTFT. CI once read the client's TTFT p50 34 % above the replay
    # with the decisions in target and nothing recorded to say why; a cache-aware run beside
    # three other jobs read +26 % at the scheduler and +4.1 points of delay verdicts.
    (health,) = report["server_health"]
    targets = (
        ("DP-mixed step fraction", "replay_diff", 0.02, "decisions"),
        (
            "delay-verdict fraction, passes with a prefillable rank",
            "replay_diff",
            0.03,
            "decisions",
        ),
        ("TTFT p50 at the scheduler", "replay_rel", 0.10, "scheduling"),
        ("TTFT p50", "replay_rel", 0.10, "client"),
    )
    for label, key, most, scope in targets:
        row = rows[label]
        if health[f"{scope}_valid"]:
            assert row["valid_runs"] == [True]
            assert abs(row[key]) <= most, (label, row, health)
        else:  # named and left out: NaN, not a number
            assert health["broken"] and row["valid_runs"] == [False]
            assert row[key] != row[key]
    # both caches hit the trace's sharing: SGLang's own cached_tokens and the twin's matches
    hit = rows["prefix-cache hit rate"]
    assert hit["server_runs"][0] > 0.05
    assert hit["server_runs"][0] == pytest.approx(hit["replay_runs"][0], abs=0.005)
    offered = replay["metrics"]["prefix_reuse_per_rank_caches"]["value"]
    assert hit["server_runs"][0] <= offered + 1e-9
    per_rank = server["extra"]["prefix_hits_by_rank"]
    assert len(per_rank) == 2 and all(r["cached_tokens"] > 0 for r in per_rank)
    # SGLang's own dispatch: the client routed nothing (the routed case has its own file)
    assert server["extra"]["dispatch"] == dispatch == "round_robin"
    assert "routed_dp_ranks" not in server["extra"]
