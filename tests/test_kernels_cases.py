"""Kernel cases: DeepSeek-V3 MLA shapes, sweep coverage, and bytes/FLOPs checked by hand."""

from __future__ import annotations

import math

import pytest

from dpbench.kernels.cases import DEEPSEEK_V3, Case, DPPair, dp_pairs, sweep


def test_deepseek_v3_mla_dimensions() -> None:
    s = DEEPSEEK_V3
    assert (s.kv_lora_rank, s.qk_rope_head_dim) == (512, 64)
    assert (s.mla_qk_dim, s.mla_v_dim, s.mha_qk_dim, s.v_head_dim) == (576, 512, 192, 128)
    # DP attention with tp = dp = 8 keeps all 128 heads per rank; plain TP8 splits them.
    assert s.heads_per_rank(1) == 128
    assert s.heads_per_rank(8) == 16
    with pytest.raises(ValueError, match="attn_tp_size must divide 128"):
        s.heads_per_rank(3)
    # qk_head_dim**-0.5 × YaRN mscale² (factor 40, mscale_all_dim 1): 0.1·ln 40 + 1 = 1.36889
    assert s.sm_scale == pytest.approx(192**-0.5 * (0.1 * math.log(40) + 1) ** 2)


def test_decode_bytes_and_flops_by_hand() -> None:
    c = Case("decode", heads=16, page_size=1, batch=2, context=1024)
    # Each decode query sees its 1024 context tokens: 2 × 1024 (query, key) pairs.
    assert c.attention_pairs == 2048
    # QKᵀ over 576 dims and PV over 512, 2 FLOPs per multiply-add: 2 · 16 · 2048 · 1088.
    assert c.flops == 71_303_168
    # q + o: 2 tokens · 16 heads · (576 + 512) · 2 B = 69 632;
    # latent cache: 2048 rows · (576 · 2 B + 4 B index) = 2 367 488.
    assert c.bytes == 69_632 + 2_367_488 == 2_437_120
    assert c.form == "mla" and c.kernel == "decode_attention_fwd"


def test_extend_without_prefix_is_mha_bytes_and_flops_by_hand() -> None:
    c = Case("extend", heads=128, page_size=1, new_tokens=512, prefix=0)
    assert c.form == "mha" and c.kernel == "extend_attention_fwd"
    # Causal: 512 · 513 / 2 pairs.
    assert c.attention_pairs == 131_328
    # 2 · 128 heads · 131 328 · (192 + 128).
    assert c.flops == 10_758_389_760
    # q, k (192 each), v, o (128 each) per token and head, bf16: 512 · 128 · 640 · 2 B.
    assert c.bytes == 83_886_080


def test_mixed_case_bytes_and_flops_by_hand() -> None:
    c = Case("mixed", heads=16, page_size=64, batch=3, context=50, new_tokens=100)
    assert c.sequences() == [(0, 100), (49, 1), (49, 1), (49, 1)]
    # 100 · 101 / 2 causal pairs for the extend, 50 per decode.
    assert c.attention_pairs == 5050 + 150
    assert c.flops == 2 * 16 * 5200 * 1088 == 181_043_200
    # q + o for 103 tokens, 3 · 49 cached rows with indices, and the new tokens' k (576) and v (512).
    assert c.bytes == 103 * 16 * 1088 * 2 + 3 * 49 * 1156 + 103 * 1088 * 2 == 3_980_108
    assert c.form == "mla"


def test_kv_slots_pad_whole_pages() -> None:
    assert Case("decode", heads=1, page_size=64, batch=2, context=65).kv_slots == 64 + 2 * 128
    assert Case("decode", heads=1, page_size=1, batch=2, context=65).kv_slots == 1 + 130


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(kind="decode", heads=16, batch=0, context=10), "needs batch ≥1"),
        (dict(kind="extend", heads=16, new_tokens=0), "needs new_tokens ≥1"),
        (dict(kind="extend", heads=16, new_tokens=5, batch=2), "not batch/context"),
        (dict(kind="decode", heads=16, batch=1, context=5, prefix=3), "not new_tokens/prefix"),
        (dict(kind="prefill", heads=16), "kind must be one of"),
        (dict(kind="decode", heads=16, batch=1, context=5, dtype="fp8"), "dtype must be one of"),
        (dict(kind="decode", heads=16, batch=1, context=5, page_size=0), "page_size must be"),
    ],
)
def test_bad_cases_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Case(**kwargs)


def test_full_sweep_covers_the_issue_ranges() -> None:
    cases = sweep("full")
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    assert {c.heads for c in cases} == {128}
    dec = [c for c in cases if c.kind == "decode"]
    assert (min(c.batch for c in dec), max(c.batch for c in dec)) == (1, 256)
    assert (min(c.context for c in dec), max(c.context for c in dec)) == (1024, 65536)
    assert {c.page_size for c in dec} == {1, 64}
    ext = [c for c in cases if c.kind == "extend"]
    assert (min(c.new_tokens for c in ext), max(c.new_tokens for c in ext)) == (512, 16384)
    assert {c.prefix > 0 for c in ext} == {True, False}
    assert {c.page_size for c in ext if c.prefix} == {1, 64}
    mix = [c for c in cases if c.kind == "mixed"]
    assert mix and all(c.batch >= 8 and c.new_tokens >= 512 for c in mix)
    assert {c.page_size for c in mix} == {1, 64}


def test_subset_sweeps_and_layouts() -> None:
    full = {c.name for c in sweep("full")}
    assert {c.name for c in sweep("quick")} <= full
    assert {c.name for c in sweep("check")} <= full
    assert {c.heads for c in sweep("quick", attn_tp_size=8)} == {16}
    tiny = sweep("tiny", dtype="float32")
    assert {c.kind for c in tiny} == {"decode", "extend", "mixed"}
    assert {c.page_size for c in tiny} == {1, 64}
    assert all(c.dtype == "float32" and c.attention_pairs < 5000 for c in tiny)
    with pytest.raises(ValueError, match="sweep must be one of"):
        sweep("huge")


def test_dp_pairs_join_an_extend_rank_with_a_decode_rank() -> None:
    pairs = dp_pairs(sweep("check"))
    assert pairs
    assert all(
        p.extend.kind == "extend" and p.extend.prefix == 0 and p.decode.kind == "decode"
        for p in pairs
    )
    with pytest.raises(ValueError, match="one extend case and one decode case"):
        DPPair(
            Case("decode", heads=1, batch=1, context=1), Case("decode", heads=1, batch=1, context=1)
        )


def test_work_axes_match_the_calibration_contract() -> None:
    assert Case("decode", heads=1, batch=4, context=100).work_axes() == {
        "batch": 4,
        "context": 100,
        "new_tokens": 0,
    }
    assert Case("extend", heads=1, new_tokens=9, prefix=7).work_axes() == {
        "batch": 1,
        "context": 7,
        "new_tokens": 9,
    }
    assert Case("mixed", heads=1, batch=2, context=5, new_tokens=9).work_axes() == {
        "batch": 2,
        "context": 5,
        "new_tokens": 9,
    }
