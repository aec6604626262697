"""Calibration file: schema, refusal of interpreter-mode files, and estimates between measured points.

The files here are synthetic, built in the test from a power law in the axes (which
log-multilinear interpolation reproduces exactly), to test the file handling and the
interpolation arithmetic; measured files come from test_kernels_interpreter.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpbench.kernels.calibration import (
    CalibrationError,
    InterpreterCalibrationError,
    load_calibration,
    save_calibration,
)
from dpbench.kernels.cases import Case

HEADS = 128
CEIL = {
    "copy_bytes_per_s": 4.0e12,
    "copy_bytes": 1 << 30,
    "matmul_flops_per_s": 7.5e14,
    "matmul_shape": [8192, 8192, 8192],
    "matmul_dtype": "bfloat16",
    "device": "test",
}


def power_law(
    kind: str, page: int, batch: int = 0, context: int = 0, new_tokens: int = 0, prefix: int = 0
) -> float:
    base = {"decode": 2e-6, "extend": 3e-6, "mixed": 5e-6}[kind] * (1.1 if page == 1 else 1.0)
    t = base
    if batch:
        t *= batch**0.7
    if context:
        t *= (context / 1024) ** 0.9
    if new_tokens:
        t *= (new_tokens / 512) ** 1.3
    if prefix:
        t *= (prefix / 1024) ** 0.5
    return t


def point(case: Case) -> dict:
    t = power_law(case.kind, case.page_size, case.batch, case.context, case.new_tokens, case.prefix)
    return {
        "case": case.name,
        "kind": case.kind,
        "form": case.form,
        "heads": case.heads,
        "page_size": case.page_size,
        "dtype": case.dtype,
        "batch": case.batch,
        "context": case.context,
        "new_tokens": case.new_tokens,
        "prefix": case.prefix,
        "median_s": t,
        "quantiles_s": {"p20": t, "p50": t, "p80": t},
        "bytes": case.bytes,
        "flops": case.flops,
        "bandwidth_bytes_per_s": case.bytes / t,
        "flops_per_s": case.flops / t,
        "copy_bandwidth_fraction": case.bytes / t / CEIL["copy_bytes_per_s"],
        "matmul_rate_fraction": case.flops / t / CEIL["matmul_flops_per_s"],
        "rel_error": 3e-3,
        "timing": {},
    }


def synthetic(interpreter: bool = False) -> dict:
    cases = []
    for page in (1, 64):
        cases += [
            Case("decode", heads=HEADS, page_size=page, batch=b, context=c)
            for b in (1, 8, 64)
            for c in (1024, 16384)
        ]
        cases += [
            Case("extend", heads=HEADS, page_size=page, new_tokens=n, prefix=p)
            for n in (512, 4096)
            for p in (4096, 16384)
        ]
        cases += [
            Case("mixed", heads=HEADS, page_size=page, new_tokens=n, batch=b, context=c)
            for n in (2048, 8192)
            for b in (32, 128)
            for c in (4096, 16384)
        ]
    cases += [Case("extend", heads=HEADS, page_size=1, new_tokens=n, prefix=0) for n in (512, 4096)]
    return {
        "schema": "dpbench.kernel-calibration/1",
        "device": "synthetic",
        "interpreter": interpreter,
        "sglang_version": "0.5.23",
        "import_path": "package",
        "created": "2026-11-29T00:00:00Z",
        "scope": "per-layer",
        "model": "deepseek-v3",
        "attn_tp_size": 1,
        "heads": HEADS,
        "default_page_size": 64,
        "sweep": "test",
        "timing": {},
        "ceilings": CEIL,
        "points": [point(c) for c in cases],
        "pairs": [],
        "failures": [],
        "notes": [],
    }


@pytest.fixture
def calib_path(tmp_path: Path) -> Path:
    return save_calibration(tmp_path / "calib.json", synthetic())


def test_round_trip_and_properties(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    assert (cal.device, cal.interpreter, cal.sglang_version) == ("synthetic", False, "0.5.23")
    assert cal.page_sizes == [1, 64]


def test_estimates_equal_measured_points(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    assert cal.estimate_s("decode", batch=8, context=16384, new_tokens=0) == pytest.approx(
        power_law("decode", 64, batch=8, context=16384)
    )
    assert cal.estimate_s(
        "decode", batch=8, context=16384, new_tokens=0, page_size=1
    ) == pytest.approx(power_law("decode", 1, batch=8, context=16384))
    assert cal.estimate_s("extend", batch=1, context=4096, new_tokens=4096) == pytest.approx(
        power_law("extend", 64, new_tokens=4096, prefix=4096)
    )
    assert cal.estimate_s("mixed", batch=128, context=4096, new_tokens=2048) == pytest.approx(
        power_law("mixed", 64, batch=128, context=4096, new_tokens=2048)
    )


def test_interpolation_is_log_multilinear(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    # A power law is linear in log-log space, so interpolation inside the grid reproduces it.
    for b, c in [(3, 2000), (20, 5000), (64, 9000)]:
        assert cal.estimate_s("decode", batch=b, context=c, new_tokens=0) == pytest.approx(
            power_law("decode", 64, batch=b, context=c), rel=1e-9
        )
    assert cal.estimate_s("mixed", batch=50, context=7000, new_tokens=3000) == pytest.approx(
        power_law("mixed", 64, batch=50, context=7000, new_tokens=3000), rel=1e-9
    )
    assert cal.estimate_s("extend", batch=1, context=9000, new_tokens=1000) == pytest.approx(
        power_law("extend", 64, new_tokens=1000, prefix=9000), rel=1e-9
    )


def test_extend_without_prefix_uses_the_mha_points_at_any_page_size(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    want = power_law("extend", 1, new_tokens=2048)
    assert cal.estimate_s("extend", batch=1, context=0, new_tokens=2048) == pytest.approx(
        want, rel=1e-9
    )
    assert cal.estimate_s(
        "extend", batch=1, context=0, new_tokens=2048, page_size=1
    ) == pytest.approx(want, rel=1e-9)


def test_batched_extend_is_per_request_launches(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    one = cal.estimate_s("extend", batch=1, context=4096, new_tokens=1024)
    assert cal.estimate_s("extend", batch=4, context=4096, new_tokens=4096) == pytest.approx(
        4 * one
    )


def test_outside_the_grid_scales_by_roofline(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    edge = Case("decode", heads=HEADS, page_size=64, batch=64, context=16384)
    far = Case("decode", heads=HEADS, page_size=64, batch=256, context=65536)

    def roofline(c: Case) -> float:
        return max(c.bytes / CEIL["copy_bytes_per_s"], c.flops / CEIL["matmul_flops_per_s"])

    want = power_law("decode", 64, batch=64, context=16384) * roofline(far) / roofline(edge)
    assert cal.estimate_s("decode", batch=256, context=65536, new_tokens=0) == pytest.approx(want)
    assert want > power_law("decode", 64, batch=64, context=16384)


def test_no_work_and_degenerate_mixed(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    assert cal.estimate_s("decode", batch=0, context=100, new_tokens=0) == 0.0
    assert cal.estimate_s("extend", batch=1, context=0, new_tokens=0) == 0.0
    assert cal.estimate_s("mixed", batch=0, context=0, new_tokens=2048) == cal.estimate_s(
        "extend", batch=1, context=0, new_tokens=2048
    )
    assert cal.estimate_s("mixed", batch=8, context=4096, new_tokens=0) == cal.estimate_s(
        "decode", batch=8, context=4096, new_tokens=0
    )


def test_bad_queries_name_what_is_allowed(calib_path: Path) -> None:
    cal = load_calibration(calib_path)
    with pytest.raises(ValueError, match="kind must be one of"):
        cal.estimate_s("prefill", batch=1, context=1, new_tokens=1)
    with pytest.raises(ValueError, match="must be ≥0"):
        cal.estimate_s("decode", batch=-1, context=1, new_tokens=0)
    with pytest.raises(CalibrationError, match="no decode points for page size 16"):
        cal.estimate_s("decode", batch=1, context=1024, new_tokens=0, page_size=16)


def test_interpreter_file_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = save_calibration(tmp_path / "interp.json", synthetic(interpreter=True))
    with pytest.raises(InterpreterCalibrationError, match="allow_interpreter=True"):
        load_calibration(path)
    assert load_calibration(path, allow_interpreter=True).interpreter is True


def test_malformed_files_get_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="no such calibration file"):
        load_calibration(tmp_path / "missing.json")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    with pytest.raises(CalibrationError, match="not valid JSON"):
        load_calibration(bad_json)
    wrong_schema = synthetic()
    wrong_schema["schema"] = "something/else"
    (tmp_path / "schema.json").write_text(json.dumps(wrong_schema))
    with pytest.raises(CalibrationError, match="field 'schema' must be"):
        load_calibration(tmp_path / "schema.json")
    no_device = synthetic()
    del no_device["device"]
    (tmp_path / "nodev.json").write_text(json.dumps(no_device))
    with pytest.raises(CalibrationError, match="field 'device'"):
        load_calibration(tmp_path / "nodev.json")
    negative = synthetic()
    negative["points"][0]["median_s"] = 0.0
    (tmp_path / "neg.json").write_text(json.dumps(negative))
    with pytest.raises(CalibrationError, match=r"points\.0\.median_s"):
        load_calibration(tmp_path / "neg.json")


def test_save_refuses_invalid_data(tmp_path: Path) -> None:
    data = synthetic()
    data["points"] = []
    with pytest.raises(CalibrationError, match="refusing to write"):
        save_calibration(tmp_path / "empty.json", data)
    assert not (tmp_path / "empty.json").exists()
