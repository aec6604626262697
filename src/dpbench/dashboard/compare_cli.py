"""`dpbench compare A B`: two commits side by side in the terminal (asv's table, then dpbench's).

First asv's own comparison (``asv compare``'s table, through asv's Python API) for
the asv benchmarks of each machine, then every metric the dashboard knows for the
two commits, run files (twin, server) included, with ratio, noise band and verdict.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dpbench.dashboard import loaders
from dpbench.dashboard.compare import CommitNotFound, Side, compare_commits, resolve_commit
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
    asv: bool = typer.Option(True, help="print asv's own comparison table first"),
) -> None:
    """Compare two commits: asv's table for asv benchmarks, then every metric incl. twin/server run files."""
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

    rows = compare_commits(model, ia, ib, machine)
    title = (
        f"A = {ca['label']} ({ca['placement'] or 'placement not measured'})  vs  "
        f"B = {cb['label']} ({cb['placement'] or 'placement not measured'})"
    )
    table = Table(title=Text(title), title_justify="left")
    for col in ("tier", "metric", "machine / env", "unit", "better", "A", "B", "B/A", "verdict"):
        table.add_column(col, overflow="fold")
    for r in rows:
        style = {"A": "red", "B": "green"}.get(r.winner, "")
        metric = r.metric + (f" ({', '.join(r.params)})" if r.params else "")
        cells = (
            r.tier,
            metric,
            f"{r.machine} / {r.env}",
            r.unit,
            r.better,
            _side(r.a),
            _side(r.b),
            "—" if r.ratio is None else f"{r.ratio:.3g}×",
            r.verdict,
        )
        table.add_row(*(Text(c) for c in cells), style=style)  # Text: no rich markup from results
    console.print(table, highlight=False)
    if not rows:
        console.print("no metric was measured on either commit")
