"""API-generation detection from signatures: known shapes match, unknown ones name what differs."""

from __future__ import annotations

import linecache
import re
import textwrap
from types import SimpleNamespace

import pytest
from conftest import release_run

from dpbench.sglang_compat.delayer import detect_generation
from dpbench.sglang_compat.detect import UnsupportedSGLang, detect, observe, variant
from dpbench.sglang_compat.generations import FEATURES, RELEASES, generation_for, generations


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
        if budget_api:

            def __init__(
                self,
                rid,
                origin_input_text,
                origin_input_ids,
                sampling_params,
                return_logprob=False,
            ):
                self.prefix_len = 0
                self.extend_end = None

        else:

            def __init__(
                self,
                rid,
                origin_input_text,
                origin_input_ids,
                sampling_params,
                return_logprob=False,
            ):
                self.prefix_indices = []

        def init_next_round_input(self, tree_cache=None, cow_mamba=None): ...

        if not budget_api:

            def set_extend_range(self, start, end): ...

    class RadixCache:
        @classmethod
        def create_simulated(cls, disable=False, mock_allocator=None, page_size=1): ...

    ns: dict = {}
    # where the delayer reads DP attention from: its own server_args (old) or the runtime context
    flag = "get_parallel().enable_dp_attention" if budget_api else "server_args.enable_dp_attention"
    init_src = (
        f"def __init__(self, {', '.join(delayer_required)}, metrics_collector=None):\n"
        f"    self.enable_dp_attention = {flag}\n"
    )
    filename = f"<fake PrefillDelayer {id(ns)}>"
    linecache.cache[filename] = (len(init_src), None, init_src.splitlines(True), filename)
    exec(compile(init_src, filename, "exec"), ns)
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
        # the newer shapes (0.5.22-0.5.23) or the older ones (0.5.15-0.5.16)
        runtime_context=SimpleNamespace(publish=print)
        if budget_api
        else SimpleNamespace(RuntimeContext=type("RuntimeContext", (), {"set_server_args": print})),
        delayer_module=SimpleNamespace(RecentPrefillBatchSizeTracker=object)
        if budget_api
        else SimpleNamespace(),
        scheduler_source="self.max_prefill_bs = max(self.max_prefill_bs, bs)\n",
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
    assert detect(old).variant("PrefillDelayer.__init__") == "args"
    assert detect(old).variant("PrefillAdder budget") == "adder_offsets"
    assert detect(new).variant("PrefillDelayer.__init__") == "runtime_context"
    assert detect(new).variant("PrefillDelayerSinglePassExecutor.finalize") == "actual_prefill_bs"
    assert variant("PrefillAdder budget", new) == "prefill_budget"


def test_unknown_shape_is_one_line_naming_the_feature_and_every_known_variant():
    odd = fake_api(
        budget_api=True, finalize_kw="actual_prefill_tokens", delayer_required=NEW_DELAYER
    )
    with pytest.raises(UnsupportedSGLang) as info:
        detect(odd)
    msg = str(info.value)
    assert "\n" not in msg
    assert "PrefillDelayerSinglePassExecutor.finalize is (actual_prefill_tokens)" in msg
    assert "actual_prefill (actual_prefill; 0.5.14-0.5.17)" in msg
    assert "actual_prefill_bs (actual_prefill_bs; 0.5.18-0.5.23)" in msg


def test_component_subset_ignores_the_delayer_for_the_placement_tier():
    odd = fake_api(
        budget_api=True, finalize_kw="actual_prefill_tokens", delayer_required=("cpu_group",)
    )
    found = detect(odd, components=("adder",))
    assert found.compared == ("adder",)
    assert "PrefillDelayer.__init__" not in found.variants
    with pytest.raises(ValueError, match="allowed"):
        detect(odd, components=("scheduler",))


def test_missing_method_is_reported_not_crashed():
    api = fake_api(budget_api=False, finalize_kw="actual_prefill", delayer_required=OLD_DELAYER)
    del api.PrefillAdder.add_chunked_req
    assert observe(api)["PrefillAdder.add_chunked_req"].startswith("missing")
    with pytest.raises(UnsupportedSGLang, match=r"PrefillAdder\.add_chunked_req"):
        detect(api)


def test_a_release_without_the_delayer_reads_as_such_for_the_adder_and_is_refused_for_the_delayer():
    api = fake_api(budget_api=False, finalize_kw="actual_prefill", delayer_required=OLD_DELAYER)

    def no_delayer_init(
        self,
        page_size,
        tree_cache,
        token_to_kv_pool_allocator,
        running_batch,
        new_token_ratio,
        rem_input_tokens,
        rem_chunk_tokens,
        max_prefill_bs=0,
    ): ...

    api.PrefillAdder.__init__ = no_delayer_init
    api.PrefillDelayer = api.PrefillDelayerSinglePassExecutor = None
    assert (
        detect(api, components=("adder",)).variant("PrefillAdder.__init__ keywords") == "no_delayer"
    )
    with pytest.raises(UnsupportedSGLang, match=r"PrefillDelayer\.__init__ is \(absent"):
        detect(api)


def test_the_table_covers_every_release_with_exactly_one_variant_per_feature():
    for f in FEATURES:
        for release in RELEASES:
            holders = [v.name for v in f.variants if release in v.releases]
            assert len(holders) == 1, (f.key, release, holders)
    names = [g.name for g in generations()]
    assert names == [
        "g0.5.14",
        "g0.5.15-0.5.16",
        "g0.5.17",
        "g0.5.18",
        "g0.5.19-0.5.20",
        "g0.5.21",
        "g0.5.22-0.5.23",
    ]
    assert [g.name for g in generations(("adder",))] == [
        "g0.5.14",
        "g0.5.15-0.5.16",
        "g0.5.17-0.5.20",
        "g0.5.21",
        "g0.5.22-0.5.23",
    ]


def test_a_new_combination_of_known_variants_is_named_by_its_variants():
    want = dict(generations()[-1].variants)
    want["PrefillDelayer.__init__"] = "args"
    gen = generation_for(want)
    assert gen.releases == ()
    assert "PrefillDelayer.__init__=args" in gen.name


def test_the_delayer_adapter_reads_its_generation_from_the_table():
    for required, name in (
        (OLD_DELAYER, "args"),
        (
            (
                "dp_size",
                "attn_tp_size",
                "cpu_group",
                "max_delay_passes",
                "token_usage_low_watermark",
            ),
            "sizes_group",
        ),
        (("cpu_group", "max_delay_passes", "token_usage_low_watermark"), "group"),
        (NEW_DELAYER, "runtime_context"),
    ):
        api = fake_api(budget_api=False, finalize_kw="actual_prefill", delayer_required=required)
        assert detect_generation(api.PrefillDelayer) == name
    odd = fake_api(budget_api=False, finalize_kw="actual_prefill", delayer_required=("group", "x"))
    with pytest.raises(UnsupportedSGLang, match="known: args"):
        detect_generation(odd.PrefillDelayer)


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
    proc = release_run([str(env.python), "-c", script], timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert (
        "PrefillAdder.add_one_req is (req, has_chunked_req, truncation_align_size, budget_view)"
        in proc.stderr
    )
    assert (
        "known: common (req, has_chunked_req, truncation_align_size; 0.5.14-0.5.23)" in proc.stderr
    )


@pytest.mark.parametrize(
    "exc, kind, needle",
    [
        (ModuleNotFoundError("No module named 'sglang.srt.managers.schedule_policy'",
                             name="sglang.srt.managers.schedule_policy"),
         "UnsupportedSGLang", "SGLang has no module sglang.srt.managers.schedule_policy"),
        (ImportError("cannot import name 'PrefillAdder' from 'sglang.srt.managers.schedule_policy'",
                     name="sglang.srt.managers.schedule_policy"),
         "UnsupportedSGLang", "lacks a name the suite drives"),
        (ModuleNotFoundError("No module named 'torchvision'", name="torchvision"),
         "BrokenEnvironment", "torchvision"),
        (ModuleNotFoundError("No module named 'sglang'", name="sglang"),
         "BrokenEnvironment", "SGLang is not installed"),
        (ImportError("libcudart.so.12: cannot open shared object file", name="sgl_kernel"),
         "BrokenEnvironment", "libcudart"),
    ],
)  # fmt: skip
def test_only_sglangs_own_missing_modules_are_an_unsupported_shape(monkeypatch, exc, kind, needle):
    """A broken environment (SGLang absent, a dependency failing) fails; only a module or name of
    SGLang's own that is not there is an API shape the suite does not know (a skip)."""
    from dpbench.sglang_compat import detect as d

    def load():
        raise exc

    monkeypatch.setattr(d, "load_api", load)
    monkeypatch.setattr(d, "_INSTALLED", {})
    with pytest.raises(getattr(d, kind), match=re.escape(needle)):
        d.detect()
    assert issubclass(d.BrokenEnvironment, RuntimeError)
    assert not issubclass(d.BrokenEnvironment, d.UnsupportedSGLang)
