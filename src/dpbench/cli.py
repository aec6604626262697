"""`dpbench …`: the command line; each area contributes one sub-command group."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    rich_markup_mode=None,  # click's plain help: full option names at 80 columns
    name="dpbench",
    help="Where SGLang's PrefillDelayer negotiation sits, and what it does to DP-attention serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Where SGLang's PrefillDelayer negotiation sits, and what it does to DP-attention serving."""


# (sub-command, module holding a `typer.Typer` named `app`)
_GROUPS: list[tuple[str, str]] = [
    ("env", "dpbench.envs.cli"),
    ("placement", "dpbench.placement.cli"),
    ("workload", "dpbench.workload.cli"),
    ("twin", "dpbench.twin.cli"),
    ("kernels", "dpbench.kernels.cli"),
    ("server", "dpbench.server.cli"),
    ("dashboard", "dpbench.dashboard.cli"),
    ("change", "dpbench.mainjob.changes_cli"),
]

for _name, _module in _GROUPS:
    try:
        _sub = importlib.import_module(_module).app
    except ModuleNotFoundError as exc:  # an area not built yet must not break the others
        if exc.name is None or not _module.startswith(exc.name):
            raise
        continue
    app.add_typer(_sub, name=_name)


# Top-level commands: (name, module, function)
_COMMANDS: list[tuple[str, str, str]] = [
    ("releases", "dpbench.mainjob.releases_cli", "releases_command"),
    ("source-history", "dpbench.mainjob.releases_cli", "source_history_command"),
    ("bench", "dpbench.mainjob.job", "bench_command"),
    ("asv-config", "dpbench.mainjob.asvconf", "asv_config_command"),
    ("compare", "dpbench.dashboard.compare_cli", "compare_command"),
]

for _name, _module, _func in _COMMANDS:
    try:
        _fn = getattr(importlib.import_module(_module), _func)
    except ModuleNotFoundError as exc:
        if exc.name is None or not _module.startswith(exc.name):
            raise
        continue
    app.command(_name)(_fn)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
