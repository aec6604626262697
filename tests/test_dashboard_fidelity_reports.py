"""The fidelity page shows what `dpbench server fidelity` measured: repeated server runs, each
paired with the twin replaying its arrivals (n, paired mean, 95 % interval), from a real
report (the committed full-scale long-prompt-burst DP 2 report of 0.5.23, three runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chromium_page import open_page

from dpbench.core.paths import project_root
from dpbench.dashboard import fidelity, loaders
from dpbench.dashboard.model import build_model

REPORT = project_root() / "docs" / "fidelity" / "long-prompt-burst-dp2-chunk8192-sglang0.5.23.json"


def _evaluate(page_path: Path, selector: str, script: str) -> list:
    """Run ``script`` on ``selector``'s elements of a built page in Chromium; no page error."""
    with open_page(page_path) as (page, errors):
        got = page.eval_on_selector_all(selector, script)
    assert errors == []
    return got


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
    from dpbench.dashboard.build import build_site

    index = build_site(results, tmp_path / "site")
    rows = _evaluate(
        index.parent / "fidelity.html",
        "#fidelity-replayed tbody tr[data-metric]",
        "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))",
    )
    by_metric = {r[2].split(" (")[0]: r for r in rows}
    mixed = by_metric["DP-mixed step fraction"]
    assert mixed[1] == "0.5.23 (not on this history)" and mixed[3] == "3"
    assert mixed[6].endswith(" pts [-0.9, +0.9]")
    assert by_metric["TTFT p50"][6].startswith("+0.2 %")


@pytest.mark.browser
def test_the_compare_page_draws_latency_against_load_a_line_per_commit_with_the_slo(
    tmp_path, monkeypatch
):
    """SYNTHETIC values, written by asv's own Results API as `asv run --record-samples` writes
    them: twin.TwinLoad's TTFT/TPOT p99 at four rates on two commits."""
    import datetime

    from asv import util
    from asv.machine import Machine
    from asv.results import Results
    from asv.runner import BenchmarkResult

    from dpbench.dashboard.build import build_site
    from dpbench.metrics.latency import Slo

    monkeypatch.setattr(Machine, "hardcoded_machine_name", "box")
    results = tmp_path / "results"
    rates = ["0.25", "0.5", "1.0", "2.0"]
    names = {
        "ttft_ms_p99": [900.0, 1500.0, 4000.0, 20000.0],
        "tpot_ms_p99": [90.0, 120.0, 200.0, 400.0],
    }
    benchmarks = {"version": 2}
    for metric in names:
        benchmarks[f"twin.TwinLoad.track_{metric}"] = {
            "name": f"twin.TwinLoad.track_{metric}", "type": "track", "unit": "ms (simulated)",
            "param_names": ["rate_scale"], "params": [rates], "version": "twin-load-1",
        }  # fmt: skip
    results.mkdir()
    (results / "benchmarks.json").write_text(json.dumps(benchmarks))
    now = datetime.datetime.now(datetime.UTC)
    for i, (sha, scale) in enumerate((("a" * 40, 1.0), ("b" * 40, 0.8))):
        res = Results({"machine": "box"}, {}, sha, 1_700_000_000_000 + i, "3.11", "env", {})
        for metric, values in names.items():
            samples = [[v * scale * f for f in (0.95, 1.0, 1.05)] for v in values]
            out = BenchmarkResult(
                result=[True] * 4, samples=samples, number=[1] * 4, errcode=0, stderr="",
                profile=None,
            )  # fmt: skip
            res.add_result(
                benchmarks[f"twin.TwinLoad.track_{metric}"], out, started_at=now, duration=1.0,
                record_samples=True,
            )  # fmt: skip
        res.save(str(results))
    info = {"machine": "box", "arch": "x86_64", "cpu": "", "num_cpu": "2", "os": "", "ram": ""}
    util.write_json(str(results / "box" / "machine.json"), info, api_version=Machine.api_version)
    index = build_site(results, tmp_path / "site")
    plots = _evaluate(
        index.parent / "compare.html",
        "#load-plots .plot",
        """els => els.map(el => ({metric: el.dataset.metric,
            traces: el.data.map(t => ({name: t.name, x: t.x, y: t.y})),
            slo: el.layout.shapes.map(s => s.y0),
            lines: el.querySelectorAll('.scatterlayer .trace').length}))""",
    )
    by = {p["metric"]: p for p in plots}
    assert set(by) == {"ttft_ms_p99", "tpot_ms_p99"}
    for metric, values in names.items():
        p = by[metric]
        assert len(p["traces"]) == 2 and p["lines"] == 2  # one drawn line per commit
        assert [t["name"].split(" = ")[0] for t in p["traces"]] == ["A", "B"]
        assert p["traces"][0]["x"] == [0.25, 0.5, 1.0, 2.0]
        assert p["traces"][0]["y"] == pytest.approx(values)  # asv's median of the seeds
        assert p["traces"][1]["y"] == pytest.approx([v * 0.8 for v in values])
    assert by["ttft_ms_p99"]["slo"] == [Slo().ttft_ms]
    assert by["tpot_ms_p99"]["slo"] == [Slo().tpot_ms]
