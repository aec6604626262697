"""The dashboard built from the suite's own asv runs, checked in a real headless Chromium.

The session fixture runs the real thing: `dpbench releases 0.5.16 0.5.17 0.5.23` builds
a release history, `asv run` runs the placement tier and the (parametrised, repeated)
KV-planner timing on the three releases (real SGLang wheels, in asv's own
environments), `asv publish` builds asv's site. Every number the tests look at comes
from those runs, except where a test says SYNTHETIC (the injected regression, the
scale input). Takes ~4–6 minutes the first time (asv builds its environments under
.cache/), less after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import asv_releases_config

from dpbench.core.paths import project_root
from dpbench.dashboard import compare, loaders
from dpbench.dashboard.build import build_report, build_site
from dpbench.dashboard.model import param_value
from dpbench.mainjob import releases

# asv builds one environment per release on first use: ~5 min on an idle 2-core machine.
pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = project_root()
PY = sys.executable
MACHINE = "dpbench-dashboard-test"
RELEASES = ("0.5.16", "0.5.17", "0.5.23")
PAGES = ("index.html", "history.html", "compare.html", "changes.html", "fidelity.html")


def _run(cmd: list[str], cwd: Path, timeout: int) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def _asv_config(tmp: Path, history: Path) -> Path:
    return asv_releases_config(tmp, history)


@pytest.fixture(scope="session")
def suite_run(tmp_path_factory):
    """{tmp, history, config, results, html}: the placement tier and the KV-planner timing run
    by asv over three real releases of the release history.

    ``DPBENCH_DASHBOARD_SUITE=<dir>`` reuses a previous run's directory (development only).
    """
    reuse = os.environ.get("DPBENCH_DASHBOARD_SUITE")
    tmp = Path(reuse) if reuse else tmp_path_factory.mktemp("dashboard-suite")
    history = tmp / "history"
    config = tmp / "asv.json"
    if not reuse:
        built = dict(releases.build(repo=history))  # every known release; we run three of them
        shas = [built[v] for v in RELEASES]
        _asv_config(tmp, history)
        hashfile = tmp / "commits.hashes"
        hashfile.write_text("\n".join(shas) + "\n")
        asv = [PY, "-m", "asv"]
        _run([*asv, "machine", "--yes", "--machine", MACHINE, "--config", str(config)], tmp, 120)
        _run(
            [
                *asv,
                "run",
                "--config",
                str(config),
                "--bench",
                r"^placement\.",
                "--bench",
                r"^workloads\.KVPlanning",  # parametrised, timed with repeats: real 99 % CI bands
                "-a",
                "repeat=3",
                "--launch-method",  # the main job's: one import per commit, each benchmark forked
                "forkserver",
                "--machine",
                MACHINE,
                "--show-stderr",
                f"HASHFILE:{hashfile}",
            ],
            tmp,
            1700,
        )
        _run([*asv, "publish", "--config", str(config)], tmp, 300)
    return {
        "tmp": tmp,
        "history": history,
        "config": config,
        "results": tmp / "results",
        "html": tmp / "html",
    }


@pytest.fixture(scope="session")
def site(suite_run):
    index = build_site(
        suite_run["results"],
        suite_run["tmp"] / "site",
        history_repo=suite_run["history"],
        asv_html=suite_run["html"],
    )
    return index, build_report(index)


def _asv_values(results: Path) -> dict[tuple[str, str, tuple[str, ...]], float]:
    """(commit, benchmark, params) → value, read with asv's own loader, independently of the dashboard."""
    import itertools

    from asv.results import iter_results_for_machine

    out = {}
    for res in iter_results_for_machine(str(results), MACHINE):
        for key in res.get_all_result_keys():
            params = res.get_result_params(key) or []
            values = res.get_result_value(key, params)
            combos = list(itertools.product(*params)) if params else [()]
            values = values if isinstance(values, list) else [values]
            for combo, value in zip(combos, values, strict=True):
                if value is not None and value == value:  # None / NaN: not measured
                    out[(res.commit_hash, key, tuple(param_value(c) for c in combo))] = value
    return out


def _run_file_labels(results: Path) -> dict[str, str]:
    return {
        p.parent.parent.name: json.loads(p.read_text())["placement"]["label"]
        for p in results.glob("runs/*/placement/*.json")
    }


def test_site_holds_every_asv_value_in_history_order(suite_run, site):
    index, model = site
    ran = {f"sglang {v}" for v in RELEASES}  # the history holds every known release
    history = [h for h in loaders.read_history(suite_run["history"]) if h["subject"] in ran]
    assert [c["sha"] for c in model["commits"]] == [h["commit"] for h in history]
    assert [c["subject"] for c in model["commits"]] == [f"sglang {v}" for v in RELEASES]
    assert [c["date"] for c in model["commits"]] == [h["date"] for h in history]
    values = _asv_values(suite_run["results"])
    assert values, "asv produced no results"
    seen = {}
    for chart in model["charts"]:
        if chart["source"] != "asv":
            continue
        assert chart["unit"] and chart["better"] in ("higher", "lower", "none")
        for s in chart["series"]:
            assert s["machine"] == MACHINE
            assert s["scenario"] == dict(zip(chart["axes"], s["params"], strict=True))
            for i, value, _lo, _hi in s["points"]:
                seen[(model["commits"][i]["sha"], chart["benchmark"], tuple(s["params"]))] = value
    assert seen == values
    plan = next(c for c in model["charts"] if c["benchmark"].endswith("KVPlanning.time_plan"))
    assert model["scenario_axes"]["dispatch"] == ["round_robin", "shortest_queue", "total_tokens"]
    # asv's repeats give every timed point a 99 % CI band around its value
    for s in plan["series"]:
        assert s["band"] == "99% CI"
        assert all(lo <= v <= hi for _, v, lo, hi in s["points"])
    assert index.name == "index.html" and all((index.parent / p).exists() for p in PAGES)


def test_placement_marks_and_changes_come_from_the_runs(suite_run, site):
    _, model = site
    labels = _run_file_labels(suite_run["results"])
    assert set(labels) == {c["sha"] for c in model["commits"]}
    for c in model["commits"]:
        assert c["placement"] == labels[c["sha"]]
    seq = [c["placement"] for c in model["commits"]]
    want = [
        {"index": i, "from": seq[i - 1], "to": seq[i]}
        for i in range(1, len(seq))
        if seq[i] != seq[i - 1]
    ]
    assert model["placement_changes"] == want
    # The before/after pair of PR #31835 is the default comparison when the runs find it.
    assert seq[:2] == ["early", "post-kv"], seq
    assert model["default_pair"] == [0, 1]


def test_asv_site_is_linked_and_published(suite_run, site):
    index, _ = site
    for page in PAGES:
        html = (index.parent / page).read_text()
        link = re.search(r'id="asv-link" href="([^"]+)"', html)
        assert link, f"no link to asv's site on {page}"
        target = (index.parent / link.group(1)).resolve()
        assert target == (suite_run["html"] / "index.html").resolve() and target.exists()


def _skip_without_chromium():
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    return browser


def _shots(tmp_path_factory) -> Path:
    return Path(os.environ.get("DPBENCH_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))


@pytest.mark.browser
def test_every_page_renders_in_chromium_without_errors(site, tmp_path_factory):
    browser = _skip_without_chromium()
    index, model = site
    shots = _shots(tmp_path_factory)
    with browser.chromium() as chromium:
        reports = {
            page: browser.load(
                chromium, index.parent / page, screenshot=shots / page.replace(".html", ".png")
            )
            for page in PAGES
        }
    print("screenshots:", *(shots / p.replace(".html", ".png") for p in PAGES))
    for page, rep in reports.items():
        assert rep.console_errors == [], page
    assert reports["index.html"].plots == []  # the landing page is tables: no plotly to parse
    hist = {p["id"]: p for p in reports["history.html"].plots}
    placed = [c for c in model["commits"] if c["placement"]]
    assert hist["placement-plot"]["points"] == [len(placed)]
    # one chart per metric measured in the default scenario; every one drawn, not just data
    asv_charts = [n for n, c in enumerate(model["charts"]) if c["source"] == "asv"]
    assert {f"plot-{n}" for n in asv_charts} == set(hist) - {"placement-plot"}
    for n in asv_charts:
        assert hist[f"plot-{n}"]["svg_points"] > 0
    assert (shots / "index.png").stat().st_size > 10_000


def _summary_cells(page) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        "table.summary td.cell",
        """cells => cells.map(td => ({
            tier: td.closest('table').dataset.tier, metric: td.dataset.metric,
            scenario: td.closest('tr').dataset.scenario,
            values: td.querySelector('.values').textContent,
            pct: td.querySelector('.pct') ? td.querySelector('.pct').textContent : '',
            verdict: td.querySelector('.verdict').textContent}))""",
    )


def _open(chromium, path: Path, hash_: str = ""):
    ctx = chromium.new_context(viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri() + hash_)
    page.wait_for_selector("body[data-ready='1']", state="attached")
    return ctx, page, errors


@pytest.mark.browser
def test_landing_page_shows_false_reports_gone_as_minus_100_percent_better(site):
    """Done-when: early → post-kv, false prefillable reports 2 → 0 is −100 %, verdict "better"."""
    browser = _skip_without_chromium()
    index, model = site
    ia, ib = model["default_pair"]
    assert (model["commits"][ia]["placement"], model["commits"][ib]["placement"]) == (
        "early",
        "post-kv",
    )
    with browser.chromium() as chromium:
        ctx, page, errors = _open(chromium, index)
        cells = _summary_cells(page)
        head = page.inner_text("#summary-head")
        ctx.close()
    assert errors == []
    assert "(early)" in head and "(post-kv)" in head
    false = [c for c in cells if c["metric"] == "false_prefillable_reports"]
    assert false == [
        {
            "tier": "placement",
            "metric": "false_prefillable_reports",
            "scenario": "—",
            "values": "2 → 0",
            "pct": "-100.0 %",
            "verdict": "better",
        }
    ]
    placement = next(c for c in cells if c["metric"] == "placement_code")
    assert placement["values"] == "early → post-kv"
    # The page and the terminal's summary agree cell by cell.
    want = []
    for tier, rows in compare.summary(model, ia, ib).items():
        for r in rows:
            for _key, (chart, _a, _b, ch) in r.cells.items():
                want.append((tier, chart["metric"], compare.scenario_text(r.scenario), ch.verdict))
    got = [(c["tier"], c["metric"], c["scenario"], c["verdict"]) for c in cells]
    assert sorted(got) == sorted(want)


@pytest.mark.browser
def test_scenario_selection_plots_that_scenario_only(site):
    """Done-when: picking a scenario changes every chart's traces to that scenario only."""
    browser = _skip_without_chromium()
    index, model = site
    plan_n, plan = next(
        (n, c) for n, c in enumerate(model["charts"]) if c["metric"] == "plan"
    )  # KVPlanning.time_plan: one series per dispatch policy
    traces_js = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(d => d.id !== 'placement-plot' && d.closest('.card').style.display !== 'none')
        .map(d => ({id: d.id, traces: d.data.map(t => ({meta: t.meta, y: t.y, mode: t.mode}))}))"""
    with browser.chromium() as chromium:
        ctx, page, errors = _open(chromium, index.parent / "history.html")
        page.uncheck("#normalise")  # absolute values: compare with the data directly
        page.wait_for_selector("body[data-all-drawn='1']", state="attached")
        seen = {}
        for value in model["scenario_axes"]["dispatch"]:
            page.select_option("select.axis-select[data-axis='dispatch']", value)
            page.wait_for_selector("body[data-all-drawn='1']", state="attached")
            seen[value] = page.evaluate(traces_js)
        ctx.close()
    assert errors == []
    for value, plots in seen.items():
        plot = next(p for p in plots if p["id"] == f"plot-{plan_n}")
        lines = [t for t in plot["traces"] if t["mode"] == "lines+markers"]
        assert [t["meta"]["scenario"] for t in lines] == [{"dispatch": value}]
        want = next(s for s in plan["series"] if s["scenario"] == {"dispatch": value})
        assert lines[0]["y"] == [p[1] for p in want["points"]]
        # the band traces belong to the same scenario, and no other chart shows another one
        for p in plots:
            for t in p["traces"]:
                assert t["meta"]["scenario"].get("dispatch", value) == value
    assert len({json.dumps(v) for v in seen.values()}) == len(seen)  # the plots really changed


@pytest.mark.browser
def test_compare_page_agrees_with_terminal_and_shows_a_drop_to_zero(site):
    """Same rows, order and verdicts as `dpbench compare`; the metric that fell to 0 is listed."""
    browser = _skip_without_chromium()
    index, model = site
    ia, ib = model["default_pair"]
    rows = compare.compare_commits(model, ia, ib)
    want = [
        [r.tier, r.metric, f"{r.machine} / {r.env}", compare.fmt_pct(r.change), r.verdict]
        for r in rows
    ]
    with browser.chromium() as chromium:
        ctx, page, errors = _open(chromium, index.parent / "compare.html")
        visible_before = page.eval_on_selector_all(
            "#compare-table tbody tr", "rows => rows.filter(r => r.style.display !== 'none').length"
        )
        page.check("#show-quiet")
        got = page.eval_on_selector_all(
            "#compare-table tbody tr",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))",
        )
        bars = page.evaluate("() => document.getElementById('change-plot').data[0].x")
        ctx.close()
    assert errors == []
    assert [[g[0], g[1].split(" (")[0], g[2], g[7], g[8].split(" (")[0]] for g in got] == want
    assert visible_before == sum(1 for r in rows if r.verdict not in compare.QUIET)
    zero = [g for g in got if g[1] == "Placement.track_false_prefillable_reports"]
    assert zero and zero[0][5] == "2" and zero[0][6] == "0" and zero[0][7] == "-100.0 %"
    assert -100.0 in bars  # drawn as a bar, not dropped from a log scale


def test_compare_command_prints_the_summary_with_verdicts_and_gates(suite_run, site):
    """`dpbench compare 0.5.16 0.5.17`: summary first, verdicts, exit code = the regressions found."""
    _, model = site
    base = [
        "--results",
        str(suite_run["results"]),
        "--config",
        str(suite_run["config"]),
        "--history",
        str(suite_run["history"]),
    ]
    proc = _compare(["0.5.16", "0.5.17", *base, "--asv"])
    out = proc.stdout
    assert "asv compare" in out and "Change" in out  # asv's own table, on request
    # the answer first, a line a metric: where the negotiation sits, then its false reports
    answer = out[out.index("A = v0.5.16") : out.index("most significant other changes")]
    placement = [ln for ln in answer.splitlines() if ln.split()[:1] == ["placement"]]
    assert len(placement) == 2 and "early → post-kv" in placement[1], answer
    false = next(ln for ln in answer.splitlines() if "false prefillable reports" in ln)
    assert "2 → 0" in false and "-100.0 %" in false and "better (deterministic)" in false
    plain = _compare(["0.5.16", "0.5.17", *base])
    assert len(plain.stdout.splitlines()) <= 50  # fits a screen; every table: --all
    assert "summary · tier placement" not in plain.stdout
    every = _compare(["0.5.16", "0.5.17", *base, "--all"])
    assert "summary · tier placement" in every.stdout and "every metric" in every.stdout
    assert every.returncode == plain.returncode
    rows = compare.compare_commits(model, 0, 1)  # 0.5.16, 0.5.17
    gating = compare.regressions(rows, 5.0)
    assert proc.returncode == (1 if gating else 0), out
    assert ("regression(s) of ≥ 5 %" in out) == bool(gating)
    bad = _compare(["0.5.16", "9.9.9", *base])
    assert bad.returncode == 2 and "no commit with results matches '9.9.9'" in re.sub(
        r"[\s│╭╮╰╯─]+", " ", bad.stderr
    )


def _compare(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "dpbench", "compare", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )


# --- SYNTHETIC: an injected regression ------------------------------------------------------------


@pytest.fixture(scope="session")
def injected(suite_run, tmp_path_factory):
    """SYNTHETIC results: the real runs replicated over 12 made-up commits (scale.synthesise), with
    PR #31835-conforming cases multiplied by 0.6 from the 7th commit on (a regression)."""
    from dpbench.dashboard import scale

    tmp = tmp_path_factory.mktemp("injected")
    scale.synthesise(suite_run["results"], tmp / "results", commits=12, benchmarks=6)
    bench = next(
        k
        for k in json.loads((tmp / "results" / "benchmarks.json").read_text())
        if "pr31835_conforming_cases" in k
    )
    shas = scale.inject_step(tmp / "results", bench, from_commit=6, factor=0.6)
    index = build_site(tmp / "results", tmp / "site", history_repo=None)
    return {"results": tmp / "results", "index": index, "bench": bench, "shas": shas}


def test_injected_regression_is_detected_with_its_commit_range(injected):
    model = build_report(injected["index"])
    found = [
        st
        for st in model["steps"]
        if model["charts"][st["chart"]]["benchmark"] == injected["bench"]
        and st["kind"] == "regression"
    ]
    shas = injected["shas"]
    assert [
        (model["commits"][st["before"]]["sha"], model["commits"][st["after"]]["sha"])
        for st in found
    ] == [(shas[5], shas[6])]
    assert found[0]["pct"] == pytest.approx(-40.0)


def test_compare_exit_code_gates_on_the_injected_regression(injected):
    base = ["--results", str(injected["results"]), "--history", str(injected["results"] / "none")]
    a, b = injected["shas"][5][:12], injected["shas"][6][:12]
    worse = _compare([a, b, *base])
    assert worse.returncode == 1, worse.stdout + worse.stderr
    assert "-40.0 %" in worse.stdout and "1 regression(s) of ≥ 5 %" in worse.stdout
    assert _compare([a, b, *base, "--fail-above", "50"]).returncode == 0
    assert _compare([a, b, *base, "--no-fail"]).returncode == 0
    assert _compare([b, a, *base]).returncode == 0  # the other way round it is an improvement


@pytest.mark.browser
def test_injected_regression_appears_on_the_regressions_page(injected, tmp_path_factory):
    """Done-when: the injected regression is listed, as a regression, with its commit range."""
    browser = _skip_without_chromium()
    with browser.chromium() as chromium:
        rep = browser.load(
            chromium,
            injected["index"].parent / "changes.html",
            screenshot=_shots(tmp_path_factory) / "changes-injected.png",
        )
        ctx, page, _ = _open(chromium, injected["index"].parent / "changes.html")
        rows = page.eval_on_selector_all(
            "#steps-table tbody tr",
            "rows => rows.map(r => ({before: r.dataset.before, after: r.dataset.after,"
            " cells: Array.from(r.cells).map(c => c.textContent)}))",
        )
        ctx.close()
    assert rep.console_errors == []
    shas = injected["shas"]
    mine = [r for r in rows if r["cells"][0] == "regression" and "pr31835" in r["cells"][2]]
    assert len(mine) == 1
    assert (mine[0]["before"], mine[0]["after"]) == (shas[5], shas[6])
    assert mine[0]["cells"][5] == f"{shas[5][:8]} → {shas[6][:8]}"
    assert mine[0]["cells"][6] == "5 → 3" and mine[0]["cells"][7].startswith("-40.0 %")


def test_unmeasured_values_are_absent_never_zero(suite_run, site, tmp_path):
    """A combination asv left null/NaN, or a run-file metric with value null, has no point."""
    results = _copy_results(suite_run, tmp_path)
    f = sorted((results / MACHINE).glob("*-*.json"))[0]
    data = json.loads(f.read_text())
    key = next(k for k in data["results"] if k.endswith("KVPlanning.time_plan"))
    col = data["result_columns"].index("result")
    data["results"][key][col][0] = None  # asv: skipped / not measured
    f.write_text(json.dumps(data))
    run = sorted(results.glob("runs/*/placement/placement.json"))[0]
    rec = json.loads(run.read_text())
    name = next(iter(rec["metrics"]))
    rec["metrics"][name]["value"] = None
    rec["metrics"]["brand_new_metric"] = {"value": None, "unit": "x", "better": "none"}
    run.write_text(json.dumps(rec))
    model = build_report(build_site(results, tmp_path / "site", history_repo=suite_run["history"]))
    sha = data["commit_hash"]
    i = [c["sha"] for c in model["commits"]].index(sha)
    plan = next(c for c in model["charts"] if c["benchmark"] == key)
    first = next(s for s in plan["series"] if s["params"] == ["round_robin"])
    assert i not in [p[0] for p in first["points"]]
    assert not any(c["metric"] == "brand_new_metric" for c in model["charts"])
    other = next(c for c in model["commits"] if c["sha"] != sha)
    ia, ib = i, model["commits"].index(other)
    row = next(
        r
        for r in compare.compare_commits(model, ia, ib)
        if r.metric == plan["title"] and r.params == ("round_robin",)
    )
    assert row.a is None and row.verdict == "not measured"


# --- damage and hostile strings --------------------------------------------------------------


def _copy_results(suite_run, tmp_path) -> Path:
    dest = tmp_path / "results"
    shutil.copytree(suite_run["results"], dest)
    return dest


def test_corrupt_partial_and_foreign_files_are_reported_and_skipped(suite_run, site, tmp_path):
    _, clean = site
    results = _copy_results(suite_run, tmp_path)
    real = sorted((results / MACHINE).glob("*-*.json"))[0]
    text = real.read_text()
    bad = {
        results / MACHINE / "deadbeef-virtualenv-py3.11.json": text[: len(text) // 2],  # cut short
        results / MACHINE / "0badc0de-virtualenv-py3.11.json": json.dumps(
            {"name": "left-pad", "version": "1.3.0"}
        ),
        results / MACHINE / "notes.json": "\x00\x01 not json",
        results
        / "runs"
        / ("ab" * 20)
        / "twin"
        / "broken.json": '{"schema": "dpbench.run-result/1", "tier": "twin"',
        results / "runs" / ("cd" * 20) / "server" / "foreign.json": json.dumps(
            {"schema": "other/1", "tier": "server"}
        ),
    }
    for path, content in bad.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    index = build_site(results, tmp_path / "site", history_repo=suite_run["history"])
    model = build_report(index)
    reported = {Path(p["path"]).resolve(): p["reason"] for p in model["problems"]}
    assert set(reported) == {p.resolve() for p in bad}, reported
    assert (
        "not valid JSON"
        in reported[(results / MACHINE / "deadbeef-virtualenv-py3.11.json").resolve()]
    )
    assert (
        "not an asv 2 results file"
        in reported[(results / MACHINE / "0badc0de-virtualenv-py3.11.json").resolve()]
    )
    # The rest still builds: the same commits and charts as the clean site.
    assert [c["sha"] for c in model["commits"]] == [c["sha"] for c in clean["commits"]]
    assert [c["id"] for c in model["charts"]] == [c["id"] for c in clean["charts"]]
    html = index.read_text()
    for path in bad:
        assert path.name in html  # named on the page


HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


@pytest.mark.browser
def test_hostile_strings_from_results_are_rendered_inert(suite_run, tmp_path, tmp_path_factory):
    """A commit message, branch name and machine name carrying markup show as text and never run."""
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    results = _copy_results(suite_run, tmp_path)
    history = tmp_path / "history"
    shutil.copytree(suite_run["history"], history)
    git = ["git", "-C", str(history), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "branch", "-m", "main<script>window.__pwned=3<"], check=True)
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", HOSTILE], check=True
    )
    sha = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    # File the newest real placement run again under the injected commit, so it has results to show.
    newest = sorted(results.glob("runs/*/placement/placement.json"))[-1]
    (results / "runs" / sha / "placement").mkdir(parents=True)
    shutil.copy2(newest, results / "runs" / sha / "placement" / "placement.json")
    # And rename the asv machine to markup.
    hostile_machine = 'm"><script>window.__pwned=4</script>'
    for f in (results / MACHINE).glob("*.json"):
        data = json.loads(f.read_text())
        if f.name == "machine.json":
            data["machine"] = hostile_machine
        else:
            data["params"]["machine"] = hostile_machine
        f.write_text(json.dumps(data))

    index = build_site(results, tmp_path / "site", history_repo=history)
    model = build_report(index)
    assert model["commits"][-1]["subject"] == HOSTILE and model["machines"][0] == hostile_machine
    for page in PAGES:
        html = (index.parent / page).read_text()
        assert "<script>window.__pwned" not in html and "<img src=x" not in html
    assert "<" not in (index.parent / "data.js").read_text().split("=", 1)[1]

    with browser.chromium() as chromium:
        for page in PAGES:
            ctx = chromium.new_context()
            tab = ctx.new_page()
            errors = []
            tab.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            tab.goto((index.parent / page).resolve().as_uri())
            tab.wait_for_selector("body[data-ready='1']", state="attached")
            assert tab.evaluate("window.__pwned") is None
            assert tab.evaluate("document.querySelectorAll('script:not([src])').length") == 0
            assert tab.evaluate("document.querySelectorAll('img').length") == 0
            text = tab.inner_text("body")
            if page == "history.html":
                assert HOSTILE in text  # shown literally in the commit table
            if page in ("index.html", "history.html", "compare.html"):
                assert hostile_machine in tab.evaluate(
                    "Array.from(document.querySelectorAll('#machine-select option')).map(o => o.textContent).join('|')"
                )
            assert errors == []
            shots = Path(
                os.environ.get("DPBENCH_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots")
            )
            tab.screenshot(path=str(shots / f"hostile-{page}.png"), full_page=True)
            ctx.close()


def test_scale_input_replicates_the_real_results(suite_run, tmp_path):
    """The benchmark's 50 × 40 input: every value is one asv really measured, on labelled synthetic commits."""
    from dpbench.dashboard import scale

    info = scale.synthesise(suite_run["results"], tmp_path / "results", commits=50, benchmarks=40)
    assert info["commits"] == 50 and info["benchmarks"] == 40
    model = build_report(build_site(tmp_path / "results", tmp_path / "site"))
    assert len(model["commits"]) == 50
    asv_charts = [c for c in model["charts"] if c["source"] == "asv"]
    assert {s["machine"] for c in asv_charts for s in c["series"]} == {scale.MACHINE}
    assert len(asv_charts) == 40
    real = set(_asv_values(suite_run["results"]).values())
    assert {p[1] for c in asv_charts for s in c["series"] for p in s["points"]} <= real
    labels = set(_run_file_labels(suite_run["results"]).values())
    assert {c["placement"] for c in model["commits"]} == labels
