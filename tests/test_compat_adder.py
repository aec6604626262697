"""AdderKit inside real release environments: SGLang's own objects, the documented API, clear errors."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import release_run

SCRIPT = textwrap.dedent("""
    import json
    from dpbench.sglang_compat.adder import AdderKit
    kit = AdderKit()
    out = {"generation": kit.generation.name, "budget_api": kit.uses_prefill_budget}
    alloc = kit.new_allocator(1000)
    tree = kit.new_tree_cache(alloc)
    out["inserted"] = kit.insert_prefix(tree, alloc, list(range(1, 101)))
    out["inserted_again"] = kit.insert_prefix(tree, alloc, list(range(1, 121)))
    adder = kit.new_adder(allocator=alloc, tree_cache=tree, running_batch=kit.new_running_batch(),
                          rem_input_tokens=4096, rem_chunk_tokens=None)
    out["budget"] = kit.budget(adder)
    req = kit.new_req("r", list(range(1, 101)) + [7] * 50, max_new_tokens=10, ignore_eos=False)
    out["result"] = kit.add_one_req(adder, req).name
    out["is_sglang_enum"] = type(kit.AddReqResult.CONTINUE).__module__
    out["admitted"] = [r.rid for r in adder.can_run_list]
    out["budget_after"] = kit.budget(adder)
    chunk_adder = kit.new_adder(allocator=alloc, tree_cache=tree, running_batch=kit.new_running_batch(),
                                rem_input_tokens=4096, rem_chunk_tokens=64)
    long_req = kit.new_req("long", [9] * 200, max_new_tokens=10, ignore_eos=False)
    kit.add_one_req(chunk_adder, long_req)
    out["chunked"] = chunk_adder.new_chunked_req is long_req
    free_before = alloc.available_size()
    out["completed"] = kit.complete_extend(long_req, alloc)
    out["slots_taken"] = free_before - alloc.available_size()
    out["computed"] = kit.computed_tokens(long_req)
    errors = []
    for bad in (lambda: kit.new_allocator(0), lambda: kit.new_req("e", [], 1)):
        try:
            bad()
        except ValueError as exc:
            errors.append(str(exc))
    out["errors"] = errors
    print(json.dumps(out))
""")


@pytest.mark.sglang
@pytest.mark.parametrize(
    "version, generation", [("0.5.16", "g0.5.15-0.5.16"), ("0.5.23", "g0.5.22-0.5.23")]
)
def test_adder_kit_in_release(version, generation, release_env):
    env = release_env(version)
    proc = release_run([str(env.python), "-c", SCRIPT], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["generation"] == generation
    assert out["budget_api"] is (version == "0.5.23")
    # 100 tokens cached, then 20 more: the tree keeps one copy of the shared 100
    assert (out["inserted"], out["inserted_again"]) == (100, 20)
    assert out["budget"]["evictable_tokens"] == 120
    assert out["budget"]["free_slots"] == 880
    assert out["budget"]["rem_total_tokens"] == 1000  # free + evictable
    assert out["result"] == "CONTINUE" and out["admitted"] == ["r"]
    assert out["is_sglang_enum"] == "sglang.srt.managers.schedule_policy"
    # 50 new tokens + 10 decode + 1 page reserved against the remaining total
    assert out["budget_after"]["rem_total_tokens"] == 1000 - 100 - 61
    # a chunked prefill: the first 64 tokens admitted, then "computed" with real slots
    assert out["chunked"] is True
    assert out["completed"] == out["slots_taken"] == out["computed"] == 64
    assert "positive number of tokens" in out["errors"][0]
    assert "at least one input token" in out["errors"][1]
