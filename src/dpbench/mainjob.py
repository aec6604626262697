"""`dpbench bench` (what `make bench` runs): the CPU tiers over SGLang releases, published.

Builds the release history, runs asv over it, publishes asv's site and the dpbench
dashboard, and says where everything is. Every step is an ordinary command a user
could run by hand; this only strings them together with progress.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from dpbench import releases
from dpbench.paths import project_root
from dpbench.procs import alive, descendants

# The embedded default: the CPU tiers that depend on SGLang. Kernel and server benchmarks
# skip without GPUs anyway; the workload benchmarks measure dpbench itself, not SGLang, so
# they need one commit only: `asv run --config asv.releases.json -b workloads HEAD^!`.
DEFAULT_BENCH = r"^(placement|twin)\."

console = Console(stderr=True)


# asv walks every folder under results/ for machine.json, including our run files'
# results/runs/<commit>/<tier>/ folders, and warns once per folder; those lines say nothing.
RUN_FILE_NOISE = re.compile(r"Skipping results: could not load .*/runs/[0-9a-f]+/\w+/machine\.json")


def _run(
    cmd: list[str],
    *,
    cwd: Path,
    check: bool = True,
    quiet: bool = False,
    drop: re.Pattern[str] | None = None,
) -> int:
    """Run a step in its own process group, streaming its output; reap it on Ctrl-C.

    ``quiet`` discards its stdout; ``drop`` filters out the stdout lines it matches.
    """
    console.print(f"[bold cyan]$[/] {' '.join(cmd)}")
    out = subprocess.DEVNULL if quiet else (subprocess.PIPE if drop else None)
    proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True, stdout=out, text=drop is not None)
    try:
        if drop is not None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not drop.search(line):
                    sys.stdout.write(line)
                    sys.stdout.flush()
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    if rc != 0 and check:
        raise typer.Exit(rc)
    return rc


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the step's group (asv then stops its own benchmark processes), then SIGKILL leftovers.

    asv starts benchmarks and installs in process groups of their own, so the whole
    process tree is snapshotted first and anything still alive after the grace period is
    killed by PID.
    """
    tree = descendants(proc.pid)
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM and not any(alive(p) for p in tree):
            return
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _sigterm_to_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def bench_command(
    versions: list[str] = typer.Argument(
        None, help="SGLang releases (default: 0.5.16 0.5.17 0.5.23)"
    ),
    bench: str = typer.Option(DEFAULT_BENCH, "--bench", "-b", help="asv benchmark regex"),
    rerun: bool = typer.Option(False, help="re-run benchmarks that already have results"),
) -> None:
    """The main job: asv over SGLang releases (CPU tiers), then asv's site and the dashboard."""
    # `kill` (or a CI timeout) must stop asv and its benchmarks too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _sigterm_to_exit)
    root = project_root()
    asv = [sys.executable, "-m", "asv"]
    conf = ["--config", str(root / "asv.releases.json")]
    t0 = time.monotonic()
    with console.status("building the SGLang release history (downloads wheels once)"):
        rows = releases.build(versions or releases.DEFAULT_RELEASES)
    console.print("release history: " + ", ".join(f"{v} ({sha[:8]})" for v, sha in rows))
    _run(
        [*asv, "machine", "--yes", *conf], cwd=root, quiet=True
    )  # its questionnaire, answered by defaults
    run = [*asv, "run", *conf, "--show-stderr", "--bench", bench, "--launch-method", "spawn"]
    if not rerun:
        run.append("--skip-existing-successful")  # failed ones are retried
    # A failed benchmark must not cost the user the others' results: publish anyway, fail at the end.
    run_rc = _run([*run, "ALL"], cwd=root, check=False)
    _run([*asv, "publish", *conf], cwd=root, drop=RUN_FILE_NOISE)
    site = None
    try:
        from dpbench.dashboard import build as dashboard_build
    except ImportError:
        console.print("[yellow]dashboard builder not available; asv's site only[/]")
    else:
        site = dashboard_build.build_site(results=root / "results", out=root / "dashboard" / "site")
    elapsed = time.monotonic() - t0
    console.print(f"\n[bold green]done[/] in {elapsed / 60:.1f} min")
    print(f"results:    {root / 'results'}")
    print(f"asv site:   {root / 'dashboard' / 'html' / 'index.html'}")
    if site is not None:
        print(f"dashboard:  {site}")
    if len(rows) > 1:
        print(
            f"compare:    .venv/bin/asv compare --config asv.releases.json {rows[0][1][:8]} {rows[1][1][:8]}"
        )
        print(f"            .venv/bin/dpbench compare {rows[0][0]} {rows[1][0]}")
    if run_rc != 0:
        console.print(
            f"[bold red]asv run exited with status {run_rc}: some benchmarks failed (see above)[/]"
        )
        raise typer.Exit(run_rc)
