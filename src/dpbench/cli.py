"""`dpbench …`: the command line; each area contributes one sub-command group.

The root loads a sub-command's module only when it is used (or listed, by ``--help``), so
``dpbench workload …`` does not import the twin or the server. A module that fails to import
fails the command loudly, naming the module; it is never left out in silence.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import typer
from typer.core import TyperGroup

try:
    from typer._click.exceptions import ClickException  # typer ≥ 0.29 carries its own click
except ImportError:  # pragma: no cover - an older typer runs on click
    from click import ClickException

from dpbench.core.cli_help import Typer

# name → (module, attribute): a `typer.Typer` (a group) or a function (one command),
# in the order `dpbench --help` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "releases": ("dpbench.mainjob.releases_cli", "releases_command"),
    "source-history": ("dpbench.mainjob.releases_cli", "source_history_command"),
    "bench": ("dpbench.mainjob.job", "bench_command"),
    "asv-config": ("dpbench.mainjob.asvconf", "asv_config_command"),
    "compare": ("dpbench.dashboard.compare_cli", "compare_command"),
    "env": ("dpbench.envs.cli", "app"),
    "placement": ("dpbench.placement.cli", "app"),
    "workload": ("dpbench.workload.cli", "app"),
    "twin": ("dpbench.twin.cli", "app"),
    "kernels": ("dpbench.kernels.cli", "app"),
    "server": ("dpbench.server.cli", "app"),
    "dashboard": ("dpbench.dashboard.cli", "app"),
    "change": ("dpbench.mainjob.changes_cli", "app"),
}


def load(name: str) -> Any:
    """The click command of ``dpbench NAME``, its module imported now."""
    module, attr = COMMANDS[name]
    try:
        target = getattr(importlib.import_module(module), attr)
    except Exception as exc:
        raise ClickException(
            f"`dpbench {name}` is unavailable: importing {module} failed with "
            f"{type(exc).__name__}: {exc} (`python -c 'import {module}'` shows where)"
        ) from exc
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class _Lazy(Mapping[str, Any]):
    """The root's sub-commands: every name known at once, each loaded when looked up."""

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)

    def __getitem__(self, name: str) -> Any:
        if name not in COMMANDS:
            raise KeyError(name)
        return load(name)


class LazyGroup(TyperGroup):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _Lazy()  # type: ignore[assignment]

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)


app = Typer(
    cls=LazyGroup,
    name="dpbench",
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Where SGLang's PrefillDelayer negotiation sits, and what it does to DP-attention serving.

    Start with `dpbench workload list`, `dpbench twin run SPEC` or `dpbench bench`."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
