"""Atomic writes and the run-result record."""

from __future__ import annotations

import json

import pytest

from dpbench.core import results
from dpbench.core.atomic import atomic_open, write_json


def test_crash_mid_write_keeps_previous_file(tmp_path):
    target = tmp_path / "r.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_open(target) as fh:
        fh.write('{"v": 2, "trunc')
        raise RuntimeError("simulated crash")
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"], (
        "no temporary file may be left behind"
    )


def test_atomic_open_refuses_read_mode(tmp_path):
    with pytest.raises(ValueError, match="mode must contain 'w'"), atomic_open(tmp_path / "x", "r"):
        pass


def _result(**over):
    base = dict(
        tier="twin",
        sglang={"version": "0.5.23", "commit": None, "generation": "g"},
        metrics={"ttft_ms_p99": results.Metric(12.5, "ms", "lower")},
        wall_time_s=1.0,
    )
    base.update(over)
    return results.make_run_result(**base)


def test_run_result_round_trips(tmp_path):
    path = results.save(tmp_path / "run.json", _result())
    back = results.load(path)
    assert back["metrics"]["ttft_ms_p99"] == {"value": 12.5, "unit": "ms", "better": "lower"}
    assert back["tier"] == "twin"


def test_run_result_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="tier must be one of"):
        _result(tier="gpu")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "dpbench.run-result/1", "tier": "twin", "metrics": {"x": 1}}')
    with pytest.raises(
        results.RunResultError, match=r"bad.json: metric 'x' needs value, unit and better"
    ):
        results.load(bad)
    bad.write_text("{not json")
    with pytest.raises(results.RunResultError, match="not valid JSON"):
        results.load(bad)


def test_atomic_file_gets_umask_permissions(tmp_path):
    import os

    write_json(tmp_path / "p.json", {})
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o666 & ~umask
