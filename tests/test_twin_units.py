"""Twin pieces that need no SGLang: config validation, the cost model, step classification, metrics, plot."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dpbench.twin.config import SchedulerSettings, TwinConfig, TwinConfigError, make_config
from dpbench.twin.cost import RankWork, RooflineModel
from dpbench.twin.metrics import classify_steps, compute, false_reports
from dpbench.twin.ranks import RankResult
from dpbench.workload.models import load_model_config


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"dp_size": 1}, "dp_size must be an integer in 2 … 16"),
        ({"dp_size": 17}, "dp_size must be an integer in 2 … 16"),
        (
            {"dispatch": "random"},
            "dispatch must be one of ('round_robin', 'shortest_queue', 'cache_aware')",
        ),
        ({"max_total_tokens_per_rank": 3}, "max_total_tokens_per_rank must be ≥ 16"),
        ({"step_exchange": "nccl"}, "step_exchange must be one of"),
        ({"deadline_s": 0}, "deadline_s must be > 0"),
    ],
)
def test_config_rejects_bad_values(kwargs, needle):
    with pytest.raises(TwinConfigError) as err:
        TwinConfig(**kwargs)
    assert needle in str(err.value)


def test_scheduler_settings_divide_global_flags_per_rank():
    s = SchedulerSettings()
    assert s.per_rank_max_running_requests(8) == 512
    with pytest.raises(TwinConfigError, match="prefill_delayer_token_usage_low_watermark"):
        SchedulerSettings(prefill_delayer_token_usage_low_watermark=1.5)


def test_default_topology_fits_deepseek_v3_on_h200():
    assert TwinConfig(dp_size=4).gpus == 8 and TwinConfig(dp_size=4).attn_tp_size == 2
    assert TwinConfig(dp_size=8).attn_tp_size == 1
    assert TwinConfig(dp_size=16).gpus == 16
    with pytest.raises(TwinConfigError, match="tp_size must be a multiple of dp_size"):
        TwinConfig(dp_size=4, tp_size=6)


def test_cross_checks_live_in_the_config():
    with pytest.raises(TwinConfigError, match="needs the delayer on"):
        make_config(enable_prefill_delayer=False, hide_delayer_from_chunked_req=True)
    with pytest.raises(TwinConfigError, match=r"idle_pass_s must be in \[0, 1\] seconds"):
        make_config(idle_pass_s=-0.001)
    assert make_config(idle_pass_s=0.0).idle_pass_s == 0.0  # the virtual clock's idle pass
    with pytest.raises(TwinConfigError, match="has no option 'dp'"):
        make_config(dp=2)


@pytest.fixture(scope="module")
def roofline():
    return RooflineModel(load_model_config("deepseek-v3"), dp_size=4)


def test_step_waits_for_the_slowest_rank(roofline):
    decode = RankWork("decode", num_reqs=64, new_tokens=64, context_tokens=64 * 6000)
    extend = RankWork(
        "extend", num_reqs=1, new_tokens=2048, context_tokens=2048, attn_pairs=2048 * 2049 // 2
    )
    pure_decode = roofline.step_time([decode] * 4)
    mixed = roofline.step_time([extend, decode, decode, decode])
    assert roofline.attention_s(extend) > roofline.attention_s(decode)
    assert mixed > pure_decode
    # the mixed step costs what its extend rank costs: swapping which rank extends changes nothing
    assert roofline.step_time([decode, decode, extend, decode]) == pytest.approx(mixed)


def test_moe_runs_over_all_ranks_tokens(roofline):
    one = RankWork("decode", num_reqs=8, new_tokens=8, context_tokens=8 * 1000)
    idle = RankWork("idle")
    # an idle rank still waits for the MoE over the other ranks' tokens
    assert roofline.step_time([one, idle, idle, idle]) < roofline.step_time([one] * 4)
    assert roofline.moe_layer_s(4000) > roofline.moe_layer_s(40)
    assert "no calibration file" in roofline.describe()


def test_decode_is_memory_bound_on_kv(roofline):
    short = RankWork("decode", num_reqs=32, new_tokens=32, context_tokens=32 * 1000)
    long = RankWork("decode", num_reqs=32, new_tokens=32, context_tokens=32 * 16000)
    assert roofline.attention_s(long) > 4 * roofline.attention_s(short) / 2


def _rank(kind, reported=None, allowed=None, admitted=None, kv=None):
    n = len(kind)
    fill = np.full(n, -1, dtype=np.int8)
    return RankResult(
        rank=0,
        steps=n,
        kind=np.asarray(kind, dtype=np.int8),
        new_tokens=np.ones(n, dtype=np.int32),
        kv_used=np.asarray(kv if kv is not None else [50] * n, dtype=np.int32),
        outcome=np.zeros(n, dtype=np.int16)
        if reported is not None
        else np.full(n, -1, dtype=np.int16),
        reported=np.asarray(reported, dtype=np.int8) if reported is not None else fill,
        allowed=np.asarray(allowed, dtype=np.int8) if allowed is not None else fill,
        admitted=np.asarray(admitted if admitted is not None else [0] * n, dtype=np.int16),
        chunk_continued=np.zeros(n, dtype=np.int8),
        pass_us=np.full(n, 100.0, dtype=np.float32),
        outcome_labels=[("all", "true", "no_wait", "false")],
        requests=[(0, 0.0, 1.0, 2.0, 10, 0)],
        retractions=0,
        kv_capacity=100,
        step_end_s=np.arange(1, n + 1, dtype=np.float64),
        step_dur_s=np.ones(n, dtype=np.float64),
        loop_wall_s=1.0,
        loop_cpu_s=0.5,
        max_prefill_bs_kind="running_max",
        waiting=np.zeros(n, dtype=np.int32),
        running=np.ones(n, dtype=np.int32),
        chunked=np.full(n, -1, dtype=np.int32),
        token_usage=np.full(n, 0.5, dtype=np.float32),
        finishing=np.full(n, -1, dtype=np.int32),
        finished=np.zeros(n, dtype=np.int32),
        admitted_idx=[[0] * int(a) for a in (admitted if admitted is not None else [0] * n)],
        token_s=[np.linspace(1.0, 2.0, 10).tolist()],
    )


def test_step_classification():
    # steps: extend+extend, decode+decode, extend+decode, idle+idle, extend+idle
    a = _rank([2, 1, 2, 0, 2])
    b = _rank([2, 1, 1, 0, 0])
    assert classify_steps([a, b]).tolist() == [0, 1, 2, 3, 0]


def test_false_report_needs_report_allow_and_no_admission():
    r = _rank([1, 1, 2, 1], reported=[1, 1, 1, 0], allowed=[1, 0, 1, 1], admitted=[0, 0, 2, 0])
    assert false_reports([r]).tolist() == [[True, False, False, False]]


def test_compute_metrics_units_and_values():
    a = _rank(
        [2, 1, 2, 1],
        reported=[1, 1, 1, 1],
        allowed=[1, 1, 1, 1],
        admitted=[1, 0, 1, 0],
        kv=[10, 20, 30, 99],
    )
    b = _rank([2, 1, 1, 1], reported=[1, 1, 1, 0], allowed=[1, 1, 1, 1], admitted=[1, 0, 0, 0])
    metrics, extra = compute([a, b], delayer_on=True)
    assert metrics["dp_mixed_step_fraction"].value == pytest.approx(1 / 4)
    assert metrics["dp_mixed_step_fraction"].unit == "fraction"
    assert metrics["false_prefillable_reports_count"].value == 4  # a: steps 1, 3; b: steps 1, 2
    assert metrics["false_report_mixed_steps_count"].value == 1
    # step 3 is mixed (a extends, b decodes): one decode rank for its 1 s; decode-rank seconds: 0+2+1+2
    assert metrics["decode_rank_s_beside_prefill"].value == pytest.approx(1.0)
    assert metrics["decode_rank_time_beside_prefill_fraction"].value == pytest.approx(1 / 5)
    assert metrics["kv_utilization_max"].value == pytest.approx(0.99)
    assert metrics["ttft_ms_p50"].value == pytest.approx(1000.0)
    assert extra["prefill_delayer_outcomes_total"][0]["count"] == 8


def test_plot_marks_mixed_steps(tmp_path):
    from dpbench.twin.plot import build_figure, write_timeline
    from dpbench.twin.run import timeline

    a = _rank([2, 1, 2], reported=[1, 1, 1], allowed=[1, 1, 1], admitted=[1, 0, 1])
    b = _rank([2, 1, 1], reported=[1, 1, 0], allowed=[1, 1, 1], admitted=[1, 0, 0])
    metrics, _ = compute([a, b], delayer_on=True)
    result = {
        "sglang": {"version": "test"},
        "placement": {"label": "early"},
        "workload": {"name": "w"},
        "metrics": {k: m.as_dict() for k, m in metrics.items()},
        "extra": {"timeline": timeline([a, b])},
    }
    fig = build_figure(result)
    mixed = next(t for t in fig.data if t.name == "DP-mixed step")
    assert list(mixed.x) == [2]
    false = next(t for t in fig.data if t.name == "false prefillable report")
    assert len(false.x) == 2
    out = write_timeline(result, tmp_path / "t.html")
    assert "<html>" in out.read_text()[:200]


def _calibration_file(path):
    from dpbench.kernels.calibration import save_calibration

    def point(kind, form, batch, context, new_tokens, prefix, median_s):
        return {
            "case": f"{kind}-{form}-{batch}-{context}-{new_tokens}-{prefix}",
            "kind": kind,
            "form": form,
            "heads": 128,
            "page_size": 1,
            "dtype": "bfloat16",
            "batch": batch,
            "context": context,
            "new_tokens": new_tokens,
            "prefix": prefix,
            "median_s": median_s,
            "quantiles_s": {},
            "bytes": 1,
            "flops": 1,
            "bandwidth_bytes_per_s": 0.0,
            "flops_per_s": 0.0,
            "copy_bandwidth_fraction": 0.0,
            "matmul_rate_fraction": 0.0,
            "rel_error": 0.0,
        }

    points = [
        point("decode", "mla", b, c, b, 0, 1e-6 * b * c / 1000)
        for b in (1, 64)
        for c in (1000, 8000)
    ]
    points += [point("extend", "mha", 1, 0, n, 0, 1e-9 * n * n) for n in (512, 4096)]
    points += [
        point("extend", "mla", 1, p, n, p, 1e-9 * n * (n + p))
        for n in (512, 4096)
        for p in (1000, 8000)
    ]
    save_calibration(
        path,
        {
            "schema": "dpbench.kernel-calibration/1",
            "device": "cpu (test)",
            "interpreter": True,
            "sglang_version": "test",
            "import_path": "test",
            "created": "2026-11-29T00:00:00Z",
            "attn_tp_size": 1,
            "heads": 128,
            "default_page_size": 1,
            "sweep": "test",
            "ceilings": {
                "copy_bytes_per_s": 1e12,
                "copy_bytes": 1,
                "matmul_flops_per_s": 1e14,
                "matmul_shape": [1, 1, 1],
                "matmul_dtype": "bf16",
                "device": "cpu",
            },
            "points": points,
        },
    )
    return path


def test_calibrated_model_reads_per_layer_attention(tmp_path):
    from dpbench.kernels.calibration import CalibrationError
    from dpbench.twin.cost import CalibratedModel, make_cost_model

    path = _calibration_file(tmp_path / "cal.json")
    model = load_model_config("deepseek-v3")
    with pytest.raises(CalibrationError, match="interpreter"):
        make_cost_model(model, 4, path)
    cal = make_cost_model(model, 4, path, allow_interpreter=True)
    assert isinstance(cal, CalibratedModel) and "calibrated attention" in cal.describe()
    roof = RooflineModel(model, 4)
    decode = RankWork("decode", num_reqs=64, new_tokens=64, context_tokens=64 * 1000)
    measured = cal.calibration.estimate_s("decode", batch=64, context=1000, new_tokens=64)
    assert measured == pytest.approx(64e-6)
    d = roof.device
    proj = roof._roof(
        2 * 64 * roof.attn_weights, roof.attn_weights * d.weight_bytes, d.gemm_efficiency
    )
    assert cal.attention_s(decode) == pytest.approx(model.num_hidden_layers * (measured + proj))
    # only attention changes: an idle step costs the same under both models
    idle = [RankWork("idle")] * 4
    assert cal.step_time(idle) == pytest.approx(roof.step_time(idle))


def test_decode_rank_seconds_weight_by_decoding_ranks():
    """A 1-extend/3-decode step weighs three times a 3/1 step; the DP-mixed fraction counts both once."""
    ranks = [_rank([2, 2]), _rank([1, 2]), _rank([1, 2]), _rank([1, 1])]
    ranks[0].step_dur_s = np.array([2.0, 0.5])
    metrics, _ = compute(ranks, delayer_on=False)
    assert metrics["dp_mixed_step_fraction"].value == 1.0
    assert metrics["decode_rank_s_beside_prefill"].value == pytest.approx(3 * 2.0 + 1 * 0.5)
    assert "false_prefillable_reports_count" not in metrics  # delayer off: not measured, absent


def test_asv_track_values_are_seed_samples_and_nan_when_unmeasured(monkeypatch):
    """asv 0.6.6 turns {"samples", "number"} into a median with a 99 % interval; unmeasured is NaN, not 0."""
    import math
    import sys
    from dataclasses import asdict
    from pathlib import Path

    from dpbench.core.asvcache import setting_key
    from dpbench.metrics.latency import Slo
    from dpbench.twin import bench

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    sys.modules.pop("benchmarks.twin", None)
    import benchmarks.twin as bt

    def run(mixed, delayer):
        m = {"dp_mixed_step_fraction": {"value": mixed}}
        if delayer:
            m["false_prefillable_reports_count"] = {"value": 3}
        return {"metrics": m, "slo": asdict(Slo())}

    setting = ("long-prompt-burst", 4, "2x")
    keys = {
        setting_key(*setting, d, s): run(0.1 * (s + 1), d == "on")
        for d in ("on", "off")
        for s in bt.SEEDS
    }
    on, off = bt.TwinHighKV(), bt.TwinHighKV()
    on.setup(keys, *setting, "on")
    off.setup(keys, *setting, "off")
    got = on.track_dp_mixed_step_fraction(keys, *setting, "on")
    assert got == {"samples": [0.1 * (s + 1) for s in bt.SEEDS], "number": 1}
    assert on.track_false_prefillable_reports()["samples"] == [3.0] * len(bt.SEEDS)
    assert math.isnan(off.track_false_prefillable_reports())
    assert "chunk16384" in bench.run_name("long-prompt-burst", 4, "2x", "on", 0)
    with pytest.raises(ValueError, match="chunked_prefill must be one of"):
        bench.run_name("long-prompt-burst", 4, "3x", "on", 0)


def test_physical_topology_splits_attention_and_charges_mixed_steps():
    model = load_model_config("deepseek-v3")
    per_rank = RooflineModel(model, dp_size=4)
    same = RooflineModel(model, dp_size=4, tp_size=4)  # one GPU per rank, stated explicitly
    physical = RooflineModel(model, dp_size=4, tp_size=8, mixed_step_charge=True)
    decode = RankWork("decode", num_reqs=64, new_tokens=64, context_tokens=64 * 6000)
    extend = RankWork(
        "extend", num_reqs=1, new_tokens=2048, context_tokens=2048, attn_pairs=2048 * 2049 // 2
    )
    assert same.step_time([decode] * 4) == per_rank.step_time([decode] * 4)
    # attention TP 2: extend attention (compute-bound) halves
    assert physical.attention_s(extend) == pytest.approx(per_rank.attention_s(extend) / 2, rel=0.05)
    # a mixed step pays the decode ranks' eager launches on top; a pure one does not
    mixed = [extend, decode, decode, decode]
    plain = RooflineModel(model, dp_size=4, tp_size=8)
    eager = model.num_hidden_layers * physical.device.eager_layer_launch_s
    assert physical.step_time(mixed) == pytest.approx(plain.step_time(mixed) + eager)
    assert physical.step_time([decode] * 4) == pytest.approx(plain.step_time([decode] * 4))
    with pytest.raises(ValueError, match="tp_size must be a multiple of dp_size"):
        RooflineModel(model, dp_size=4, tp_size=6)


def test_batch_is_full_rules_are_the_compat_layers_names():
    from dpbench.sglang_compat import scheduling
    from dpbench.twin.config import BATCH_IS_FULL_RULES

    assert set(BATCH_IS_FULL_RULES) == {
        scheduling.BATCH_IS_FULL_ALWAYS,
        scheduling.BATCH_IS_FULL_IF_ADMITTED_OR_RUNNING,
    }
    with pytest.raises(TwinConfigError, match="batch_is_full_rule must be one of"):
        SchedulerSettings(batch_is_full_rule="sometimes")
    assert make_config(batch_is_full_rule="always").scheduler.batch_is_full_rule == "always"


def test_finished_filter_rule_is_read_off_get_next_batch_to_run():
    """0.5.23 drops finished requests from the running batch at every pass; 0.5.16/0.5.17 only in
    update_running_batch, at the rank's next decode pass (source shapes as in those wheels)."""
    from dpbench.sglang_compat import scheduling
    from dpbench.twin.config import FINISHED_FILTER_RULES

    every = (
        "def update_running_batch(self, batch):\n    pass\n"
        "def get_next_batch_to_run(self):\n"
        "        running_bs = running_batch.batch_size()\n"
        "        running_batch.filter_batch()\n"
        "        if running_batch.batch_size() < running_bs:\n"
        "            running_batch.batch_is_full = False\n"
    )
    at_decode = (
        "def update_running_batch(self, batch):\n    batch.filter_batch()\n"
        "def get_next_batch_to_run(self):\n"
        "        if running_batch.is_prefill_only:\n"
        "            running_batch.filter_batch()\n"
        "            if running_batch.is_empty():\n"
    )
    assert scheduling.finished_filter_rule(every) == scheduling.FINISHED_FILTER_EVERY_PASS
    assert scheduling.finished_filter_rule(at_decode) == scheduling.FINISHED_FILTER_AT_DECODE
    with pytest.raises(scheduling.UnsupportedSGLang, match="update_running_batch"):
        scheduling.finished_filter_rule("def get_next_batch_to_run(self): pass")
    assert set(FINISHED_FILTER_RULES) == {
        scheduling.FINISHED_FILTER_EVERY_PASS,
        scheduling.FINISHED_FILTER_AT_DECODE,
    }
    with pytest.raises(TwinConfigError, match="finished_filter_rule must be one of"):
        SchedulerSettings(finished_filter_rule="never")


@pytest.mark.parametrize(
    "arm, modes",
    [
        ("0.5.16:finished-filter=every_pass", {"finished_filter_rule": "every_pass"}),
        ("0.5.16:no-chunk-reset", {"chunk_merge_resets_batch_is_full": False}),
        ("0.5.16:batch-is-full=if_admitted_or_running",
         {"batch_is_full_rule": "if_admitted_or_running"}),
        ("0.5.17:ablation,no-overlap",
         {"hide_delayer_from_chunked_req": True, "overlap_schedule": False}),
        ("0.5.16:conservativeness=2", {"schedule_conservativeness": 2.0}),
        ("0.5.16:overlap_schedule=false,dp_size=3", {"overlap_schedule": False, "dp_size": 3}),
    ],
)  # fmt: skip
def test_sweep_arms_turn_into_config_options(arm, modes):
    from dpbench.twin.job import arm_overrides

    assert arm_overrides(arm) == (arm.partition(":")[0], modes)


@pytest.mark.parametrize(
    "arm, needle",
    [
        (
            "0.5.16:batch-is-full=never",
            "batch_is_full_rule= takes one of always, if_admitted_or_running",
        ),
        ("0.5.16:conservativeness=high", "schedule_conservativeness= takes a float"),
        ("0.5.16:fast", "want NAME=VALUE"),
        ("0.5.16:dp=2", "want NAME=VALUE with NAME one of"),
        (":ablation", "no release before ':'"),
    ],
)
def test_a_bad_sweep_arm_names_what_exists(arm, needle):
    from dpbench.twin.job import arm_overrides

    with pytest.raises(ValueError, match=re.escape(needle)):
        arm_overrides(arm)


def test_replayed_arrivals_go_to_the_rank_the_server_chose():
    from dpbench.twin.ranks import Arrivals, Dispatcher

    arrivals = Arrivals(
        ids=("a", "b", "c"),
        arrival_s=np.array([0.1, 0.2, 0.3]),
        input_len=np.array([8, 8, 8]),
        max_new_tokens=np.array([2, 2, 2]),
        ignore_eos=True,
        token_ids=lambda i: [1] * 8,
        rank=np.array([1, 1, 0]),
    )
    taken = {r: Dispatcher(arrivals, 2, r, "round_robin").take(0.25) for r in (0, 1)}
    assert taken == {0: [], 1: [0, 1]}  # round robin would have split a and b


def _trace(n):
    from types import SimpleNamespace

    return [SimpleNamespace(id=f"r{i}", arrival_s=0.1 * i) for i in range(n)]


@pytest.mark.parametrize(
    "content, needle",
    [
        ("not json", "cannot read it as JSON"),
        ('{"extra": {}}', "without extra.scheduler_arrivals"),
        ('{"r0": [0.0, 0]}', "1 of the trace's 2 requests have no arrival there (first: r1)"),
        ('{"r0": [0.0, 0], "r1": [0.5, 2]}', "want seconds ≥ 0 and a rank in 0 … 1"),
    ],
)
def test_bad_replayed_arrivals_are_named(tmp_path, content, needle):
    from dpbench.twin.run import load_replay

    path = tmp_path / "arrivals.json"
    path.write_text(content)
    with pytest.raises(TwinConfigError, match=re.escape(needle)):
        load_replay(str(path), _trace(2), 2)


def test_replayed_arrivals_read_from_a_server_result(tmp_path):
    import json

    from dpbench.twin.run import load_replay

    path = tmp_path / "run.json"
    path.write_text(
        json.dumps({"extra": {"scheduler_arrivals": {"r0": [0.3, 1], "r1": [0.05, 0]}}})
    )
    assert load_replay(str(path), _trace(2), 2) == {"r0": (0.3, 1), "r1": (0.05, 0)}


def test_skip_finishing_decode_is_read_off_update_running_batch():
    """0.5.23's overlap loop leaves requests finishing in flight out of the next decode (and skips
    a decode that does not fit while they hold KV); 0.5.16/0.5.17 decode them once more."""
    from dpbench.sglang_compat import scheduling

    new = (
        "def event_loop_overlap(self):\n        self.enable_skip_finishing_decode = True\n"
        "def _reqs_finishing_inflight(self, batch):\n    return []\n"
        "def update_running_batch(self, batch):\n"
        "        finishing_reqs = self._reqs_finishing_inflight(batch)\n"
        "        batch.filter_batch(reqs_to_exclude=finishing_reqs)\n"
    )
    old = "def update_running_batch(self, batch):\n    batch.filter_batch()\n"
    assert scheduling.skip_finishing_decode_rule(new) is True
    assert scheduling.skip_finishing_decode_rule(old) is False
    half = "def _reqs_finishing_inflight(self, batch):\n    return []\n" + old
    with pytest.raises(scheduling.UnsupportedSGLang, match="not both"):
        scheduling.skip_finishing_decode_rule(half)
    assert make_config(skip_finishing_decode=False).scheduler.skip_finishing_decode is False
