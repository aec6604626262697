"""`dpbench env …`: build and inspect the per-release SGLang environments of the CPU tiers."""

from __future__ import annotations

import json
import subprocess

import typer
from rich.console import Console
from rich.table import Table

from dpbench.core.cli_help import Typer
from dpbench.core.paths import cache_dir
from dpbench.envs.venv import EnvError, ensure_env, env_path

app = Typer(
    help="Build and list per-release SGLang environments.\n\n"
    "Each holds one SGLang release (installed --no-deps), CPU pins and a shared torch."
)
console = Console(stderr=True)


@app.command("create")
def create(
    versions: list[str] = typer.Argument(
        ..., metavar="VERSIONS", help="SGLang versions, e.g. 0.5.16 0.5.23"
    ),
    server: bool = typer.Option(
        False, "--server", help="also add the simulated-forward server tier's extras"
    ),
    jobs: int = typer.Option(
        2, "--jobs", "-j", min=1, help="environments built at once (pip is CPU-bound)"
    ),
) -> None:
    """Build (or reuse) each version's environment.

    It builds --jobs environments at once."""
    from concurrent.futures import ThreadPoolExecutor

    from dpbench.envs.venv import ensure_server_env

    build = ensure_server_env if server else ensure_env
    errors: list[str] = []
    with (
        console.status(
            f"environments under {env_path(versions[0]).parent} (first build takes minutes)"
        ),
        ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        futures = {v: pool.submit(build, v) for v in versions}
        for v, fut in futures.items():
            try:
                env = fut.result()
            except EnvError as exc:
                errors.append(f"SGLang {v}: {exc}")
                console.print(f"[red]SGLang {v}: {exc}[/]")
                continue
            console.print(f"SGLang {v}: {env.python}")
    if errors:
        raise typer.Exit(1)


@app.command("list")
def list_envs() -> None:
    """List the environments built so far and their pins."""
    table = Table()
    for col in ("sglang", "path", "transformers pin"):
        table.add_column(col)
    for stamp in sorted((cache_dir() / "envs").glob("sglang-*/dpbench-env.json")):
        info = json.loads(stamp.read_text())
        pin = next((r for r in info.get("requirements", []) if r.startswith("transformers")), "")
        table.add_row(info["sglang"], str(stamp.parent), pin)
    Console().print(table)


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context, version: str = typer.Argument(..., help="SGLang version")) -> None:
    """Run a command with a release environment's python.

    For example: dpbench env run 0.5.23 -- -m pip show sglang"""
    env = ensure_env(version)
    raise typer.Exit(subprocess.call([str(env.python), *ctx.args]))
