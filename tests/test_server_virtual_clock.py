"""SGLang's real server in virtual time (``--clock virtual``), on the smoke trace with a late request.

One server (0.5.23, DP 2) replays the trace twice on the virtual clock, charging 1 ms of
virtual time per pass for the scheduler's own work (so its waits on the clock get exercised). A request is
injected 30 s after the trace's last arrival: the clock must jump to it (the ranks are idle)
and never show it to a scheduler early. Causality is read off the stand-in's own records:
every request reaches its scheduler at or after its virtual arrival, and no pass of that
rank starts between the two (the clock never passed a request on its way). The two replays
must repeat each other step for step. The agreement with a real-clock run needs the machine
to itself: ``test_server_virtual_vs_real.py`` (``make test`` runs it after the parallel suite).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from simserver import sim_options

from dpbench.server.loadgen import Schedule
from dpbench.server.prepare import for_seed
from dpbench.server.run import execute_replays, prepare
from dpbench.server.steps import read_records

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

LATE_S = 30.0
# the measured-charge run's gap: its replay's wall time is this machine's own work, which
# beside a busy suite took 33 s of the 30 (a fresh clone, 2026-12-07); a gap waited out on the
# wall would still take four times that
MEASURED_LATE_S = 120.0
OTHER_SEED = 8
CHARGE_MS = 1.0  # the scheduler's work per pass (--pass-charge-ms): the clock's waits get exercised


def _late(prep, gap_s: float = LATE_S):
    """The smoke trace with its last request moved gap_s after the one before it."""
    off = np.array(prep.schedule.offsets_s, dtype=float)
    off[-1] = off[-2] + gap_s
    return replace(prep, schedule=Schedule(offsets_s=off))


@pytest.fixture(scope="module")
def virtual(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("virtual")
    prep = _late(
        prepare(
            sim_options("0.5.23", tmp, clock="virtual", max_requests=16, pass_charge_ms=CHARGE_MS)
        )
    )
    # a third replay draws another seed of the spec against the same start-up (server sweep)
    results = execute_replays(prep, 3, clients=[prep, prep, for_seed(prep, OTHER_SEED)])
    return prep, results, tmp


def _records(result) -> Path:
    return Path(result["extra"]["server_log"]).with_suffix("") / "steps"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_every_request_reaches_its_scheduler_at_or_after_its_virtual_arrival(virtual):
    prep, results, _ = virtual
    early, missed = _causality(prep, results[0])
    assert not early, f"seen before their virtual arrival: {early}"
    assert not missed, f"the clock passed them on their way: {missed}"


def _causality(prep, first) -> tuple[list, list]:
    """The requests a scheduler saw before their virtual arrival, and those a pass of their
    rank passed on their way (started after the request was due, before it was taken in)."""
    steps = _records(first)
    window = first["extra"].get("replay", {})  # a server's only replay has no window: all of it
    t_load, until = window.get("from_t", -np.inf), window.get("to_t", np.inf)
    planned = {r.id: float(o) for r, o in zip(prep.requests, prep.schedule.offsets_s, strict=True)}
    arrivals, passes = {}, {}
    for r in range(2):
        for rec in _jsonl(steps / f"arrivals-rank{r}.jsonl"):
            # without a window, SGLang's warm-up request is in the records too
            if t_load <= rec["t"] < until and (window or rec["rid"] in planned):
                arrivals[rec["rid"]] = (rec["t"], r)
        passes[r] = [p["t"] for p in _jsonl(steps / f"passes-rank{r}.jsonl")]
    assert set(arrivals) == set(planned)
    t0 = min(t for t, _ in arrivals.values()) - min(planned.values())
    early, missed = [], []
    for rid, (t, rank) in arrivals.items():
        due = t0 + planned[rid]
        if t < due - 1e-9:
            early.append((rid, due, t))
        # a pass of that rank started after the request was due and before it was taken in
        if any(due + 1e-9 < p < t - 1e-9 for p in passes[rank]):
            missed.append((rid, due, t))
    return early, missed


def test_a_measured_charge_is_the_passes_own_work_the_same_on_every_rank(tmp_path):
    """``--pass-charge measured``: each charge is the wall time a scheduler worked since it
    last waited on the clock, the largest over the ranks. So every rank charges the same on
    the same passes (a rank ahead would wait in a collective for one behind it), the charges
    are this machine's own times, not one constant, and causality holds as with a fixed one."""
    prep = _late(
        prepare(sim_options("0.5.23", tmp_path, clock="virtual", max_requests=16, pass_charge="measured")),
        MEASURED_LATE_S,
    )  # fmt: skip
    (run,) = execute_replays(prep, 1)
    assert run["extra"]["executor"]["pass_charge"] == "measured"
    assert run["extra"]["run_options"]["pass_charge"] == "measured"
    steps = _records(run)
    charges = [[p["charge_s"] for p in _jsonl(steps / f"passes-rank{r}.jsonl") if "charge_s" in p]
               for r in range(2)]  # fmt: skip
    assert charges[0] and charges[0] == charges[1]
    assert all(c > 0 for c in charges[0]) and len(set(charges[0])) > 1
    early, missed = _causality(prep, run)
    assert not early and not missed, (early, missed)
    # the late request's gap is still jumped, not waited
    assert run["wall_time_s"] < MEASURED_LATE_S / 2


def test_the_clock_jumps_to_a_late_request_and_serves_it_at_once(virtual):
    _, results, _ = virtual
    m = results[1]["metrics"]
    # the replay spans the late request's 30 virtual seconds, and its TTFT is a prefill on an
    # idle server, not the gap; the wall clock did not wait the gap out
    assert m["e2e_ms_p99"]["value"] < LATE_S * 1e3 / 10
    assert m["ttft_ms_p99"]["value"] < LATE_S * 1e3 / 10
    assert results[1]["wall_time_s"] < LATE_S


def test_two_replays_repeat_each_other_step_for_step(virtual):
    _, results, _ = virtual
    a, b = (r["metrics"] for r in results[:2])
    for key in ("dp_mixed_step_fraction", "steps_count", "ttft_ms_p50", "ttft_ms_p99",
                "itl_ms_p50", "tpot_ms_p99", "e2e_ms_p99"):  # fmt: skip
        assert a[key]["value"] == pytest.approx(b[key]["value"], rel=1e-9, abs=1e-9), key
    steps = _records(results[0])
    one = read_records(steps, 2)
    t1, t2 = (results[k]["extra"]["replay"]["from_t"] for k in (1, 2))
    shape = [[(s["kind"], s["bs"], s["extend_tokens"]) for s in rank] for rank in one]
    first = [[x for x, s in zip(rank, ranks, strict=True) if s["t"] < t1]
             for rank, ranks in zip(shape, one, strict=True)]  # fmt: skip
    second = [[x for x, s in zip(rank, ranks, strict=True) if t1 <= s["t"] < t2]
              for rank, ranks in zip(shape, one, strict=True)]  # fmt: skip
    # the first replay's window also holds SGLang's warm-up steps: compare its last steps
    for r in range(2):
        assert second[r] and first[r][-len(second[r]) :] == second[r]


def test_another_seed_replays_against_the_same_start_up_and_records_its_seed(virtual):
    prep, results, _ = virtual
    first, other = results[0], results[2]
    assert first["workload"]["seed"] == prep.spec.seed != OTHER_SEED
    assert other["workload"]["seed"] == other["extra"]["run_options"]["seed"] == OTHER_SEED
    assert other["workload"]["hash"] != first["workload"]["hash"]
    assert other["extra"]["command"] == first["extra"]["command"]  # one server, one KV pool
    assert [list(r.input_ids) for r in for_seed(prep, OTHER_SEED).requests] != [
        list(r.input_ids) for r in prep.requests
    ]
    assert other["metrics"]["errors_total"]["value"] == 0
    assert other["metrics"]["steps_count"]["value"] > 0


def _started(result) -> list[dict]:
    steps = _records(result)
    return [_jsonl(steps / f"process-rank{r}.jsonl")[0] for r in range(2)]


def test_sglang_s_own_spawned_processes_make_the_same_run_as_forked_ones(virtual, tmp_path):
    """The simulated-forward server forks SGLang's DP controller, schedulers and detokenizer
    from its launcher (``start_method``: none of them then imports SGLang anew, ~11 s of CPU
    each). SGLang's own ``spawn`` must make the same run: same metrics, same steps."""
    prep, results, _ = virtual
    spawned = _late(
        prepare(
            sim_options(
                "0.5.23", tmp_path, clock="virtual", max_requests=16,
                pass_charge_ms=CHARGE_MS, start_method="spawn",
            )
        )
    )  # fmt: skip
    (again,) = execute_replays(spawned, 1)
    forked = results[0]
    assert [p["start_method"] for p in _started(forked)] == ["fork", "fork"]
    assert [p["start_method"] for p in _started(again)] == ["spawn", "spawn"]
    assert forked["extra"]["run_options"]["start_method"] == "fork"
    assert again["extra"]["run_options"]["start_method"] == "spawn"
    for key in ("dp_mixed_step_fraction", "steps_count", "ttft_ms_p50", "ttft_ms_p99",
                "itl_ms_p50", "tpot_ms_p99", "e2e_ms_p99"):  # fmt: skip
        want = forked["metrics"][key]["value"]
        assert again["metrics"][key]["value"] == pytest.approx(want, rel=1e-9, abs=1e-9), key
    # the trace's own steps, from its first request's arrival at a scheduler: SGLang's
    # warm-up before it runs on the wall clock, and one fresh-clone run saw it take one idle
    # step more in one server than in the other
    ids = {r.id for r in prep.requests}
    t1 = results[1]["extra"]["replay"]["from_t"]  # the forked server's first replay ends here

    def shape(result, until):
        steps = _records(result)
        since = min(a["t"] for r in range(2) for a in _jsonl(steps / f"arrivals-rank{r}.jsonl")
                    if a["rid"] in ids)  # fmt: skip
        return [[(s["kind"], s["bs"], s["extend_tokens"]) for s in rank if since <= s["t"] < until]
                for rank in read_records(steps, 2)]  # fmt: skip

    assert shape(again, float("inf")) == shape(forked, t1)
