"""`dpbench asv-config`: a copy of asv.conf.json pointed at a local SGLang clone (or any repo URL)."""

from __future__ import annotations

from pathlib import Path

import typer

from dpbench.core.atomic import write_json
from dpbench.core.paths import project_root

# A commit's python/ folder installed as the CPU tiers need it (dpbench.envs.install on a
# source tree): what asv.conf.json's GPU-runner install adds is SGLang's CUDA dependencies.
CPU_INSTALL = [
    "in-dir={env_dir} python -m pip install -q -e {conf_dir}",
    "in-dir={env_dir} python -m dpbench.envs.install {build_dir} --no-server",
]


def asv_config_command(
    repo: str = typer.Option(
        ..., metavar="REPO", help="SGLang repository: a local clone's path or a URL"
    ),
    out: Path = typer.Option(
        Path("asv.local.json"), "-o", "--out", metavar="FILE", help="config file to write"
    ),
    base: Path = typer.Option(
        None, metavar="FILE", help="config to start from (default: asv.conf.json)"
    ),
    branch: list[str] = typer.Option(
        None, metavar="BRANCH", help="branches to follow (default: the base's)"
    ),
    cpu: bool = typer.Option(
        False,
        "--cpu",
        help="install each commit the CPU way (the CPU tiers' imports pinned as its pyproject "
        "pins them, SGLang --no-deps), not with its full CUDA dependency list",
    ),
) -> None:
    """Write an asv config for another SGLang repository.

    For example a local clone on a GPU runner."""
    from asv.util import load_json  # asv's loader accepts the // comments our configs carry

    base = base or project_root() / "asv.conf.json"
    conf = load_json(str(base), js_comments=True)
    local = Path(repo).expanduser()
    if local.exists():
        if not (local / ".git").exists():
            raise typer.BadParameter(
                f"{local} exists but is not a git clone (no .git); give a clone of SGLang"
            )
        if not (local / conf.get("repo_subdir", "") / "pyproject.toml").exists():
            raise typer.BadParameter(
                f"{local} has no {conf.get('repo_subdir', '')}/pyproject.toml; is it an SGLang clone?"
            )
        repo = str(local.resolve())
    conf["repo"] = repo
    if cpu:
        conf["install_command"] = CPU_INSTALL
    if branch:
        conf["branches"] = list(branch)
    write_json(out, conf)
    typer.echo(f"wrote {out}: asv run --config {out} <range>")
