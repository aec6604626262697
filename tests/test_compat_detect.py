"""API-generation detection from signatures: known shapes match, unknown ones name what differs."""

from __future__ import annotations

import subprocess
import textwrap
from types import SimpleNamespace

import pytest

from dpbench.sglang_compat.detect import GENERATIONS, UnsupportedSGLang, detect, observe


def fake_api(
    *, budget_api: bool, finalize_kw: str, delayer_required: tuple[str, ...]
) -> SimpleNamespace:
    """Classes with the signatures SGLang's have (bodies empty): detection must read only shapes."""

    class PrefillAdder:
        def __init__(
            self,
            page_size,
            tree_cache,
            token_to_kv_pool_allocator,
            running_batch,
            new_token_ratio,
            rem_input_tokens,
            rem_chunk_tokens,
            num_mixed_decode_tokens=0,
            max_prefill_bs=0,
            max_running_requests=None,
            prefill_delayer_single_pass=None,
            waiting_queue_len=0,
        ): ...
        def add_one_req(self, req, has_chunked_req, truncation_align_size): ...
        def add_chunked_req(self, req): ...

    class TokenToKVPoolAllocator:
        def __init__(self, size, dtype, device, kvcache, need_sort): ...

    if budget_api:
        TokenToKVPoolAllocator.create_prefill_budget = (
            lambda self, tree_cache, *, num_mixed_decode_tokens=0: None
        )

    class Req:
        def __init__(
            self, rid, origin_input_text, origin_input_ids, sampling_params, return_logprob=False
        ): ...
        def init_next_round_input(self, tree_cache=None, cow_mamba=None): ...

    class RadixCache:
        @classmethod
        def create_simulated(cls, disable=False, mock_allocator=None, page_size=1): ...

    ns: dict = {}
    exec(f"def __init__(self, {', '.join(delayer_required)}, metrics_collector=None): ...", ns)
    PrefillDelayer = type("PrefillDelayer", (), {"__init__": ns["__init__"]})
    exec(f"def finalize(self, *, {finalize_kw}): ...", ns)

    class PrefillDelayerSinglePassExecutor:
        finalize = ns["finalize"]

        def __init__(self, prefill_delayer, token_usage): ...
        def negotiate_should_allow_prefill(
            self,
            local_prefillable,
            running_batch=0,
            max_prefill_bs=0,
            max_running_requests=0,
            waiting_queue_len=0,
        ): ...

    return SimpleNamespace(
        PrefillAdder=PrefillAdder,
        TokenToKVPoolAllocator=TokenToKVPoolAllocator,
        Req=Req,
        RadixCache=RadixCache,
        PrefillDelayer=PrefillDelayer,
        PrefillDelayerSinglePassExecutor=PrefillDelayerSinglePassExecutor,
        AddReqResult=None,
    )


OLD_DELAYER = (
    "dp_size",
    "attn_tp_size",
    "cpu_group",
    "server_args",
    "max_delay_passes",
    "token_usage_low_watermark",
)
NEW_DELAYER = ("max_delay_passes", "token_usage_low_watermark")


def test_known_shapes_are_recognised_without_version_strings():
    old = fake_api(budget_api=False, finalize_kw="actual_prefill", delayer_required=OLD_DELAYER)
    new = fake_api(budget_api=True, finalize_kw="actual_prefill_bs", delayer_required=NEW_DELAYER)
    assert detect(old).name == "g2026_07"
    assert detect(new).name == "g2026_10"


def test_unknown_shape_names_the_feature_that_differs_and_what_is_supported():
    odd = fake_api(
        budget_api=True, finalize_kw="actual_prefill_tokens", delayer_required=NEW_DELAYER
    )
    with pytest.raises(UnsupportedSGLang) as info:
        detect(odd)
    msg = str(info.value)
    assert "PrefillDelayerSinglePassExecutor.finalize" in msg
    assert "expected (actual_prefill_bs), found (actual_prefill_tokens)" in msg
    assert all(g.name in msg for g in GENERATIONS)


def test_component_subset_ignores_the_delayer_for_the_placement_tier():
    odd = fake_api(
        budget_api=True, finalize_kw="actual_prefill_tokens", delayer_required=("cpu_group",)
    )
    found = detect(odd, components=("adder",))
    assert (found.name, found.compared) == ("g2026_10", ("adder",))
    with pytest.raises(ValueError, match="allowed"):
        detect(odd, components=("scheduler",))


def test_missing_method_is_reported_not_crashed():
    api = fake_api(budget_api=False, finalize_kw="actual_prefill", delayer_required=OLD_DELAYER)
    del api.PrefillAdder.add_chunked_req
    assert observe(api)["PrefillAdder.add_chunked_req"].startswith("missing")
    with pytest.raises(UnsupportedSGLang, match=r"PrefillAdder\.add_chunked_req"):
        detect(api)


@pytest.mark.sglang
def test_real_release_with_a_changed_signature_is_refused_by_the_probe(release_env):
    """Inside the 0.5.23 environment, change PrefillAdder.add_one_req's signature: the probe exits 3 naming it."""
    env = release_env("0.5.23")
    script = textwrap.dedent("""
        import sys
        from sglang.srt.managers import schedule_policy
        def add_one_req(self, req, has_chunked_req, truncation_align_size, budget_view): ...
        schedule_policy.PrefillAdder.add_one_req = add_one_req
        from dpbench.placement import probe
        sys.exit(probe.main(["--json"]))
    """)
    proc = subprocess.run(
        [str(env.python), "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert (
        "PrefillAdder.add_one_req: expected (req, has_chunked_req, truncation_align_size)"
        in proc.stderr
    )
    assert "budget_view" in proc.stderr
