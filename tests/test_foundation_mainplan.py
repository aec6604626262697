"""The main job's printed plan: every SGLang-facing benchmark class is in exactly one step (or
named as run by hand), and what each step cost is kept atomically."""

from __future__ import annotations

import inspect
import json
import re

import pytest

from dpbench.mainjob import plan as mainplan

# run by hand, never by the default plan (docs/mainjob.md): GPU-only tiers skip without
# GPUs anyway; the workload and dashboard benchmarks time dpbench itself on one commit; the
# real-time simulated server (the virtual clock's check), its delayer-off control and the
# DP-8 trace replay are on demand.
BY_HAND = {
    "server.SimulatedRooflineServe",
    "server.ServeThroughput",
    "server.ClientOverhead",
    "server.BenchServingReference",
    "server.SimulatedRooflineServeControl",
    "twin.TwinProductionTraceDp8",
}


def _benchmark_classes() -> list[str]:
    from benchmarks import placement, server, twin

    out = []
    for module in (placement, server, twin):
        short = module.__name__.split(".")[-1]
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and any(
                m.startswith(("track_", "time_", "peakmem_")) for m in dir(cls)
            ):
                out.append(f"{short}.{name}")
    return out


def test_every_benchmark_class_runs_in_exactly_one_step_or_by_hand():
    classes = _benchmark_classes()
    assert "twin.TwinHeadline" in classes and "server.SimulatedProductionTrace" in classes
    for name in classes:
        # asv matches --bench against "module.Class.method"
        steps = [s.key for s in mainplan.PLAN if re.search(s.regex, f"{name}.track_x")]
        if name in BY_HAND:
            assert steps == [], (name, steps)
        else:
            assert len(steps) == 1, (name, steps)
    assert set(BY_HAND) <= set(classes)  # a renamed class must not hide here


def test_the_plan_names_each_step_its_releases_and_its_cost():
    lines = mainplan.plan_lines(10)
    assert len(lines) == len(mainplan.PLAN) + 1
    counts = [int(re.search(r": (\d+) release", line).group(1)) for line in lines[:-1]]
    assert counts == [mainplan.release_count(s, 10) for s in mainplan.PLAN]
    assert counts == [10, 2, 4, 2, 2, 2, 4, 1]
    assert mainplan.release_count(mainplan.PLAN[2], 1) == 1  # never more than were selected
    for step, line in zip(mainplan.PLAN, lines, strict=False):
        per = mainplan.REFERENCE.get(step.key)
        assert ("beside the twin steps" in line) == step.side
        assert ("alone, after the rest" in line) == step.alone
        if per is None:
            assert line.endswith("not yet measured")
        else:
            assert line.endswith(f"~{per * mainplan.release_count(step, 10) / 60:.0f} min")
    assert mainplan.REFERENCE_AT in lines[-1]


def test_step_costs_are_written_whole(tmp_path, monkeypatch):
    path = tmp_path / "mainjob-costs.json"
    path.write_text('{"earlier": true}\n')
    costs = [mainplan.StepCost("placement", 10, 480.0), mainplan.StepCost("server", 3, 0.0)]
    monkeypatch.setattr("dpbench.core.atomic.os.replace", _refuse)
    with pytest.raises(OSError, match="refused"):
        mainplan.write_costs(path, costs, total_s=480.0)
    assert json.loads(path.read_text()) == {"earlier": True}  # the earlier file, whole
    monkeypatch.undo()
    data = json.loads(mainplan.write_costs(path, costs, total_s=480.0).read_text())
    assert [s["step"] for s in data["steps"]] == ["placement", "server"]
    assert data["steps"][0]["per_release_s"] == 48.0 and data["total_s"] == 480.0
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


def _refuse(*_a, **_k):
    raise OSError("refused")
