"""A change benchmarked by asv like a release: `asv run` over 0.5.17 and PR #31835 reverted on it.

asv checks out the change's commit of the release history and installs it with
asv.releases.json's own install command (the base's wheel and pins, then the patch laid
over SGLang); the placement tier then reads the reverted code, and `dpbench compare` gates
on asv's results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import asv_releases_config

from dpbench.core.paths import cache_dir, project_root
from dpbench.mainjob import releases

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1800)]

PY = sys.executable
MACHINE = "dpbench-change-test"
REVERT = project_root() / "patches" / "0.5.17-revert-31835.patch"
# asv's environment for these tests, kept between runs; not the one other asv tests share, which
# they may be installing a release into at the same time
ASV_ENV = cache_dir() / "asv-env-changes"


def _run(cmd: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _ok(cmd: list[str], cwd: Path, timeout: int) -> str:
    proc = _run(cmd, cwd, timeout)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _placement_codes(tmp: Path, config: Path, shas: dict[str, str]) -> dict[str, float]:
    """asv machine, run (the placement tier over ``shas``' commits) and publish; the placement
    code asv recorded for each name."""
    hashes = tmp / "commits.hashes"
    hashes.write_text("\n".join(shas.values()) + "\n")
    asv = [PY, "-m", "asv"]
    _ok([*asv, "machine", "--yes", "--machine", MACHINE, "--config", str(config)], tmp, 120)
    _ok([*asv, "run", "--config", str(config), "--bench", r"^placement\.", "--launch-method",
         "spawn", "--machine", MACHINE, "--show-stderr", f"HASHFILE:{hashes}"],
        tmp, 1500)  # fmt: skip
    _ok([*asv, "publish", "--config", str(config)], tmp, 300)
    return _recorded_codes(tmp, shas)


def _recorded_codes(tmp: Path, shas: dict[str, str]) -> dict[str, float]:
    """The placement code asv recorded for each name (whatever asv's machine was called)."""
    codes = {}
    for name, sha in shas.items():
        (path,) = (tmp / "results").glob(f"*/{sha[:8]}-*.json")
        data = json.loads(path.read_text())
        at = data["result_columns"].index("result")
        codes[name] = data["results"]["placement.Placement.track_placement_code"][at][0]
    return codes


def test_asv_runs_a_change_like_a_release(tmp_path):
    history = tmp_path / "history"
    built = dict(releases.build(repo=history))
    _ok([PY, "-m", "dpbench", "change", "add", "revert-31835", "--base", "0.5.17",
         "--patch", str(REVERT), "--history", str(history), "--no-env"], tmp_path, 300)  # fmt: skip
    change = _ok(["git", "-C", str(history), "rev-parse", "revert-31835"], tmp_path, 30).strip()
    config = asv_releases_config(tmp_path, history, env_dir=str(ASV_ENV))
    # the main job's own path: a change named beside its base, in an asv run of its own
    job = _run([PY, "-m", "dpbench", "bench", "0.5.17", "revert-31835", "-b", r"^placement\.",
                "--config", str(config), "--site", str(tmp_path / "site")], tmp_path, 1500)  # fmt: skip
    out = job.stdout + job.stderr  # the step lines go to the console (stderr)
    assert job.returncode == 0, out[-3000:]
    assert "over 1 change(s)" in out and "over 1 release(s)" in out, out[-2000:]
    costs = json.loads((tmp_path / "results" / "mainjob-costs.json").read_text())
    assert [(c["of"], c["releases"]) for c in costs["steps"]] == [("releases", 1), ("changes", 1)]
    assert all(c["wall_s"] > 0 and c["reference_s"] is None for c in costs["steps"])
    codes = _recorded_codes(tmp_path, {"0.5.17": built["0.5.17"], "revert": change})
    assert codes == {"0.5.17": 2, "revert": 1}  # post-kv → early
    assert (tmp_path / "site" / "index.html").is_file()
    run_file = tmp_path / "results" / "runs" / change / "placement" / "placement.json"
    detail = json.loads(run_file.read_text())
    assert detail["sglang"]["change"]["name"] == "revert-31835"
    assert detail["metrics"]["false_prefillable_reports"]["value"] == 2

    res = _run([PY, "-m", "dpbench", "compare", "0.5.17", "revert-31835", "--results",
                str(tmp_path / "results"), "--history", str(history), "--config", str(config)],
               tmp_path, 300)  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    text = " ".join(res.stdout.split())
    assert "false_prefillable_reports" in text[text.index("regression(s)") :]


def test_asv_git_history_path_over_an_sglang_shaped_repository(tmp_path):
    """The GPU runners' path (asv.conf.json: repo_subdir = python) over a local repository
    built from the releases' sources plus a change, three commits, the CPU install."""
    history = tmp_path / "history"
    releases.build(repo=history)
    _ok([PY, "-m", "dpbench", "change", "add", "revert-31835", "--base", "0.5.17",
         "--patch", str(REVERT), "--history", str(history), "--no-env"], tmp_path, 300)  # fmt: skip
    src = tmp_path / "sglang"
    _ok([PY, "-m", "dpbench", "source-history", str(src), "--release", "0.5.16", "--release",
         "0.5.17", "--history", str(history)], tmp_path, 600)  # fmt: skip
    assert (src / "python" / "pyproject.toml").is_file()
    config = tmp_path / "asv.json"
    _ok([PY, "-m", "dpbench", "asv-config", "--repo", str(src), "--cpu", "-o", str(config)],
        tmp_path, 120)  # fmt: skip
    conf = json.loads(config.read_text())
    assert conf["repo_subdir"] == "python" and "envs.install" in conf["install_command"][1]
    conf.update(
        {
            "results_dir": "results",
            "html_dir": "html",
            "env_dir": str(ASV_ENV),
            "benchmark_dir": str(project_root() / "benchmarks"),
            "install_command": [
                c.replace("{conf_dir}", str(project_root())) for c in conf["install_command"]
            ],
        }
    )
    config.write_text(json.dumps(conf, indent=2))
    shas = {
        name: _ok(["git", "-C", str(src), "rev-parse", name], tmp_path, 30).strip()
        for name in ("v0.5.16", "v0.5.17", "revert-31835")
    }
    codes = _placement_codes(tmp_path, config, shas)
    assert (tmp_path / "html" / "index.html").is_file()  # asv publish
    assert codes == {"v0.5.16": 1, "v0.5.17": 2, "revert-31835": 1}  # early, post-kv, early

    from dpbench.dashboard.build import build_site

    index = build_site(tmp_path / "results", tmp_path / "site", history_repo=src)
    text = (index.parent / "data.js").read_text()
    model = json.loads(text[text.index("=") + 1 :].strip().rstrip(";"))
    shown = [(c["tags"], c["placement"], c["branch"]) for c in model["commits"]]
    assert shown == [
        (["v0.5.16"], "early", "main"),
        (["v0.5.17"], "post-kv", "main"),
        (["revert-31835"], "early", "change/revert-31835"),  # next to its base
    ]
