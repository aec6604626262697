"""`dpbench placement …`: show where each SGLang release's PrefillDelayer negotiation sits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dpbench.core.cli_help import Typer

app = Typer(
    help="Where a release's PrefillDelayer negotiation sits.\n\n"
    "PrefillAdder negotiates with the PrefillDelayer before or after its KV-budget gates."
)


@app.command()
def show(
    sglang: Annotated[
        list[str] | None,
        typer.Option(
            "--sglang",
            help="SGLang release(s) or change(s) (dpbench change list) to probe, each in its "
            "own environment (repeatable; default: every known release)",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the run results as a JSON list")
    ] = False,
    save: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="folder to save each run result in, as placement-VERSION.json"
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds allowed per release")] = 600,
) -> None:
    """Probe each release in its environment; print a table.

    Each probe reads the source and runs the scheduler."""
    from dpbench.core import results
    from dpbench.core.progress import console
    from dpbench.envs import run_in_env
    from dpbench.mainjob.releases import KNOWN_VERSIONS
    from dpbench.placement.probe import EXIT_UNSUPPORTED
    from dpbench.placement.table import cases, summary

    err = console()
    out = Console()
    found: list[dict] = []
    failed = False
    for version in sglang or KNOWN_VERSIONS:
        with err.status(
            f"SGLang {version}: preparing its environment and probing (first import ~10 s)"
        ):
            proc = run_in_env(version, "dpbench.placement.probe", ["--json"], timeout=timeout)
        if proc.returncode == EXIT_UNSUPPORTED:
            err.print(
                f"[yellow]SGLang {version}: skipped[/]: {proc.stderr.strip().splitlines()[-1]}"
            )
            continue
        if proc.returncode != 0:
            failed = True
            err.print(
                f"[red]SGLang {version}: probe failed (exit {proc.returncode})[/]\n{proc.stderr[-3000:]}"
            )
            continue
        result = json.loads(proc.stdout)
        found.append(result)
        if save is not None:
            path = results.save(save / f"placement-{version}.json", result)
            err.print(f"saved {path}")
    if as_json:
        out.print_json(json.dumps(found))
    elif found:
        out.print(summary(found))
        for result in found:
            out.print(cases(result))
        out.print("placement_code: 0 unknown, 1 early, 2 post-kv, 3 absent")
    if failed:
        raise typer.Exit(1)


@app.command()
def static(
    path: Annotated[
        Path, typer.Argument(help="a schedule_policy.py, e.g. from a local SGLang clone")
    ],
) -> None:
    """Read one schedule_policy.py and print its placement.

    No SGLang install is needed."""
    from dpbench.placement.static import analyse_file

    found = analyse_file(path)
    out = Console()
    out.print(
        f"[bold]{found.label}[/]  KV-budget exits before negotiation: {found.kv_exits_before_negotiation}"
        f"  add_chunked_req negotiates: {found.chunked_negotiates}"
    )
    if found.reason:
        out.print(found.reason)
    for e in found.events:
        out.print(f"  line {e.line:5d}  {e.kind:11s}  {e.detail}")
    if found.label == "unknown":
        raise typer.Exit(2)
