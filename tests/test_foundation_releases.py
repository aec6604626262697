"""The release-history repository and the per-release pins, against the real SGLang wheels."""

from __future__ import annotations

import json
import subprocess

import pytest

from dpbench.envs.pins import GPU_ONLY, cpu_requirements
from dpbench.envs.venv import wheel_path
from dpbench.mainjob import job as mainjob
from dpbench.mainjob import releases


def test_history_holds_every_known_release_with_stable_hashes(tmp_path):
    rows = releases.build((), tmp_path / "a")
    assert [v for v, _ in rows] == list(releases.KNOWN_VERSIONS)
    assert rows[0][0] == "0.5.14" and rows[-1][0] == "0.5.23"
    hist = releases.read_history(tmp_path / "a")
    assert [h["version"] for h in hist] == list(releases.KNOWN_VERSIONS)
    dates = {h["version"]: h["date"] for h in hist}
    # dated by the wheels' build times (sglang-facts.md: 2026-07-25 and 2026-10-30)
    assert dates["0.5.16"].startswith("2026-07-25")
    assert dates["0.5.23"].startswith("2026-10-30")
    again = releases.build((), tmp_path / "b")
    assert again == rows, (
        "same releases must give the same commit hashes (asv keys results by them)"
    )
    # asking for known releases changes nothing: which commits run is the main job's choice
    assert releases.build(["0.5.23", "0.5.16"], tmp_path / "c") == rows
    msg = subprocess.run(
        ["git", "-C", str(tmp_path / "a"), "log", "-1", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert msg == "sglang 0.5.23"


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17", "0.5.23"])
def test_recorded_releases_match_their_real_wheels(version):
    """The table's wheel name, sha256 and build time are the PyPI wheel's (the test environments' wheels)."""
    known = {r.version: r for r in releases.KNOWN_RELEASES}
    assert releases.describe(version) == known[version]


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["0.5.x"], "'0.5.x' is not a version"),
        (["0.5.24", "0.5.24"], "duplicate"),
        (["0.5.15.post1"], "not newer than 0.5.23: inserting it would change every later commit"),
    ],
)
def test_bad_versions_are_refused_clearly(tmp_path, bad, needle):
    with pytest.raises(releases.ReleasesError, match=needle):
        releases.build(bad, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_main_job_runs_heavier_tiers_on_first_and_last_early_first_post_kv_and_newest(tmp_path):
    rows = [(f"0.5.{n}", f"c{n}") for n in range(14, 24)]
    labels = {c: ("early" if int(c[1:]) < 17 else "post-kv") for _, c in rows}
    labels.pop("c15")  # a release whose placement run failed has no label
    runs = tmp_path / "runs"
    for sha, label in labels.items():
        path = runs / sha / "placement" / "placement.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"placement": {"label": label}}))
    read = mainjob.placement_labels(tmp_path, [c for _, c in rows])
    assert read == labels
    assert mainjob.choose_heavy(rows, read) == [
        ("0.5.14", "c14", "first early"),
        ("0.5.16", "c16", "last early"),
        ("0.5.17", "c17", "first post-kv"),
        ("0.5.23", "c23", "newest"),
    ]
    # no early release among those selected: the first post-kv and the newest
    assert [v for v, _, _ in mainjob.choose_heavy(rows[3:], read)] == ["0.5.17", "0.5.23"]
    assert mainjob.choose_heavy(rows[-1:], read) == [("0.5.23", "c23", "first post-kv, newest")]
    # the simulated server: the placement change's before/after pair and the newest
    assert [v for v, _, _ in mainjob.server_sim_releases(mainjob.choose_heavy(rows, read))] == [
        "0.5.16",
        "0.5.17",
        "0.5.23",
    ]
    one_early = mainjob.choose_heavy(rows[2:], read)  # 0.5.16 is first and last early
    assert one_early[0] == ("0.5.16", "c16", "first early, last early")
    assert [v for v, _, _ in mainjob.server_sim_releases(one_early)] == [
        "0.5.16",
        "0.5.17",
        "0.5.23",
    ]
    # the suggested comparison is the placement change, not the first two releases
    assert mainjob.compare_pair(rows, read) == (("0.5.16", "c16"), ("0.5.17", "c17"))
    assert mainjob.compare_pair(rows[3:5], read) == (("0.5.17", "c17"), ("0.5.18", "c18"))


def test_failed_benchmarks_are_read_off_asvs_result_files(tmp_path, monkeypatch):
    """The main job names failures from asv's own result files (written here by asv's Results):
    a null combination failed (setup, run, or the class's setup_cache); NaN is a skip."""
    import datetime
    import math

    from asv import util
    from asv.machine import Machine
    from asv.results import Results
    from asv.runner import BenchmarkResult

    monkeypatch.setattr(Machine, "hardcoded_machine_name", "box")
    res = Results({"machine": "box"}, {}, "c23" + "0" * 37, 0, "3.11", "env", {})
    now = datetime.datetime.now(datetime.UTC)
    rows = {
        "placement.Placement.track_ok": [1.0, 2.0],
        "placement.Placement.track_skipped": [math.nan, math.nan],
        "placement.Placement.track_one_failed": [1.0, None],
        "placement.Placement.track_setup_cache_failed": [None, None],
        "twin.TwinHighKV.track_failed_elsewhere": [None, None],
    }
    for name, values in rows.items():
        bench = {"name": name, "params": [["a", "b"]], "version": "1"}
        out = BenchmarkResult(
            result=values, samples=[None, None], number=[None, None], errcode=0, stderr="",
            profile=None,
        )  # fmt: skip
        res.add_result(bench, out, started_at=now, duration=1.0)
    res.save(str(tmp_path))
    info = {"machine": "box", "arch": "x86_64", "cpu": "", "num_cpu": "2", "os": "", "ram": ""}
    util.write_json(str(tmp_path / "box" / "machine.json"), info, api_version=Machine.api_version)
    got = mainjob.failed_benchmarks(tmp_path, ["c23" + "0" * 37], r"^placement\.")
    assert got == [
        "placement.Placement.track_one_failed (c2300000)",
        "placement.Placement.track_setup_cache_failed (c2300000)",
    ]
    assert mainjob.failed_benchmarks(tmp_path, ["other"], r"^placement\.") == []


@pytest.mark.parametrize(
    "version, transformers",
    [("0.5.16", "transformers==5.12.1"), ("0.5.23", "transformers==5.19.0")],
)
def test_cpu_pins_follow_each_release(version, transformers):
    reqs = cpu_requirements(wheel_path(version))
    assert transformers in reqs
    names = {r.split("=")[0].split(">")[0].split("<")[0].lower() for r in reqs}
    assert not names & GPU_ONLY, "no GPU-only dependency may be installed for the CPU tiers"
    assert not any(r.startswith("torch") for r in reqs), (
        "torch comes from the shared CPU-importable pair"
    )
