"""The twin on an imported Mooncake window (real SGLang release, DP ranks with their own radix
caches): each rank hits what the trace lets it hit, and cache-aware dispatch keeps more of the
trace's sharing than round robin."""

from __future__ import annotations

from pathlib import Path

import pytest
from twinjob import run_twin_job

from dpbench.core.paths import shared_traces_dir

MOONCAKE = shared_traces_dir() / "mooncake-fast25" / "conversation_trace.jsonl"
BIG_POOL = 3_000_000  # tokens per rank: the window's every prompt fits, nothing is evicted


def _spec(tmp_path: Path) -> Path:
    assert MOONCAKE.is_file(), f"the shared trace {MOONCAKE} is missing"
    p = tmp_path / "mc.yaml"
    p.write_text(
        "name: mc-test\ndescription: a Mooncake window\nmodel: deepseek-v3\n"
        "target_kv_util: 0.98\ndp_size: 2\nseed: 1\n"
        # the first 400 requests of minutes 5-10, prompts cut to their first 4 blocks (cheap
        # on two cores; conversations that continue within the window still share them)
        f"trace: {{format: mooncake, path: {MOONCAKE}, window_s: 300, rate_scale: 4, "
        "max_requests: 400, max_input_len: 2048, overlong: truncate}\n"
    )
    return p


def _twin(env, spec: Path, out: Path, **options) -> dict:
    return run_twin_job(env, str(spec), out, record_timeline=False, **options)


@pytest.mark.sglang
def test_each_rank_hits_what_the_trace_lets_it_hit(release_env, tmp_path):
    from dpbench.workload.importers.reuse import block_reuse
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    env = release_env("0.5.23")
    spec = _spec(tmp_path)
    rr = _twin(env, spec, tmp_path / "rr.json", max_total_tokens_per_rank=BIG_POOL)
    ca = _twin(
        env, spec, tmp_path / "ca.json", max_total_tokens_per_rank=BIG_POOL, dispatch="cache_aware"
    )
    reqs = generate_trace(load_spec(spec), 1)
    trace_reuse = block_reuse(reqs)
    for r in (rr, ca):
        m = {k: v["value"] for k, v in r["metrics"].items()}
        assert m["requests_finished_count"] == len(reqs) == 400
        assert m["prefix_reuse_trace"] == trace_reuse[0] / trace_reuse[1] > 0
        rows = r["extra"]["prefix_hits_by_rank"]
        assert len(rows) == 2 and sum(x["requests"] for x in rows) == len(reqs)
        for row in rows:  # SGLang never matches a whole prompt: a token short at most
            assert row["offered_reuse"] - 0.03 <= row["hit_rate"] <= row["offered_reuse"]
            assert row["cached_tokens"] > 0
        assert m["prefix_hit_rate"] <= m["prefix_reuse_per_rank_caches"] <= m["prefix_reuse_trace"]
    # round robin splits each conversation over both caches; the router keeps it together
    # (this window: 32.6 % reuse with one cache, 30.1 % over round robin's two)
    hit = {name: r["metrics"]["prefix_hit_rate"]["value"] for name, r in (("rr", rr), ("ca", ca))}
    offered = rr["metrics"]["prefix_reuse_per_rank_caches"]["value"]
    assert offered < trace_reuse[0] / trace_reuse[1] - 0.02
    assert hit["ca"] > hit["rr"] + 0.01
    assert ca["extra"]["config"]["dispatch"] == "cache_aware"
    # rank balance (dpbench.metrics.balance): round robin splits requests evenly whatever their
    # length; the router trades request counts for cache hits. Per-rank totals add up.
    for r in (rr, ca):
        table = r["extra"]["rank_balance"]
        assert sum(x["requests"] for x in table) == len(reqs)
        assert all(x["tokens"] > 0 and x["busy_s"] > 0 for x in table)
        tokens = [x["tokens"] for x in table]
        assert r["metrics"]["rank_tokens_imbalance"]["value"] == pytest.approx(
            max(tokens) / (sum(tokens) / 2)
        )
        assert 0 <= r["metrics"]["rank_idle_while_others_wait_fraction"]["value"] < 1
    assert rr["metrics"]["dispatch_imbalance"]["value"] == 1.0
