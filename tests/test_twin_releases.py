"""The twin on real SGLang wheels (0.5.16 early placement, 0.5.23 post-KV) at small scale, in release envs.

Each run is ``python -m dpbench.twin.run`` inside the release's environment: real
PrefillAdder, real PrefillDelayer negotiating over gloo between 2 rank processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import release_run

from dpbench.core.procs import alive, children

pytestmark = pytest.mark.sglang

SPEC = "long-prompt-burst"
SMALL = {"dp_size": 2, "record_timeline": False}  # and 60 requests
# Wall-clock metrics: real time, so they differ run to run by design.
WALL_METRICS = {"scheduler_pass_us_p50", "passes_per_s", "pass_wall_over_rank_work"}
OUTCOME_LABELS = {
    "input_estimation": {"all", "mixed", "none"},
    "output_allow": {"true", "false"},
    "output_reason": {"no_wait", "wait_success", "delay", "wait_timeout", "token_watermark", ""},
    "actual_execution": {"true", "false"},
}


def _command(env, out: Path, requests: int = 60, **options) -> list[str]:
    """``python -m dpbench.twin.run JOB -o OUT``, the job built from the schema's options."""
    from dpbench.twin.config import TwinInputs, make_config
    from dpbench.twin.job import write_job

    job = write_job(
        out.with_suffix(".job.json"), SPEC, make_config(**options), TwinInputs(requests=requests)
    )
    return [str(env.python), "-m", "dpbench.twin.run", str(job), "-o", str(out)]


def _simulated(result: dict) -> dict:
    return {k: v for k, v in result["metrics"].items() if k not in WALL_METRICS}


# Every run the tests below read, per release, run one after another in one process of that
# release's environment (``tests/twin_batch.py``: SGLang imported once, ~11 s of CPU each time;
# a run that left state behind would move the next one's numbers). Each is what
# ``python -m dpbench.twin.run`` runs; "processes" forks its two rank processes from there.
BATCHES = {
    "0.5.23": {
        "base": {},
        "again": {},
        "gloo": {"step_exchange": "gloo"},
        "threads": {"rank_mode": "threads"},
        "ablation": {
            "hide_delayer_from_chunked_req": True,
            "batch_is_full_rule": "always",
            "skip_finishing_decode": False,
            "rank_mode": "threads",
        },
        "off": {"enable_prefill_delayer": False, "rank_mode": "threads"},
    },
    "0.5.16": {
        "base": {},
        "threads": {"rank_mode": "threads"},
        "mid_chunk": {"rank_mode": "threads", "record_timeline": True},
        "mid_chunk_arm": {
            "rank_mode": "threads",
            "record_timeline": True,
            "chunk_merge_resets_batch_is_full": False,
        },
    },
}


@pytest.fixture(scope="module")
def batches(release_env, tmp_path_factory):
    """{release: {name: run result}} for :data:`BATCHES`."""
    from twinjob import run_twin_jobs, twin_job

    tmp = tmp_path_factory.mktemp("twin")
    out = {}
    for version, named in BATCHES.items():
        jobs = [
            twin_job(
                SPEC,
                tmp / f"{version}-{name}.json",
                requests=60,
                **{**SMALL, "rank_mode": "processes", **options},
            )
            for name, options in named.items()
        ]
        out[version] = dict(zip(named, run_twin_jobs(release_env(version), jobs), strict=True))
    return out


@pytest.fixture(scope="module")
def runs(batches):
    return {v: batches[v]["base"] for v in ("0.5.16", "0.5.23")}


@pytest.mark.parametrize(
    "version, placement, delayer_gen",
    [("0.5.16", "early", "args"), ("0.5.23", "post-kv", "runtime_context")],
)
def test_twin_runs_the_release(runs, version, placement, delayer_gen):
    r = runs[version]
    assert r["tier"] == "twin"
    assert r["sglang"]["version"] == version
    assert r["sglang"]["delayer_generation"] == delayer_gen
    assert r["placement"]["label"] == placement
    m = {k: v["value"] for k, v in r["metrics"].items()}
    assert m["requests_finished_count"] == 60
    assert m["steps_count"] == sum(
        m[f"steps_{k}_count"] for k in ("extend", "decode", "mixed", "idle")
    )
    assert 0.9 < m["kv_utilization_max"] <= 1.0  # the spec drives the pool to ≥ 95 %
    outcomes = r["extra"]["prefill_delayer_outcomes_total"]
    # one outcome per rank per pass, labelled as SGLang's prefill_delayer_outcomes_total
    assert sum(o["count"] for o in outcomes) == 2 * m["steps_count"]
    for o in outcomes:
        for label, allowed in OUTCOME_LABELS.items():
            assert o[label] in allowed
    assert "roofline" in r["notes"][0]


def test_early_placement_reports_false_prefillable(runs):
    """PR #31835's failure mode shows on 0.5.16 and not (or less) on 0.5.23, same trace."""
    early = runs["0.5.16"]["metrics"]
    post = runs["0.5.23"]["metrics"]
    assert early["false_prefillable_reports_count"]["value"] > 0
    assert (
        early["false_prefillable_reports_count"]["value"]
        > post["false_prefillable_reports_count"]["value"]
    )


def test_same_release_spec_seed_give_identical_metrics(runs, batches):
    """Determinism: same release, spec, seed and parameters → identical simulated numbers (two
    runs in one process here; tests/test_identity.py holds runs against a stored reference)."""
    again = batches["0.5.23"]["again"]
    first = {k: v for k, v in runs["0.5.23"]["metrics"].items() if k not in WALL_METRICS}
    second = {k: v for k, v in again["metrics"].items() if k not in WALL_METRICS}
    assert first == second
    assert (
        runs["0.5.23"]["extra"]["prefill_delayer_outcomes_total"]
        == again["extra"]["prefill_delayer_outcomes_total"]
    )


def test_gloo_step_exchange_matches_shared_memory(runs, batches):
    """The twin's own end-of-step exchange (shared memory by default) changes no simulated number."""
    gloo = batches["0.5.23"]["gloo"]
    assert gloo["extra"]["config"]["step_exchange"] == "gloo"
    first = {k: v for k, v in runs["0.5.23"]["metrics"].items() if k not in WALL_METRICS}
    assert first == {k: v for k, v in gloo["metrics"].items() if k not in WALL_METRICS}


def test_killed_rank_ends_the_run_and_leaves_no_process(release_env, tmp_path):
    env = release_env("0.5.23")
    proc = subprocess.Popen(
        [*_command(env, tmp_path / "never.json", requests=400, **SMALL), "--events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ranks: list[int] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until the ranks are stepping
            if json.loads(line).get("event") == "progress":
                break
        ranks = children(proc.pid)
        assert len(ranks) == 2, f"expected 2 rank processes under {proc.pid}, found {ranks}"
        victim = ranks[1]
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, err[-2000:]
    events = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    error = next(e for e in events if e["event"] == "error")
    assert f"rank {error['rank']} (pid {victim}) killed by SIGKILL" in error["message"]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in ranks), "a rank process outlived the run"
    assert not (tmp_path / "never.json").exists()


# Two rank processes whose scheduler cannot be built: each sends its error and exits. The
# ranks fail before they read the trace or the cost model, so the job holds neither.
_RAISING_RANKS = """
import json, multiprocessing as mp, os
from dpbench.core.procs import free_port
from dpbench.twin.config import make_config
from dpbench.twin.ranks import RankJob, SharedMemoryExchange, TwinRankError, run_ranks

def no_kit():
    raise RuntimeError(f"no kit in pid {os.getpid()}")

job = RankJob(
    config=make_config(dp_size=2, enable_prefill_delayer=False, deadline_s=120),
    arrivals=None, kv_tokens=1024, cost=None, port=free_port(), make_kit=no_kit,
    defaults=None, exchange=SharedMemoryExchange(mp.get_context("fork"), 2, 120),
    idle_pass_s=0.001,
)
try:
    run_ranks(job)
except TwinRankError as exc:
    print(json.dumps({"rank": exc.rank, "message": str(exc), "left": len(mp.active_children())}))
"""


def test_a_rank_that_raises_is_named_with_its_error(release_env):
    """A rank's exception reaches the parent as its message and traceback; every rank is reaped."""
    env = release_env("0.5.23")
    proc = release_run([str(env.python), "-c", _RAISING_RANKS], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rank"] in (0, 1)
    assert out["message"].startswith(f"rank {out['rank']} failed: RuntimeError: no kit in pid ")
    assert "Traceback" in out["message"] and "_build_rank" in out["message"]
    assert out["left"] == 0, "a rank process outlived the run"


@pytest.mark.parametrize(
    "version, batch_is_full, finished_filter, skip, tracker",
    [
        ("0.5.16", "always", "at_decode", False, "NewTokenRatioTracker.from_server_args"),
        (
            "0.5.23",
            "if_admitted_or_running",
            "every_pass",
            True,
            "NewTokenRatioTracker.from_config",
        ),
    ],
)
def test_scheduler_defaults_come_from_the_release(
    runs, version, batch_is_full, finished_filter, skip, tracker
):
    """SGLang's own DP-attention resolution: conservativeness ×0.3, chunk ÷ DP size, ratio from its envs."""
    d = runs[version]["extra"]["scheduler_defaults"]
    assert d["dp_size"] == 2 and d["tp_size"] == 8
    assert d["schedule_conservativeness"] == pytest.approx(0.3)
    assert d["per_rank_chunked_prefill_size"] == 8192 // 2
    assert d["init_new_token_ratio"] == pytest.approx(0.7 * 0.3)  # SGLANG_INIT_NEW_TOKEN_RATIO × c
    assert d["min_new_token_ratio"] < d["init_new_token_ratio"]
    assert d["batch_is_full_on_no_token"] == batch_is_full
    assert d["finished_filter"] == finished_filter  # when finished requests leave the running batch
    assert d["skip_finishing_decode"] is skip  # 0.5.23: finishing requests sit the decode out
    assert d["sources"]["new_token_ratio"] == tracker  # the release's own tracker, not a formula
    assert d["radix_cache_default"] and d["overlap_schedule_default"]
    assert "radix cache on" in " ".join(runs[version]["notes"])


def test_thread_ranks_give_the_gloo_processes_numbers(runs, batches):
    """The in-process rank mode (sweeps' default) changes no simulated number, on the early and post-KV release."""
    for version in ("0.5.16", "0.5.23"):
        threads = batches[version]["threads"]
        assert threads["extra"]["config"]["rank_mode"] == "threads"
        assert _simulated(threads) == _simulated(runs[version])
        assert (
            threads["extra"]["prefill_delayer_outcomes_total"]
            == runs[version]["extra"]["prefill_delayer_outcomes_total"]
        )


def test_ablation_arm_hides_the_delayer_from_chunk_continuations(batches):
    """0.5.23 with add_chunked_req's report hidden: runs, says so, and keeps the post-KV placement.

    The same run swaps in 0.5.16's batch_is_full rule (the arm ``batch-is-full=always``):
    the result says the rule came from the flag, not from the release.
    """
    r = batches["0.5.23"]["ablation"]
    assert r["extra"]["config"]["scheduler"]["hide_delayer_from_chunked_req"] is True
    assert r["extra"]["twin_config"]["scheduler"]["skip_finishing_decode"] is False
    assert any("ablation arm" in n for n in r["notes"])
    assert r["metrics"]["requests_finished_count"]["value"] == 60
    d = r["extra"]["scheduler_defaults"]
    assert d["batch_is_full_on_no_token"] == "always"
    assert d["sources"]["batch_is_full_on_no_token"] == "--batch-is-full-rule"
    assert d["skip_finishing_decode"] is False  # 0.5.23's own rule turned back by the arm
    assert d["sources"]["skip_finishing_decode"] == "--skip-finishing-decode"


def test_injected_scenario_failure_fails_the_run(release_env, tmp_path):
    env = release_env("0.5.23")
    proc = release_run(
        _command(env, tmp_path / "x.json", **SMALL),
        timeout=300,
        env={**os.environ, "DPBENCH_INJECT_FAILURE": "twin"},
    )
    assert proc.returncode != 0
    assert "InjectedFailure" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_delayer_off_reports_no_delayer_metrics(batches):
    """Not measured is absent: no false reports, false-report mixed steps or delay passes without the delayer."""
    r = batches["0.5.23"]["off"]
    for name in (
        "false_prefillable_reports_count",
        "false_report_mixed_steps_count",
        "delayer_delay_count",
    ):
        assert name not in r["metrics"]
    assert r["metrics"]["dp_mixed_step_fraction"]["value"] >= 0


def _mid_chunk_reports(result: dict) -> Counter:
    """Per pass in which a rank continued a chunked prefill with requests waiting: what it
    told the delayer first (1: prefillable, 0: not)."""
    tl = result["extra"]["timeline"]
    seen: Counter = Counter()
    for r in range(len(tl["rank_kind"])):
        for kind, chunked, waiting, told in zip(
            tl["rank_kind"][r],
            tl["rank_chunked"][r],
            tl["rank_waiting"][r],
            tl["rank_reported"][r],
            strict=True,
        ):
            if kind == 2 and chunked >= 0 and waiting > 0:
                seen[told] += 1
    return seen


def test_a_rank_mid_chunk_offers_its_queue_every_pass_as_sglang_does(batches):
    """SGLang merges the last extend batch without the chunked request in flight; the batch
    shrank, so ``batch_is_full`` is reset and a rank mid-chunk offers its waiting requests to
    ``add_one_req`` every pass. On 0.5.16 (negotiation first) it then always tells the delayer
    "prefillable", as the real server's pass records show on long-prompt-burst (3,873 of
    3,873 rank-passes, 0.5.16, DP 4). The arm ``--no-chunk-merge-reset`` (the twin before the fix) kept
    the flag and had such ranks report "not prefillable"."""
    fixed = _mid_chunk_reports(batches["0.5.16"]["mid_chunk"])
    arm = _mid_chunk_reports(batches["0.5.16"]["mid_chunk_arm"])
    assert fixed[1] > 0 and fixed[0] == 0
    assert arm[0] > 0
