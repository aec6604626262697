"""`dpbench compare A B`: the dashboard's summary and verdicts in the terminal, with a CI exit code.

By default it fits one 80 × 50 screen: the answer first (the headline rows of the answer's
sections, placement, the twin at the README's headline settings and SGLang's real scheduler:
one line a metric, with the values its change is computed from, the change, its interval and
the verdict; :mod:`dpbench.dashboard.compare_text` lays them out to the terminal's width), then
as many of the most significant other changes as the screen holds. ``--all``: every summary
table (per tier and scenario, delayer-off scenarios apart as the control) and every metric. With
``--asv``, asv's own ``asv compare`` table first. Exit code: 0 when no metric got worse (outside
noise) by ``--fail-above`` % or more (default 5), 1 when one did (a worsening from 0 always
counts; metrics without a direction, single runs and the instrument's health never gate), 2 for
bad arguments, and for a missing answer: a side's results file unreadable, or a headline metric
one side lacks (:mod:`dpbench.dashboard.completeness`).
"""

from __future__ import annotations

import contextlib
import io
import textwrap
from collections import Counter
from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dpbench.core.paths import project_root
from dpbench.core.tables import Column, fits
from dpbench.dashboard import loaders, metrics
from dpbench.dashboard.compare import (
    QUIET,
    VERDICT_ORDER,
    Change,
    CommitNotFound,
    Row,
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
from dpbench.dashboard.compare_text import (
    LEGEND,
    VERDICT_STYLE,
    Entry,
    Item,
    basis_text,
    change_lines,
    metric_lines,
    short,
    values_text,
)
from dpbench.dashboard.completeness import headline_items, missing_headlines, unreadable
from dpbench.dashboard.model import build_model


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


EXIT_REGRESSION = 1
EXIT_MISSING = 2  # typer's code for bad arguments: the results cannot answer the question
TOP_OTHER_ROWS = 10
SCREEN_LINES = 50  # the default view fits an 80 × 50 screen: the answer, then what fits


def _side(s: Side | None, value: float | None, banded: bool) -> str:
    """A value as its change used it; with its band where the bands decided."""
    if s is None or value is None:
        return "—"
    return short(value) + (f" [{short(s.lo)}, {short(s.hi)}]" if banded and s.banded else "")


def _cell(chart: dict, a: Side | None, b: Side | None, change: Change) -> Text:
    values = values_text(chart, change)
    if chart.get("key") != "placement" and change.basis == "bands":
        values = f"{_side(a, change.a, True)} → {_side(b, change.b, True)}"
    text = Text(values + "\n" + ("" if chart.get("key") == "placement" else fmt_pct(change) + " "))
    text.append(change.verdict, style=VERDICT_STYLE.get(change.verdict, "dim"))
    if basis_text(change):
        text.append(f" ({basis_text(change)})", style="dim")
    return text


def answer_items(
    model: dict, ia: int, ib: int, machine: str | None
) -> tuple[list[Item], set[tuple[str, str, tuple[str, ...]]]]:
    """The answer's sections as headings, settings and a line a headline metric; and the
    (tier, metric, params) shown, so the list of other changes leaves them out."""
    headings = {k: h for k, h, _ in metrics.KEY_METRICS}
    items: list[Item] = []
    shown: set[tuple[str, str, tuple[str, ...]]] = set()
    answer = headline_items(model, ia, ib, machine)
    for section in dict.fromkeys(sec for sec, _, _ in answer):
        rows = [r for sec, r, _ in answer if sec == section]
        regimes = {regime_text(r) for r in rows} - {""}
        items.append(("head", section + (f" — {regimes.pop()}" if len(regimes) == 1 else "")))
        for sec, r, cells in answer:
            if sec != section:
                continue
            setting = scenario_text(r.scenario) if r.scenario else ""
            if len(regimes) > 1 and regime_text(r):
                setting += f" ({regime_text(r)})"
            if setting:
                items.append(("setting", setting))
            for key, chart, _a, _b, change in cells:
                items.append(Entry.of(headings[key], chart, change))
                shown |= _series_shown(chart, r.scenario)
    return items, shown


def _series_shown(chart: dict, scenario: dict) -> set[tuple[str, str, tuple[str, ...]]]:
    out = set()
    for s in chart["series"]:
        scen = {k: v for k, v in s["scenario"].items() if k != "run"}
        if chart["source"] != "asv":
            scen = {"run": s["scenario"].get("run", "")}
        if scen == scenario:
            out.add((chart["tier"], chart["title"], tuple(s["params"])))
    return out


def _print_lines(console: Console, lines: list[Text]) -> None:
    for line in lines:
        console.print(line, highlight=False, no_wrap=True, overflow="fold", crop=False)


def print_summary(console: Console, model: dict, ia: int, ib: int, machine: str | None) -> int:
    """The summary tables (one per tier); returns how many rows were printed. Where one is
    wider than the console, every scenario is a block instead, a line a metric."""
    headings = {k: h for k, h, _ in metrics.KEY_METRICS}
    tables: list[Table] = []
    items: list[Item] = []
    for tier, rows in summary(model, ia, ib, machine).items():
        keys = [k for k in headings if any(k in r.cells for r in rows)]
        for control in (False, True):
            part = [r for r in rows if r.control == control]
            if not part:
                continue
            title = f"summary · tier {tier}" + (
                " · control: delayer off (placement cannot matter)" if control else ""
            )
            tables.append(_summary_table(title, part, keys, headings))
            items.append(("head", title))
            for r in part:
                regime = regime_text(r)
                where = f"{r.machine} / {r.env}"
                items.append(
                    (
                        "setting",
                        " · ".join(filter(None, [scenario_text(r.scenario), regime, where])),
                    )
                )
                for k in keys:
                    if k in r.cells:
                        chart, _, _, change = r.cells[k]
                        items.append(Entry.of(headings[k], chart, change))
    if all(fits(console, t) for t in tables):
        for t in tables:
            console.print(t)
    else:
        _print_lines(console, metric_lines(items, console.width))
    return sum(1 for i in items if isinstance(i, tuple) and i[0] == "setting")


def _summary_table(title: str, rows: list, keys: list[str], headings: dict[str, str]) -> Table:
    table = Table(title=Text(title), title_justify="left", show_lines=True)
    table.add_column("scenario", overflow="fold")
    table.add_column("machine / env", overflow="fold")
    for k in keys:
        table.add_column(headings[k], no_wrap=True)
    for r in rows:
        regime = regime_text(r)
        scen = scenario_text(r.scenario) + (f"\n{regime}" if regime else "")
        cells = [Text(scen), Text(f"{r.machine} / {r.env}")]
        cells += [_cell(*r.cells[k]) if k in r.cells else Text("—") for k in keys]
        table.add_row(*cells)
    return table


def compare_command(
    a: str = typer.Argument(
        ...,
        metavar="COMMIT_A",
        help="commit A: hash prefix, tag (v0.5.16) or release version (0.5.16)",
    ),
    b: str = typer.Argument(..., metavar="COMMIT_B", help="commit B, named the same ways"),
    results: Path = typer.Option(
        None, metavar="DIR", help="results directory (default: the checkout's results/)"
    ),
    config: Path = typer.Option(
        None, metavar="FILE", help="asv config for asv's table (default: asv.releases.json)"
    ),
    history_repo: Path = typer.Option(
        None, "--history", metavar="REPO", help="git history the commits are from"
    ),
    machine: str = typer.Option(None, metavar="NAME", help="only this machine"),
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
        metavar="PERCENT",
        help="exit 1 when a metric is worse (outside noise) by at least this many %; "
        "a worsening from 0 always counts",
    ),
    fail: bool = typer.Option(True, "--fail/--no-fail", help="--no-fail: always exit 0"),
    allow_mixed_profiles: bool = typer.Option(
        False, "--allow-mixed-profiles", help="pair results made under different cost profiles"
    ),
) -> None:
    """Compare two commits, most significant change first.

    It shows the deciding metrics per tier and scenario, then every change. Exit 0: no
    regression of --fail-above % or more; 1: at least one; 2: bad arguments."""
    root = project_root()
    console = Console()
    loaded, history = _load(results or root / "results", history_repo)
    model = build_model(loaded, history)
    ia, ib = _resolve(model, a, history), _resolve(model, b, history)
    _require_answers(model, ia, ib, machine)
    ca, cb = model["commits"][ia], model["commits"][ib]
    mixed = profile_mismatch(loaded.run_files, ca["sha"], cb["sha"])
    if mixed and not allow_mixed_profiles:
        raise typer.BadParameter(f"{mixed}; --allow-mixed-profiles compares them anyway")
    for p in model["problems"]:  # other commits' files: named, and left out
        console.print(
            f"[yellow]skipped[/] {escape(p['path'])}: {escape(p['reason'])}", highlight=False
        )
    if asv and (config or root / "asv.releases.json").exists():
        _print_asv(console, loaded, model, ia, ib, machine, config or root / "asv.releases.json",
                   results or root / "results", history_repo)  # fmt: skip
    ca, cb = model["commits"][ia], model["commits"][ib]
    head = (
        f"A = {ca['label']} ({ca['placement'] or 'placement not measured'})  →  "
        f"B = {cb['label']} ({cb['placement'] or 'placement not measured'})"
    )
    console.print(Text(head, style="bold"), highlight=False)
    rows = compare_commits(model, ia, ib, machine)
    tail = [*_counts_text(model, rows), _gate_text(rows, fail_above)]
    if show_all:
        _print_all(console, model, ia, ib, machine, rows)
    else:
        used = sum(_lines(t, console.width) for t, _ in [(head, ""), *tail])
        _print_default(console, model, ia, ib, machine, rows, used + len(model["problems"]))
    for text, style in tail:
        console.print(Text(text, style=style), highlight=False)
    if fail and regressions(rows, fail_above):
        raise typer.Exit(EXIT_REGRESSION)


def _load(results: Path, history_repo: Path | None) -> tuple[loaders.Loaded, list[dict]]:
    try:
        loaded = loaders.load_results(results)
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc), param_hint="--results") from exc
    if history_repo is None:
        from dpbench.dashboard.build import default_history

        history_repo = default_history(loaded)
    return loaded, loaders.read_history(history_repo)


def _resolve(model: dict, name: str, history: list[dict]) -> int:
    """A commit's index; a name that matches none, but whose results file could not be read,
    is refused naming that file."""
    try:
        return resolve_commit(model, name)
    except CommitNotFound as exc:
        tagged = [h["commit"] for h in history if {name, f"v{name}"} & set(h["tags"])]
        bad = [p for sha in tagged or [name.lower()] for p in unreadable(model["problems"], sha)]
        if bad:
            raise typer.BadParameter(f"{exc}; {_unreadable_text(bad)}") from exc
        raise typer.BadParameter(str(exc)) from exc


def _unreadable_text(problems: list[dict[str, str]]) -> str:
    return "unreadable: " + "; ".join(f"{p['path']} ({p['reason']})" for p in problems)


def _require_answers(model: dict, ia: int, ib: int, machine: str | None) -> None:
    """Exit 2 when a side's results are unreadable or lack a headline metric the other side
    has: a gate never passes on a missing answer."""
    err = Console(stderr=True)
    why = []
    for side, i in (("A", ia), ("B", ib)):
        bad = unreadable(model["problems"], model["commits"][i]["sha"])
        if bad:
            why.append(f"commit {side} ({model['commits'][i]['label']}) {_unreadable_text(bad)}")
    if not why:
        why = missing_headlines(model, ia, ib, machine)
    if why:
        for line in why:  # soft wrap: a path stays whole, to copy
            err.print(Text(f"error: {line}", style="bold red"), highlight=False, soft_wrap=True)
        err.print(
            "cannot compare on a missing answer: repair or rerun those results, then compare again",
            highlight=False,
        )
        raise typer.Exit(EXIT_MISSING)


def _print_asv(
    console: Console,
    loaded: loaders.Loaded,
    model: dict,
    ia: int,
    ib: int,
    machine: str | None,
    config: Path,
    results: Path,
    history_repo: Path | None,
) -> None:
    ca, cb = model["commits"][ia], model["commits"][ib]
    asv_shas = {r.commit for r in loaded.asv_runs}
    machines = sorted({r.machine for r in loaded.asv_runs if r.commit in (ca["sha"], cb["sha"])})
    for m in machines:
        if machine and m != machine:
            continue
        if ca["sha"] in asv_shas and cb["sha"] in asv_shas:
            console.rule(Text(f"asv compare · machine {m}"), style="cyan")
            print(asv_compare(config, results, history_repo, ca["sha"], cb["sha"], m))


def _row_entry(r: Row, with_tier: bool) -> Entry:
    label = r.metric + (f" ({', '.join(r.params)})" if r.params else "")
    chart = {"key": "placement" if r.metric.endswith("placement_code") else None}
    return Entry.of(f"{r.tier} · {label}" if with_tier else label, chart, r.change)


def _print_default(
    console: Console,
    model: dict,
    ia: int,
    ib: int,
    machine: str | None,
    rows: list[Row],
    used: int,
) -> None:
    """The answer, a legend, then as many of the most significant other changes as leave the
    screen (SCREEN_LINES, of which ``used`` go to the lines around these) whole."""
    items, answered = answer_items(model, ia, ib, machine)
    answer = metric_lines(items, console.width)
    _print_lines(console, answer)
    console.print(Text(LEGEND, style="dim"), highlight=False)
    loud = [r for r in rows if r.verdict not in QUIET]
    others = [r for r in loud if (r.tier, r.metric, r.params) not in answered]
    title = "the {} most significant other changes of {} with a verdict (all: --all)"
    room = SCREEN_LINES - used - len(answer) - 1 - _lines(title, console.width)
    shown: list[Text] = []
    n = 0
    for k in range(1, min(len(others), TOP_OTHER_ROWS) + 1):
        lines = change_lines([_row_entry(r, True) for r in others[:k]], console.width)
        if len(lines) > room:
            break
        shown, n = lines, k
    console.print(Text(title.format(n, len(loud)), style="italic"), highlight=False)
    _print_lines(console, shown)


def _lines(text: str, width: int) -> int:
    """How many lines ``text`` takes at ``width`` (rich wraps at spaces, as textwrap)."""
    return len(textwrap.wrap(text, width)) or 1


def _print_all(
    console: Console, model: dict, ia: int, ib: int, machine: str | None, rows: list[Row]
) -> None:
    print_summary(console, model, ia, ib, machine)
    title = "every metric, answer first"
    columns = [Column(c) for c in ("tier", "metric", "machine / env", "unit", "better")]
    columns += [Column("A", True), Column("B", True), Column("change"), Column("verdict")]
    cells = []
    for r in rows:
        e = _row_entry(r, False)
        banded = r.change.basis == "bands"
        cells.append([r.tier, e.label, f"{r.machine} / {r.env}", r.unit, r.better,
                      _side(r.a, r.change.a, banded), _side(r.b, r.change.b, banded), e.change,
                      e.verdict + (f" ({e.basis})" if e.basis else "")])  # fmt: skip
    table = Table(title=Text(title), title_justify="left", box=None)
    for col in columns:
        table.add_column(col.name, justify="right" if col.right else "left", no_wrap=True)
    for row in cells:
        table.add_row(*(Text(c) for c in row))
    if fits(console, table):
        console.print(table)
    else:  # a line for its name, unit and direction, a line for its values and verdict
        console.print(Text(title, style="italic"), highlight=False)
        several = len({(r.machine, r.env) for r in rows}) > 1
        entries = [
            replace(
                _row_entry(r, True),
                label=f"{_row_entry(r, True).label} · {r.unit}, better {r.better}"
                + (f" · {r.machine} / {r.env}" if several else ""),
            )
            for r in rows
        ]
        _print_lines(console, change_lines(entries, console.width))
    if not rows:
        console.print("no metric was measured on either commit")


def _counts_text(model: dict, rows: list[Row]) -> list[tuple[str, str]]:
    counts = Counter(r.verdict for r in rows)
    out = [(", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if counts[v]) or "no metrics", "")]
    if model["unknown_directions"]:
        unknown = ", ".join(model["unknown_directions"])
        out.append((f"direction unknown (never gated): {unknown}", "yellow"))
    return out


def _gate_text(rows: list[Row], fail_above: float) -> tuple[str, str]:
    gating = regressions(rows, fail_above)
    if not gating:
        return f"no regression of ≥ {fail_above:g} % outside noise", "green"
    listed = "; ".join(
        f"{r.tier} {r.metric}" + (f" ({', '.join(r.params)})" if r.params else "")
        + f" {fmt_pct(r.change)}"
        for r in gating[:10]
    )  # fmt: skip
    more = " …" if len(gating) > 10 else ""
    return f"{len(gating)} regression(s) of ≥ {fail_above:g} % outside noise: {listed}{more}", (
        "bold red"
    )
