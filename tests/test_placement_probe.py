"""The placement probe on the real wheels: 0.5.16 negotiates early, 0.5.17 and 0.5.23 after the KV gates."""

from __future__ import annotations

import json

import pytest
from conftest import release_run

from dpbench.core import results

EXPECTED = {
    # version: (label, code, false prefillable reports, chunked negotiates)
    "0.5.16": ("early", 1, 2, 0),
    "0.5.17": ("post-kv", 2, 0, 1),
    "0.5.23": ("post-kv", 2, 0, 1),
}


@pytest.fixture(scope="module")
def probed():
    from dpbench.envs import run_in_env

    cache: dict[str, dict] = {}

    def get(version: str) -> dict:
        if version not in cache:
            proc = run_in_env(version, "dpbench.placement.probe", ["--json"], timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]
            cache[version] = results.validate(json.loads(proc.stdout), source=f"probe {version}")
        return cache[version]

    return get


def value(result: dict, name: str) -> float:
    return result["metrics"][name]["value"]


@pytest.mark.sglang
@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_probe_labels_and_counts(version, probed):
    label, code, false_reports, chunked = EXPECTED[version]
    r = probed(version)
    assert r["tier"] == "placement"
    assert r["sglang"]["version"] == version
    assert r["sglang"]["generation"].startswith("g0.5.")  # never None
    assert r["placement"]["label"] == label
    assert r["placement"]["static"]["label"] == label
    assert r["placement"]["behavioural_label"] == label
    assert value(r, "placement_code") == code
    assert value(r, "false_prefillable_reports") == false_reports
    assert value(r, "chunked_negotiates") == chunked
    assert r["metrics"]["false_prefillable_reports"]["unit"] == "reports"


@pytest.mark.sglang
@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_every_case_is_built_from_sglangs_own_objects(version, probed):
    r = probed(version)
    objects = r["extra"]["objects"]
    for piece in ("adder", "allocator", "tree_cache", "req"):
        assert objects[piece].startswith("sglang."), (piece, objects[piece])
    # the only two stand-ins, both documented
    assert objects["delayer"] == "dpbench.placement.behavioural.RecordingDelayer"
    assert objects["running_batch"] == "dpbench.sglang_compat.adder.RunningBatch"
    if r["sglang"]["variants"]["PrefillAdder budget"] == "prefill_budget":
        assert objects["prefill_budget"] == "sglang.srt.mem_cache.prefill_budget.PrefillBudget"
    cases = {c["case"]: c for c in r["extra"]["cases"]}
    assert all(c["constructible"] for c in cases.values()), [c["reason"] for c in cases.values()]


@pytest.mark.sglang
def test_what_the_delayer_heard_before_and_after_pr31835(probed):
    before = {c["case"]: c for c in probed("0.5.16")["extra"]["cases"]}
    after = {c["case"]: c for c in probed("0.5.17")["extra"]["cases"]}
    for case in ("kv_budget_reject", "lock_recheck_reject"):
        # 0.5.16 told the delayer "prefillable" and then rejected the request for KV budget
        assert [n["local_prefillable"] for n in before[case]["negotiations"]] == [True]
        assert before[case]["result"] == "NO_TOKEN" and before[case]["false_prefillable_report"]
        # 0.5.17 rejects without negotiating; finalize() reports not-prefillable
        assert after[case]["negotiations"] == [] and after[case]["pass_report"] is False
        assert after[case]["result"] == "NO_TOKEN"
    recheck = after["lock_recheck_reject"]["detail"]
    # the re-check case really is decided by the lock: fits unlocked, not locked
    assert recheck["rem_total_locked"] <= recheck["need_tokens"] < recheck["rem_total_unlocked"]
    # chunked: 0.5.17 reports prefillable and continues the chunk despite a delay verdict
    assert [n["local_prefillable"] for n in after["chunked"]["negotiations"]] == [True]
    assert after["chunked"]["verdict"] is False and after["chunked"]["admitted"] is True
    assert before["chunked"]["negotiations"] == []
    for version in (before, after):  # pass 2 continues where pass 1's chunk ended
        assert (
            version["chunked"]["detail"]["pass2_extend_from"]
            == version["chunked"]["detail"]["computed_after_pass1"]
        )
        assert version["chunked"]["detail"]["pass2_extend_tokens"] > 0
    for version in (before, after):
        assert version["delay_verdict_blocks"]["admitted"] is False
        assert version["allow_verdict_admits"]["admitted"] is True


UNREADABLE_STATIC = """
import json, sys
from dpbench.placement import probe
from dpbench.sglang_compat import negotiation
probe.static.analyse_installed = lambda: negotiation.analyse_source(
    "class PrefillAdder(:\\n", origin="broken.py")
print(json.dumps(probe.build_result()))
"""


@pytest.mark.sglang
def test_a_failed_static_reading_says_unknown_with_its_reason_never_a_count(release_env):

    env = release_env("0.5.23")
    proc = release_run([str(env.python), "-c", UNREADABLE_STATIC], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    # no "0 KV exits" (which reads exactly like an early placement): the metric is absent
    assert "kv_exits_before_negotiation" not in r["metrics"]
    assert r["placement"]["static"]["label"] == "unknown"
    assert r["placement"]["static"]["kv_exits_before_negotiation"] is None
    assert any("static analysis: unknown (does not parse" in n for n in r["notes"])
    # the label comes from the behavioural probe, and says so
    assert (r["placement"]["label"], r["placement"]["source"]) == ("post-kv", "behavioural")
    assert r["sglang"]["generation"] == "g0.5.22-0.5.23"


def test_static_absent_and_unknown_carry_no_exit_count():
    from dpbench.sglang_compat.negotiation import analyse_source
    from dpbench.sglang_compat.provenance import detected_placement

    absent = analyse_source(
        "class PrefillAdder:\n"
        "    def add_one_req(self, req, has_chunked_req, truncation_align_size):\n"
        "        if req.x > self.rem_total_tokens:\n"
        "            return AddReqResult.NO_TOKEN\n"
        "        return AddReqResult.CONTINUE\n"
    )
    assert (absent.label, absent.kv_exits_before_negotiation) == ("absent", None)
    block = detected_placement(absent)
    assert block["label"] == "absent" and block["kv_exits_before_negotiation"] is None
    assert "never calls negotiate_should_allow_prefill" in block["reason"]
    unknown = detected_placement(analyse_source("x = (\n"))
    assert unknown["label"] == "unknown" and "does not parse" in unknown["reason"]
    assert unknown["kv_exits_before_negotiation"] is None
