"""Arms of a comparison (``twin sweep``, ``twin capacity``): each a release, optionally with modes,
run as one process in that release's environment, several at once, with progress."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import typer

from dpbench.twin.job import arm_overrides


def check_arms(arms: list[str], *, at_least: int = 1) -> None:
    """Each arm reads as ``VERSION[:modes]`` and there are at least ``at_least`` of them; else
    a usage error naming --sglang."""
    if len(arms) < at_least:
        raise typer.BadParameter(
            f"give at least {at_least} arms (--sglang A --sglang B)", param_hint="--sglang"
        )
    for arm in arms:
        try:
            arm_overrides(arm)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--sglang") from None


def run_arm_module(
    arm: str,
    version: str,
    module: str,
    job: Path,
    out: Path,
    *,
    timeout: float,
    on_progress: Callable[[str, dict[str, Any]], None],
    what: str,
) -> dict[str, Any]:
    """``python -m MODULE JOB -o OUT`` in ``version``'s environment; its JSON progress lines go
    to ``on_progress(arm, event)``; a non-zero exit raises RuntimeError naming the arm."""
    from dpbench.envs import run_in_env

    def line(text: str) -> None:
        try:
            event = json.loads(text)
        except json.JSONDecodeError:
            return
        if isinstance(event, dict) and event.get("event") == "progress":
            on_progress(arm, event)

    proc = run_in_env(version, module, [str(job), "-o", str(out)], timeout=timeout, on_line=line)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} arm {arm} exited with status {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return json.loads(out.read_text())


def run_arms(
    arms: list[str], jobs: int, run_one: Callable[[int, str], dict[str, Any]], what: str
) -> dict[str, dict[str, Any]]:
    """``run_one(index, arm)`` for every arm, ``jobs`` at once; a failed arm ends the command
    (exit 1) naming it."""
    from dpbench.core.progress import console

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {arm: pool.submit(run_one, i, arm) for i, arm in enumerate(arms)}
        try:
            return {arm: f.result() for arm, f in futures.items()}
        except RuntimeError as exc:
            console().print(f"[red]{what} failed:[/] {exc}")
            raise typer.Exit(1) from None
