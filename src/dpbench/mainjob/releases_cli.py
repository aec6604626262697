"""`dpbench releases`: build the local SGLang release-history repository asv runs over."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from dpbench.mainjob import releases

_VERSIONS_HELP = (
    "releases newer than the known ones to append (the history always holds every known "
    "release: " + " ".join(releases.KNOWN_VERSIONS) + ")"
)


def releases_command(
    versions: list[str] = typer.Argument(None, metavar="VERSIONS", help=_VERSIONS_HELP),
    repo: Path = typer.Option(
        None, metavar="DIR", help="where to build it (default: .cache/sglang-releases)"
    ),
) -> None:
    """Build the git history of SGLang releases asv runs over.

    Each commit holds one PyPI release; asv.releases.json runs over them."""
    try:
        rows = releases.build(versions or (), repo)
    except releases.ReleasesError as exc:
        raise typer.BadParameter(str(exc)) from exc
    table = Table(title=f"SGLang release history at {repo or releases.default_repo()}")
    table.add_column("version")
    table.add_column("commit")
    table.add_column("wheel built (UTC)")
    history = {r["commit"]: r for r in releases.read_history(repo)}
    for version, sha in rows:
        table.add_row(version, sha[:12], history[sha]["date"])
    Console().print(table)


def source_history_command(
    out: Path = typer.Argument(..., metavar="DIR", help="where to build the repository"),
    release: list[str] = typer.Option(
        None,
        "--release",
        metavar="VERSION",
        help="releases to hold, oldest first (default: 0.5.16 0.5.17)",
    ),
    with_changes: bool = typer.Option(
        True, "--changes/--no-changes", help="add the release history's changes on these releases"
    ),
    history: Path = typer.Option(
        None, metavar="DIR", help="the release history the changes come from"
    ),
) -> None:
    """Build an SGLang-shaped git repository from the releases.

    Each commit holds python/ from a release's sources, with the changes on them as branches.
    asv's git-history path (asv.conf.json) then runs without GitHub."""
    from dpbench.changes import ChangeError
    from dpbench.changes.history import list_changes
    from dpbench.mainjob import source_history

    versions = release or ["0.5.16", "0.5.17"]
    repo = Path(history or releases.default_repo())
    kept = [s for s in list_changes(repo) if s.change.base in versions] if with_changes else []
    try:
        rows = source_history.build(out, versions, kept)
    except (releases.ReleasesError, ChangeError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    table = Table(title=f"SGLang-shaped history at {out} (python/ per commit)")
    table.add_column("release or change")
    table.add_column("commit")
    for name, sha in rows:
        table.add_row(name, sha[:12])
    Console().print(table)
    print(f"next: dpbench asv-config --repo {out} --cpu -o asv.local.json")
