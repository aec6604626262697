"""The fidelity page shows what `dpbench server fidelity` measured: repeated server runs, each
paired with the twin replaying its arrivals (n, paired mean, 95 % interval), from a real
report (the committed full-scale long-prompt-burst DP 2 report of 0.5.23, three runs)."""

from __future__ import annotations

import json
import shutil

import pytest

from dpbench.dashboard import fidelity, loaders
from dpbench.dashboard.model import build_model
from dpbench.paths import project_root

REPORT = project_root() / "docs" / "fidelity" / "long-prompt-burst-dp2-chunk8192-sglang0.5.23.json"


@pytest.fixture
def results(tmp_path):
    where = tmp_path / "results" / "fidelity"
    where.mkdir(parents=True)
    shutil.copy2(REPORT, where / REPORT.name)
    # a server run result beside it (read by the report, not a report) and a damaged file
    (where / f"{REPORT.stem}-server-r0.json").write_text(json.dumps({"tier": "server"}))
    (where / "other.json").write_text(json.dumps({"something": "else"}))
    return tmp_path / "results"


def test_reports_are_read_and_their_paired_rows_kept(results):
    loaded = loaders.load_results(results)
    assert [r.path for r in loaded.fidelity_reports] == [str(results / "fidelity" / REPORT.name)]
    # the fidelity folder is not an asv machine; only the foreign file is a problem
    assert [p.path for p in loaded.problems] == [str(results / "fidelity" / "other.json")]
    (rep,) = fidelity.replayed(build_model(loaded, []), loaded.fidelity_reports)
    assert rep["release"] == "0.5.23" and rep["commit"] is None and rep["runs"] == 3
    assert rep["scenario"] == {
        "spec": "long-prompt-burst",
        "dp_size": "2",
        "chunked_prefill_size": "8192",
        "delayer": "on",
    }
    rows = {r["metric"]: r for r in rep["rows"]}
    raw = {r["metric"]: r for r in json.loads(REPORT.read_text())["rows"]}
    mixed = rows["DP-mixed step fraction"]
    assert mixed["n"] == 3 and mixed["dev_unit"] == "pts"
    assert mixed["diff"] == pytest.approx(raw["DP-mixed step fraction"]["replay_diff"] * 100)
    assert [mixed["lo"], mixed["hi"]] == pytest.approx(
        [v * 100 for v in raw["DP-mixed step fraction"]["replay_ci95"]]
    )
    ttft = rows["TTFT p50"]  # % of the replayed twin's mean
    assert ttft["dev_unit"] == "%"
    assert ttft["diff"] == pytest.approx(raw["TTFT p50"]["replay_rel"] * 100)


@pytest.mark.browser
def test_the_fidelity_page_shows_the_paired_table(results, tmp_path):
    from dpbench.dashboard import browser
    from dpbench.dashboard.build import build_site

    try:
        browser.chromium_path()
    except browser.BrowserUnavailable as exc:
        pytest.skip(str(exc))
    index = build_site(results, tmp_path / "site")
    with browser.chromium() as chromium:
        ctx = chromium.new_context()
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((index.parent / "fidelity.html").resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']", state="attached")
        rows = page.eval_on_selector_all(
            "#fidelity-replayed tbody tr[data-metric]",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))",
        )
        ctx.close()
    assert errors == []
    by_metric = {r[2].split(" (")[0]: r for r in rows}
    mixed = by_metric["DP-mixed step fraction"]
    assert mixed[1] == "0.5.23 (not on this history)" and mixed[3] == "3"
    assert mixed[6].endswith(" pts [-0.9, +0.9]")
    assert by_metric["TTFT p50"][6].startswith("+0.2 %")
