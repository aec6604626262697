"""The pages' comparison rules (dashboard.js, in a real headless Chromium) give what the
terminal's rules (dpbench.dashboard.compare) give, case by case: paired seeds, a timing tier's
repeats (unpaired, Welch), bands, single runs, instrument health. The cases are hand-built sides, not results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chromium_page import open_page

from dpbench.core.paths import project_root
from dpbench.dashboard.compare import Side, change_of, compare_commits
from dpbench.dashboard.metrics import Quantity
from dpbench.dashboard.model import T975

pytestmark = pytest.mark.browser

CASES = [
    # (A, B, better, tier)
    (
        Side(0.10, 0.08, 0.13, (0.08, 0.10, 0.13), "v3"),
        Side(0.09, 0.07, 0.12, (0.07, 0.09, 0.12), "v3"),
        "lower",
        "twin",
    ),
    (
        Side(0.10, 0.08, 0.13, (0.08, 0.10, 0.13), "v3"),
        Side(0.10, None, None, (0.09, 0.12, 0.11), "v3"),
        "lower",
        "twin",
    ),
    (
        Side(1.0, 0.9, 1.1, (0.9, 1.0, 1.1), "v3"),
        Side(2.0, 1.9, 2.1, (1.9, 2.0, 2.1), "v4"),
        "lower",
        "twin",
    ),
    (
        Side(1.0, 0.9, 1.1, (0.9, 1.0, 1.1), "v3"),
        Side(2.0, None, None, (None, 2.0, 2.2), "v3"),
        "higher",
        "twin",
    ),
    (
        Side(11.5, None, None, (10.0, 12.0, 11.0, 13.0), "v"),
        Side(12.6, None, None, (11.0, 12.5, 12.0, 15.0), "v"),
        "none",
        "twin",
    ),
    (
        Side(3.0, None, None, (3.0, 3.0), "v"),
        Side(3.0, None, None, (3.0, 3.0), "v"),
        "lower",
        "twin",
    ),
    (Side(10, 9, 11), Side(20, 19, 21), "lower", "twin"),
    (Side(10), Side(20), "higher", "server"),
    (Side(10), Side(1000), "instrument", "server"),
    (Side(0), Side(1), "higher", "twin"),
    # a timing tier's samples are repeats: unpaired, Welch, better / worse from 3 runs a side
    (  # 10: would pair into "better" in the twin; in the server, within noise
        Side(0.10, 0.08, 0.13, (0.08, 0.10, 0.13), "v3"),
        Side(0.09, 0.07, 0.12, (0.07, 0.09, 0.12), "v3"),
        "lower",
        "server",
    ),
    (  # 11: 3 + 4 runs, df 216/53 floored to 4: better
        Side(10.0, None, None, (9.0, 10.0, 11.0), "v"),
        Side(14.0, None, None, (11.0, 13.0, 15.0, 17.0), "v"),
        "higher",
        "server",
    ),
    (  # 12: runs a side left unmeasured are dropped: 3 + 3, worse
        Side(10.0, None, None, (10.0, None, 10.2, 9.9), "v"),
        Side(11.0, None, None, (11.0, 11.3, None, 11.1), "v"),
        "lower",
        "server",
    ),
    (  # 13: 2 + 3 runs, interval off 0, yet too few runs: single run
        Side(10.05, None, None, (10.0, 10.1), "v"),
        Side(20.1, None, None, (20.0, 20.2, 20.1), "v"),
        "higher",
        "server",
    ),
    (  # 14: one run a side
        Side(10.0, None, None, (10.0,), "v"),
        Side(20.0, None, None, (20.0,), "v"),
        "higher",
        "server",
    ),
    (  # 15: one run against three, disjoint bands: single run
        Side(10.0, 9.0, 11.0, (10.0,), "v"),
        Side(20.0, 19.0, 21.0, (19.0, 20.0, 21.0), "v"),
        "higher",
        "server",
    ),
    (  # 16: the same constant on every run: no change
        Side(5.0, None, None, (5.0, 5.0, 5.0), "v"),
        Side(5.0, None, None, (5.0, 5.0, 5.0), "v"),
        "lower",
        "server",
    ),
    (  # 17: two constants: a zero-width interval, the direction decides
        Side(5.0, None, None, (5.0, 5.0, 5.0), "v"),
        Side(6.0, None, None, (6.0, 6.0, 6.0), "v"),
        "higher",
        "server",
    ),
    (  # 18: no direction: changed
        Side(10.0, None, None, (9.0, 10.0, 11.0), "v"),
        Side(20.0, None, None, (19.0, 20.0, 21.0), "v"),
        "none",
        "server",
    ),
    (  # 19: A's mean 0: no percentage
        Side(0.0, None, None, (-1.0, 0.0, 1.0), "v"),
        Side(6.0, None, None, (5.0, 6.0, 7.0), "v"),
        "lower",
        "server",
    ),
    (  # 20: instrument health first, whatever the repeats
        Side(10.0, None, None, (9.0, 10.0, 11.0), "v"),
        Side(1000.0, None, None, (990.0, 1000.0, 1010.0), "v"),
        "instrument",
        "server",
    ),
    (  # 21: 60 + 60 runs: Welch df past the pages' t table (1.96)
        Side(100.0, None, None, tuple(100.0 + (i % 7) - 3 for i in range(60)), "v"),
        Side(101.0, None, None, tuple(101.5 + (i % 5) - 2 for i in range(60)), "v"),
        "higher",
        "server",
    ),
    # 22: a deterministic probe (placement): one run a side is its answer, listed first
    (Side(2.0), Side(0.0), "lower", "placement"),
    # 23: one run a side of the twin, a huge change: no verdict (one seed is one draw)
    (Side(100.0), Side(2000.0), "lower", "twin"),
    # bounded quantities (BOUNDED: the chart's bounds and whether it counts events)
    (  # 24: the server's DP-mixed runs issue 35 quotes: a fraction, the interval stops at -100 %
        Side(0.0088, None, None, (0.0088, 0.0088, 0.0174), "v"),
        Side(0.0106, None, None, (0.0106, 0.0106, 0.0091), "v"),
        "lower",
        "server",
    ),
    (  # 25: false reports 3 → 0 over 5 seeds: too few to judge
        Side(0.0, None, None, (2.0, 0.0, 1.0, 0.0, 0.0), "v"),
        Side(0.0, None, None, (0.0,) * 5, "v"),
        "lower",
        "twin",
    ),
    (  # 26: 15 → 0: judged, the interval stopping at -100 %
        Side(3.0, None, None, (5.0, 4.0, 3.0, 2.0, 1.0), "v"),
        Side(0.0, None, None, (0.0,) * 5, "v"),
        "lower",
        "twin",
    ),
    (  # 27: a fraction near 1: never above 1
        Side(0.9, None, None, (0.85, 0.95, 0.9), "v"),
        Side(0.97, None, None, (0.999, 0.93, 0.98), "v"),
        "higher",
        "twin",
    ),
    (Side(4.0), Side(3.0), "lower", "twin"),  # 28: one run a side of a count: 7 events
    (Side(10, 0, 20), Side(1, 0, 2), "lower", "twin"),  # 29: bands, a rate: -100 % at most
]
FRACTION, COUNT, RATE = Quantity(0.0, 1.0), Quantity(0.0, None, True), Quantity(0.0, None)
BOUNDED = {24: FRACTION, 25: COUNT, 26: COUNT, 27: FRACTION, 28: COUNT, 29: RATE}


def _rules_page(tmp_path) -> Path:
    """A blank page with the dashboard's shared script (its DP object) and nothing else."""
    js = (project_root() / "dashboard" / "assets" / "dashboard.js").read_text()
    page_path = tmp_path / "rules.html"
    page_path.write_text(f"<!doctype html><html><body><script>{js}</script></body></html>")
    return page_path


def _js_side(s: Side) -> dict:
    return {
        "value": s.value,
        "lo": s.lo,
        "hi": s.hi,
        "samples": list(s.samples) if s.samples is not None else None,
        "seeds": s.seeds,
    }


def test_the_pages_compare_two_sides_as_the_terminal_does(tmp_path):
    page_path = _rules_page(tmp_path)
    # each case as a one-series chart on two commits; the page compares commit 0 with 1
    charts = []
    for n, (a, b, better, tier) in enumerate(CASES):
        series = {"machine": "m", "env": "e", "params": [str(n)], "scenario": {}, "points": []}
        for i, side in enumerate((a, b)):
            series["points"].append([i, side.value, side.lo, side.hi])
            if side.samples is not None:
                series.setdefault("samples", {})[str(i)] = {
                    "x": list(side.samples),
                    "seeds": side.seeds,
                }
        q = BOUNDED.get(n)
        charts.append(
            {
                "tier": tier,
                "source": "asv",
                "title": f"case {n}",
                "unit": "",
                "better": better,
                "series": [series],
                **({"bounds": [q.lo, q.hi], "count": q.count} if q else {}),
            }
        )
    data = {"charts": charts, "t975": T975}
    with open_page(page_path, wait_ready=False) as (page, errors):
        got = page.evaluate(
            "data => DP.compareCommits(data, 0, 1).map(r => [r.series.params[0], r.change])",
            json.loads(json.dumps(data)),
        )
    assert errors == []
    # the same order: the rows with a verdict by tier (placement, twin, server), each by
    # basis (deterministic and paired, repeats, bands) and significance; then the quiet
    # rows by verdict, single runs and the instrument's health last
    want_order = [r.params[0] for r in compare_commits(data, 0, 1)]
    assert [n for n, _ in got] == want_order
    assert want_order[:7] == ["22", "0", "26", "3", "4", "6", "2"]
    assert want_order[7:13] == ["17", "18", "12", "21", "11", "19"]
    assert set(want_order[13:18]) == {"1", "10", "24", "27", "29"}  # within noise
    assert set(want_order[18:20]) == {"25", "28"}  # too few to judge
    assert set(want_order[20:22]) == {"5", "16"}  # no change
    assert set(want_order[22:28]) == {"9", "13", "15", "14", "7", "23"}  # single run
    assert set(want_order[-2:]) == {"8", "20"}
    by_case = {int(n): c for n, c in got}
    for n, (a, b, better, tier) in enumerate(CASES):
        want = change_of(a, b, better, tier, BOUNDED.get(n))
        js = by_case[n]
        assert (js["verdict"], js["basis"]) == (want.verdict, want.basis), n
        for key in ("pct", "lo", "hi", "a", "b"):
            w = getattr(want, key)
            assert (js[key] is None) == (w is None), (n, key)
            if w is not None:
                assert js[key] == pytest.approx(w, rel=1e-5, abs=1e-9), (n, key)


def test_the_pages_open_the_summary_with_the_answer_as_the_terminal_does(tmp_path):
    """Sections in the model's answer-first order on both sides: placement, the twin at the
    headline settings, the real scheduler (simulated forward), then the rest by name."""
    from dpbench.dashboard.compare import summary
    from dpbench.dashboard.metrics import section_rank

    sections = ["workloads", "twin · TwinHighKV", "server · SimulatedRooflineServe", "placement"]
    sections += ["twin · TwinHeadline"]
    charts = [
        {
            "tier": sec.split(" ")[0],
            "source": "asv",
            "title": sec,
            "unit": "",
            "better": "lower",
            "key": "mixed",
            "section": sec,
            "series": [
                {
                    "machine": "m",
                    "env": "e",
                    "params": [],
                    "scenario": {},
                    "points": [[0, 1.0, None, None], [1, 2.0, None, None]],
                }
            ],
        }
        for sec in sections
    ]
    data = {"charts": charts, "t975": T975, "section_order": sorted(sections, key=section_rank)}
    with open_page(_rules_page(tmp_path), wait_ready=False) as (page, errors):
        got = page.evaluate("data => Object.keys(DP.summary(data, 0, 1))", data)
    assert errors == []
    want = list(summary(data, 0, 1))
    assert got == want
    assert want[:3] == ["placement", "twin · TwinHeadline", "server · SimulatedRooflineServe"]


def test_each_summary_row_says_what_it_ran_as_the_terminal_does(tmp_path):
    """Requests a run, seeds (or a server's runs) and the pool reached, beside the scenario:
    the regime a published setting shows, the same words on both sides."""
    from dpbench.dashboard.compare import regime_text, summary

    def chart(section, key, regime, points, samples=None):
        series = {"machine": "m", "env": "e", "params": ["4"], "scenario": {"dp_size": "4"},
                  "points": points}  # fmt: skip
        if samples:
            series["samples"] = samples
        return {"tier": section.split(" ")[0], "source": "asv", "title": f"{section} {key}",
                "unit": "", "better": "lower", "key": key, "regime": regime,
                "section": section, "series": [series]}  # fmt: skip

    seeds = {str(i): {"x": [0.2, 0.3, None, 0.25, 0.21], "seeds": "v1"} for i in (0, 1)}
    runs = {str(i): {"x": [0.1, 0.12, 0.11], "seeds": "v4"} for i in (0, 1)}
    data = {
        "charts": [
            chart("twin · TwinHeadline", "mixed", None, [[0, 0.27, None, None], [1, 0.16, None, None]], seeds),
            chart("twin · TwinHeadline", None, "requests", [[0, 1024.0, None, None], [1, 1024.0, None, None]]),
            chart("twin · TwinHeadline", None, "pool", [[0, 0.996, None, None], [1, 1.0, None, None]]),
            chart("server · SimulatedRooflineServe", "mixed", None, [[0, 0.1, None, None], [1, 0.11, None, None]], runs),
            chart("twin · TwinLoad", "mixed", None, [[1, 0.1, None, None]]),
            chart("twin · TwinLoad", None, "pool", [[0, 0.5, None, None]]),  # A's only: shown
        ],
        "t975": T975,
        "section_order": [],
    }  # fmt: skip
    want = {sec: [regime_text(r) for r in rows] for sec, rows in summary(data, 0, 1).items()}
    assert want == {
        "twin · TwinHeadline": ["1,024 requests a run · 4 seeds · pool reached 1.00"],
        "server · SimulatedRooflineServe": ["3 runs"],
        "twin · TwinLoad": ["pool reached 0.50"],
    }
    with open_page(_rules_page(tmp_path), wait_ready=False) as (page, errors):
        got = page.evaluate(
            """data => Object.fromEntries(Object.entries(DP.summary(data, 0, 1))
                 .map(([sec, rows]) => [sec, rows.map(r => DP.regimeText(r))]))""",
            json.loads(json.dumps(data)),
        )
    assert errors == []
    assert got == want


def _series(points, samples=None, params=(), scenario=None):
    s = {"machine": "vm", "env": "e", "params": list(params), "scenario": scenario or {},
         "band": None, "points": points}  # fmt: skip
    if samples:
        s["samples"] = {str(i): {"x": x, "seeds": "v1"} for i, x in samples.items()}
    return s


def _chart(tier, title, better, series, *, source="asv", unit="", key=None):
    return {"id": f"{source}:{title}", "tier": tier, "source": source, "benchmark": title,
            "group": title.split(".")[0], "title": title, "metric": title.rsplit(".", 1)[-1],
            "key": key, "regime": None, "unit": unit, "better": better, "better_why": "",
            "executor": None, "param_names": [], "axes": [], "section": None,
            "series": [series]}  # fmt: skip


def test_the_comparison_page_opens_with_the_answer_not_single_runs_or_the_instrument(tmp_path):
    """The placement pair as the main job publishes it (one row of each kind): the page's first
    rows are the placement probe's false-report drop and the twin's paired changes; a single
    server run's huge change, one seed's run file and the load client's lateness (the rows that
    led the page and `compare`'s exit code before) carry no verdict and are hidden as quiet."""
    from dpbench.dashboard.build import build_site

    empty = tmp_path / "results"
    empty.mkdir()
    index = build_site(empty, tmp_path / "site")
    data_js = index.parent / "data.js"
    model = json.loads(
        data_js.read_text().removeprefix("window.DPBENCH_DATA = ").rstrip().removesuffix(";")
    )
    model["commits"] = [
        {"sha": sha * 40, "short": sha * 8, "date": None, "subject": f"sglang {v}",
         "branch": "main", "tags": [f"v{v}"], "label": f"v{v} {sha * 8}", "placement": p,
         "placement_sources": {p: 2}}
        for sha, v, p in (("a", "0.5.16", "early"), ("b", "0.5.17", "post-kv"))
    ]  # fmt: skip
    seeds_a, seeds_b = [0.28, 0.27, 0.29, 0.26, 0.285], [0.16, 0.15, 0.17, 0.155, 0.16]
    model["charts"] = [
        _chart("server", "SimulatedRooflineServe.track_client_send_lateness_ms_max",
               "instrument", _series([[0, 10.0, None, None], [1, 277.6, None, None]])),
        _chart("server", "ttft_ms_p99", "lower",
               _series([[0, 100.0, None, None], [1, 900.0, None, None]]), source="run"),
        _chart("twin", "tpot_ms_mean", "lower",
               _series([[0, 281.2, None, None], [1, 494.8, None, None]]), source="run"),
        _chart("twin", "TwinHighKV.track_dp_mixed_step_fraction", "lower",
               _series([[0, 0.10, 0.09, 0.11], [1, 0.09, 0.08, 0.10]],
                       {0: [0.10, 0.09, 0.11], 1: [0.09, 0.085, 0.10]})),
        _chart("twin", "TwinHeadline.track_dp_mixed_step_fraction", "lower",
               _series([[0, 0.28, 0.26, 0.29], [1, 0.16, 0.15, 0.17]],
                       {0: seeds_a, 1: seeds_b}, params=("4", "default"))),
        _chart("placement", "Placement.track_false_prefillable_reports", "lower",
               _series([[0, 2.0, None, None], [1, 0.0, None, None]])),
    ]  # fmt: skip
    model["default_pair"] = [0, 1]
    data_js.write_text("window.DPBENCH_DATA = " + json.dumps(model) + ";\n")
    with open_page(index.parent / "compare.html") as (page, errors):
        rows = page.eval_on_selector_all(
            "#compare-table tbody tr",
            "trs => trs.map(tr => ({shown: tr.style.display !== 'none',"
            " cells: Array.from(tr.cells).map(td => td.textContent)}))",
        )
    assert errors == []
    shown = [r["cells"] for r in rows if r["shown"]]
    assert [(c[0], c[1].split(" ")[0]) for c in shown] == [
        ("placement", "Placement.track_false_prefillable_reports"),
        ("twin", "TwinHeadline.track_dp_mixed_step_fraction"),
        ("twin", "TwinHighKV.track_dp_mixed_step_fraction"),
    ]
    assert shown[0][-1] == "better (deterministic)"
    assert shown[1][-1] == "better (paired, 5 seeds)"
    hidden = {r["cells"][1]: r["cells"][-1] for r in rows if not r["shown"]}
    assert hidden == {
        "SimulatedRooflineServe.track_client_send_lateness_ms_max": "instrument",
        "ttft_ms_p99": "single run",
        "tpot_ms_mean": "single run",
    }
    # the terminal's rules order and judge the same rows the same way
    terminal = compare_commits(model, 0, 1)
    assert [(r.tier, r.metric, r.verdict) for r in terminal][:3] == [
        (c[0], c[1].split(" ")[0], c[-1].split(" (")[0]) for c in shown
    ]
