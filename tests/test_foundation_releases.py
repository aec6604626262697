"""The release-history repository and the per-release pins, against the real SGLang wheels."""

from __future__ import annotations

import subprocess

import pytest

from dpbench import releases
from dpbench.envs.pins import GPU_ONLY, cpu_requirements
from dpbench.envs.venv import wheel_path


def test_history_is_ordered_dated_and_reproducible(tmp_path):
    rows = releases.build(["0.5.23", "0.5.16"], tmp_path / "a")  # given out of order
    assert [v for v, _ in rows] == ["0.5.16", "0.5.23"]
    hist = releases.read_history(tmp_path / "a")
    assert [h["version"] for h in hist] == ["0.5.16", "0.5.23"]
    # dated by the wheels' build times (sglang-facts.md: 2026-07-25 and 2026-10-30)
    assert hist[0]["date"].startswith("2026-07-25")
    assert hist[1]["date"].startswith("2026-10-30")
    again = releases.build(["0.5.16", "0.5.23"], tmp_path / "b")
    assert again == rows, (
        "same releases must give the same commit hashes (asv keys results by them)"
    )
    msg = subprocess.run(
        ["git", "-C", str(tmp_path / "a"), "log", "-1", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert msg == "sglang 0.5.23"


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["0.5.x"], "'0.5.x' is not a version"),
        (["0.5.16", "0.5.16"], "duplicate"),
        ([], "no versions"),
    ],
)
def test_bad_versions_are_refused_clearly(tmp_path, bad, needle):
    with pytest.raises(releases.ReleasesError, match=needle):
        releases.build(bad, tmp_path / "r")
    assert not (tmp_path / "r").exists()


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
