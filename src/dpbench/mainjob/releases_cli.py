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
