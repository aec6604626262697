"""Operating points: the twin's load axis (rate_scale), SLO attainment, and the capacity-at-SLO
search (bisection: unit-tested on known curves, then through a real release's twin)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import release_run
from twinjob import run_twin_jobs, twin_job

from dpbench.metrics.latency import RequestLatency, Slo, latency_metrics
from dpbench.twin.capacity import search
from dpbench.twin.capacity_cli import summarise
from dpbench.twin.config import TwinConfigError, make_config


def _curve(edge: float):
    """A run whose attainment is 1 up to ``edge`` and falls after it; records the rates run."""
    seen = []

    def run(rate: float) -> dict[str, float]:
        seen.append(rate)
        att = 1.0 if rate <= edge else 0.5
        return {"requests_total": 10, "requests_finished_count": 10, "slo_attainment": att}

    return run, seen


def test_bisection_brackets_the_edge_within_its_resolution():
    run, seen = _curve(0.3)
    got = search(run, attainment=0.99, lo=1 / 64, hi=4.0, steps=8)
    assert got["bound"] == "bracket" and len(seen) == 9  # hi, then 8 halvings; a halving held
    assert 1 / 64 not in seen  # so lo, the dearest run, never ran
    good, bad = got["bracket"]
    assert good <= 0.3 < bad and bad / good <= 256 ** (1 / 2**8) + 1e-9
    assert got["capacity"] == good
    assert [p["rate_scale"] for p in got["points"]] == seen  # every rate it ran is kept


def _lo_first(run, *, attainment, lo, hi, steps):
    """The bisection as it ran before lo moved last: both ends first, then the halvings."""
    holds = lambda r: run(r)["slo_attainment"] >= attainment  # noqa: E731
    if not holds(lo):
        return None, "below"
    if holds(hi):
        return hi, "above"
    good, bad = lo, hi
    for _ in range(steps):
        mid = math.sqrt(good * bad)
        good, bad = (mid, bad) if holds(mid) else (good, mid)
    return good, "bracket"


@pytest.mark.parametrize("edge", [0.001, 0.01, 0.0101, 0.012, 0.05, 0.1, 0.3, 0.99, 1.0, 50.0])
def test_lo_last_finds_what_lo_first_found(edge):
    run, seen = _curve(edge)
    got = search(run, attainment=0.99, lo=0.01, hi=1.0, steps=4)
    assert (got["capacity"], got["bound"]) == _lo_first(
        _curve(edge)[0], attainment=0.99, lo=0.01, hi=1.0, steps=4
    )
    lowest_halving = 0.01 * 100 ** (1 / 2**4)  # where the halvings end when none held
    if edge < lowest_halving:  # lo runs only when no halving held, and then last
        assert seen[-1] == 0.01 and seen.count(0.01) == 1
    else:
        assert 0.01 not in seen


def test_edges_outside_the_range_are_named_not_guessed():
    below = search(_curve(0.001)[0], attainment=0.99, lo=0.01, hi=1.0, steps=4)
    assert below["capacity"] is None and below["bound"] == "below"
    above = search(_curve(50.0)[0], attainment=0.99, lo=0.01, hi=1.0, steps=4)
    assert above["capacity"] == 1.0 and above["bound"] == "above"
    with pytest.raises(ValueError, match="0 < lo < hi"):
        search(_curve(1.0)[0], attainment=0.99, lo=1.0, hi=1.0, steps=1)


def test_an_unfinished_request_fails_the_rate_whatever_the_attainment():
    def run(rate: float) -> dict[str, float]:
        return {"requests_total": 10, "requests_finished_count": 9, "slo_attainment": 1.0}

    assert search(run, attainment=0.5, lo=0.1, hi=1.0, steps=2)["bound"] == "below"


def test_slo_attainment_is_the_fraction_of_completed_requests_meeting_both_slos():
    reqs = [
        RequestLatency(1.0, 2.0, [0.1], 11),  # TTFT 1 s, TPOT 0.1 s: meets 2 s / 100 ms
        RequestLatency(3.0, 4.0, [], 11),  # TTFT too long
        RequestLatency(0.5, 30.5, [], 11),  # TPOT 3 s
        RequestLatency(0.5, 0.5, [], 1),  # one token: no TPOT, meets
    ]
    m = latency_metrics(reqs, 10.0, Slo(ttft_ms=2000, tpot_ms=100))
    assert m["slo_attainment"].value == pytest.approx(0.5)
    assert m["goodput_requests_per_s"].value == pytest.approx(0.2)
    assert "slo_attainment" not in latency_metrics([], 10.0)  # nothing completed: absent


def test_rate_scale_is_checked():
    assert make_config(rate_scale=2.5).rate_scale == 2.5
    with pytest.raises(TwinConfigError, match="rate_scale must be in"):
        make_config(rate_scale=0)
    with pytest.raises(TwinConfigError, match="rate_scale must be 1 when replaying"):
        make_config(rate_scale=2.0, replay_arrivals="run.json")


def test_summary_pairs_seeds_and_counts_those_out_of_range():
    def arm(caps):
        rows = []
        for seed, c in enumerate(caps):
            bound = "bracket" if c is not None else "below"
            rows.append(
                {"dp": 4, "chunked_prefill_size": 8192, "seed": seed, "capacity": c, "bound": bound}
            )
        return {"rows": rows}

    (row,) = summarise({"A": arm([0.2, 0.3, 0.4, None]), "B": arm([0.25, 0.36, 0.43, 0.5])})
    a, b = row["arms"]["A"], row["arms"]["B"]
    assert (a["n"], a["below"], b["n"]) == (3, 1, 4)
    assert a["mean"] == pytest.approx(0.3) and a["ci95"][0] < 0.3 < a["ci95"][1]
    p = row["paired"]["B"]
    assert p["n"] == 3 and p["mean_diff"] == pytest.approx((0.05 + 0.06 + 0.03) / 3)
    assert p["ci95_low"] > 0  # B above A on every common seed


@pytest.mark.sglang
def test_a_faster_rate_queues_more_and_the_search_runs_on_the_real_twin(release_env, tmp_path):
    env = release_env("0.5.23")
    spec = "agentic-multiturn-small"
    slow, fast = run_twin_jobs(env, [
        twin_job(spec, tmp_path / "slow.json", rate_scale=0.5),
        twin_job(spec, tmp_path / "fast.json", rate_scale=8.0),
    ])  # fmt: skip
    assert slow["extra"]["twin_config"]["rate_scale"] == 0.5
    ms, mf = ({k: v["value"] for k, v in r["metrics"].items()} for r in (slow, fast))
    assert fast["extra"]["twin_config"]["rate_scale"] == 8.0
    # 16× the offered rate: the same requests arrive 16× sooner and wait longer
    assert mf["simulated_duration_s"] < ms["simulated_duration_s"]
    assert mf["ttft_ms_p99"] > ms["ttft_ms_p99"]
    assert mf["slo_attainment"] <= ms["slo_attainment"]
    # the search, as `dpbench twin capacity` runs it in the release's environment
    from dpbench.core.schema import to_dict
    from dpbench.twin.sweep import arm_base_config

    job = {
        "spec": spec,
        "seeds": [0],
        "dps": [2],
        "chunks": [8192],
        "requests": None,
        "attainment": 0.9,
        "lo": 0.25,
        "hi": 16.0,
        "steps": 2,
        "config": to_dict(arm_base_config({"slo_ttft_ms": 3000.0, "slo_tpot_ms": 150.0})),
    }
    (tmp_path / "cap.job.json").write_text(json.dumps(job))
    proc = release_run([str(env.python), "-m", "dpbench.twin.capacity", str(tmp_path / "cap.job.json"), "-o",
         str(tmp_path / "cap.json")], timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads((tmp_path / "cap.json").read_text())["rows"]
    rates = [p["rate_scale"] for p in row["points"]]
    assert rates[:2] == [16.0, 2.0] and len(rates) <= 4  # hi, the first halving; lo only last
    assert 0.25 not in rates[:-1]
    assert all(0 <= p["slo_attainment"] <= 1 for p in row["points"])
    if row["bound"] == "bracket":
        good, bad = row["bracket"]
        assert 0.25 <= good < bad <= 16.0 and math.isclose(row["capacity"], good)
