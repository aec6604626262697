"""Progress display: rich bars on a terminal, silence under asv, CI or a pipe."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def interactive() -> bool:
    """True when a person is watching: stderr is a terminal and asv is not running us."""
    if os.environ.get("ASV") == "true" or os.environ.get("DPBENCH_QUIET"):
        return False
    return sys.stderr.isatty()


def console() -> Console:
    return Console(stderr=True)


def progress(*, transient: bool = False) -> Progress:
    """A rich Progress that renders nothing when nobody is watching."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(),
        transient=transient,
        disable=not interactive(),
    )
