"""Help that reads at 80 columns: the typer app and command class every dpbench command uses.

Usage lines and option lists show what a value is, never the Python type that holds it:
an argument by its name (``SPEC``), a choice by its values (``{drop|truncate}``), a number
by what it counts (``N``, ``SECONDS``). An option or argument declared without a
``metavar`` gets one from the house rules below, so one rule serves every command,
schema-generated or not.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

# a parameter whose name is or ends in the first takes the second (first match wins): the
# same name means the same kind of value in every command
_BY_NAME: tuple[tuple[str, str], ...] = (
    ("seed", "N"),
    ("timeout", "SECONDS"),
    ("_ms", "MS"),
    ("_s", "SECONDS"),
    ("_scale", "X"),
    ("_dir", "DIR"),
    ("_addr", "HOST:PORT"),
    ("model_path", "DIR"),
    ("calibration", "FILE"),
    ("sglang", "VERSION"),
    ("extra_args", "FLAG"),
    ("model", "MODEL"),
    ("python", "PYTHON"),
    ("pythonpath", "PATHS"),
    ("backend", "NAME"),
    ("port", "PORT"),
    ("host", "HOST"),
)
_BY_TYPE: dict[type, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def choices(values: Iterable[Any]) -> str:
    """A choice's metavar: ``{a|b|c}``."""
    return "{" + "|".join(str(v.value if isinstance(v, enum.Enum) else v) for v in values) + "}"


def _annotation(param: Any) -> Any:
    """The parameter's value type (a list's element type), across typer versions."""
    desc = getattr(param, "type_descriptor", None)
    hint = desc.annotation if desc is not None else None
    if typing.get_origin(hint) in (list, tuple):
        hint = typing.get_args(hint)[0]
    return hint


def _choices(param: Any) -> tuple[Any, ...] | None:
    desc = getattr(param, "type_descriptor", None)
    found = getattr(desc, "choices", None) if desc is not None else None
    if found is None:
        found = getattr(getattr(param, "type", None), "choices", None)  # click before typer 0.29
    return tuple(found) if found else None


def default_metavar(param: Any) -> str | None:
    """What a parameter's value is called in help, when its declaration does not say."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    found = _choices(param)
    if found:
        return choices(found)
    name = param.name or ""
    if param.param_type_name == "argument":
        return name.upper()
    for suffix, word in _BY_NAME:
        if name == suffix or name.endswith(suffix):
            return word
    hint = _annotation(param)
    if hint is None:  # click's own type name (an older typer)
        return {"integer": "N", "float": "NUMBER", "path": "PATH"}.get(
            getattr(getattr(param, "type", None), "name", ""), "TEXT"
        )
    return next((word for t, word in _BY_TYPE.items() if hint is t), "TEXT")


class Command(TyperCommand):
    """A typer command whose usage and option list name values, not their Python types."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None:
                param.metavar = default_metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = param.metavar or (param.name or "").upper()
                name = name if param.required else f"[{name}]"
                pieces.append(name)  # a repeated argument's help says so; no "..." at all
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append((param.metavar or (param.name or "").upper(), record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class Typer(typer.Typer):
    """A dpbench command group: plain help (full option names at 80 columns), help when run
    bare, and every command a :class:`Command`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("rich_markup_mode", None)
        kwargs.setdefault("no_args_is_help", True)
        kwargs.setdefault("subcommand_metavar", "COMMAND [ARGS]")  # click's own ends in "..."
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or Command, **kwargs)
