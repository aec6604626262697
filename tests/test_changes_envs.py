"""Changes run by the tiers: PR #31835 reverted on 0.5.17, and add_chunked_req's negotiation removed.

`dpbench change add` builds each change's environment from its base's (the base's wheel and
pins, the patch laid over SGLang); the placement probe and the twin then run SGLang's real
PrefillAdder and PrefillDelayer there, and `dpbench compare` gates on the change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from twinjob import run_twin_job, run_twin_jobs, twin_job

from dpbench.core import results
from dpbench.core.paths import cache_dir, project_root
from dpbench.mainjob import releases

pytestmark = pytest.mark.sglang

PATCHES = project_root() / "patches"
SPEC = "long-prompt-burst"
# Wall-clock metrics: real time, different run to run by design.
WALL_METRICS = {"scheduler_pass_us_p50", "passes_per_s", "pass_wall_over_rank_work"}
CHANGES = {
    "revert-31835": ("0.5.17", "0.5.17-revert-31835.patch"),
    "no-chunked-negotiation": ("0.5.17", "0.5.17-no-chunked-negotiation.patch"),
}


def dpbench(*args: str, history: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dpbench", *args, "--history", str(history)],
        capture_output=True,
        text=True,
        timeout=1200,
    )


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """A release history holding both changes, their environments built (or reused)."""
    repo = tmp_path_factory.mktemp("hist") / "sglang-releases"
    releases.build(repo=repo)
    for name, (base, patch) in CHANGES.items():
        res = dpbench("change", "add", name, "--base", base, "--patch", str(PATCHES / patch),
                      history=repo)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "environment " in res.stdout and " ready in " in res.stdout
    return repo


@pytest.fixture
def on_history(history, monkeypatch):
    """Tiers name changes by name: resolved through $DPBENCH_HISTORY (inherited by children)."""
    monkeypatch.setenv("DPBENCH_HISTORY", str(history))
    return history


def probe(name: str) -> dict:
    from dpbench.envs import run_in_env

    proc = run_in_env(name, "dpbench.placement.probe", ["--json"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def value(result: dict, metric: str) -> float:
    return result["metrics"][metric]["value"]


def test_the_change_env_is_its_base_plus_the_patch(on_history):
    from dpbench.envs import ensure_env

    env = ensure_env("revert-31835")
    base = ensure_env("0.5.17")
    stamp = json.loads((env.path / "dpbench-env.json").read_text())
    base_stamp = json.loads((base.path / "dpbench-env.json").read_text())
    assert stamp["requirements"] == base_stamp["requirements"]  # the base's pins
    assert stamp["change"]["base"] == "0.5.17"
    assert env.path.name.startswith("change-revert-31835-") and env.path != base.path
    site = next((env.path / "lib").glob("python3*/site-packages"))
    base_site = next((base.path / "lib").glob("python3*/site-packages"))
    policy = "sglang/srt/managers/schedule_policy.py"
    assert (site / policy).read_bytes() != (base_site / policy).read_bytes()
    assert not (base_site / "sglang" / "_dpbench_change.json").exists()  # the release untouched
    assert (site / "sglang/srt/managers/prefill_delayer.py").read_bytes() == (
        base_site / "sglang/srt/managers/prefill_delayer.py"
    ).read_bytes()


def test_reverting_31835_reads_early_with_false_reports(on_history, tmp_path):
    """Done-when: the revert reads `early` with false prefillable reports in the placement
    tier, its provenance names the change, and `dpbench compare` fails naming the regression."""
    before, after = probe("0.5.17"), probe("revert-31835")
    assert before["placement"]["label"] == "post-kv"
    assert value(before, "false_prefillable_reports") == 0
    assert after["placement"]["label"] == "early"
    assert after["placement"]["behavioural_label"] == "early"
    assert value(after, "false_prefillable_reports") == 2
    assert value(after, "chunked_negotiates") == 0
    change = after["sglang"]["change"]
    record = json.loads(git(on_history, "show", "change/revert-31835:change.json"))
    assert change["patch_sha256"] == record["patch_sha256"]
    assert (change["name"], change["base"], after["sglang"]["version"]) == (
        "revert-31835",
        "0.5.17",
        "0.5.17",
    )

    out = tmp_path / "results"
    for name, result in (("v0.5.17", before), ("revert-31835", after)):
        sha = git(on_history, "rev-parse", name)
        results.save(out / "runs" / sha / "placement" / "placement.json", result)
    res = subprocess.run(
        [sys.executable, "-m", "dpbench", "compare", "0.5.17", "revert-31835",
         "--results", str(out), "--history", str(on_history)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    text = " ".join(res.stdout.split())  # rich wraps lines at the terminal's width
    verdict = text[text.index("regression(s)") :]
    assert "placement false_prefillable_reports" in verdict
    assert "revert-31835" in text


@pytest.mark.slow
def test_the_twin_shows_the_reverts_false_reports(on_history, tmp_path):
    from dpbench.envs import ensure_env

    base = run_twin_job(ensure_env("0.5.17"), SPEC, tmp_path / "base.json", requests=60)
    revert = run_twin_job(ensure_env("revert-31835"), SPEC, tmp_path / "rev.json", requests=60)
    assert revert["placement"]["label"] == "early"
    assert revert["sglang"]["change"]["name"] == "revert-31835"
    reports = value(revert, "false_prefillable_reports_count")
    assert reports > 0 and reports > value(base, "false_prefillable_reports_count")


@pytest.mark.slow
def test_the_ablation_arm_is_the_no_chunked_negotiation_patch(on_history, tmp_path):
    """The twin's `0.5.17:ablation` (the delayer hidden from add_chunked_req) and the real
    source change agree on every simulated metric, seed for seed."""
    from dpbench.envs import ensure_env

    seeds = (0, 1)
    arms = run_twin_jobs(ensure_env("0.5.17"), [
        twin_job(SPEC, tmp_path / f"arm{seed}.json", requests=60, seed=seed,
                 hide_delayer_from_chunked_req=True)
        for seed in seeds
    ])  # fmt: skip
    patched = run_twin_jobs(ensure_env("no-chunked-negotiation"), [
        twin_job(SPEC, tmp_path / f"p{seed}.json", requests=60, seed=seed) for seed in seeds
    ])  # fmt: skip
    for arm, patch in zip(arms, patched, strict=True):  # seed for seed
        sim = {k: v for k, v in arm["metrics"].items() if k not in WALL_METRICS}
        assert sim == {k: v for k, v in patch["metrics"].items() if k not in WALL_METRICS}
        assert value(arm, "dp_mixed_step_fraction") > 0
    assert [a["extra"]["config"]["seed"] for a in arms] == list(seeds)
    assert [p["extra"]["config"]["seed"] for p in patched] == list(seeds)


def test_a_change_whose_scheduler_does_not_import(on_history, tmp_path):
    patch = tmp_path / "broken.patch"
    patch.write_text(
        "--- a/python/sglang/srt/managers/schedule_policy.py\n"
        "+++ b/python/sglang/srt/managers/schedule_policy.py\n"
        "@@ -5,6 +5,7 @@\n"
        " \n"
        " from sglang.srt.environ import envs\n"
        " from sglang.srt.managers.prefill_delayer import PrefillDelayerSinglePassExecutor\n"
        "+from sglang.srt.no_such_module import Nothing\n"
        " from sglang.srt.runtime_context import get_disagg\n"
        " from sglang.srt.utils import get_bool_env_var\n"
        " \n"
    )
    before = git(on_history, "for-each-ref")
    res = dpbench("change", "add", "broken", "--base", "0.5.17", "--patch", str(patch),
                  history=on_history)  # fmt: skip
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert (
        "change broken: SGLang's scheduler does not import: ModuleNotFoundError: No module "
        "named 'sglang.srt.no_such_module'" in lines[0]
    )
    assert git(on_history, "for-each-ref") == before
    assert not list((cache_dir() / "envs").glob("change-broken-*"))  # nothing half-installed
