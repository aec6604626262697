"""Twin vs simulated-forward server: the comparison rows (unit) — the real runs are in test_server_simulated."""

from __future__ import annotations

import math

import pytest

from dpbench.server.fidelity import Inputs, compare, run_stem


def _result(**metrics):
    return {"metrics": {k: {"value": v} for k, v in metrics.items()}}


def test_rows_hold_the_server_spread_and_the_paired_replay_difference():
    twin = _result(dp_mixed_step_fraction=0.02, ttft_ms_p50=100.0)
    servers = [
        _result(dp_mixed_step_fraction=0.01, ttft_ms_p50=110.0),
        _result(dp_mixed_step_fraction=0.03, ttft_ms_p50=130.0),
    ]
    replays = [
        _result(dp_mixed_step_fraction=0.012, ttft_ms_p50=100.0),
        _result(dp_mixed_step_fraction=0.026, ttft_ms_p50=140.0),
    ]
    rows = {r["metric"]: r for r in compare(twin, servers, replays)}
    mixed = rows["DP-mixed step fraction"]
    assert mixed["server"] == pytest.approx(0.02) and mixed["server_runs"] == [0.01, 0.03]
    assert mixed["diff"] == pytest.approx(0.0) and mixed["within_range"]
    # paired: (0.01 − 0.012 + 0.03 − 0.026) / 2
    assert mixed["replay_diff"] == pytest.approx(0.001)
    ttft = rows["TTFT p50"]
    assert ttft["rel"] == pytest.approx(0.2)  # server mean 120 over the twin's 100
    assert ttft["replay_diff"] == pytest.approx(0.0) and ttft["replay_rel"] == pytest.approx(0.0)
    assert ttft["server_sd"] == pytest.approx(math.sqrt(200))
    # a metric neither side measured stays NaN, never 0
    verdicts = rows["delay-verdict fraction, passes with a prefillable rank"]
    assert math.isnan(verdicts["twin"]) and math.isnan(verdicts["server"])
    assert math.isnan(verdicts["replay_diff"]) and not verdicts["within_range"]


def test_repeats_must_be_positive():
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        Inputs(spec="long-prompt-burst-small", dp=2, release="0.5.23", repeats=0)


def test_a_device_sync_the_clock_cannot_run_is_refused():
    with pytest.raises(ValueError, match="device_sync must be one of"):
        Inputs(spec="long-prompt-burst-small", dp=2, release="0.5.23", device_sync="late")
    with pytest.raises(ValueError, match="--clock virtual needs --device-sync group"):
        Inputs(spec="long-prompt-burst-small", dp=2, clock="virtual", device_sync="own")
    assert Inputs(spec="long-prompt-burst-small", dp=2, device_sync="group").device_sync == "group"


def test_a_pass_charge_the_clock_cannot_run_is_refused():
    """Measured or fixed charges are the virtual clock's; measured excludes a fixed time. The
    same refusals hold for a run's options and for the simulated forward's own config."""
    from dpbench.server.options import RunOptions, RunOptionsError
    from dpbench.sglang_compat.simforward.config import SimForwardConfig

    lpb = "long-prompt-burst-small"
    with pytest.raises(ValueError, match="--pass-charge-ms and --pass-charge need --clock virtual"):
        Inputs(spec=lpb, dp=2, pass_charge="measured")
    with pytest.raises(ValueError, match="measured excludes --pass-charge-ms"):
        Inputs(spec=lpb, dp=2, clock="virtual", pass_charge="measured", pass_charge_ms=1.0)
    with pytest.raises(ValueError, match="pass_charge must be one of"):
        Inputs(spec=lpb, dp=2, clock="virtual", pass_charge="guessed")
    sim = {"spec": lpb, "simulate_forward": True}
    with pytest.raises(RunOptionsError, match="--pass-charge need --clock virtual"):
        RunOptions(**sim, pass_charge="measured")
    with pytest.raises(RunOptionsError, match="measured excludes --pass-charge-ms"):
        RunOptions(**sim, clock="virtual", pass_charge="measured", pass_charge_ms=2.0)
    conf = {"record_dir": "r", "cost_factory": "m:f", "device_sync": "group"}
    with pytest.raises(ValueError, match="needs the virtual clock and no fixed pass_charge_s"):
        SimForwardConfig(**conf, pass_charge="measured")
    with pytest.raises(ValueError, match="needs the virtual clock and no fixed pass_charge_s"):
        SimForwardConfig(**conf, clock="virtual", pass_charge="measured", pass_charge_s=0.001)
    ok = SimForwardConfig(**conf, clock="virtual", pass_charge="measured")
    assert ok.pass_charge == "measured"


def test_the_paired_replay_difference_has_its_interval():
    twin = _result(dp_mixed_step_fraction=0.02)
    servers = [_result(dp_mixed_step_fraction=0.01), _result(dp_mixed_step_fraction=0.03)]
    replays = [_result(dp_mixed_step_fraction=0.012), _result(dp_mixed_step_fraction=0.026)]
    (mixed,) = [r for r in compare(twin, servers, replays) if r["metric"].startswith("DP-mixed")]
    half = 12.7062 * 0.006 / math.sqrt(2) / math.sqrt(2)  # t(1) × sd(−0.002, +0.004) / √2
    assert mixed["replay_ci95"] == pytest.approx([0.001 - half, 0.001 + half], rel=1e-3)


def test_the_servers_idle_pass_is_the_mean_after_the_first_trace_arrival(tmp_path):
    from dpbench.server.fidelity import server_idle_pass_ms

    (tmp_path / "arrivals-rank0.jsonl").write_text(
        '{"rid": "warmup", "t": 90.0}\n{"rid": "r0", "t": 100.0}\n'
    )
    (tmp_path / "idle-passes-rank1.jsonl").write_text(
        '{"t": 95.0, "s": 1.0}\n{"t": 100.1, "s": 0.002}\n{"t": 100.2, "s": 0.004}\n'
    )
    server = {"extra": {"step_records_dir": str(tmp_path), "scheduler_arrivals": {"r0": [0, 0]}}}
    assert server_idle_pass_ms(server, 2) == pytest.approx(3.0)  # the warm-up's pass left out
    assert math.isnan(server_idle_pass_ms({"extra": {}}, 2))  # not measured: NaN, not 0


def test_run_files_of_a_delayer_off_setting_never_meet_the_delayer_on_ones():
    """Every input that changes a run is in its file name, so ``--no-delayer`` neither
    overwrites nor (with ``--reuse-server-runs``) reuses a delayer-on server run."""
    on = Inputs(spec="long-prompt-burst", dp=4, release="0.5.16", chunked_prefill_size=8192)
    off = Inputs(
        spec="long-prompt-burst", dp=4, release="0.5.16", chunked_prefill_size=8192, delayer=False
    )
    serial = Inputs(
        spec="long-prompt-burst",
        dp=4,
        release="0.5.16",
        chunked_prefill_size=8192,
        serial_forward=True,
    )
    stems = {run_stem(on), run_stem(off), run_stem(serial)}
    assert len(stems) == 3
    assert run_stem(on) == "long-prompt-burst-dp4-chunk8192-sglang0.5.16"  # stored runs still found
    assert "nodelayer" in run_stem(off)


def test_every_input_but_the_repeat_count_names_the_run_files():
    """Built from the schema: changing any field of Inputs (but ``repeats``, whose runs are
    numbered) changes the stem, so no input can be left out of the file names."""
    import dataclasses

    from dpbench.core.schema import replace

    base = Inputs(spec="long-prompt-burst", dp=4, release="0.5.16", chunked_prefill_size=8192)
    changed = {
        "spec": "agentic-multiturn", "dp": 8, "release": "0.5.17", "chunked_prefill_size": 4096,
        "delayer": False, "serial_forward": True, "repeats": 3, "dispatch": "cache_aware",
        "flush_replays": True, "clock": "virtual", "pass_charge_ms": 1.0, "device_sync": "group",
        "pass_charge": "measured",
    }  # fmt: skip
    # set on both sides, so only `name` differs
    needs = {"pass_charge_ms": {"clock": "virtual"}, "pass_charge": {"clock": "virtual"}}
    assert set(changed) == {f.name for f in dataclasses.fields(Inputs)}  # a new field: add it
    for name, value in changed.items():
        before = replace(base, **needs.get(name, {}))
        other = replace(before, **{name: value})
        assert (run_stem(other) == run_stem(before)) == (name == "repeats"), name


def test_a_server_run_that_lost_requests_is_not_compared():
    """A run whose client gave up on requests (the server then aborted them) is invalid: the
    twin serves every request, so the comparison fails naming the run and the error kinds.
    Found on long-prompt-burst at DP 2 (2026-12-02): 248 of 1,024 requests timed out after
    600 s without a byte, and the server's TTFT read 24 % below the twin's."""
    from pathlib import Path

    from dpbench.server.fidelity import FidelityError, check_complete

    def run(ok: float, timeouts: float) -> dict:
        m = {"requests_total": 1024.0, "requests_ok_total": ok, "errors_total": timeouts,
             "errors_timeout_total": timeouts, "errors_http_total": 0.0}  # fmt: skip
        return {"metrics": {k: {"value": v} for k, v in m.items()}}

    check_complete(run(1024.0, 0.0), Path("r0.json"))
    with pytest.raises(
        FidelityError, match=r"r1.json: 248 of 1024 requests did not complete \({'timeout': 248}\)"
    ):
        check_complete(run(776.0, 248.0), Path("r1.json"))
    # the client's own words for the first failure, where the run kept them
    lost = run(1022.0, 0.0)
    lost["metrics"]["errors_connect_total"] = {"value": 2.0}
    lost["extra"] = {"failed_requests": [
        {"id": "t17", "kind": "connect", "error": "ClientOSError: [Errno 104] Connection reset by peer",
         "http_status": None, "sent_s": 12.5}]}  # fmt: skip
    with pytest.raises(
        FidelityError,
        match=r"\({'connect': 2}; first: t17 connect 12.5 s after the first send: ClientOSError",
    ):
        check_complete(lost, Path("r2.json"))
