"""`dpbench compare` in an 80-column terminal, and its refusal to pass a gate on a missing answer.

The input is asv's own results files (written through asv's API, as `asv run --record-samples`
writes them; tests/asv_results.py): the twin's headline seeds and the simulated server's
repeats of two commits, the server's DP-mixed runs and the small false-report counts being the
main job's numbers issue 35 quotes, and (in a second environment) the twin's high-KV settings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import asv_results
import pytest
from rich.console import Console

from dpbench.core.paths import project_root
from dpbench.dashboard import compare
from dpbench.dashboard.compare_text import Entry, metric_lines

A, B = "a1" * 20, "b2" * 20
VERDICTS = tuple(compare.VERDICT_ORDER)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("compare-cli") / "results"
    asv_results.write(where, asv_results.headline_pair(A, B), asv_results.CLASSES)
    asv_results.write(where, asv_results.high_kv_pair(A, B), asv_results.CLASSES, env="env2")
    return where


def _compare(results: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpbench", "compare", A[:8], B[:8], "--results", str(results),
         "--history", str(results / "no-history"), *args],
        capture_output=True, text=True, timeout=300, cwd=project_root(),
        env={**os.environ, "COLUMNS": str(columns)},
    )  # fmt: skip


def _answer_rows(out: str) -> list[str]:
    """The answer's metric lines: indented under a setting, before the legend."""
    answer = out[: out.index("A → B: the values")]
    return [ln for ln in answer.splitlines()[1:] if ln.startswith("  ") and ln.strip()]


def test_the_default_view_fits_an_80_by_50_screen_with_every_verdict(results):
    proc = _compare(results)
    out = proc.stdout
    assert proc.returncode in (0, 1), proc.stderr
    lines = out.splitlines()
    assert len(lines) <= 50 and max(map(len, lines)) <= 80, out
    assert "…" not in out
    rows = _answer_rows(out)
    assert len(rows) >= 12
    for row in rows:  # every metric line ends with its verdict
        assert row.rstrip().endswith(VERDICTS), row
    # the server's DP-mixed row: the means, falling as the change says, the interval stopping
    # at -100 % (asv's medians read 0.0088 → 0.0106 and the interval ran to -120.7 %)
    mixed = next(r for r in rows if "DP-mixed" in r and "-13.4 %" in r)
    assert "0.01167 → 0.0101" in mixed and "[-100, +93.9]" in mixed
    assert mixed.rstrip().endswith("within noise")
    # the twin's false reports 3 → 0 over 5 seeds: too few to judge, no percentage
    few = [r for r in rows if "false" in r]
    assert few and all("3 vs 0 events  too few to judge" in r for r in few)
    lows = [float(x) for x in re.findall(r"\[([-+]\d+(?:\.\d)?),", out)]
    assert lows and min(lows) >= -100  # no interval past -100 %


def test_the_wide_view_says_what_each_verdict_rests_on(results):
    out = _compare(results, columns=200).stdout
    assert "false prefillable reports" in out and "(paired, 5 seeds)" in out
    assert "(repeats, 3 + 3 runs)" in out


def test_every_table_fits_80_columns(results):
    proc = _compare(results, "--all")
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in proc.stdout
    assert "summary · tier twin · TwinHighKV" in proc.stdout
    # every metric: a line for its name, then its values, change and verdict
    every = proc.stdout[proc.stdout.index("every metric") :].splitlines()[1:]
    verdicts = [ln for ln in every if ln.startswith("    ")]
    assert verdicts and all(ln.rstrip().endswith((*VERDICTS, "runs)", "seeds)")) for ln in verdicts)


def test_metric_lines_never_cut_a_number_or_a_verdict():
    """Rendered by rich at 80 columns down to 40: each entry's numbers and verdict whole."""
    entries = [
        Entry("decode-rank s beside prefill", "12,345,678 → 12,456,789",
              "-13.4 % [-100, +93.9]", "within noise", "repeats, 3 + 3 runs"),
        Entry("false prefillable reports", "0.6 → 0", "3 vs 0 events", compare.TOO_FEW),
        Entry("TTFT p99", "20,582 → 20,492", "-0.4 % [-1.1, +0.2]", "better", "paired, 5 seeds"),
    ]  # fmt: skip
    items = [("head", "twin · TwinHeadline — 1,024 requests a run · 5 seeds"), *entries]
    for width in (80, 60, 40):
        console = Console(width=width, record=True, color_system=None)
        for line in metric_lines(items, width):
            console.print(line, no_wrap=True, crop=False)
        text = console.export_text()
        assert max(map(len, text.splitlines())) <= width and "…" not in text, text
        flat = " ".join(text.split())
        for e in entries:
            for part in (*e.values.split(), *e.change.split(), e.verdict):
                assert part in flat, (width, part)


def _truncate(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


@pytest.mark.parametrize("side", ["A", "B"])
def test_a_truncated_results_file_on_either_side_exits_2_naming_it(results, tmp_path, side):
    """The gate never passes on a missing answer: one of the side's two results files cut short
    (the side still has results: its other environment's), then both."""
    import shutil

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    sha = A if side == "A" else B
    cut = copy / asv_results.MACHINE / f"{sha[:8]}-env.json"
    _truncate(cut)
    proc = _compare(copy)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert f"error: commit {side} ({sha[:8]}) unreadable: {cut}" in err
    assert "not valid JSON" in err and "no regression" not in proc.stdout
    _truncate(copy / asv_results.MACHINE / f"{sha[:8]}-env2.json")  # no readable file left
    gone = _compare(copy)
    flat = re.sub(r"[\s│╭╮╰╯─]+", " ", gone.stderr)
    assert gone.returncode == 2 and str(cut.name) in flat and "not valid JSON" in flat, flat


def test_a_headline_metric_one_side_lacks_exits_2_naming_it(tmp_path):
    data = asv_results.headline_pair(A, B)
    del data[B]["SimulatedRooflineServe.track_dp_mixed_step_fraction"]
    where = tmp_path / "results"
    asv_results.write(where, data, asv_results.CLASSES)
    asv_results.write(where, asv_results.high_kv_pair(A, B), asv_results.CLASSES, env="env2")
    proc = _compare(where)
    assert proc.returncode == 2, proc.stdout
    err = " ".join(proc.stderr.split())
    assert (
        f"error: {B[:8]} has no DP-mixed fraction (server, spec=long-prompt-burst-small, "
        f"dp_size=2, delayer=on) that {A[:8]} has"
    ) in err
