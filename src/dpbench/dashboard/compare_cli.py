"""`dpbench compare A B`: the dashboard's summary and verdicts in the terminal, with a CI exit code.

Prints the summary (per tier, per scenario: the metrics that decide the question, with
change in %, interval and verdict; delayer-off scenarios apart as the control), then
every metric that changed, most significant first (``--all``: every metric). With
``--asv``, asv's own ``asv compare`` table first. Exit code: 0 when no metric got worse
(outside noise) by ``--fail-above`` % or more (default 5), 1 when one did (a worsening
from 0 always counts; metrics without a direction never gate), 2 for bad arguments.
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dpbench.dashboard import loaders, metrics
from dpbench.dashboard.compare import (
    QUIET,
    VERDICT_ORDER,
    Change,
    CommitNotFound,
    Side,
    compare_commits,
    fmt_pct,
    regime_text,
    regressions,
    resolve_commit,
    scenario_text,
    summary,
)
from dpbench.dashboard.model import build_model
from dpbench.paths import project_root


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    a = abs(v)
    return f"{v:.3e}" if a and (a >= 1e6 or a < 1e-3) else f"{v:.4g}"


def _side(s: Side | None) -> str:
    if s is None:
        return "—"
    return _fmt(s.value) + (f" [{_fmt(s.lo)}, {_fmt(s.hi)}]" if s.banded else "")


def asv_compare(
    config: Path, results: Path, history_repo: Path | None, sha_a: str, sha_b: str, machine: str
) -> str:
    """asv's comparison table for one machine, as text (asv prints it; we capture it)."""
    from asv import util
    from asv.commands.compare import Compare
    from asv.config import Config

    conf = Config.load(str(config))
    conf.results_dir = str(results.resolve())
    if history_repo is not None:
        conf.repo = str(Path(history_repo).resolve())
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            Compare.run(
                conf, sha_a, sha_b, factor=1.1, machine=machine, sort="name"
            )  # asv's CLI default factor
    except util.UserError as exc:
        return f"(asv compare: {exc})"
    return buf.getvalue()


PLACEMENT_LABELS = {0: "unknown", 1: "early", 2: "post-kv", 3: "absent"}
VERDICT_STYLE = {"worse": "bold red", "better": "green", "changed": "blue"}
TOP_ROWS = 15  # rows of the change table without --all: it fits a screen
EXIT_REGRESSION = 1


def _cell(chart: dict, a: Side | None, b: Side | None, change: Change) -> Text:
    if chart.get("key") == "placement":
        la = PLACEMENT_LABELS.get(round(a.value), _fmt(a.value)) if a else "—"
        lb = PLACEMENT_LABELS.get(round(b.value), _fmt(b.value)) if b else "—"
        return Text(f"{la} → {lb}\n{change.verdict}")
    text = Text(f"{_side(a)} → {_side(b)}\n{fmt_pct(change)} ")
    text.append(change.verdict, style=VERDICT_STYLE.get(change.verdict, "dim"))
    if change.basis == "single run" and change.verdict in ("better", "worse", "changed"):
        text.append(" (single run)", style="dim")
    elif change.basis.startswith(("paired", "repeats")):
        text.append(f" ({change.basis})", style="dim")
    return text


def print_summary(console: Console, model: dict, ia: int, ib: int, machine: str | None) -> int:
    """The summary tables (one per tier); returns how many rows were printed."""
    headings = {k: h for k, h, _ in metrics.KEY_METRICS}
    n = 0
    for tier, rows in summary(model, ia, ib, machine).items():
        keys = [k for k in headings if any(k in r.cells for r in rows)]
        for control in (False, True):
            part = [r for r in rows if r.control == control]
            if not part:
                continue
            title = f"summary · tier {tier}" + (
                " · control: delayer off (placement cannot matter)" if control else ""
            )
            table = Table(title=Text(title), title_justify="left", show_lines=True)
            table.add_column("scenario", overflow="fold")
            table.add_column("machine / env", overflow="fold")
            for k in keys:
                table.add_column(headings[k], overflow="fold")
            for r in part:
                regime = regime_text(r)
                scen = scenario_text(r.scenario) + (f"\n{regime}" if regime else "")
                cells = [Text(scen), Text(f"{r.machine} / {r.env}")]
                for k in keys:
                    cells.append(_cell(*r.cells[k]) if k in r.cells else Text("—"))
                table.add_row(*cells)
                n += 1
            console.print(table)
    return n


def compare_command(
    a: str = typer.Argument(
        ..., help="commit A: hash prefix, tag (v0.5.16) or release version (0.5.16)"
    ),
    b: str = typer.Argument(..., help="commit B, named the same ways"),
    results: Path = typer.Option(None, help="results directory (default: the checkout's results/)"),
    config: Path = typer.Option(
        None, help="asv config for asv's table (default: asv.releases.json)"
    ),
    history_repo: Path = typer.Option(None, "--history", help="git history the commits are from"),
    machine: str = typer.Option(None, help="only this machine"),
    asv: bool = typer.Option(
        False, "--asv/--no-asv", help="also print asv's own `asv compare` table"
    ),
    show_all: bool = typer.Option(
        False,
        "--all",
        help="list every metric (default: the 15 most significant changes; quiet rows, single "
        "server runs and instrument health hidden)",
    ),
    fail_above: float = typer.Option(
        5.0,
        "--fail-above",
        min=0.0,
        help="exit 1 when a metric is worse (outside noise) by at least this many %; "
        "a worsening from 0 always counts",
    ),
    fail: bool = typer.Option(True, "--fail/--no-fail", help="--no-fail: always exit 0"),
) -> None:
    """Compare two commits: the deciding metrics per tier and scenario, then every change, most
    significant first. Exit 0: no regression of --fail-above % or more; 1: at least one; 2: bad
    arguments."""
    root = project_root()
    results = results or root / "results"
    config = config or root / "asv.releases.json"
    console = Console()
    try:
        loaded = loaders.load_results(results)
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc), param_hint="--results") from exc
    if history_repo is None:
        from dpbench.dashboard.build import default_history

        history_repo = default_history(loaded)
    model = build_model(loaded, loaders.read_history(history_repo))
    for p in model["problems"]:
        console.print(
            f"[yellow]skipped[/] {escape(p['path'])}: {escape(p['reason'])}", highlight=False
        )
    try:
        ia, ib = resolve_commit(model, a), resolve_commit(model, b)
    except CommitNotFound as exc:
        raise typer.BadParameter(str(exc)) from exc
    ca, cb = model["commits"][ia], model["commits"][ib]

    if asv and config.exists():
        asv_shas = {r.commit for r in loaded.asv_runs}
        machines = sorted(
            {r.machine for r in loaded.asv_runs if r.commit in (ca["sha"], cb["sha"])}
        )
        for m in machines:
            if machine and m != machine:
                continue
            if ca["sha"] in asv_shas and cb["sha"] in asv_shas:
                console.rule(Text(f"asv compare · machine {m}"), style="cyan")
                print(asv_compare(config, results, history_repo, ca["sha"], cb["sha"], m))

    console.print(
        Text(
            f"A = {ca['label']} ({ca['placement'] or 'placement not measured'})  →  "
            f"B = {cb['label']} ({cb['placement'] or 'placement not measured'})",
            style="bold",
        )
    )
    print_summary(console, model, ia, ib, machine)

    rows = compare_commits(model, ia, ib, machine)
    loud = [r for r in rows if r.verdict not in QUIET]
    shown = rows if show_all else loud[:TOP_ROWS]
    counts = Counter(r.verdict for r in rows)
    left = len(rows) - len(shown)
    table = Table(
        title=Text(
            ("every metric" if show_all else f"the {len(shown)} most significant changes")
            + ", most significant first"
            + (
                ""
                if show_all
                else f" ({left} more: within noise, unchanged, single server runs, not "
                "measured, instrument health, or further down: --all)"
            )
        ),
        title_justify="left",
    )
    for col in ("tier", "metric", "machine / env", "unit", "better", "A", "B", "change", "verdict"):
        table.add_column(col, overflow="fold")
    for r in shown:
        metric = r.metric + (f" ({', '.join(r.params)})" if r.params else "")
        verdict = r.verdict + (
            " (single run)"
            if r.change.basis == "single run" and r.verdict not in QUIET
            else f" ({r.change.basis})"
            if r.change.basis.startswith(("paired", "repeats"))
            else ""
        )
        cells = (
            r.tier,
            metric,
            f"{r.machine} / {r.env}",
            r.unit,
            r.better,
            _side(r.a),
            _side(r.b),
            fmt_pct(r.change),
            verdict,
        )
        table.add_row(
            *(Text(c) for c in cells), style=VERDICT_STYLE.get(r.verdict, "")
        )  # Text: no rich markup from results
    console.print(table, highlight=False)
    if not rows:
        console.print("no metric was measured on either commit")
    console.print(
        ", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if counts[v]) or "no metrics",
        highlight=False,
    )
    if model["unknown_directions"]:
        console.print(
            "direction unknown (never gated): " + ", ".join(model["unknown_directions"]),
            style="yellow",
            highlight=False,
        )
    gating = regressions(rows, fail_above)
    if gating:
        console.print(
            Text(
                f"{len(gating)} regression(s) of ≥ {fail_above:g} % outside noise: "
                + "; ".join(
                    f"{r.tier} {r.metric}"
                    + (f" ({', '.join(r.params)})" if r.params else "")
                    + f" {fmt_pct(r.change)}"
                    for r in gating[:10]
                )
                + (" …" if len(gating) > 10 else ""),
                style="bold red",
            )
        )
        if fail:
            raise typer.Exit(EXIT_REGRESSION)
    else:
        console.print(f"no regression of ≥ {fail_above:g} % outside noise", style="green")
