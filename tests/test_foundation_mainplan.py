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


def test_a_change_runs_where_its_base_runs_and_its_cost_is_printed_apart():
    from types import SimpleNamespace

    import typer

    from dpbench.mainjob import job

    stored = {
        "revert-31835": SimpleNamespace(commit="c" * 40, change=SimpleNamespace(base="0.5.17")),
        "other": SimpleNamespace(commit="d" * 40, change=SimpleNamespace(base="0.5.9")),
    }
    changes = job.selected_changes(stored, ["0.5.16", "0.5.17", "revert-31835"])
    assert changes == [("revert-31835", "c" * 40, "0.5.17")]
    with pytest.raises(typer.BadParameter, match=r"select 0\.5\.17 too"):
        job.selected_changes(stored, ["0.5.16", "revert-31835"])
    pair = [("0.5.16", "a" * 40, "last early"), ("0.5.17", "b" * 40, "first post-kv")]
    assert job.changes_of(pair, changes) == changes
    assert job.changes_of(pair[:1], changes) == []  # its base not picked: the step skips it
    ran: list[list[str]] = []
    costs: list[mainplan.StepCost] = []
    rcs: list[int] = []
    job._step_runs(mainplan.PLAN[1], pair, changes, rcs, costs, lambda shas: ran.append(shas) or 0)
    assert ran == [["a" * 40, "b" * 40], ["c" * 40]]  # the change in its own, timed run
    assert [(c.releases, c.changes) for c in costs] == [(2, False), (1, True)]
    lines = job.cost_lines(costs)
    assert "over 2 release(s)" in lines[0] and "over 1 change(s)" in lines[1]
    # the plan says what a change adds: one release's share of every step, overlapping as the
    # releases' steps do (the side run beside the twin steps), so less than their plain sum
    (line,) = mainplan.change_lines([("revert-31835", "0.5.17")])
    share = mainplan.change_share_s()
    assert max(mainplan.REFERENCE.values()) < share < sum(mainplan.REFERENCE.values())
    assert (
        line.startswith("change revert-31835 on 0.5.17") and f"about {share / 60:.0f} min" in line
    )
