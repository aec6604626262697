"""KV planner: bytes per token and peak demand per rank, checked against hand-computed cases.

The service model (planner.py docstring): a request holds ``input_len − prefix_len +
max_new_tokens`` tokens from its start until ``start + input_len / P + max_new_tokens / D``;
here P = 1000 tok/s and D = 10 tok/s so the hold times are easy to do by hand.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from dpbench.workload.models import ModelConfigError, load_model_config
from dpbench.workload.planner import GIB, plan_kv, pool_tokens
from dpbench.workload.spec import load_spec, parse_spec
from dpbench.workload.trace import TraceRequest, generate_columns, generate_trace

SPEC = textwrap.dedent(
    """\
    name: planner-test
    description: hand-checkable planner cases
    model: deepseek-v3
    num_requests: 5
    input_len: {kind: fixed, value: 100}
    output_len: {kind: fixed, value: 10}
    arrival: {process: poisson, rate_per_s: 1}
    target_kv_util: 0.8
    dp_size: 2
    seed: 0
    planner: {prefill_tokens_per_s: 1000, decode_tokens_per_s: 10}
    """
)


def req(i, t, input_len, out, group=None, prefix=0):
    return TraceRequest(f"r{i:06d}", t, input_len, group, prefix, out, True, None, None)


# Case A. hold = input/1000 + out/10:
#   r0 t=0  1000+100 → [0, 11)    1100 tokens
#   r1 t=1  2000+50  → [1, 8)     2050
#   r2 t=2   500+200 → [2, 22.5)   700
#   r3 t=9  1000+100 → [9, 20)    1100
#   r4 t=10 3000+10  → [10, 14)   3010
CASE_A = [
    req(0, 0.0, 1000, 100),
    req(1, 1.0, 2000, 50),
    req(2, 2.0, 500, 200),
    req(3, 9.0, 1000, 100),
    req(4, 10.0, 3000, 10),
]


# ---- bytes per token ------------------------------------------------------------------------


def test_deepseek_v3_mla_bytes_per_token():
    v3 = load_model_config("deepseek-v3")
    assert v3.is_mla and v3.is_moe
    assert (v3.kv_lora_rank, v3.qk_rope_head_dim, v3.num_hidden_layers) == (512, 64, 61)
    assert v3.kv_bytes_per_token(2) == (512 + 64) * 61 * 2 == 70_272
    assert v3.kv_bytes_per_token(1) == 35_136  # fp8 KV cache
    assert v3.vocab_size == 129_280 and v3.n_routed_experts == 256 and v3.num_experts_per_tok == 8


def test_deepseek_v2_lite_and_tiny_bytes_per_token():
    assert (
        load_model_config("deepseek-v2-lite").kv_bytes_per_token() == (512 + 64) * 27 * 2 == 31_104
    )
    tiny = load_model_config("deepseek-v3-tiny")
    assert tiny.architecture == "DeepseekV3ForCausalLM" and tiny.is_mla and tiny.is_moe
    assert tiny.kv_bytes_per_token() == (512 + 64) * 4 * 2 == 4_608
    assert tiny.vocab_size == load_model_config("deepseek-v3").vocab_size


def test_gqa_bytes_per_token(tmp_path):
    # Llama-3-8B shape: 32 layers, 8 KV heads of 128 → 2 × 8 × 128 × 32 × 2 B = 128 KiB
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "vocab_size": 128256,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    llama = load_model_config(tmp_path)
    assert not llama.is_mla and llama.head_dim == 128
    assert llama.kv_bytes_per_token(2) == 2 * 8 * 128 * 32 * 2 == 131_072
    cfg["head_dim"] = 64  # an explicit head_dim wins over hidden_size / heads
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model_config(tmp_path).kv_bytes_per_token(2) == 2 * 8 * 64 * 32 * 2


def test_model_config_errors_name_the_key(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_attention_heads": 2}))
    with pytest.raises(
        ModelConfigError, match=r"`num_hidden_layers` must be an integer ≥ 1; found None"
    ):
        load_model_config(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 8,
                "num_attention_heads": 2,
                "num_hidden_layers": 2,
                "vocab_size": 10,
                "kv_lora_rank": 16,
            }
        )
    )
    with pytest.raises(ModelConfigError, match=r"needs `qk_rope_head_dim` ≥ 1; found None"):
        load_model_config(tmp_path)
    with pytest.raises(
        ModelConfigError, match=r"shipped name: deepseek-v2-lite, deepseek-v3, deepseek-v3-tiny"
    ):
        load_model_config("gpt-5")


# ---- pool size arithmetic -------------------------------------------------------------------


def test_pool_tokens_is_an_exact_ceiling():
    assert pool_tokens(4810, 0.8) == 6013  # 6012.5 → 6013
    assert pool_tokens(96, 0.96) == 100
    assert pool_tokens(21, 0.7) == 30  # 21 / 0.7 is 30.000000000000004 in binary floats
    assert pool_tokens(4810, 0.8, page_size=64) == 6016  # 94 pages
    assert pool_tokens(100, 1.0) == 100


# ---- peak demand ------------------------------------------------------------------------------


def test_round_robin_case_a():
    plan = plan_kv(parse_spec(SPEC), CASE_A, dp_size=2, dispatch="round_robin")
    # rank 0 gets r0, r2, r4: at t=10 it holds 1100 + 700 + 3010 = 4810
    # rank 1 gets r1, r3: r1 alone (2050) at t=1 beats r3 alone (1100)
    assert plan.requests_per_rank == (3, 2)
    assert plan.peak_tokens_per_rank == (4810, 2050)
    assert plan.peak_time_s_per_rank == (10.0, 1.0)
    assert plan.peak_requests_per_rank == (3, 1)
    assert plan.bytes_per_token == 70_272
    assert plan.max_total_tokens_per_rank == 6013  # ceil(4810 / 0.8)
    assert plan.bytes_per_rank == 6013 * 70_272 == 422_545_536
    assert plan.gib_per_rank == pytest.approx(0.393526, abs=1e-6)  # 422,545,536 / 1,073,741,824
    assert plan.busiest_rank == 0
    assert plan.util_at_peak_per_rank[0] == pytest.approx(4810 / 6013)


def test_shortest_queue_case_a():
    plan = plan_kv(parse_spec(SPEC), CASE_A, dp_size=2, dispatch="shortest_queue")
    # r0→0; r1→1 (held 1,0); r2→0 (tie → lowest); r3 at t=9 → 1 (r1 ended at 8: held 2,0);
    # r4 at t=10 → 1 (held 2,1). Rank 1 at t=10: r3 1100 + r4 3010 = 4110.
    assert plan.requests_per_rank == (2, 3)
    assert plan.peak_tokens_per_rank == (1800, 4110)
    assert plan.max_total_tokens_per_rank == 5138  # ceil(4110 / 0.8) = ceil(5137.5)


# Case B: a t=0 4000+100 → [0, 14) 4100; b t=0.5 100+10 → [0.5, 1.6) 110; c t=1 → [1, 2.1) 110
CASE_B = [req(0, 0.0, 4000, 100), req(1, 0.5, 100, 10), req(2, 1.0, 100, 10)]


def test_total_tokens_differs_from_shortest_queue_case_b():
    spec = parse_spec(SPEC)
    sq = plan_kv(spec, CASE_B, 2, "shortest_queue")
    tt = plan_kv(spec, CASE_B, 2, "total_tokens")
    # shortest_queue: c sees held (1, 1) → rank 0; total_tokens: c sees (4100, 110) → rank 1
    assert sq.peak_tokens_per_rank == (4100 + 110, 110)
    assert tt.peak_tokens_per_rank == (4100, 220)


def test_shared_prefix_is_held_once_per_rank():
    # group 0, prefix 1000: p0 [0, 11.5) own 600; p1 [1, 12.2) own 300; p2 [20, 31.1) own 200;
    # q (no group) [5, 6.4) own 410. Peak at t=5: 600 + 300 + 410 + 1000 (prefix once) = 2310.
    reqs = [
        req(0, 0.0, 1500, 100, group=0, prefix=1000),
        req(1, 1.0, 1200, 100, group=0, prefix=1000),
        req(2, 5.0, 400, 10),
        req(3, 20.0, 1100, 100, group=0, prefix=1000),
    ]
    plan = plan_kv(parse_spec(SPEC), reqs, dp_size=1)
    assert plan.peak_tokens_per_rank == (2310,)
    assert plan.peak_requests_per_rank == (3,)
    # on two ranks round robin puts p0, q on rank 0 and p1, p2 on rank 1: each holds the prefix
    two = plan_kv(parse_spec(SPEC), reqs, dp_size=2)
    assert two.peak_tokens_per_rank == (600 + 410 + 1000, 300 + 1000)


def test_back_to_back_requests_do_not_overlap():
    # a [0, 2) then b [2, 4), each 1010 tokens (1000/1000 + 10/10 = 2.0 s exactly)
    assert (
        plan_kv(parse_spec(SPEC), [req(0, 0.0, 1000, 10), req(1, 2.0, 1000, 10)], 1).peak_tokens
        == 1010
    )
    # same with a shared 500-token prefix: the prefix interval ends and restarts at t=2
    grouped = [
        req(0, 0.0, 1000, 10, group=0, prefix=500),
        req(1, 2.0, 1000, 10, group=0, prefix=500),
    ]
    assert plan_kv(parse_spec(SPEC), grouped, 1).peak_tokens == 510 + 500


def test_closed_loop_starts_when_a_slot_frees():
    spec = parse_spec(
        SPEC.replace("{process: poisson, rate_per_s: 1}", "{process: closed_loop, concurrency: 2}")
    )
    reqs = [req(i, 0.0, r.input_len, r.max_new_tokens) for i, r in enumerate(CASE_A[:4])]
    # holds 11, 7, 20.5, 11 → starts 0, 0, 7 (r1 frees), 11 (r0 frees); peak at t=0: 1100 + 2050
    one = plan_kv(spec, reqs, 1)
    assert one.peak_tokens_per_rank == (3150,) and one.closed_loop_concurrency == 2
    # round robin on 2 ranks: r0, r2 → rank 0 overlap on [7, 11): 1800; rank 1: r1 2050
    assert plan_kv(spec, reqs, 2).peak_tokens_per_rank == (1800, 2050)


def test_overrides_for_utilization_and_dtype():
    plan = plan_kv(parse_spec(SPEC), CASE_A, 2, target_util=0.5, dtype_bytes=1)
    assert plan.max_total_tokens_per_rank == 9620  # 4810 / 0.5
    assert plan.bytes_per_token == 35_136
    assert plan.gib_per_rank == pytest.approx(9620 * 35_136 / GIB)


def test_bad_planner_arguments_are_refused():
    spec = parse_spec(SPEC)
    with pytest.raises(
        ValueError,
        match=r"dispatch must be one of round_robin, shortest_queue, total_tokens; found 'random'",
    ):
        plan_kv(spec, CASE_A, 2, "random")
    with pytest.raises(ValueError, match=r"dp_size must be ≥ 1; found 0"):
        plan_kv(spec, CASE_A, 0)
    with pytest.raises(ValueError, match=r"target utilization must be in \(0, 1\]; found 1.2"):
        plan_kv(spec, CASE_A, 2, target_util=1.2)


def test_plan_accepts_columns_or_requests_alike():
    spec = load_spec("agentic-multiturn").with_overrides(num_requests=400)
    a = plan_kv(spec, generate_trace(spec), 4, "shortest_queue")
    b = plan_kv(spec, generate_columns(spec), 4, "shortest_queue")
    assert a == b


def test_long_prompt_burst_puts_every_rank_at_95_percent_or_more():
    spec = load_spec("long-prompt-burst")
    plan = plan_kv(spec, generate_columns(spec), 8)
    assert plan.model_name == "deepseek-v3" and plan.bytes_per_token == 70_272
    assert max(plan.util_at_peak_per_rank) == pytest.approx(spec.target_kv_util, abs=1e-5)
    assert min(plan.util_at_peak_per_rank) >= 0.95
    assert plan.max_total_tokens_per_rank == pool_tokens(plan.peak_tokens, spec.target_kv_util)
    assert plan.gib_per_rank == pytest.approx(plan.max_total_tokens_per_rank * 70_272 / 2**30)


def test_balanced_baseline_sits_near_60_percent():
    spec = load_spec("balanced-baseline")
    plan = plan_kv(spec, generate_columns(spec), 8)
    assert max(plan.util_at_peak_per_rank) == pytest.approx(0.6, abs=1e-4)
    assert min(plan.util_at_peak_per_rank) > 0.4
