"""SGLang's real DP-attention server with only the forward simulated, on this CPU (real wheels).

One server (0.5.23) replays a small high-KV trace through the suite's own client; every
assertion about that run shares it. ``test_server_simulated_early.py`` runs the same checks
on 0.5.16 (the early placement), a file of its own so that pytest's workers start the two
releases' servers side by side.
The process-lifecycle tests are in ``test_server_lifecycle.py`` (a file of their own, so the
two pytest workers start their servers in parallel).
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import time
from pathlib import Path

import pytest
from conftest import release_run
from identity import TWIN_WALL_METRICS, stable
from simserver import DPBENCH, SPEC, server_processes, server_sessions, sim_options

from dpbench.core import results
from dpbench.server.run import execute, prepare

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _run(release: str, tmp: Path) -> tuple[object, dict, list, set[int]]:
    prep = prepare(sim_options(release, tmp))
    outcomes: list = []
    sessions: set[int] = set()

    def on_done(outcome) -> None:
        if not sessions:
            sessions.update(server_sessions(str(tmp)))
        outcomes.append(outcome)

    result = execute(prep, on_done=on_done)
    return prep, results.load(results.save(tmp / "run.json", result)), outcomes, sessions


def served(release: str, tmp_path_factory) -> tuple:
    tmp = tmp_path_factory.mktemp(f"sim-{release}")
    t0 = time.monotonic()
    prep, result, outcomes, sessions = _run(release, tmp)
    print(f"simulated server {release}: {time.monotonic() - t0:.0f} s")
    return release, tmp, prep, result, outcomes, sessions


@pytest.fixture(scope="module", params=["0.5.23"])
def sim_run(request, tmp_path_factory):
    return served(request.param, tmp_path_factory)


def test_every_request_decodes_exactly_its_max_new_tokens(sim_run):
    release, _, prep, result, outcomes, _ = sim_run
    want = {r.id: r.max_new_tokens for r in prep.requests}
    assert len(outcomes) == len(want) == 24
    bad = [
        (o.id, o.ok, o.error, o.output_tokens, want[o.id])
        for o in outcomes
        if not o.ok or o.output_tokens != want[o.id]
    ]
    assert bad == [], bad
    assert result["sglang"]["version"] == release
    assert {o.dp_rank for o in outcomes} == {0, 1}


def test_the_real_delayer_counted_outcomes(sim_run):
    _, _, _, result, _, _ = sim_run
    m = result["metrics"]
    assert m["delayer_outcomes_total"]["value"] > 0
    outcomes = result["extra"]["server_metrics"]["delayer_outcomes"]
    reasons = {k.split("/")[2] for k, v in outcomes.items() if v > 0}
    assert reasons & {"no_wait", "wait_success", "delay", "wait_timeout"}, outcomes


def test_step_records_hold_extend_decode_and_dp_mixed_steps(sim_run):
    _, _, _, result, _, _ = sim_run
    m = result["metrics"]
    steps = result["extra"]["steps"]
    assert m["steps_extend_count"]["value"] > 0
    assert m["steps_decode_count"]["value"] > 0
    assert m["steps_mixed_count"]["value"] > 0, steps["step_kind"]
    assert 0 < m["dp_mixed_step_fraction"]["value"] < 1
    assert m["decode_rank_s_beside_prefill"]["value"] > 0
    # ranks line up step by step: both wrote every step
    assert len(set(steps["steps_per_rank"])) == 1
    rows = [
        json.loads(x)
        for x in (Path(result["extra"]["step_records_dir"]) / "rank0.jsonl")
        .read_text()
        .splitlines()
    ]
    assert {r["kind"] for r in rows} >= {"extend", "decode"}
    assert all(r["kv_total"] == rows[0]["kv_total"] for r in rows)


def test_the_kv_utilization_reached_sits_beside_the_planned(sim_run):
    """The planner sized the pool; the run reports its expected peak utilization beside the
    token_usage its schedulers reached (the twin's kv_utilization_max, from the pass records)."""
    _, _, _, result, _, _ = sim_run
    m = {k: v["value"] for k, v in result["metrics"].items()}
    plan = result["extra"]["kv_plan"]
    assert m["kv_utilization_planned"] == plan["planned_peak_util"]
    assert m["kv_utilization_planned"] == pytest.approx(plan["target_util"], abs=0.01)
    assert 0 < m["kv_utilization_max"] <= 1


def test_the_result_is_marked_simulated_with_its_cost_model(sim_run):
    _, _, _, result, _, _ = sim_run
    assert result["executor"] == "simulated" and result["cost_model"] == "roofline"
    assert result["extra"]["executor"]["kind"] == "simulated"
    assert all(m["executor"] == "simulated" for m in result["metrics"].values())
    m = result["metrics"]
    # the CPU work the overlap schedule did not hide is measured, not guessed
    assert 0 <= m["device_idle_fraction"]["value"] < 1 and m["simulated_step_ms_p50"]["value"] > 0
    # SGLang's own DP cooperation counters (SGLANG_ENABLE_METRICS_DP_ATTENTION=1)
    assert m["dp_coop_decode_tokens_total"]["value"] > 0


def test_the_run_names_how_long_each_server_process_waited_for_a_cpu(sim_run):
    """The instrument's run-queue check reads each process's main thread; the sum over its
    threads (a scheduler's gloo loop threads) is recorded beside it. Not an inequality
    between the two: a thread that ends during the run leaves the sum (its counters go with
    it), and 0.5.16's run once read a main thread above its process's sum."""
    _, _, _, result, _, _ = sim_run
    m = result["metrics"]
    main = m["server_main_thread_wait_fraction"]["value"]
    assert 0 <= main <= 1.01 and m["server_run_queue_wait_fraction"]["value"] >= 0
    rows = result["extra"]["run_queue_wait_by_process"]
    names = [r["process"] for r in rows]
    schedulers = [n for n in names if n.startswith("sglang::scheduler")]  # SGLang's titles
    assert len(schedulers) == 2 and any("DP1" in n for n in schedulers), names
    assert all(0 <= r["main_thread"] <= 1.01 and r["all_threads"] >= 0 for r in rows)
    assert rows[0]["main_thread"] == pytest.approx(main)  # the most-waiting one decides
    assert (
        "server_main_thread_wait_fraction" not in result["extra"]["instrument_health"]["unchecked"]
    )


def test_the_overlap_schedule_launches_onto_a_busy_virtual_device(sim_run):
    # SGLang's overlap loop schedules and launches batch k+1 before it reads batch k's
    # results: with the virtual device the launch comes before k's device end, and the
    # device starts k+1 only when every rank's k ended (the collectives' coupling)
    _, _, _, result, _, _ = sim_run
    where = Path(result["extra"]["step_records_dir"])
    ranks = [
        [json.loads(x) for x in (where / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)
    ]
    assert len(ranks[0]) == len(ranks[1])  # one forward per rank per step, warm-up included
    for k in range(1, len(ranks[0])):
        slowest = max(rows[k - 1]["end"] for rows in ranks)
        assert all(rows[k]["start"] >= slowest - 1e-9 for rows in ranks), k
        assert all(rows[k]["start"] >= rows[k]["t"] for rows in ranks), k
    rows = ranks[0]
    early = sum(b["t"] < a["end"] for a, b in itertools.pairwise(rows) if a["kind"] != "idle")
    busy = sum(a["kind"] != "idle" for a in rows[:-1])
    # how often the launch beats the device depends on this machine's load (between 0.3 and
    # 0.7 of busy steps here); that it happens at all is the overlap: without it SGLang reads
    # step k's results (waiting for its device end) before it schedules k+1
    assert 0 < early <= busy, (early, busy)


def test_scheduler_arrivals_are_recorded_and_the_twin_replays_them(sim_run, tmp_path):
    from dpbench.server.run import release_python

    release, tmp, _, result, outcomes, _ = sim_run
    arrivals = result["extra"]["scheduler_arrivals"]
    assert set(arrivals) == {o.id for o in outcomes}  # SGLang's warm-up request left out
    assert all(arrivals[o.id][1] == o.dp_rank for o in outcomes)  # the rank SGLang reports
    assert result["metrics"]["pickup_ms_p50"]["value"] > 0
    out = tmp_path / "replay.json"
    from dpbench.twin.config import make_config
    from dpbench.twin.job import write_job

    config = make_config(
        dp_size=2, tp_size=2, replay_arrivals=str(tmp / "run.json"), rank_mode="threads",
        record_timeline=False,
    )  # fmt: skip
    job = write_job(tmp_path / "job.json", SPEC, config)
    again = tmp_path / "again.json"
    # two jobs in one process (how the fidelity report runs its replays): the second run
    # repeats the first, so the first left nothing behind that moved it
    proc = release_run(
        [release_python(release), "-m", "dpbench.twin.run", str(job), str(job),
         "-o", str(out), "-o", str(again)],
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    twin = results.load(out)
    assert twin["extra"]["config"]["replay_arrivals"] == str(tmp / "run.json")
    assert twin["metrics"]["requests_finished_count"]["value"] == len(outcomes)
    assert stable(results.load(again), TWIN_WALL_METRICS) == stable(twin, TWIN_WALL_METRICS)


def test_the_twin_refuses_jobs_without_as_many_outputs(tmp_path):
    from dpbench.server.run import release_python

    proc = release_run(
        [release_python("0.5.23"), "-m", "dpbench.twin.run", "a.json", "b.json", "-o", "x.json"],
        timeout=120,
    )
    assert proc.returncode == 2
    assert "2 job(s) need as many -o outputs, got 1" in proc.stderr


def test_fidelity_reuses_a_stored_server_run_and_replays_its_arrivals(sim_run, tmp_path):
    """``dpbench server fidelity --reuse-server-runs`` on this module's real server run: the
    real twin runs on the trace and on that run's own arrivals; no second server starts."""
    import shutil

    from dpbench.server import fidelity

    release, tmp, _, result, _, _ = sim_run
    inp = fidelity.Inputs(spec=SPEC, dp=2, release=release, chunked_prefill_size=4096)
    stem = f"sim-smoke-dp2-chunk4096-sglang{release}"
    shutil.copy(tmp / "run.json", tmp_path / f"{stem}-server-r0.json")
    t0 = time.monotonic()
    report = fidelity.run(inp, out_dir=tmp_path, reuse_server_runs=True)
    assert time.monotonic() - t0 < 300  # two twin runs; a server start-up alone takes ~60 s
    rows = {r["metric"]: r for r in report["rows"]}
    mixed = rows["DP-mixed step fraction"]
    assert mixed["server_runs"] == [result["metrics"]["dp_mixed_step_fraction"]["value"]]
    assert len(mixed["replay_runs"]) == 1 and not math.isnan(mixed["replay_runs"][0])
    replay = results.load(report["twin_replay_results"][0])
    assert replay["extra"]["config"]["replay_arrivals"] == str(tmp_path / f"{stem}-server-r0.json")
    # the server's idle-pass time (passes with no batch anywhere while requests waited) is the
    # replay's; absent (nobody held back at an idle pass): the twin keeps its default
    wait_ms = result["metrics"].get("idle_pass_ms_p50")
    plain = results.load(report["twin_result"])
    want = wait_ms["value"] / 1e3 if wait_ms else plain["extra"]["config"]["idle_pass_s"]
    assert replay["extra"]["config"]["idle_pass_s"] == pytest.approx(want)


def test_pass_records_line_up_with_the_forwards(sim_run):
    """Every pass that ran a batch on a rank is one forward there, in order, on every rank."""
    from dpbench.server.steps import _jsonl

    _, _, _, result, _, _ = sim_run
    where = Path(result["extra"]["step_records_dir"])
    for r in range(2):
        passes = _jsonl(where / f"passes-rank{r}.jsonl")
        forwards = _jsonl(where / f"rank{r}.jsonl")
        ran = [p["kind"] for p in passes if p["kind"] != "none"]
        assert ran == [f["kind"] for f in forwards]
        assert all(p["reported"] in (True, False) and p["reason"] is not None for p in passes)
        extends = [p for p in passes if p["kind"] == "extend"]
        assert extends and all(len(p["admitted"]) == p["bs"] for p in extends)


def test_the_divergence_finder_on_a_real_run_and_an_injected_departure(sim_run, tmp_path):
    """``dpbench server diverge`` on this module's real run: the twin replaying it makes the
    server's decisions (no rank runs another kind of forward on an aligned step; on 0.5.23 but
    for the one departure the twin is known to have); a departure injected into the twin's
    records is found at its step, with the label pair."""
    from dpbench.server import diverge as dv

    release, tmp, _, result, _, _ = sim_run
    # its speed on a stored run is a measured figure (docs/server.md), not a timed assertion:
    # on a loaded two-core CI machine this small run's finder once took 60.3 s
    proc = subprocess.run(
        [DPBENCH, "server", "diverge", str(tmp / "run.json"), "-o", str(tmp_path / "rep.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert "first divergence" in proc.stdout
    server = dv.server_steps(result)
    assert rep["counts"]["server"]["steps"] == len(server)
    forwards = sum(1 for s in server if dv.step_kind(s) != "none")
    assert forwards == result["metrics"]["steps_count"]["value"]
    # no decision departs: where a rank's forward differs, what it saw differed first (an
    # arrival a pass apart). "What it saw" counts the running requests its decode will run:
    # not those already finished that the next decode filters out (0.5.16/0.5.17), nor on
    # 0.5.23 those its overlap loop leaves out because the in-flight step finishes them
    # (enable_skip_finishing_decode): both sides record both per pass
    decisions = rep["departures"]["decision_pairs"]
    assert decisions == {}, rep["departures"]
    where = Path(result["extra"]["step_records_dir"])
    passes = [json.loads(x) for f in where.glob("passes-rank*.jsonl") for x in f.open()]
    assert passes
    if release == "0.5.23":
        assert any(p.get("finishing") for p in passes), "no pass saw a finishing request"
        # a rank whose every running request finishes in flight sits the step out
        assert any(p["kind"] == "idle" and p["running"] == p["finishing"] > 0 for p in passes)
    else:
        assert all("finishing" not in p for p in passes)
        # under the overlap lag a finished request stays in the batch until the next decode
        assert any(p["finished"] > 0 for p in passes)
    # inject: the twin's rank 1 extends at a step where both ranks decode, inside the run
    twin = dv.replay_twin(tmp / "run.json", tmp_path / "twin.json")
    base_report = dv.compare(server, dv.twin_steps(twin))
    base, base_departure = base_report["first_divergence"], base_report["departures"]
    tl = twin["extra"]["timeline"]
    kinds = list(zip(tl["rank_kind"][0], tl["rank_kind"][1], strict=True))
    step = next(i for i in range(5, len(kinds) - 5) if kinds[i - 1 : i + 2] == [(1, 1)] * 3)
    tl["rank_kind"][1][step] = 2
    tl["rank_chunked"][1][step] = -1
    got_report = dv.compare(server, dv.twin_steps(twin))
    got = got_report["first_divergence"]
    # after alignment too: the injected forward is where the sequences first part, unless
    # they had parted before it
    departed = got_report["departures"]["first_departure"]
    before = base_departure["first_departure"]
    assert departed is not None and departed["twin_step"] <= step
    if before is None or before["twin_step"] > step:
        assert departed["twin_step"] == step
    first = base["first_kind_step"]
    assert got["first_kind_step"] == min(step, first if first is not None else step)
    if (first is None or first > step) and (
        base["first_state_step"] is None or base["first_state_step"] > step
    ):  # nothing parted before it: the same state, another forward, is a decision
        assert got["decision"] is True and f"step {step}" in got["verdict"]


def test_no_server_process_is_left_after_the_run(sim_run):
    _, tmp, _, _, _, sessions = sim_run
    assert sessions, "the server's session was not seen during the run"
    assert server_processes(str(tmp), sessions) == []
