"""The pages say what `dpbench compare` says and read at a glance, in a real headless Chromium at
1,400 pixels: the same values (the ones each change uses) and verdicts on the summary, compare and
history pages; the widest summary table within the window; no developer notice; the history page
on the twin's headline scenario.

The input is asv's own results files (tests/asv_results.py): the twin's headline seeds and the
simulated server's repeats of two commits, and the twin's 18 high-KV settings with every
summary column (SYNTHETIC values of the main job's sizes), plus one metric no direction row
knows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import asv_results
import pytest
from chromium_page import open_page

from dpbench.dashboard import compare
from dpbench.dashboard.build import build_report, build_site
from dpbench.dashboard.compare_text import short, values_text

pytestmark = pytest.mark.browser
A, B = "a1" * 20, "b2" * 20
WIDTH = 1400


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("pages")
    results = tmp / "results"
    data = asv_results.headline_pair(A, B)
    for sha, extra in ((A, [[3.0] * 5] * 4), (B, [[4.0] * 5] * 4)):
        data[sha]["TwinHeadline.track_brand_new_thing"] = extra  # no direction row matches
    asv_results.write(results, data, asv_results.CLASSES)
    asv_results.write(results, asv_results.high_kv_pair(A, B), asv_results.CLASSES, env="env2")
    index = build_site(results, tmp / "site", history_repo=None)
    return index, build_report(index)


def _shot(page, name: str, tmp_path: Path) -> Path:
    where = Path(os.environ.get("DPBENCH_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(where / name), full_page=True)
    return where / name


def _viewport(page) -> None:
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.wait_for_timeout(50)


def test_the_summary_fits_1400_pixels_and_agrees_with_the_terminal(site, tmp_path):
    index, model = site
    assert model["unknown_directions"] == ["brand_new_thing"]
    with open_page(index) as (page, errors):
        _viewport(page)
        overflow = page.evaluate(
            """() => [document.documentElement.scrollWidth, document.documentElement.clientWidth,
                Math.max(...Array.from(document.querySelectorAll('table.summary'))
                    .map(t => t.getBoundingClientRect().right))]"""
        )
        cells = page.eval_on_selector_all(
            "table.summary td.cell",
            """cells => cells.map(td => ({section: td.closest('table').dataset.tier,
                metric: td.dataset.metric, scenario: td.closest('tr').dataset.scenario,
                values: td.querySelector('.values').textContent,
                pct: td.querySelector('.pct') ? td.querySelector('.pct').textContent : '',
                verdict: td.querySelector('.verdict').textContent}))""",
        )
        notices = page.evaluate(
            "() => document.querySelectorAll('.warn, #unknown-directions').length"
        )
        headers = page.eval_on_selector_all(
            "table.summary th", "ths => ths.map(t => t.textContent)"
        )
        shot = _shot(page, "summary-1400.png", tmp_path)
    assert errors == []
    scroll, client, right = overflow
    assert scroll <= client and right <= WIDTH, overflow  # nothing past the right edge
    assert any(h.startswith("TPOT p99") for h in headers) and any(
        h.startswith("goodput") for h in headers
    )
    assert notices == 0  # the unknown direction fails a test, not the user's page
    want = {}
    for section, rows in compare.summary(model, 0, 1).items():
        for r in rows:
            for chart, _a, _b, ch in r.cells.values():
                pct = "" if chart.get("key") == "placement" else compare.fmt_pct(ch)
                key = (section, chart["metric"], compare.scenario_text(r.scenario))
                want[key] = (values_text(chart, ch), pct, ch.verdict)
    got = {
        (c["section"], c["metric"], c["scenario"]): (c["values"], c["pct"], c["verdict"])
        for c in cells
    }
    assert got == want
    mixed = got[
        ("server", "dp_mixed_step_fraction", "spec=long-prompt-burst-small, dp_size=2, delayer=on")
    ]
    assert mixed == ("0.01167 → 0.0101", "-13.4 % [-100, +93.9]", "within noise")
    assert shot.stat().st_size > 10_000


def test_the_compare_page_shows_the_values_each_change_uses(site):
    index, model = site
    rows = compare.compare_commits(model, 0, 1)
    with open_page(index.parent / "compare.html") as (page, errors):
        _viewport(page)
        page.check("#show-quiet")
        got = page.eval_on_selector_all(
            "#compare-table tbody tr",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))",
        )
        scroll = page.evaluate("() => document.documentElement.scrollWidth")
    assert errors == [] and scroll <= WIDTH
    banded = [r.change.basis == "bands" for r in rows]
    want = [
        [short(r.change.a) if r.a else "—", short(r.change.b) if r.b else "—", compare.fmt_pct(r.change),
         r.verdict]
        for r, band in zip(rows, banded, strict=True)
        if not band
    ]  # fmt: skip
    assert [[g[5], g[6], g[7], g[8].split(" (")[0]] for g, band in zip(got, banded, strict=True)
            if not band] == want  # fmt: skip


def test_the_history_page_opens_on_the_headline_scenario_with_the_values_compared(site, tmp_path):
    index, model = site
    with open_page(index.parent / "history.html") as (page, errors):
        _viewport(page)
        page.wait_for_selector("body[data-all-drawn='1']", state="attached")
        axes = page.eval_on_selector_all(
            "select.axis-select", "ss => Object.fromEntries(ss.map(s => [s.dataset.axis, s.value]))"
        )
        page.uncheck("#normalise")
        page.wait_for_selector("body[data-all-drawn='1']", state="attached")
        n = next(i for i, c in enumerate(model["charts"])
                 if c["benchmark"] == "twin.TwinHeadline.track_dp_mixed_step_fraction")  # fmt: skip
        ys = page.evaluate(
            f"() => document.getElementById('plot-{n}').data"
            ".filter(t => t.mode === 'lines+markers').map(t => t.y)"
        )
        badge = page.inner_text(f"#card-{n} .badge.stat")
        _shot(page, "history-1400.png", tmp_path)
    assert errors == []
    assert axes == {"chunked_prefill": "default", "delayer": "on", "dp_size": "4",
                    "spec": "long-prompt-burst"}  # fmt: skip
    assert badge == "mean of the seeds"
    chart = model["charts"][n]
    (series,) = [
        s
        for s in chart["series"]
        if s["scenario"] == {"dp_size": "4", "chunked_prefill": "default"}
    ]
    changes = compare.chart_change(chart, *(compare.side_at(series, i) for i in (0, 1)))
    assert ys == [[pytest.approx(changes.a), pytest.approx(changes.b)]]  # the means compared


def test_the_model_points_are_the_means_and_bands_stop_at_the_bounds(site):
    _, model = site
    goodput = next(
        c for c in model["charts"] if c["benchmark"].endswith("Serve.track_goodput_requests_per_s")
    )
    assert goodput["bounds"] == [0.0, None] and goodput["stat"] == "mean"
    (dp2,) = [s for s in goodput["series"] if s["params"][1] == "2"]
    (_, a, lo, hi), _ = dp2["points"]
    assert a == pytest.approx((0.62 + 2.066 + 2.31) / 3)  # asv's value: 2.066, the median
    assert lo == 0.0 < hi  # asv's 99 % interval of the three runs reached -2.37 req/s
    assert json.dumps(model)  # plain JSON for data.js
