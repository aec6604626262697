"""The commands' tables at 80 columns: a layout that reads, and no number ever cut.

`dpbench server fidelity` on a report it wrote (docs/fidelity/), `dpbench twin sweep` and
`dpbench twin capacity` on rows their own summarising code builds from hand-made arms, and
`dpbench server diverge` on hand-built steps of eight ranks (its reading of real records is
tested in test_server_simulated.py)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from dpbench.core.paths import project_root
from dpbench.core.tables import Column, fit

FIDELITY = (
    project_root() / "docs" / "fidelity" / "long-context-chat-dp2-chunk8192-sglang0.5.23.json"
)


def _render(columns, rows, width: int, **kw) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    fit(console, columns, rows, **kw)
    return console.export_text().splitlines()


def _whole(lines: list[str], rows: list[list[str]], width: int) -> None:
    """Every line within ``width``, no "…" added, and every cell on one line, whole."""
    assert max(map(len, lines)) <= width, "\n".join(lines)
    for row in rows:
        for cell in row:
            if cell:
                assert any(cell in ln for ln in lines), (cell, "\n".join(lines))


def test_fidelity_reads_as_a_block_per_metric_at_80_columns():
    from dpbench.server.cli import FIDELITY_COLUMNS, _fidelity_row

    report = json.loads(FIDELITY.read_text())
    rows = [_fidelity_row(r) for r in report["rows"]]
    narrow = _render(FIDELITY_COLUMNS, rows, 80, title="twin vs server")
    _whole(narrow, rows, 80)
    heads = [ln for ln in narrow if ln and not ln.startswith("  ")]
    assert heads[1:] == [r[0] for r in rows if not r[0].startswith(" ")]  # a block per metric
    wide = _render(FIDELITY_COLUMNS, rows, 300, title="twin vs server")
    assert any("┃ metric" in ln for ln in wide)  # the table where it fits
    _whole(wide, rows, 300)


def _arm(level: float, shift: float) -> dict:
    runs = []
    for dp in (4, 8):
        for chunk in (8192, 16384):
            for seed in range(5):
                m = {
                    "dp_mixed_step_fraction": level * (1 + shift) + 0.01 * seed,
                    "ttft_ms_p99": 20_000.0 * (1 + shift / 10) + 97.0 * seed,
                    "request_throughput_req_per_s": 2.41 + 0.013 * seed + shift / 50,
                    "false_prefillable_reports_count": float(seed % 2),
                }
                runs.append({"dp": dp, "chunked_prefill_size": chunk, "seed": seed, "metrics": m})
    return {"runs": runs}


def test_sweep_reads_at_80_columns():
    from dpbench.twin.cli import SWEEP_TABLE_METRICS, paired_table
    from dpbench.twin.sweep import compare

    rows = compare(_arm(0.28, 0.0), _arm(0.28, -0.4))
    title, columns, cells, setting = paired_table(rows, "0.5.16", "0.5.17", SWEEP_TABLE_METRICS)
    assert setting == 2 and len(cells) == 4 * 4
    lines = _render(columns, cells, 80, title=title, group=setting, label=setting + 1)
    _whole(lines, [c[setting:] for c in cells], 80)
    assert "DP 4 · chunk 8192 · dp_mixed_step_fraction" in lines


def test_capacity_reads_at_80_columns():
    from dpbench.metrics.latency import Slo
    from dpbench.twin.capacity_cli import capacity_table, summarise

    def arm(caps):
        return {
            "rows": [
                {"dp": dp, "chunked_prefill_size": 8192, "seed": s, "capacity": c,
                 "bound": "bracket" if c is not None else "below"}
                for dp in (4, 8)
                for s, c in enumerate(caps)
            ]
        }  # fmt: skip

    arms = {
        "0.5.16": arm([0.2973, 0.2973, 0.25, None]),
        "0.5.17": arm([0.2973, 0.2973, 0.3164, 0.31]),
        "0.5.23": arm([0.31, 0.33, 0.29, 0.30]),
    }
    title, columns, cells = capacity_table(summarise(arms), list(arms), 0.95, Slo(5000, 250))
    lines = _render(columns, cells, 80, title=title, group=2, label=2)
    _whole(lines, cells, 80)
    assert "DP 4 · chunk 8192" in lines


def test_tables_group_then_block_rather_than_cut():
    columns = [Column("DP", True, True), Column("metric"), Column("A", True), Column("B", True)]
    rows = [["4", "decode_rank_time_beside_prefill_fraction", "0.1041", "0.1049"]]
    grouped = _render(columns, rows, 60, group=1)
    assert grouped[0] == "DP 4" and any("0.1049" in ln for ln in grouped)
    wide = [Column(f"column {i}", True) for i in range(12)]
    blocks = _render(wide, [[f"{i * 1.2345e4:.4g}" for i in range(12)]], 40)
    _whole(blocks, [[f"{i * 1.2345e4:.4g}" for i in range(12)]], 40)


def test_diverge_wraps_long_lines_at_their_spaces():
    from dpbench.server import diverge as dv

    def rank(kind, **kw):
        return dv.RankPass(kind=kind, waiting=3, running=7, chunked=None, **kw)

    ext = rank("extend", reported=True, allow=True, admitted=("request-0001", "request-0002"))
    false = rank("decode", reported=True, allow=True)
    server = [tuple([ext] * 8), tuple([false, *[ext] * 7]), tuple([rank("decode")] * 8)]
    twin = [tuple([ext] * 8), tuple([ext] * 8), tuple([rank("decode")] * 8)]
    report = dv.compare(server, twin)
    flat = dv.render(report)
    assert max(map(len, flat.splitlines())) > 80  # eight ranks' states do not fit
    narrow = dv.render(report, width=80).splitlines()
    assert max(map(len, narrow)) <= 80
    words = set(" ".join(flat.split()).split())
    assert words == set(" ".join(narrow).split())  # every state and number whole


@pytest.mark.parametrize("width", [80, 120])
def test_a_table_that_fits_is_a_table(width):
    columns = [Column("metric"), Column("value", True)]
    lines = _render(columns, [["ttft_ms_p99", "2.038e+04"]], width)
    assert any("┃ metric" in ln for ln in lines) and any("2.038e+04" in ln for ln in lines)
