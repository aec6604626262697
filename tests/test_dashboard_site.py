"""The dashboard built from the suite's own asv runs, checked in a real headless Chromium.

The session fixture runs the real thing: `dpbench releases 0.5.16 0.5.23` builds a
release history, `asv run` runs the placement tier on both releases (real SGLang
wheels, in asv's own environments), `asv publish` builds asv's site. Every number the
tests look at comes from those runs. Takes ~3–5 minutes the first time (asv builds
its environment under .cache/), less after.
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

from dpbench.dashboard import loaders
from dpbench.dashboard.build import build_report, build_site
from dpbench.dashboard.compare import compare_commits
from dpbench.paths import cache_dir, project_root

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

ROOT = project_root()
PY = sys.executable
MACHINE = "dpbench-dashboard-test"
RELEASES = ("0.5.16", "0.5.23")


def _run(cmd: list[str], cwd: Path, timeout: int) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def _asv_config(tmp: Path, history: Path) -> Path:
    """asv.releases.json, with results/html in ``tmp`` and its own env dir (kept in .cache/ across runs)."""
    from asv.util import load_json

    conf = load_json(str(ROOT / "asv.releases.json"), js_comments=True)
    conf.update(
        repo=str(history),
        results_dir="results",
        html_dir="html",
        env_dir=str(cache_dir() / "asv-env-dashboard-tests"),
        benchmark_dir=str(ROOT / "benchmarks"),
        install_command=[c.replace("{conf_dir}", str(ROOT)) for c in conf["install_command"]],
    )
    path = tmp / "asv.json"
    path.write_text(json.dumps(conf, indent=2))
    return path


@pytest.fixture(scope="session")
def suite_run(tmp_path_factory):
    """{tmp, history, config, results, html}: the placement tier run by asv over two real releases."""
    tmp = tmp_path_factory.mktemp("dashboard-suite")
    history = tmp / "history"
    _run([PY, "-m", "dpbench", "releases", *RELEASES, "--repo", str(history)], ROOT, 600)
    config = _asv_config(tmp, history)
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
            "--launch-method",
            "spawn",
            "--machine",
            MACHINE,
            "--show-stderr",
            "ALL",
        ],
        tmp,
        1500,
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


def _asv_values(results: Path) -> dict[tuple[str, str], float]:
    """(commit, benchmark) → value, read with asv's own loader, independently of the dashboard."""
    from asv.results import iter_results_for_machine

    out = {}
    for res in iter_results_for_machine(str(results), MACHINE):
        for key in res.get_all_result_keys():
            params = res.get_result_params(key) or []
            value = res.get_result_value(key, params)
            assert not params, f"{key}: the placement tier has no parameters"
            out[(res.commit_hash, key)] = value[0] if isinstance(value, list) else value
    return out


def _run_file_labels(results: Path) -> dict[str, str]:
    return {
        p.parent.parent.name: json.loads(p.read_text())["placement"]["label"]
        for p in results.glob("runs/*/placement/*.json")
    }


def test_site_holds_every_asv_value_in_history_order(suite_run, site):
    index, model = site
    history = loaders.read_history(suite_run["history"])
    assert [c["sha"] for c in model["commits"]] == [h["commit"] for h in history]
    assert [c["subject"] for c in model["commits"]] == [f"sglang {v}" for v in RELEASES]
    assert [c["date"] for c in model["commits"]] == [h["date"] for h in history]
    values = _asv_values(suite_run["results"])
    assert values, "asv produced no results"
    seen = {}
    for chart in model["charts"]:
        if chart["source"] != "asv":
            continue
        assert (
            chart["tier"] == "placement"
            and chart["unit"]
            and chart["better"] in ("higher", "lower", "none")
        )
        for s in chart["series"]:
            assert s["machine"] == MACHINE
            for i, value, _lo, _hi in s["points"]:
                seen[(model["commits"][i]["sha"], chart["benchmark"])] = value
    assert seen == {k: v for k, v in values.items() if v is not None}
    assert index.name == "index.html" and (index.parent / "compare.html").exists()


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
    if seq == ["early", "post-kv"]:
        assert model["default_pair"] == [0, 1]


def test_asv_site_is_linked_and_published(suite_run, site):
    index, _ = site
    html = index.read_text()
    link = re.search(r'id="asv-link" href="([^"]+)"', html)
    assert link, "no link to asv's site"
    target = (index.parent / link.group(1)).resolve()
    assert target == (suite_run["html"] / "index.html").resolve() and target.exists()


@pytest.mark.browser
def test_pages_render_in_chromium(suite_run, site, tmp_path_factory):
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    index, model = site
    shots = Path(os.environ.get("DPBENCH_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    with browser.chromium() as chromium:
        main = browser.load(chromium, index, screenshot=shots / "index.png")
        comp = browser.load(
            chromium, index.parent / "compare.html", screenshot=shots / "compare.png"
        )
    print(f"screenshots: {shots / 'index.png'} {shots / 'compare.png'}")
    assert main.console_errors == [] and comp.console_errors == []

    plots = {p["id"]: p for p in main.plots}
    placed = [c for c in model["commits"] if c["placement"]]
    assert plots["placement-plot"]["traces"] == 1 and plots["placement-plot"]["points"] == [
        len(placed)
    ]
    for n, chart in enumerate(model["charts"]):
        p = plots[f"plot-{n}"]
        assert p["traces"] == len(chart["series"])
        assert p["points"] == [len(s["points"]) for s in chart["series"]]
        assert p["svg_points"] == sum(
            len(s["points"]) for s in chart["series"]
        )  # drawn, not just data
    assert len(plots) == len(model["charts"]) + 1

    ia, ib = model["default_pair"]
    rows = compare_commits(model, ia, ib)
    ratio_plot = next(p for p in comp.plots if p["id"] == "ratio-plot")
    assert ratio_plot["points"] == [sum(1 for r in rows if r.ratio is not None and r.ratio > 0)]
    assert (shots / "index.png").stat().st_size > 10_000


@pytest.mark.browser
def test_compare_page_agrees_with_terminal_comparison(site):
    """The page's JavaScript and dpbench.dashboard.compare give the same table for the default pair."""
    from dpbench.dashboard import browser

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    index, model = site
    ia, ib = model["default_pair"]
    want = [
        [r.tier, r.machine + " / " + r.env, r.unit, r.better, r.verdict]
        for r in compare_commits(model, ia, ib)
    ]
    with browser.chromium() as chromium:
        ctx = chromium.new_context()
        page = ctx.new_page()
        page.goto((index.parent / "compare.html").resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']", state="attached")
        got = page.eval_on_selector_all(
            "#compare-table tbody tr",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))",
        )
        ctx.close()
    assert [[g[0], g[2], g[3], g[4], g[8]] for g in got] == want
    assert len(want) == sum(len(c["series"]) for c in model["charts"])


def test_compare_command_prints_asv_and_dpbench_tables(suite_run):
    proc = subprocess.run(
        [
            PY,
            "-m",
            "dpbench",
            "compare",
            "0.5.16",
            "v0.5.23",
            "--results",
            str(suite_run["results"]),
            "--config",
            str(suite_run["config"]),
            "--history",
            str(suite_run["history"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "asv compare" in out and "Change" in out  # asv's own table header
    for name in ("track_placement_code", "track_false_prefillable_reports"):
        assert name in out
    bad = subprocess.run(
        [
            PY,
            "-m",
            "dpbench",
            "compare",
            "0.5.16",
            "9.9.9",
            "--results",
            str(suite_run["results"]),
            "--history",
            str(suite_run["history"]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "no commit with results matches '9.9.9'" in re.sub(
        r"[\s│╭╮╰╯─]+", " ", bad.stderr
    )


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
    for page in ("index.html", "compare.html"):
        html = (index.parent / page).read_text()
        assert "<script>window.__pwned" not in html and "<img src=x" not in html
    assert "<" not in (index.parent / "data.js").read_text().split("=", 1)[1]

    with browser.chromium() as chromium:
        for page in ("index.html", "compare.html"):
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
            if page == "index.html":
                assert HOSTILE in text  # shown literally in the commit table
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
