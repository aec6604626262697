"""The main job's simulated-server steps in an asv run of their own (dpbench.mainjob.side): its
config, and folding its asv result files back into the main ones (asv's own Results API
writes and reads them)."""

from __future__ import annotations

import json

import pytest

from dpbench.mainjob import side as mainside

MACHINE = "vm"
SHA = "dc74558371be594423f330676c03ac3b422654d0"
OWNED = [r"^server\.SimulatedRooflineServe\."]


def _results(root, values: dict[str, float], setup: dict[str, float]):
    """A real asv result file for SHA on MACHINE with one value per benchmark."""
    from asv import results, runner

    res = results.Results(
        {"machine": MACHINE, "python": "3.11"}, {}, SHA, 1784937998000, "3.11",
        "virtualenv-py3.11", {},
    )  # fmt: skip
    for name, value in values.items():
        bench = {"name": name, "version": "1", "params": [], "param_names": []}
        res.add_result(bench, runner.BenchmarkResult([value], [[value]], [1], 0, "", None))
    for key, seconds in setup.items():
        res.set_setup_cache_duration(key, seconds)
    res.save(str(root))
    return root / MACHINE / f"{SHA[:8]}-virtualenv-py3.11.json"


def _value(path, name):
    from asv import results

    return results.Results.load(str(path)).get_result_value(name, [])


def test_the_side_runs_benchmarks_replace_only_their_own_entries(tmp_path):
    main_root, side_root = tmp_path / "results", tmp_path / "side"
    main = _results(main_root, {"placement.Placement.track_x": 1.0}, {"placement:20": 5.0})
    mainside.seed_side(main_root, side_root, MACHINE, [SHA])
    assert (side_root / MACHINE / main.name).read_bytes() == main.read_bytes()
    # meanwhile the main run adds the twin's results; the side run adds the server's, and
    # its copy still holds the placement value the main file had when it was copied
    _results(
        main_root,
        {"placement.Placement.track_x": 1.0, "twin.TwinHighKV.track_y": 2.0},
        {"placement:20": 5.0, "twin:114": 60.0},
    )
    side = _results(
        side_root,
        {"placement.Placement.track_x": 9.0, "server.SimulatedRooflineServe.track_z": 3.0},
        {"placement:20": 99.0, "server:371": 400.0},
    )
    assert mainside.merge_side(side_root, main_root, MACHINE, OWNED) == [main]
    assert _value(main, "placement.Placement.track_x") == [1.0]  # the main run's, kept
    assert _value(main, "twin.TwinHighKV.track_y") == [2.0]
    assert _value(main, "server.SimulatedRooflineServe.track_z") == [3.0]
    durations = json.loads(main.read_text())["durations"]
    assert durations["<setup_cache server:371>"] == 400.0
    assert (
        durations["<setup_cache placement:20>"] == 5.0
        and durations["<setup_cache twin:114>"] == 60.0
    )
    assert side.is_file()  # the side folder is left for the next run's copies
    assert not list(main.parent.glob(".*.tmp"))  # written whole, no temporary left


def test_result_files_of_another_format_are_not_merged(tmp_path):
    main_root, side_root = tmp_path / "results", tmp_path / "side"
    main = _results(main_root, {"placement.Placement.track_x": 1.0}, {})
    side = _results(side_root, {"server.SimulatedRooflineServe.track_z": 3.0}, {})
    data = json.loads(side.read_text())
    side.write_text(json.dumps({**data, "version": 1}))
    before = main.read_bytes()
    with pytest.raises(ValueError, match=r"different formats .*version 1 vs 2"):
        mainside.merge_side(side_root, main_root, MACHINE, OWNED)
    assert main.read_bytes() == before


def test_the_side_config_is_the_main_one_with_its_own_environment_and_results(tmp_path):
    config = tmp_path / "asv.releases.json"
    conf = {"version": 1, "repo": ".cache/sglang-releases", "env_dir": ".asv/env",
            "results_dir": "results", "benchmark_dir": "benchmarks"}  # fmt: skip
    path = mainside.side_config(conf, config)
    assert path.parent == config.parent  # ASV_CONF_DIR, where run files go, stays the same
    data = json.loads(path.read_text())
    assert data == {**conf, "env_dir": ".asv/env-side", "results_dir": ".asv/results-side"}
