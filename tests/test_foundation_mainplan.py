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
    phases = {"releases": 480.04}
    data = json.loads(mainplan.write_costs(path, costs, total_s=480.0, phases=phases).read_text())
    assert [s["step"] for s in data["steps"]] == ["placement", "server"]
    assert data["phases"] == {"releases": 480.0}
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
    # the releases' phase runs every step over the releases, the changes' phase after it over
    # the changes whose base a step picks; a step that picks none of their bases is left out
    picks = {"pair": pair, "newest": [("0.5.23", "e" * 40, "newest")], "heavy": pair}
    steps = [s for s in mainplan.PLAN[1:] if s.picks in picks]
    releases_phase = job.phase_steps(steps, picks, changes, False)
    changes_phase = job.phase_steps(steps, picks, changes, True)
    assert [s.key for s, _ in releases_phase] == [s.key for s in steps]
    assert [s.key for s, _ in changes_phase] == [s.key for s in steps if s.picks != "newest"]
    assert all(c == [("revert-31835", "c" * 40, "change on 0.5.17")] for _, c in changes_phase)
    ran: list[list[str]] = []
    costs: list[mainplan.StepCost] = []
    rcs: list[int] = []
    for of_changes, phase in ((False, releases_phase[:1]), (True, changes_phase[:1])):
        for step, chosen in phase:
            job._timed(step, chosen, of_changes, rcs, costs, lambda shas: ran.append(shas) or 0)
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
        line.startswith("change revert-31835 on 0.5.17")
        and f"at most ~{share / 60:.0f} min more" in line
    )
    env = mainplan.REFERENCE["placement"]
    assert f"its environment ~{env / 60:.1f} min" in line
    assert f"its benchmarks ~{(share - env) / 60:.0f} min" in line
    # once the picks are known: only the steps the change runs count (not twin-speed's newest)
    expected = job.expected_changes_s(changes_phase, changes)
    r = mainplan.REFERENCE
    side, main = r["server-trace"] + r["server"], r["headline"] + r["twin"] + r["twin-trace"]
    assert expected == pytest.approx(max(side, main) + r["pass-timing"])
    assert expected < share
    # at the end: what the changes' phase added, against that expectation
    ends = mainplan.phase_lines({"releases": 2400.0, "changes": 900.0, "changes_expected": 870.0})
    assert ends == [
        "the releases: 40.0 min",
        "the changes: 15.0 min more (their bases' share of the steps they ran: ~14.5)",
    ]
    assert mainplan.phase_lines({"releases": 60.0}) == ["the releases: 1.0 min"]


def test_the_changes_run_after_every_release_step_and_their_phase_is_timed(tmp_path, monkeypatch):
    """The default plan's order, with asv's runs recorded instead of run: the releases' whole
    plan (placement, the side steps beside the twin steps, the timings), then the changes'."""
    from asv.machine import Machine

    from dpbench.mainjob import job

    rel = [("0.5.16", "a" * 40), ("0.5.17", "b" * 40), ("0.5.23", "e" * 40)]
    pair = [("0.5.16", "a" * 40, "last early"), ("0.5.17", "b" * 40, "first post-kv")]
    newest = [("0.5.23", "e" * 40, "newest")]
    picks = {"every": [(*r, "selected") for r in rel], "pair": pair, "newest": newest}
    picks["heavy"] = pair + newest
    changes = [("revert-31835", "c" * 40, "0.5.17")]
    ran: list[tuple[str, tuple[str, ...], bool]] = []

    def fake_run(asv, conf, bench, commits, *, results_root, **kw):
        side = ".side." in " ".join(conf)
        ran.append((bench, tuple(c[0] for c in commits), side))
        return 0

    monkeypatch.setattr(job, "_asv_run", fake_run)
    monkeypatch.setattr(job, "_picks", lambda selected, results_root: picks)
    monkeypatch.setattr(Machine, "get_unique_machine_name", staticmethod(lambda: "m"))
    config = tmp_path / "asv.releases.json"
    phases: dict[str, float] = {}
    run = job.JobRun(["asv"], ["--config", str(config)], {"results_dir": "results"}, config,
                     tmp_path, tmp_path / "results", rerun=False)  # fmt: skip
    job._default_plan(run, rel, changes, phases)
    costs = run.costs
    first_change = next(i for i, (_, shas, _) in enumerate(ran) if "c" in shas)
    assert all("c" not in shas for _, shas, _ in ran[:first_change])
    assert all(shas == ("c",) for _, shas, _ in ran[first_change:])  # the change runs alone
    # every step of the plan over the releases, then every step its base is picked for
    assert {b for b, _, _ in ran[:first_change]} == {s.regex for s in mainplan.PLAN}
    assert {b for b, _, _ in ran[first_change:]} == {
        s.regex for s in mainplan.PLAN if s.picks != "newest"
    }
    # the side steps ran in the side run, the timings last in their phase
    assert all(side == any(s.side and s.regex == b for s in mainplan.PLAN) for b, _, side in ran)
    timings = [s.regex for s in mainplan.PLAN if s.alone]
    assert [b for b, _, _ in ran[first_change - 2 : first_change]] == timings
    assert ran[-1][0] == timings[0]  # twin-speed runs on the newest only, not on the change
    assert set(phases) == {"releases", "changes", "changes_expected"}
    assert all(v >= 0 for v in phases.values())
    keys = {s.key for s in mainplan.PLAN if s.picks != "newest"}
    assert phases["changes_expected"] == pytest.approx(mainplan.change_share_s(keys))
    assert sum(c.changes for c in costs) == len(ran) - first_change
