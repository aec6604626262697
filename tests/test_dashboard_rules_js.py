"""The pages' comparison rules (dashboard.js, in a real headless Chromium) give what the
terminal's rules (dpbench.dashboard.compare) give, case by case: paired seeds, bands, single
runs, instrument health. The cases are hand-built sides, not results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chromium_page import open_page

from dpbench.dashboard.compare import Side, change_of, compare_commits
from dpbench.dashboard.model import T975
from dpbench.paths import project_root

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
]


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
        charts.append(
            {
                "tier": tier,
                "source": "asv",
                "title": f"case {n}",
                "unit": "",
                "better": better,
                "series": [series],
            }
        )
    data = {"charts": charts, "t975": T975}
    with open_page(page_path, wait_ready=False) as (page, errors):
        got = page.evaluate(
            "data => DP.compareCommits(data, 0, 1).map(r => [r.series.params[0], r.change])",
            json.loads(json.dumps(data)),
        )
    assert errors == []
    # the same order: verdict, then paired before unpaired before single runs, by significance
    want_order = [r.params[0] for r in compare_commits(data, 0, 1)]
    assert [n for n, _ in got] == want_order
    # "worse" first; among "better", the paired ones (most significant first) before the
    # single run with the infinite size (a change from 0)
    assert want_order[:5] == ["6", "2", "0", "3", "9"]
    by_case = {int(n): c for n, c in got}
    for n, (a, b, better, tier) in enumerate(CASES):
        want = change_of(a, b, better, tier)
        js = by_case[n]
        assert (js["verdict"], js["basis"]) == (want.verdict, want.basis), n
        for key in ("pct", "lo", "hi"):
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
