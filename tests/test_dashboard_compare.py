"""The comparison rules (noise band, direction, change %), the direction table, step detection,
fidelity matching and commit naming: shared by the pages and the terminal."""

from __future__ import annotations

import json
import re

import pytest

from dpbench.dashboard import metrics
from dpbench.dashboard.compare import (
    QUIET,
    Change,
    CommitNotFound,
    Row,
    Side,
    change_of,
    fmt_pct,
    regressions,
    resolve_commit,
    sort_key,
    t975,
)


@pytest.mark.parametrize(
    ("a", "b", "better", "verdict", "pct"),
    [
        (Side(10, 9, 11), Side(10.5, 9.5, 11.5), "lower", "within noise", 5.0),  # bands overlap
        (Side(10, 9, 11), Side(20, 19, 21), "lower", "worse", 100.0),  # disjoint bands
        (Side(10, 9, 11), Side(20, 19, 21), "higher", "better", 100.0),
        (Side(10), Side(20), "higher", "better", 100.0),  # deterministic: direction decides
        (Side(2), Side(0), "lower", "better", -100.0),  # a drop to zero is -100 %, not omitted
        (Side(0), Side(1), "higher", "better", None),  # from 0: no percentage
        (Side(1), Side(2), "none", "changed", 100.0),  # e.g. a placement code
        (Side(1), Side(2), "unknown", "changed", 100.0),  # never guessed better or worse
        (Side(3), Side(3), "lower", "no change", 0.0),
        (None, Side(3), "lower", "not measured", None),
        (Side(3), None, "lower", "not measured", None),
    ],
)
def test_verdicts(a, b, better, verdict, pct):
    """On a deterministic tier (placement: a probe of the installed code), where one run a
    side is the answer."""
    c = change_of(a, b, better, "placement")
    assert c.verdict == verdict
    assert c.pct == (pytest.approx(pct) if pct is not None else None)


@pytest.mark.parametrize("tier", ["twin", "server", "kernels", ""])
def test_one_run_a_side_of_any_other_tier_gets_no_verdict(tier):
    """One seed of the twin is one draw of its distribution, one server run one draw of its
    timing: "single run", a quiet row that never gates, its change still given."""
    c = change_of(Side(100.0), Side(2000.0), "lower", tier)
    assert (c.verdict, c.basis) == ("single run", "single run") and c.pct == pytest.approx(1900.0)
    assert "single run" in QUIET
    assert regressions([_row_of(c)], 5.0) == []
    placed = change_of(Side(2.0), Side(0.0), "lower", "placement")
    assert (placed.verdict, placed.basis) == ("better", "deterministic")


def test_instrument_health_and_single_server_runs_get_no_verdict():
    """The load client's lateness or the device's idle time never reads as SGLang better or
    worse, and one server run per side (a timing-dependent tier) is no basis for a verdict."""
    from dpbench.dashboard.compare import VERDICT_ORDER
    from dpbench.dashboard.metrics import direction

    for name in (
        "server.SimulatedRooflineServe.track_client_send_lateness_ms_max",
        "server.SimulatedRooflineServe.track_device_idle_fraction",
        "twin.TwinHighKV.track_passes_per_s",
        "server.Serve.track_pickup_ms_p50",
    ):
        assert direction(name).better == "instrument", name
    c = change_of(Side(10), Side(1000), "instrument")
    assert c.verdict == "instrument" and c.pct == pytest.approx(9900.0)
    assert change_of(Side(10), Side(20), "higher", "server").verdict == "single run"
    assert change_of(Side(10, 9, 11), Side(20, 19, 21), "higher", "server").verdict == "better"
    assert change_of(Side(10), Side(20), "higher", "twin").verdict == "single run"
    assert change_of(Side(10), Side(20), "higher", "placement").verdict == "better"
    assert {"single run", "instrument"} <= set(QUIET)
    assert VERDICT_ORDER["instrument"] == max(VERDICT_ORDER.values())  # listed last


def test_interval_of_the_change_comes_from_both_bands():
    c = change_of(Side(10, 9, 11), Side(20, 19, 22), "lower")
    assert (c.lo, c.pct, c.hi) == (pytest.approx(80.0), pytest.approx(100.0), pytest.approx(130.0))
    assert c.basis == "bands" and fmt_pct(c) == "+100.0 % [+80.0, +130]"
    assert change_of(Side(2), Side(0), "lower").basis == "single run"
    assert change_of(Side(2), Side(0), "lower", "placement").basis == "deterministic"


def _row_of(change: Change, tier: str = "t") -> Row:
    return Row(tier, "asv", "m", (), {}, "mach", "env", "u", "lower", Side(1), Side(2), change)


def _row(verdict_pct: tuple[str, float | None]) -> Row:
    verdict, pct = verdict_pct
    return Row(
        "t",
        "asv",
        "m",
        (),
        {},
        "mach",
        "env",
        "u",
        "lower",
        Side(1),
        Side(2),
        Change(pct, None, None, verdict, "single run"),
    )


def test_gate_counts_only_worse_beyond_the_threshold():
    rows = [
        _row(v)
        for v in [
            ("worse", 8.0),
            ("worse", 3.0),
            ("better", -50.0),
            ("changed", 90.0),
            ("within noise", 40.0),
            ("worse", None),
        ]
    ]
    assert [r.change.pct for r in regressions(rows, 5.0)] == [8.0, None]  # from 0 always counts
    assert [r.change.pct for r in regressions(rows, 0.0)] == [8.0, 3.0, None]


def test_every_benchmark_metric_has_a_direction():
    """Every track_/time_ benchmark in benchmarks/ (written out or made from a class's table)
    gets higher/lower/none from the one table: none unknown."""
    import importlib
    import inspect

    from dpbench.core.paths import project_root

    names = []
    for path in sorted((project_root() / "benchmarks").glob("*.py")):
        module = importlib.import_module(f"benchmarks.{path.stem}")
        for cname, cls in inspect.getmembers(module, inspect.isclass):
            names += [
                f"{path.stem}.{cname}.{m}"
                for m in dir(cls)
                if m.startswith(("track_", "time_", "mem_", "peakmem_"))
            ]
    assert "twin.TwinLoad.track_slo_attainment" in names
    unknown = [n for n in names if metrics.direction(n).better == "unknown"]
    assert unknown == []
    assert metrics.direction("twin.TwinHighKV.track_request_throughput").better == "higher"
    assert metrics.direction("x.Y.track_dp_mixed_step_fraction").better == "lower"
    assert metrics.direction("x.Y.track_ttft_ms_p99").better == "lower"
    assert metrics.direction("x.Y.track_decode_rank_s_beside_prefill").better == "lower"
    assert metrics.direction("x.Y.track_something_new").better == "unknown"
    assert metrics.direction("something_new", declared="higher").better == "higher"


def test_delayer_off_scenarios_are_the_control():
    assert metrics.is_control({"spec": "a", "delayer": "off"})
    assert not metrics.is_control({"spec": "a", "delayer": "on"})
    assert not metrics.is_control({})


def test_steps_follow_asv_detector_and_respect_bands():
    from dpbench.dashboard.steps import series_steps

    flat = [[i, 5.0, None, None] for i in range(6)] + [[i, 3.0, None, None] for i in range(6, 10)]
    (st,) = series_steps(flat)
    assert (st["before"], st["after"], st["pct"]) == (5, 6, pytest.approx(-40.0))
    noisy = [[0, 1.0, 0.8, 1.2], [1, 1.1, 0.9, 1.3]]  # bands overlap: not a step
    assert series_steps(noisy) == []
    assert series_steps([[0, 2.0, None, None], [3, 2.0, None, None]]) == []


def test_fidelity_pairs_twin_and_simulated_server_on_the_same_scenario():
    """Unit input (hand-made model, not results): matching by metric name and common params."""
    from dpbench.dashboard.fidelity import pairs

    def chart(tier, cls, metric, scen, value, executor=None):
        return {
            "tier": tier,
            "source": "asv",
            "metric": metric,
            "unit": "req/s",
            "better": "higher",
            "executor": executor,
            "param_names": list(scen),
            "group": cls,
            "series": [
                {"machine": "m", "env": "e", "scenario": scen, "points": [[0, value, None, None]]}
            ],
        }

    model = {
        "charts": [
            chart(
                "twin",
                "TwinHighKV",
                "request_throughput",
                {"spec": "s", "dp_size": "4", "chunked_prefill": "default", "delayer": "on"},
                2.0,
            ),
            chart(
                "twin",
                "TwinHighKV",
                "request_throughput",
                {"spec": "s", "dp_size": "4", "chunked_prefill": "2x", "delayer": "on"},
                9.0,
            ),
            chart(
                "server",
                "ServeSimulated",
                "request_throughput_per_s",
                {"spec": "s", "dp_size": "4", "delayer": "on"},
                2.5,
                "simulated",
            ),
            chart(
                "server",
                "ServeThroughput",
                "request_throughput_per_s",
                {"spec": "s", "dp_size": "4"},
                7.0,
            ),
        ]
    }
    (p,) = pairs(model)
    assert p["scenario"] == {
        "spec": "s",
        "dp_size": "4",
        "chunked_prefill": "default",
        "delayer": "on",
    }
    assert p["rows"] == [[0, 2.0, None, None, 2.5, None, None, pytest.approx(-20.0)]]
    assert p["dev_unit"] == "%"


def test_fidelity_deviation_of_a_fraction_is_in_points():
    from dpbench.dashboard.fidelity import deviation

    assert deviation(0.02, 0.01, "fraction") == (pytest.approx(1.0), "pts")
    assert deviation(0.0, 0.0, "fraction (evictable entries included)") == (0.0, "pts")
    assert deviation(110.0, 100.0, "ms") == (pytest.approx(10.0), "%")
    assert deviation(1.0, 0.0, "ms") == (None, "%")


MODEL = {
    "commits": [
        {
            "sha": "33bf16ff81bf16e95fb61a3bbee70a21ed0c684b",
            "tags": ["v0.5.16"],
            "label": "v0.5.16 33bf16ff",
        },
        {"sha": "33bf0000000000000000000000000000000000aa", "tags": [], "label": "33bf0000"},
        {
            "sha": "3548a850339085c527aeacd78aa6c5977d3f592e",
            "tags": ["v0.5.23"],
            "label": "v0.5.23 3548a850",
        },
    ]
}


def test_commits_are_named_by_version_tag_or_hash_prefix():
    assert resolve_commit(MODEL, "0.5.16") == 0
    assert resolve_commit(MODEL, "v0.5.23") == 2
    assert resolve_commit(MODEL, "3548a8") == 2
    with pytest.raises(CommitNotFound, match="matches 2 commits"):
        resolve_commit(MODEL, "33bf")
    with pytest.raises(CommitNotFound, match=re.escape("commits with results: v0.5.16 33bf16ff")):
        resolve_commit(MODEL, "0.4.0")


def test_noise_free_levels_are_split_where_asvs_detector_splits_them():
    """The build's shortcut for exact piecewise-constant series gives asv's own segments."""
    import random

    from asv.step_detect import detect_steps

    from dpbench.dashboard.steps import _runs

    rng = random.Random(0)
    checked = 0
    while checked < 40:
        levels = [rng.choice([0, 1, 2, 5, 0.129, 0.175]) for _ in range(rng.randint(1, 4))]
        ys: list[float] = []
        while len(ys) < 30:
            ys += [rng.choice(levels)] * rng.randint(2, 12)
        runs = _runs(ys)
        if len(runs) > len(ys) // 2:
            continue
        checked += 1
        assert [s[:3] for s in detect_steps(ys)] == [s[:3] for s in runs], ys


def test_the_same_seeds_on_both_commits_are_compared_pair_by_pair():
    """Three seeds whose unpaired bands overlap ("within noise" unpaired) but which move the
    same way on every seed: the paired difference has an interval that excludes 0."""
    a = Side(0.10, 0.08, 0.13, samples=(0.08, 0.10, 0.13), seeds="v3")
    b = Side(0.09, 0.07, 0.12, samples=(0.07, 0.09, 0.12), seeds="v3")
    assert change_of(Side(0.10, 0.08, 0.13), Side(0.09, 0.07, 0.12), "lower").verdict == (
        "within noise"
    )
    c = change_of(a, b, "lower")
    assert c.verdict == "better" and c.basis == "paired, 3 seeds"
    assert c.pct == pytest.approx(-0.01 / (0.31 / 3) * 100)
    assert c.lo == pytest.approx(c.pct) and c.hi == pytest.approx(c.pct)  # identical differences
    # per-seed differences of both signs: the interval holds 0
    noisy = change_of(a, Side(0.10, samples=(0.09, 0.12, 0.11), seeds="v3"), "lower")
    assert noisy.verdict == "within noise" and noisy.lo < 0 < noisy.hi


def test_pairing_needs_the_same_seed_set():
    a = Side(1.0, 0.9, 1.1, samples=(0.9, 1.0, 1.1), seeds="v3")
    other_version = Side(2.0, 1.9, 2.1, samples=(1.9, 2.0, 2.1), seeds="v4")
    fewer = Side(2.0, 1.9, 2.1, samples=(1.9, 2.1), seeds="v3")
    for b in (other_version, fewer, Side(2.0, 1.9, 2.1)):
        c = change_of(a, b, "lower")
        assert c.basis == "bands" and c.verdict == "worse"  # unpaired: the bands decide
    # a seed one side did not measure is left out of the pairs; one pair is not enough
    gap = change_of(a, Side(2.0, samples=(None, 2.0, 2.2), seeds="v3"), "lower")
    assert gap.basis == "paired, 2 seeds"
    lone = change_of(a, Side(2.0, 1.9, 2.1, samples=(None, None, 2.1), seeds="v3"), "lower")
    assert lone.basis == "bands"


def test_paired_interval_is_the_t_interval_of_the_differences():
    import statistics

    from dpbench.twin.stats import paired

    xs, ys = (10.0, 12.0, 11.0, 13.0), (11.0, 12.5, 12.0, 15.0)
    c = change_of(Side(11.5, samples=xs, seeds="v"), Side(12.6, samples=ys, seeds="v"), "higher")
    p = paired(xs, ys)
    scale = statistics.mean(xs) / 100
    assert (c.lo, c.pct, c.hi) == (
        pytest.approx(p.ci95_low / scale),
        pytest.approx(p.mean_diff / scale),
        pytest.approx(p.ci95_high / scale),
    )
    assert c.verdict == "better"


def test_asv_samples_of_two_commits_are_paired_by_seed(tmp_path, monkeypatch):
    """asv's own Results (written with record_samples, as the main job's `asv run
    --record-samples` writes them) → the loader → the model → a paired verdict; a commit whose
    benchmark version differs (another seed set) is compared unpaired."""
    import datetime

    from asv import util
    from asv.machine import Machine
    from asv.results import Results
    from asv.runner import BenchmarkResult

    from dpbench.dashboard.compare import compare_commits
    from dpbench.dashboard.loaders import load_results
    from dpbench.dashboard.model import build_model

    monkeypatch.setattr(Machine, "hardcoded_machine_name", "box")
    now = datetime.datetime.now(datetime.UTC)
    meta = {"type": "track", "param_names": ["dp_size"], "params": [["4", "8"]]}
    (tmp_path / "benchmarks.json").write_text(
        json.dumps({"version": 2, "twin.TwinHighKV.track_dp_mixed_step_fraction": meta})
    )
    per_commit = {  # commit → (benchmark version, per-seed DP-mixed fractions at 2 settings)
        "a" * 40: ("v3", [[0.08, 0.10, 0.13], [0.20, 0.21, 0.22]]),
        "b" * 40: ("v3", [[0.07, 0.09, 0.12], [0.20, 0.23, 0.21]]),
        "c" * 40: ("v4", [[0.07, 0.09, 0.12], [0.20, 0.23, 0.21]]),
    }
    for i, (sha, (version, samples)) in enumerate(per_commit.items()):
        res = Results({"machine": "box"}, {}, sha, 1_700_000_000_000 + i, "3.11", "env", {})
        bench = {
            "name": "twin.TwinHighKV.track_dp_mixed_step_fraction",
            "params": [["4", "8"]],
            "version": version,
        }
        out = BenchmarkResult(
            result=[True, True], samples=samples, number=[1, 1], errcode=0, stderr="",
            profile=None,
        )  # fmt: skip
        res.add_result(bench, out, started_at=now, duration=1.0, record_samples=True)
        res.save(str(tmp_path))
    info = {"machine": "box", "arch": "x86_64", "cpu": "", "num_cpu": "2", "os": "", "ram": ""}
    util.write_json(str(tmp_path / "box" / "machine.json"), info, api_version=Machine.api_version)
    model = build_model(load_results(tmp_path), [])
    (chart,) = model["charts"]
    assert [s["samples"]["0"]["x"] for s in chart["series"]] == [
        [0.08, 0.10, 0.13],
        [0.2, 0.21, 0.22],
    ]
    rows = {r.params: r for r in compare_commits(model, 0, 1)}
    assert rows[("4",)].change.basis == "paired, 3 seeds" and rows[("4",)].verdict == "better"
    assert rows[("8",)].change.basis == "paired, 3 seeds" and rows[("8",)].verdict == "within noise"
    unpaired = {r.params: r for r in compare_commits(model, 0, 2)}
    assert unpaired[("4",)].change.basis == "bands"
    # a timing's samples are repeats, not seeds: never paired
    meta["type"] = "time"
    (tmp_path / "benchmarks.json").write_text(
        json.dumps({"version": 2, "twin.TwinHighKV.track_dp_mixed_step_fraction": meta})
    )
    timed = build_model(load_results(tmp_path), [])
    assert all("samples" not in s for s in timed["charts"][0]["series"])
    assert compare_commits(timed, 0, 1)[0].change.basis == "bands"


# --- a timing tier's repeated runs: unpaired, Welch ---------------------------------------


def test_server_repeats_get_the_welch_interval_of_the_difference_of_means():
    """Worked by hand: A = 9, 10, 11 (mean 10, s² 1), B = 11, 13, 15, 17 (mean 14, s² 20/3).
    Standard error² = 1/3 + (20/3)/4 = 2; Welch–Satterthwaite df = 2² / ((1/3)²/2 + (5/3)²/3)
    = 216/53 = 4.08 → 4; t(0.975, 4) = 2.7764451 (tables); half-width 2.7764451·√2 = 3.92649;
    over |mean A| = 10: +40 % [+0.735, +79.265]."""
    a = Side(10.0, samples=(9.0, 10.0, 11.0), seeds="v")
    b = Side(14.0, samples=(11.0, 13.0, 15.0, 17.0), seeds="v")
    c = change_of(a, b, "higher", "server")
    half = 2.7764451 * 2**0.5
    assert (c.lo, c.pct, c.hi) == (
        pytest.approx((4 - half) / 10 * 100, rel=1e-6),
        pytest.approx(40.0),
        pytest.approx((4 + half) / 10 * 100, rel=1e-6),
    )
    assert c.lo == pytest.approx(0.7351, abs=1e-4) and c.hi == pytest.approx(79.2649, abs=1e-4)
    assert (c.verdict, c.basis) == ("better", "repeats, 3 + 4 runs")
    assert change_of(a, b, "lower", "server").verdict == "worse"
    assert change_of(a, b, "none", "server").verdict == "changed"
    # outside a timing tier these samples are seeds, and 3 against 4 do not pair
    assert change_of(a, b, "higher", "twin").basis == "single run"


def test_server_samples_are_never_paired_even_with_the_same_seeds():
    """Run k of commit A is no counterpart of run k of commit B: samples that pair into a
    "better" in the twin tier are compared unpaired in the server tier (and their means'
    interval holds 0)."""
    a = Side(0.10, 0.08, 0.13, samples=(0.08, 0.10, 0.13), seeds="v3")
    b = Side(0.09, 0.07, 0.12, samples=(0.07, 0.09, 0.12), seeds="v3")
    twin = change_of(a, b, "lower", "twin")
    assert (twin.verdict, twin.basis) == ("better", "paired, 3 seeds")
    server = change_of(a, b, "lower", "server")
    assert (server.verdict, server.basis) == ("within noise", "repeats, 3 + 3 runs")
    assert server.lo < 0 < server.hi
    assert server.pct == pytest.approx(-0.01 / (0.31 / 3) * 100)
    # runs a side left unmeasured (None) are dropped, not paired away
    gaps = change_of(
        Side(10.0, samples=(10.0, None, 10.2, 9.9), seeds="v"),
        Side(11.0, samples=(11.0, 11.3, None, 11.1), seeds="v"),
        "lower",
        "server",
    )
    assert (gaps.verdict, gaps.basis) == ("worse", "repeats, 3 + 3 runs")
    # the same constant on every run of both sides: no change; two different constants: a
    # zero-width interval, the direction decides
    same = Side(5.0, samples=(5.0, 5.0, 5.0), seeds="v")
    assert change_of(same, same, "lower", "server").verdict == "no change"
    up = change_of(same, Side(6.0, samples=(6.0, 6.0, 6.0), seeds="v"), "higher", "server")
    assert up.verdict == "better" and up.lo == up.pct == up.hi == pytest.approx(20.0)


def test_a_server_verdict_needs_three_runs_a_side():
    """Two runs a side: the change and its interval, but "single run" (too few runs for a
    verdict) even where the interval excludes 0; one run: "single run", bands or not."""
    two = Side(10.05, samples=(10.0, 10.1), seeds="v")
    three = Side(20.1, samples=(20.0, 20.2, 20.1), seeds="v")
    c = change_of(two, three, "higher", "server")
    assert (c.verdict, c.basis) == ("single run", "repeats, 2 + 3 runs")
    assert c.pct == pytest.approx((20.1 - 10.05) / 10.05 * 100) and 0 < c.lo < c.pct < c.hi
    assert "single run" in QUIET
    flat = change_of(two, Side(10.05, samples=(10.1, 10.0), seeds="v"), "higher", "server")
    assert flat.verdict == "within noise"  # a quiet verdict needs no third run
    assert (
        change_of(Side(10.0, samples=(9.0, 10.0, 11.0)), three, "higher", "server").verdict
        == "better"
    )
    one = (Side(10.0, samples=(10.0,), seeds="v"), Side(20.0, samples=(20.0,), seeds="v"))
    one_each = change_of(*one, "higher", "server")
    assert (one_each.verdict, one_each.basis) == ("single run", "single run")
    assert one_each.pct == pytest.approx(100.0)
    # one run against three, even with disjoint bands: too few runs on A's side
    lone = Side(10, 9, 11, samples=(10.0,))
    banded = change_of(lone, Side(20, 19, 21, samples=(19.0, 20.0, 21.0)), "higher", "server")
    assert (banded.verdict, banded.basis) == ("single run", "bands")
    # bands without recorded samples (no run count) still decide, as before
    assert change_of(Side(10, 9, 11), Side(20, 19, 21), "higher", "server").verdict == "better"


def test_instrument_health_of_a_server_with_repeats_is_still_no_verdict():
    a = Side(10.0, samples=(9.0, 10.0, 11.0), seeds="v")
    b = Side(1000.0, samples=(990.0, 1000.0, 1010.0), seeds="v")
    c = change_of(a, b, "instrument", "server")
    assert (c.verdict, c.basis, c.lo, c.hi) == ("instrument", "", None, None)
    assert c.pct == pytest.approx(9900.0)


def test_rows_sort_paired_then_repeats_then_bands_then_single_runs():
    bases = ["single run", "bands", "repeats, 3 + 3 runs", "paired, 5 seeds", ""]
    ranks = [Change(1.0, None, None, "worse", b).basis_rank for b in bases]
    assert ranks == [3, 2, 1, 0, 3]
    rows = [
        Row("t", "asv", b or "none", (), {}, "m", "e", "u", "lower", Side(1), Side(2), change)
        for b in bases
        for change in [Change(10.0, None, None, "worse", b)]
    ]
    assert [r.change.basis for r in sorted(rows, key=sort_key)] == [
        "paired, 5 seeds",
        "repeats, 3 + 3 runs",
        "bands",
        "",
        "single run",
    ]


def test_t_quantiles_are_the_pages_up_to_100_df_then_1_96():
    from dpbench.dashboard.model import T975

    assert len(T975) == 100
    assert all(t975(df) == pytest.approx(T975[df - 1], abs=1e-6) for df in range(1, 101))
    assert t975(101) == 1.96 and t975(4) == pytest.approx(2.7764451, abs=1e-7)


# --- the values shown, bounded intervals, counts too small to judge ---------------------------

COUNT = metrics.Quantity(0.0, None, count=True)
FRACTION = metrics.Quantity(0.0, 1.0)
RATE = metrics.Quantity(0.0, None)

# The main job's simulated-server DP-mixed runs that issue 35 quotes: asv's medians read
# 0.0088 → 0.0106 (a rise) while the means fall; the interval ran to -120.9 %.
SERVER_MIXED = (
    Side(0.0088, samples=(0.0088, 0.0088, 0.0174), seeds="v"),
    Side(0.0106, samples=(0.0106, 0.0106, 0.0091), seeds="v"),
)


def test_the_values_a_change_shows_are_the_ones_it_is_computed_from():
    c = change_of(*SERVER_MIXED, "lower", "server", FRACTION)
    assert (c.a, c.b, c.stat) == (
        pytest.approx((0.0088 + 0.0088 + 0.0174) / 3),
        pytest.approx((0.0106 + 0.0106 + 0.0091) / 3),
        "mean",
    )
    assert c.b < c.a and c.pct < 0  # the values shown fall as the change says
    cases = [
        (*SERVER_MIXED, "lower", "server"),  # repeats: means
        (Side(0.10, samples=(0.08, 0.10, 0.13), seeds="v3"),
         Side(0.09, samples=(0.07, 0.09, 0.12), seeds="v3"), "lower", "twin"),  # paired
        (Side(1.0, samples=(0.9, None, 1.1), seeds="v3"),
         Side(2.0, samples=(1.9, 2.0, 2.6), seeds="v3"), "lower", "twin"),  # paired, a gap
        (Side(10, 9, 11), Side(20, 19, 21), "lower", "twin"),  # bands: asv's values
        (Side(2), Side(0), "lower", "placement"),  # deterministic
    ]  # fmt: skip
    for a, b, better, tier in cases:
        c = change_of(a, b, better, tier)
        assert c.pct == pytest.approx((c.b - c.a) / abs(c.a) * 100), (a, b)
    gap = change_of(*cases[2][:2], "lower", "twin")
    assert (gap.a, gap.b) == (pytest.approx(1.0), pytest.approx(2.25))  # the 2 seeds it paired


def test_intervals_stop_at_the_bounds_and_keep_their_verdicts():
    free = change_of(*SERVER_MIXED, "lower", "server")
    bounded = change_of(*SERVER_MIXED, "lower", "server", FRACTION)
    assert free.lo < -100 and bounded.lo == pytest.approx(-100.0)
    assert (bounded.pct, bounded.hi, bounded.verdict) == (free.pct, free.hi, free.verdict)
    assert fmt_pct(bounded) == "-13.4 % [-100, +93.9]"
    # a rate (the server's goodput, asv's 99 % band [-2.4, 5.7] req/s): never below 0
    rate = change_of(
        Side(2.066, samples=(0.62, 2.066, 2.31), seeds="v"),
        Side(2.19, samples=(2.10, 2.28, 2.19), seeds="v"),
        "higher",
        "server",
        RATE,
    )
    assert rate.lo == pytest.approx(-100.0) and rate.verdict == "within noise"
    # a fraction near 1 never above 1: B ≤ 1 caps the change at (1 - A) / A
    near = change_of(
        Side(0.9, samples=(0.85, 0.95, 0.9), seeds="v"),
        Side(0.97, samples=(0.999, 0.93, 0.98), seeds="v"),
        "higher",
        "twin",
        FRACTION,
    )
    assert near.hi == pytest.approx((1 - 0.9) / 0.9 * 100) and near.lo < near.pct < near.hi
    # clipping never moves a verdict or the estimate
    for a, b, better, tier in [(*SERVER_MIXED, "lower", "server"),
                               (Side(10, 9, 11), Side(1, 0, 19), "lower", "twin"),
                               (Side(0.5, 0.1, 0.9), Side(0.95, 0.9, 1.0), "higher", "twin")]:  # fmt: skip
        for q in (FRACTION, RATE):
            plain, cut = change_of(a, b, better, tier), change_of(a, b, better, tier, q)
            assert (cut.verdict, cut.pct) == (plain.verdict, plain.pct)
            assert q.lo is None or cut.lo >= (q.lo - cut.a) / cut.a * 100 - 1e-9


def test_a_count_with_too_few_events_is_too_few_to_judge():
    """Fewer than MIN_COUNT_EVENTS events on both sides together: "too few to judge", the
    events in place of a percentage (never an interval past -100 %), quiet, never gating."""
    from dpbench.dashboard.compare import MIN_COUNT_EVENTS, TOO_FEW

    reports = Side(0.0, samples=(2, 0, 1, 0, 0), seeds="v"), Side(0.0, samples=(0,) * 5, seeds="v")
    plain = change_of(*reports, "lower", "twin")
    assert plain.lo < -100  # what the main job printed: -100.0 % [-285.1, +85.1]
    few = change_of(*reports, "lower", "twin", COUNT)
    assert (few.verdict, few.pct, few.lo, few.hi) == (TOO_FEW, None, None, None)
    assert fmt_pct(few) == "3 vs 0 events" and (few.a, few.b) == (pytest.approx(0.6), 0.0)
    assert TOO_FEW in QUIET and regressions([_row_of(few)], 0.0) == []
    # enough events: judged, the interval stopping at -100 %
    many = Side(0.0, samples=(5, 4, 3, 2, 1), seeds="v"), Side(0.0, samples=(0,) * 5, seeds="v")
    assert sum(many[0].samples) >= MIN_COUNT_EVENTS
    judged = change_of(*many, "lower", "twin", COUNT)
    assert judged.verdict == "better" and judged.lo == pytest.approx(-100.0)
    assert judged.pct == pytest.approx(-100.0)
    # a server's runs count the same way; one run a side counts its value
    assert change_of(Side(1.0, samples=(1, 0, 0)), Side(0.0, samples=(0, 0, 0)), "lower",
                     "server", COUNT).verdict == TOO_FEW  # fmt: skip
    assert change_of(Side(4), Side(3), "lower", "twin", COUNT).basis == "4 vs 3 events"
    assert change_of(Side(40), Side(30), "lower", "twin", COUNT).verdict == "single run"
    # the placement probe's counts are exact: 2 → 0 is -100 %, better
    exact = change_of(Side(2), Side(0), "lower", "placement", COUNT)
    assert (exact.verdict, exact.pct) == ("better", pytest.approx(-100.0))
    # nothing changed: no change, whatever the count
    zeros = Side(0.0, samples=(0, 0, 0), seeds="v")
    assert change_of(zeros, zeros, "lower", "twin", COUNT).verdict == "no change"


def _suite_metric_names() -> set[str]:
    """Every metric name a benchmark or a run result of the suite writes: the benchmarks'
    track_/time_ methods, and the keys of every Metric(...) the library builds (a name built
    with an f-string stands in with its known values, or "x")."""
    import ast

    from dpbench.core.paths import project_root

    fill = {  # f-string parts the name tables must cover with their real values
        "short": ["prefill_delayer_wait_seconds", "prefill_delayer_wait_forward_passes"],
    }
    names: set[str] = set()
    root = project_root()
    names |= _benchmark_names(root / "benchmarks")
    for path in sorted((root / "src" / "dpbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            keys = []
            if isinstance(node, ast.Dict):
                keys = [k for k, v in zip(node.keys, node.values, strict=True) if _is_metric(v)]
            elif isinstance(node, ast.Assign) and _is_metric(node.value):
                keys = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
            for key in keys:
                if isinstance(key, ast.Constant):
                    names.add(key.value)
                elif isinstance(key, ast.JoinedStr):
                    names |= _expand(key, fill)
    return names


def _benchmark_names(folder) -> set[str]:
    """``module.Class.track_x`` for every benchmark method, as asv finds them: the classes
    build their track_ methods from unit tables, so read the classes, not the source."""
    import importlib
    import inspect

    out = set()
    for path in sorted(folder.glob("*.py")):
        mod = importlib.import_module(f"{folder.name}.{path.stem}")
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__:
                out |= {
                    f"{path.stem}.Class.{n}"
                    for n in dir(cls)
                    if n.startswith(("track_", "time_", "peakmem_"))
                }
    return out


def _is_metric(node) -> bool:
    import ast

    return isinstance(node, ast.Call) and "Metric" in (
        getattr(node.func, "id", None),
        getattr(node.func, "attr", None),
    )


def _expand(key, fill: dict[str, list[str]]) -> set[str]:
    import ast

    out = {""}
    for part in key.values:
        if isinstance(part, ast.Constant):
            out = {o + part.value for o in out}
        else:
            choices = fill.get(ast.unparse(part.value), ["x"])
            out = {o + c for o in out for c in choices}
    return out


def test_every_metric_the_suite_writes_has_a_direction_and_bounds():
    """A metric without a direction (or without bounds) fails here, not on the user's page:
    the benchmarks' metrics and every run-result metric the library builds."""
    names = _suite_metric_names()
    assert "idle_passes_count" in names and "server.Class.track_errors" in names
    assert len(names) > 100
    assert [n for n in names if metrics.direction(n).better == "unknown"] == []
    assert [n for n in names if metrics.quantity(n) is None] == []
    assert metrics.quantity("dp_mixed_step_fraction") == FRACTION
    assert metrics.quantity("false_prefillable_reports_count") == COUNT
    assert metrics.quantity("twin.TwinHeadline.track_request_throughput") == RATE
    assert metrics.quantity("workloads.KVPlanning.time_plan") == RATE  # a time: ≥ 0


def test_the_headline_scenario_is_the_twins_headline():
    """The history page opens on TwinHeadline's spec at DP 4 and SGLang's chunk size."""
    import ast

    from dpbench.core.paths import project_root

    tree = ast.parse((project_root() / "benchmarks" / "twin.py").read_text())
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    assert metrics.HEADLINE_SCENARIO["spec"] == consts["HEADLINE_SPEC"]
    axes = {"spec": ["agentic-multiturn", "long-prompt-burst"], "dp_size": ["2", "4", "8"],
            "chunked_prefill": ["2x", "default"], "delayer": ["off", "on"], "dispatch": ["a", "b"]}  # fmt: skip
    assert metrics.default_scenario(axes) == {
        "spec": "long-prompt-burst", "dp_size": "4", "chunked_prefill": "default",
        "delayer": "on", "dispatch": "a",
    }  # fmt: skip
