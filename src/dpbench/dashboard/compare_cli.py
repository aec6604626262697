"""`dpbench compare A B`: the dashboard's summary and verdicts in the terminal, with a CI exit code.

By default it fits a screen: the answer first (the headline rows of the answer's sections,
placement, the twin at the README's headline settings and SGLang's real scheduler: one line
a metric, with its change, interval and verdict), then the few most significant other
changes, one line each. ``--all``: every summary table (per tier and scenario, delayer-off
scenarios apart as the control) and every metric. With ``--asv``, asv's own ``asv compare``
table first. Exit code: 0 when no metric got worse (outside noise) by ``--fail-above`` % or
more (default 5), 1 when one did (a worsening from 0 always counts; metrics without a
direction, single runs and the instrument's health never gate), 2 for bad arguments.
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

from dpbench.core.paths import project_root
from dpbench.dashboard import loaders, metrics
from dpbench.dashboard.compare import (
    QUIET,
    VERDICT_ORDER,
    Change,
    CommitNotFound,
    Side,
    compare_commits,
    fmt_pct,
    profile_mismatch,
    regime_text,
    regressions,
    resolve_commit,
    scenario_text,
    summary,
)
from dpbench.dashboard.model import build_model


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    a = abs(v)
    return f"{v:.3e}" if a and (a >= 1e6 or a < 1e-3) else f"{v:.4g}"


def _short(v: float) -> str:
    """A value for the answer's lines: 420,600 rather than 4.206e+05."""
    return f"{v:,.0f}" if 1e4 <= abs(v) < 1e9 else _fmt(v)


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
EXIT_REGRESSION = 1


def _cell(chart: dict, a: Side | None, b: Side | None, change: Change) -> Text:
    if chart.get("key") == "placement":
        la = PLACEMENT_LABELS.get(round(a.value), _fmt(a.value)) if a else "—"
        lb = PLACEMENT_LABELS.get(round(b.value), _fmt(b.value)) if b else "—"
        return Text(f"{la} → {lb}\n{change.verdict}")
    text = Text(f"{_side(a)} → {_side(b)}\n{fmt_pct(change)} ")
    text.append(change.verdict, style=VERDICT_STYLE.get(change.verdict, "dim"))
    if change.basis.startswith(("paired", "repeats")) or change.basis == "deterministic":
        text.append(f" ({change.basis})", style="dim")
    return text


# The answer's sections (metrics.SECTION_ORDER ranks 0-2: placement, the twin's headline
# settings, SGLang's real scheduler) and the metrics each opens with.
ANSWER_RANKS = 3
ANSWER_KEYS = ("placement", "false_reports", "mixed", "decode_beside", "ttft_p99", "throughput")
TOP_OTHER_ROWS = 10


def _verdict_text(change: Change) -> str:
    if change.basis.startswith(("paired", "repeats")) or change.basis == "deterministic":
        return f"{change.verdict} ({change.basis})"
    return change.verdict


def print_answer(
    console: Console, model: dict, ia: int, ib: int, machine: str | None
) -> set[tuple[str, str, tuple[str, ...]]]:
    """The answer's sections, a line a metric under its section and setting; returns the
    (tier, metric, params) shown, so the list of other changes leaves them out."""
    headings = {k: h for k, h, _ in metrics.KEY_METRICS}
    shown: set[tuple[str, str, tuple[str, ...]]] = set()
    lines: list[tuple[str, ...]] = []  # ("head", text) | ("row", metric, values, change, verdict)
    for section, rows in summary(model, ia, ib, machine).items():
        if metrics.section_rank(section)[0] >= ANSWER_RANKS:
            continue
        rows = [r for r in rows if not r.control]
        regimes = {regime_text(r) for r in rows} - {""}
        lines.append(("head", section + (f" — {regimes.pop()}" if len(regimes) == 1 else "")))
        for r in rows:
            setting = scenario_text(r.scenario) if r.scenario else ""
            if len(regimes) > 1 and regime_text(r):
                setting += f" ({regime_text(r)})"
            if setting:
                lines.append(("setting", setting))
            for key in ANSWER_KEYS:
                if key not in r.cells:
                    continue
                chart, a, b, change = r.cells[key]
                if key == "placement":
                    la = PLACEMENT_LABELS.get(round(a.value), _fmt(a.value)) if a else "—"
                    lb = PLACEMENT_LABELS.get(round(b.value), _fmt(b.value)) if b else "—"
                    values, pct = f"{la} → {lb}", ""
                else:
                    values = f"{_short(a.value) if a else '—'} → {_short(b.value) if b else '—'}"
                    pct = fmt_pct(change)
                lines.append(
                    ("row", headings[key], values, pct, _verdict_text(change), change.verdict)
                )
                for s in chart["series"]:
                    scen = {k: v for k, v in s["scenario"].items() if k != "run"}
                    if chart["source"] != "asv":
                        scen = {"run": s["scenario"].get("run", "")}
                    if scen == r.scenario:
                        shown.add((chart["tier"], chart["title"], tuple(s["params"])))
    widths = [max((len(ln[i]) for ln in lines if ln[0] == "row"), default=0) for i in range(1, 4)]
    for ln in lines:
        if ln[0] == "head":
            console.print(Text(ln[1], style="bold cyan"), highlight=False)
        elif ln[0] == "setting":
            console.print(Text(f"  {ln[1]}", style="bold"), highlight=False)
        else:
            text = Text(
                "    " + "  ".join(c.ljust(w) for c, w in zip(ln[1:4], widths, strict=True)) + "  "
            )
            text.append(ln[4], style=VERDICT_STYLE.get(ln[5], "dim"))
            console.print(text, highlight=False, overflow="ellipsis", no_wrap=True)
    return shown


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
        help="every summary table and every metric (default: the answer's headline rows and "
        "the 10 most significant other changes, one line each; quiet rows, single runs and "
        "instrument health hidden)",
    ),
    fail_above: float = typer.Option(
        5.0,
        "--fail-above",
        min=0.0,
        help="exit 1 when a metric is worse (outside noise) by at least this many %; "
        "a worsening from 0 always counts",
    ),
    fail: bool = typer.Option(True, "--fail/--no-fail", help="--no-fail: always exit 0"),
    allow_mixed_profiles: bool = typer.Option(
        False, "--allow-mixed-profiles", help="pair results made under different cost profiles"
    ),
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
    mixed = profile_mismatch(loaded.run_files, ca["sha"], cb["sha"])
    if mixed and not allow_mixed_profiles:
        raise typer.BadParameter(f"{mixed}; --allow-mixed-profiles compares them anyway")

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
    rows = compare_commits(model, ia, ib, machine)
    counts = Counter(r.verdict for r in rows)
    if show_all:
        print_summary(console, model, ia, ib, machine)
        shown = rows
        title = "every metric, answer first"
    else:
        answered = print_answer(console, model, ia, ib, machine)
        loud = [r for r in rows if r.verdict not in QUIET]
        others = [r for r in loud if (r.tier, r.metric, r.params) not in answered]
        shown = others[:TOP_OTHER_ROWS]
        title = (
            f"the {len(shown)} most significant other changes of {len(loud)} with a verdict "
            f"(every table and metric: --all)"
        )
    table = Table(title=Text(title), title_justify="left", box=None, pad_edge=False)
    columns = ("metric", "A", "B", "change", "verdict")
    if show_all:
        columns = (
            "tier",
            "metric",
            "machine / env",
            "unit",
            "better",
            "A",
            "B",
            "change",
            "verdict",
        )
    for col in columns:
        table.add_column(col, overflow="fold" if show_all else "ellipsis", no_wrap=not show_all)
    for r in shown:
        metric = r.metric + (f" ({', '.join(r.params)})" if r.params else "")
        if not show_all:
            metric = f"{r.tier} · {metric}"
        cells = {
            "tier": r.tier,
            "metric": metric,
            "machine / env": f"{r.machine} / {r.env}",
            "unit": r.unit,
            "better": r.better,
            "A": _side(r.a),
            "B": _side(r.b),
            "change": fmt_pct(r.change),
            "verdict": _verdict_text(r.change),
        }
        table.add_row(
            *(Text(cells[c]) for c in columns), style=VERDICT_STYLE.get(r.verdict, "")
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
