"""A DP-mixed step stretches the decoding ranks' inter-token gaps, on the real twin.

Under DP attention every rank's forward of a step ends together (the MoE all-to-all waits
for the slowest rank), so a rank that only decodes while another prefills gives its running
requests one token per *prefill* step. The twin must carry that into ITL: this test builds a
trace in which one request decodes alone on rank 1 while long prompts arrive on rank 0 (each
request's rank fixed by a replay file), and the same decoder with no long prompts anywhere.
If the twin timed rank 1's tokens by rank 1's own forward, both runs would have the same ITL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twinjob import run_twin_job

pytestmark = pytest.mark.sglang

BLOCK = 512
DECODER = {"timestamp": 0, "input_length": BLOCK, "output_length": 300, "hash_ids": [0]}
LONG_PROMPT = 8192  # two chunks at chunk 8192 under DP 2 (4,096 a rank)
LONG_AT_MS = (200, 1200, 2200, 3200)  # while the decoder runs (300 tokens)


def _spec(tmp: Path, name: str, with_long_prompts: bool) -> tuple[Path, Path]:
    """A Mooncake-format trace and its spec; the replay puts the decoder on rank 1 and every
    long prompt on rank 0. Returns (spec, replay)."""
    lines = [DECODER]
    if with_long_prompts:
        n_blocks = LONG_PROMPT // BLOCK
        lines += [
            {
                "timestamp": t,
                "input_length": LONG_PROMPT,
                "output_length": 2,
                "hash_ids": list(range(1 + i * n_blocks, 1 + (i + 1) * n_blocks)),  # no sharing
            }
            for i, t in enumerate(LONG_AT_MS)
        ]
    trace = tmp / f"{name}.jsonl"
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = tmp / f"{name}.yaml"
    spec.write_text(
        f"name: {name}\n"
        "description: one decoder on rank 1, long prompts on rank 0 (test)\n"
        "model: deepseek-v3\n"
        f"trace: {{format: mooncake, path: {trace}}}\n"
        "target_kv_util: 0.5\n"
        "dp_size: 2\n"
        "seed: 0\n"
    )
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    reqs = generate_trace(load_spec(spec))
    assert len(reqs) == len(lines)
    replay = tmp / f"{name}-arrivals.json"
    # the decoder is the first request; everything else lands on rank 0
    replay.write_text(
        json.dumps({r.id: [r.arrival_s, 1 if i == 0 else 0] for i, r in enumerate(reqs)})
    )
    return spec, replay


def _run(env, tmp: Path, name: str, with_long_prompts: bool) -> dict[str, float]:
    spec, replay = _spec(tmp, name, with_long_prompts)
    result = run_twin_job(
        env,
        str(spec),
        tmp / f"{name}.json",
        enable_prefill_delayer=False,  # let rank 0 prefill at once, beside rank 1's decode
        chunked_prefill_size=8192,
        replay_arrivals=str(replay),
        max_total_tokens_per_rank=200_000,
        record_timeline=False,
    )
    return {k: v["value"] for k, v in result["metrics"].items()}


def test_a_dp_mixed_step_stretches_the_decoding_ranks_itl(release_env, tmp_path):
    env = release_env("0.5.23")
    alone = _run(env, tmp_path, "decoder-alone", with_long_prompts=False)
    beside = _run(env, tmp_path, "decoder-beside-prefill", with_long_prompts=True)

    assert alone["dp_mixed_step_fraction"] == 0
    assert beside["dp_mixed_step_fraction"] > 0
    # rank 1 ran only decode in both runs, and decoded the same request
    assert beside["requests_finished_count"] == 1 + len(LONG_AT_MS)
    # 4 prompts × 2 chunks = 8 stretched gaps of the decoder's 299: p99 reads one of them,
    # a 4k-token prefill step's length, far above a lone decode step's (0.5.23, 2026-12-02:
    # 601 ms against 9.6 ms; p50 9.6 ms in both)
    assert beside["itl_ms_p99"] > 5 * alone["itl_ms_p99"], (beside, alone)
    assert beside["itl_ms_p50"] == pytest.approx(alone["itl_ms_p50"], rel=0.2)
    assert alone["decode_rank_s_beside_prefill"] == 0
    assert beside["decode_rank_s_beside_prefill"] > 0
