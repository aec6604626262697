"""KV planner: bytes per token and peak demand per rank, checked against hand-computed cases.

The service model (planner.py docstring): a request holds ``input_len − prefix_len +
max_new_tokens`` tokens from its start until ``start + input_len / P + max_new_tokens / D``;
here P = 1000 tok/s and D = 10 tok/s so the hold times are easy to do by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from dpbench.workload.models import ModelConfigError, load_model_config
from dpbench.workload.planner import GIB, plan_kv, pool_tokens
from dpbench.workload.sharing import block_units, held_spans
from dpbench.workload.spec import DISPATCH_POLICIES, known_specs, load_spec, parse_spec
from dpbench.workload.trace import TraceRequest, columns_of, generate_columns, generate_trace

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


# ---- KV blocks (imported traces): the radix tree's sharing --------------------------------------


def breq(i, t, blocks, input_len, out):
    return TraceRequest(
        f"b{i:06d}", t, input_len, None, 0, out, True, None, None, tuple(blocks), 100
    )


# Case K, 100-token blocks, hold = input/1000 + out/10:
#   a t=0    blocks 1 2 3     300+10 → [0, 1.3)
#   b t=0.5  blocks 1 2 4 5   350+10 → [0.5, 1.85)  (block 5 holds 50 tokens)
#   c t=1    blocks 1 2 4     250+20 → [1, 3.25)    (block 4 cut to 50: b's first 50 tokens)
#   d t=1.1  blocks 9 2       200+10 → [1.1, 2.3)   (its 2 follows 9: not a's or b's 2)
CASE_K = [
    breq(0, 0.0, (1, 2, 3), 300, 10),
    breq(1, 0.5, (1, 2, 4, 5), 350, 10),
    breq(2, 1.0, (1, 2, 4), 250, 20),
    breq(3, 1.1, (9, 2), 200, 10),
]


def test_shared_kv_blocks_are_held_once_per_rank():
    plan = plan_kv(parse_spec(SPEC), CASE_K, dp_size=1)
    # at t=1.1 all four are held: 1, 1-2, 1-2-3 (100 each), 1-2-4 (100: b's whole block, c's
    # first 50 inside it), 1-2-4-5 (50), 9 and 9-2 (200), outputs 10+10+20+10 = 700
    assert plan.shared_by == "KV blocks"
    assert plan.peak_tokens_per_rank == (700,)
    assert plan.peak_time_s_per_rank == (1.1,)
    assert plan.peak_requests_per_rank == (4,)
    assert plan.peak_tokens_unshared_per_rank == (310 + 360 + 270 + 210,)
    assert plan.max_total_tokens_per_rank == 875  # ceil(700 / 0.8)
    assert plan.planned_peak_util == 700 / 875
    # round robin: rank 0 a, c overlap on [1, 1.3): 1, 1-2, 1-2-3, c's 50 of 1-2-4, outputs 30
    # = 380; rank 1 b, d share nothing: 360 + 210
    two = plan_kv(parse_spec(SPEC), CASE_K, dp_size=2)
    assert two.peak_tokens_per_rank == (380, 570)
    assert two.peak_tokens_unshared_per_rank == (580, 570)
    assert two.max_total_tokens_per_rank == 713  # ceil(570 / 0.8) = ceil(712.5)


def test_block_units_and_the_spans_they_are_held():
    shared = block_units(CASE_K)
    assert shared.own.tolist() == [10, 10, 20, 10]  # outputs: every prompt token is in a block
    starts, ends = np.array([0.0, 0.5, 1.0, 1.1]), np.array([1.3, 1.85, 3.25, 2.3])
    s, e, tok = held_spans(shared, starts, ends, np.ones(4, dtype=bool))
    assert sorted(zip(s.tolist(), e.tolist(), tok.tolist(), strict=True)) == [
        (0.0, 1.3, 100),  # 1-2-3: a
        (0.0, 3.25, 100),  # 1: a, b, c
        (0.0, 3.25, 100),  # 1-2
        (0.5, 1.85, 50),  # 1-2-4, tokens 51-100: b alone holds them
        (0.5, 1.85, 50),  # 1-2-4-5: b
        (0.5, 3.25, 50),  # 1-2-4, tokens 1-50: b, then c after b left
        (1.1, 2.3, 100),  # 9: d
        (1.1, 2.3, 100),  # 9-2
    ]
    # on c's rank alone (round robin's rank 0 holds a and c): b's spans are not there
    s, e, tok = held_spans(shared, starts, ends, np.array([True, False, True, False]))
    assert sorted(zip(s.tolist(), e.tolist(), tok.tolist(), strict=True)) == [
        (0.0, 1.3, 100),
        (0.0, 3.25, 100),
        (0.0, 3.25, 100),
        (1.0, 3.25, 50),
    ]


def test_a_route_places_the_requests():
    seen = []

    def route(r, held):
        seen.append((r.id, tuple(held)))
        return 0 if r.blocks[0] == 1 else 1

    plan = plan_kv(parse_spec(SPEC), CASE_K, 2, "cache_aware", route=route)
    # rank 0 a, b, c on [1, 1.3): 1, 1-2, 1-2-3, 1-2-4 (100), 1-2-4-5 (50), outputs 40 = 490
    assert plan.peak_tokens_per_rank == (490, 210)
    assert plan.requests_per_rank == (3, 1) and plan.dispatch == "cache_aware"
    # the route sees the requests held per rank when each starts (a ends at 1.3)
    assert seen == [
        ("b000000", (0, 0)),
        ("b000001", (1, 0)),
        ("b000002", (2, 0)),
        ("b000003", (3, 0)),
    ]
    with pytest.raises(ValueError, match="pass the trace's requests, not its columns"):
        plan_kv(parse_spec(SPEC), columns_of(CASE_K), 2, "cache_aware", route=route)
    with pytest.raises(ValueError, match=r"sent request 0 to rank 5; allowed: 0 … 1"):
        plan_kv(parse_spec(SPEC), CASE_K, 2, "cache_aware", route=lambda r, held: 5)


def test_a_trace_with_block_ids_on_some_requests_only_is_refused():
    with pytest.raises(
        ValueError, match=r"1 of 5 requests have no KV block ids \(first: r000000\)"
    ):
        plan_kv(parse_spec(SPEC), [req(0, 0.0, 300, 10), *CASE_K], 1)


# ---- synthetic specs: the same plans as before the planner counted KV blocks -------------------

BEFORE_BLOCKS = "3c9d8de"  # the planner's last commit before it read KV block ids


def _planner_at(commit: str, monkeypatch) -> types.ModuleType:
    """planner.py as it was at ``commit``, imported beside today's (it reads today's spec,
    models and trace modules, which it shares the interface of)."""
    root = Path(__file__).resolve().parents[1]
    try:
        source = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:src/dpbench/workload/planner.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs the git history at {commit} (a git checkout of dpbench): {exc}")
    module = types.ModuleType(f"planner_{commit}")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up there
    exec(compile(source, f"planner.py@{commit}", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("name", [n for n in known_specs() if load_spec(n).trace is None])
def test_synthetic_plans_are_unchanged_since_3c9d8de(name, monkeypatch):
    before = _planner_at(BEFORE_BLOCKS, monkeypatch)
    spec = load_spec(name)
    checked = 0
    for seed in (spec.seed, spec.seed + 1):
        reqs = generate_trace(spec, seed)
        for dispatch in DISPATCH_POLICIES:
            for dp in sorted({1, 3, spec.dp_size}):
                old = before.plan_kv(spec, reqs, dp, dispatch).as_dict()
                new = plan_kv(spec, reqs, dp, dispatch).as_dict()
                assert {k: new[k] for k in old} == old, (seed, dispatch, dp)
                checked += 1
    assert checked == 2 * len(DISPATCH_POLICIES) * len({1, 3, spec.dp_size})
