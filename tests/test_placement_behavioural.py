"""The behavioural probe's bookkeeping (no SGLang needed): recording, false reports, the implied label, the CLI."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dpbench.placement.behavioural import (
    CASES,
    BehaviouralPlacement,
    CaseRecord,
    RecordingDelayer,
    record_outcome,
)
from dpbench.placement.cli import app
from dpbench.placement.probe import PLACEMENT_CODES, behavioural_label


class Executor:
    """The executor signature SGLang 0.5.16 … 0.5.23 share."""

    def negotiate_should_allow_prefill(
        self,
        local_prefillable,
        running_batch=0,
        max_prefill_bs=0,
        max_running_requests=0,
        waiting_queue_len=0,
    ): ...


def test_recorder_keeps_every_call_with_defaults_and_answers_the_script():
    rec = RecordingDelayer(False, Executor)
    assert rec.negotiate_should_allow_prefill(local_prefillable=True, running_batch=3) is False
    assert rec.negotiate_should_allow_prefill(True) is False
    assert rec.calls == [
        {
            "local_prefillable": True,
            "running_batch": 3,
            "max_prefill_bs": 0,
            "max_running_requests": 0,
            "waiting_queue_len": 0,
            "verdict": False,
        },
        {
            "local_prefillable": True,
            "running_batch": 0,
            "max_prefill_bs": 0,
            "max_running_requests": 0,
            "waiting_queue_len": 0,
            "verdict": False,
        },
    ]


def test_recorder_refuses_arguments_the_real_executor_would_refuse():
    rec = RecordingDelayer(True, Executor)
    with pytest.raises(TypeError, match=r"does not accept.*queue_depth"):
        rec.negotiate_should_allow_prefill(local_prefillable=True, queue_depth=4)


@pytest.mark.parametrize(
    "told, result, false_report, pass_report",
    [
        (
            [True],
            "NO_TOKEN",
            True,
            True,
        ),  # told prefillable, then rejected for KV: the bug PR #31835 fixed
        ([], "NO_TOKEN", False, False),  # rejected before negotiating: finalize() reports False
        ([True], "OTHER", False, True),  # delayed by the verdict: not a KV rejection
        ([False], "NO_TOKEN", False, False),
    ],
)
def test_false_prefillable_report(told, result, false_report, pass_report):
    rec = RecordingDelayer(True, Executor)
    for flag in told:
        rec.negotiate_should_allow_prefill(local_prefillable=flag)
    case = record_outcome(CaseRecord("kv_budget_reject", result=result), rec)
    assert (case.false_prefillable_report, case.pass_report) == (false_report, pass_report)


def cases(
    *, gated_told: bool, verdict_negotiates: bool = True, recheck: bool = True
) -> BehaviouralPlacement:
    out = []
    for name in CASES:
        rec = CaseRecord(name)
        if name in ("kv_budget_reject", "lock_recheck_reject"):
            rec.result = "NO_TOKEN"
            rec.negotiations = [{"local_prefillable": True}] if gated_told else []
            rec.false_prefillable_report = gated_told
            if name == "lock_recheck_reject" and not recheck:
                rec.constructible, rec.reason = False, "lock did not move the budget"
        elif name in ("delay_verdict_blocks", "allow_verdict_admits"):
            rec.negotiations = [{"local_prefillable": True}] if verdict_negotiates else []
        out.append(rec)
    return BehaviouralPlacement(out)


def test_label_implied_by_the_cases():
    assert behavioural_label(cases(gated_told=True)) == "early"
    assert behavioural_label(cases(gated_told=False)) == "post-kv"
    assert behavioural_label(cases(gated_told=False, verdict_negotiates=False)) == "absent"
    # one gated case unconstructible: still decided by the other, and reported
    partial = cases(gated_told=True, recheck=False)
    assert behavioural_label(partial) == "early"
    assert partial.not_constructible == ["lock_recheck_reject"]
    assert set(PLACEMENT_CODES) == {"unknown", "early", "post-kv", "absent"}


def test_cli_static_reads_a_file(tmp_path):
    src = tmp_path / "schedule_policy.py"
    src.write_text(
        "class PrefillAdder:\n"
        "    def add_one_req(self, req, has_chunked_req, truncation_align_size):\n"
        "        if x:\n"
        "            return AddReqResult.NO_TOKEN\n"
        "        self.prefill_delayer_single_pass.negotiate_should_allow_prefill(local_prefillable=True)\n"
    )
    out = CliRunner().invoke(app, ["static", str(src)])
    assert out.exit_code == 0, out.output
    assert "post-kv" in out.output and "exits before negotiation: 1" in out.output
    bad = tmp_path / "broken.py"
    bad.write_text("class PrefillAdder(:\n")
    out = CliRunner().invoke(app, ["static", str(bad)])
    assert out.exit_code == 2 and "unknown" in out.output and "does not parse" in out.output


def test_asv_benchmark_fails_where_sglang_is_missing(monkeypatch):
    """In an environment without SGLang (the orchestrating venv) the asv suite fails naming a
    broken environment: asv installs SGLang in every env it runs, so its absence is never an
    unsupported API to skip."""
    import importlib
    import importlib.util

    from dpbench.sglang_compat.detect import BrokenEnvironment

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is importable here; the path needs an environment without it")
    from dpbench.core.paths import project_root

    monkeypatch.syspath_prepend(str(project_root()))
    bench = importlib.import_module("benchmarks.placement").Placement()
    with pytest.raises(BrokenEnvironment, match="SGLang is not installed"):
        bench.setup_cache()
