"""`dpbench change add/list/show` and change commits in the release history (no environments).

Every command here runs ``python -m dpbench change …`` against a history built in a
temporary folder, with ``--no-env`` (tests/test_changes_envs.py builds environments).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sglang_checkout

from dpbench.core.paths import project_root
from dpbench.dashboard.loaders import read_history
from dpbench.mainjob import releases

PATCHES = project_root() / "patches"
REVERT = PATCHES / "0.5.17-revert-31835.patch"


def dpbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dpbench", *args], capture_output=True, text=True, timeout=300
    )


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(objectname) %(refname)")


def add_revert(repo: Path) -> None:
    """A fresh history at ``repo`` holding the change revert-31835 (no environment)."""
    releases.build(repo=repo)
    res = dpbench(
        "change", "add", "revert-31835", "--base", "0.5.17", "--patch", str(REVERT),
        "--history", str(repo), "--no-env",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("hist") / "sglang-releases"
    add_revert(repo)
    return repo


def test_a_change_is_a_child_of_its_base_with_its_record(history):
    sha = git(history, "rev-parse", "change/revert-31835")
    assert git(history, "rev-parse", "revert-31835") == sha  # tagged by its name
    assert git(history, "rev-parse", f"{sha}^") == git(history, "rev-parse", "v0.5.17")
    assert git(history, "rev-parse", "main") == git(history, "rev-parse", "v0.5.23")  # main kept
    files = git(history, "ls-tree", "--name-only", sha).split()
    assert files == ["README.md", "change.json", "change.patch", "release.json"]
    assert git(history, "show", f"{sha}:release.json") == git(
        history, "show", "v0.5.17:release.json"
    )
    record = json.loads(git(history, "show", f"{sha}:change.json"))
    import hashlib

    assert record["base"] == "0.5.17" and record["name"] == "revert-31835"
    assert record["patch_sha256"] == hashlib.sha256(REVERT.read_bytes()).hexdigest()
    assert record["placement"]["label"] == "early"
    assert record["source"] == {"kind": "patch", "file": REVERT.name}
    patch = subprocess.run(
        ["git", "-C", str(history), "show", f"{sha}:change.patch"], capture_output=True, check=True
    ).stdout
    assert patch == REVERT.read_bytes()
    # one second after its base: the dashboard shows it next to 0.5.17
    base_date = git(history, "log", "-1", "--format=%ct", "v0.5.17")
    assert int(git(history, "log", "-1", "--format=%ct", sha)) == int(base_date) + 1


def test_list_and_show(history):
    res = dpbench("change", "list", "--history", str(history))
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("revert-31835"))
    assert "0.5.17" in line and "early" in line and REVERT.name in line
    res = dpbench("change", "show", "revert-31835", "--history", str(history), "--patch")
    assert res.returncode == 0, res.stderr
    assert "placement   early" in res.stdout
    assert res.stdout.endswith(REVERT.read_text())


def test_the_same_change_gets_the_same_hash_and_survives_a_rebuild(history, tmp_path):
    sha = git(history, "rev-parse", "change/revert-31835")
    other = tmp_path / "other"
    add_revert(other)
    assert git(other, "rev-parse", "change/revert-31835") == sha
    releases.build(repo=other)  # `dpbench releases` again: the change is carried over
    assert git(other, "rev-parse", "change/revert-31835") == sha


def test_the_dashboard_history_places_a_change_after_its_base(history):
    rows = read_history(history)
    labels = [(r["tags"] or [""])[0] for r in rows]
    at = labels.index("revert-31835")
    assert labels[at - 1] == "v0.5.17" and labels[at + 1] == "v0.5.18"
    assert rows[at]["branch"] == "change/revert-31835"


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["revert-31835", "--base", "0.5.17", "--patch", str(REVERT)],
            "a change named 'revert-31835' already exists (commit ",
        ),
        (
            ["other", "--base", "0.5.99", "--patch", str(REVERT)],
            "unknown base '0.5.99'; the history has 0.5.14 0.5.15 0.5.16 0.5.17",
        ),
        (
            ["other", "--base", "0.5.16", "--patch", str(REVERT)],
            "the patch does not apply to SGLang 0.5.16: "
            "python/sglang/srt/managers/schedule_policy.py hunks 1, 2, 3 of 3",
        ),
        (["other", "--base", "0.5.17", "--tree", "/"], "/ is not an SGLang checkout"),
        (["other", "--base", "0.5.17"], "give exactly one of --patch FILE and --tree DIR"),
        (["0.5.18", "--base", "0.5.17", "--patch", str(REVERT)], "reads as a release version"),
        (["x", "--base", "0.5.17", "--patch", "/nonexistent.patch"], "cannot read the patch"),
    ],
)
def test_bad_input_gets_one_line_and_leaves_the_history(history, args, needle):
    before = refs(history)
    res = dpbench("change", "add", *args, "--history", str(history), "--no-env")
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert refs(history) == before


def test_an_unchanged_tree_is_refused(history, tmp_path):
    tree = sglang_checkout(tmp_path / "clone", "0.5.17")
    res = dpbench(
        "change", "add", "same", "--base", "0.5.17", "--tree", str(tree),
        "--history", str(history), "--no-env",
    )  # fmt: skip
    assert res.returncode == 2
    assert "holds SGLang 0.5.17's sources unchanged" in res.stderr


def test_an_sglang_shaped_history_holds_release_sources_and_changes(history, tmp_path):
    import tomllib

    from dpbench.changes.record import prepare
    from dpbench.envs.venv import wheel_path
    from dpbench.mainjob.asvconf import CPU_INSTALL

    src = tmp_path / "sglang"
    res = dpbench("source-history", str(src), "--release", "0.5.16", "--release", "0.5.17",
                  "--history", str(history))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert git(src, "tag", "--list").split() == ["revert-31835", "v0.5.16", "v0.5.17"]
    assert git(src, "rev-parse", "revert-31835^") == git(src, "rev-parse", "v0.5.17")
    project = tomllib.loads(git(src, "show", "v0.5.17:python/pyproject.toml"))["project"]
    assert project["version"] == "0.5.17" and "transformers==5.12.1" in project["dependencies"]
    policy = "python/sglang/srt/managers/schedule_policy.py"
    assert git(src, "diff", "--name-only", "v0.5.17", "revert-31835") == policy
    _, files = prepare("x", "0.5.17", REVERT.read_text(), {"kind": "patch"}, wheel_path("0.5.17"))
    shown = subprocess.run(
        ["git", "-C", str(src), "show", f"revert-31835:{policy}"], capture_output=True, check=True
    ).stdout
    assert shown == files["sglang/srt/managers/schedule_policy.py"]

    conf = tmp_path / "asv.json"
    res = dpbench("asv-config", "--repo", str(src), "--cpu", "-o", str(conf))
    assert res.returncode == 0, res.stderr
    written = json.loads(conf.read_text())
    assert written["repo"] == str(src) and written["install_command"] == CPU_INSTALL
    assert written["repo_subdir"] == "python"
