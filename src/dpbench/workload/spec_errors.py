"""Pydantic validation errors as readable text: every problem, each naming field, value found and what is allowed."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError


def _unwrap(annotation: Any) -> list[Any]:
    """The BaseModel classes an annotation can hold (through Annotated, Optional, unions, lists)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _tag_of(cls: type[BaseModel]) -> str | None:
    for key in ("kind", "process"):
        field = cls.model_fields.get(key)
        if field is not None:
            return typing.get_args(field.annotation)[0]
    return None


def _classes_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[Any]:
    """The model classes that pydantic's location ``loc`` (tags included) can point into."""
    current: list[Any] = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        tagged = [c for c in current if _tag_of(c) == part]
        if len(current) > 1 and tagged:
            current = tagged
            continue
        nxt: list[Any] = []
        for cls in current:
            field = cls.model_fields.get(part)
            if field is not None:
                nxt.extend(_unwrap(field.annotation))
        if not nxt:
            return []
        current = nxt
    return current


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    current = _classes_at(root, loc)
    return current[0] if len(current) == 1 else None


def _display_loc(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """``input_len.sigma`` for pydantic's ``('input_len', 'lognormal', 'sigma')``: the tag that
    pydantic puts in the location of a discriminated union is dropped (nobody wrote it)."""
    shown = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            shown += f"[{part}]"
            continue
        choices = _classes_at(root, loc[:i])
        if len(choices) > 1 and part in {_tag_of(c) for c in choices}:
            continue
        shown += f".{part}" if shown else str(part)
    return shown or "(top level)"


def _allowed_for(err: dict[str, Any], root: type[BaseModel]) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind in ("extra_forbidden", "missing"):
        cls = _model_at(root, loc[:-1])
        if cls is not None:
            names = [n for n in cls.model_fields if n not in ("kind", "process")]
            req = [n for n, f in cls.model_fields.items() if f.is_required()]
            return f"fields allowed here: {', '.join(names)} (required: {', '.join(req)})"
    ctx = err.get("ctx") or {}
    if kind == "union_tag_invalid" or kind == "union_tag_not_found":
        disc = ctx.get("discriminator", "kind").strip("'")
        tags = ctx.get("expected_tags") or ", ".join(
            f"'{t}'" for t in (_tag_of(c) for c in _classes_at(root, loc)) if t
        )
        return f"`{disc}` must be one of {tags}"
    if kind == "literal_error":
        return f"allowed: {ctx.get('expected')}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return err["msg"].replace("Input should be", "allowed: a value")
    if kind == "string_pattern_mismatch":
        return "allowed: lower-case letters, digits and '-', starting with a letter or digit"
    if kind in ("too_short", "too_long"):
        return err["msg"].replace("List should have", "allowed: a list with")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return "allowed: " + err["msg"].replace("Input should be ", "")
    return ""


def describe_problem(err: dict[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error as "`field`: found <value>; <what is allowed>" (no source prefix)."""
    where = _display_loc(root, tuple(err["loc"]))
    kind = err["type"]
    if kind == "value_error":
        text = str((err.get("ctx") or {}).get("error", err["msg"]))
        return text if not err["loc"] else f"`{where}`: {text}"
    if kind == "missing":
        return f"`{where}` is required but missing; {_allowed_for(err, root)}"
    if kind == "extra_forbidden":
        return f"`{where}` is not a known field (found {err['input']!r}); {_allowed_for(err, root)}"
    allowed = _allowed_for(err, root) or err["msg"]
    return f"`{where}`: found {err['input']!r}; {allowed}"


def validation_problems(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """Every problem pydantic found, each naming its field, the value found and what is allowed."""
    return [describe_problem(err, root) for err in exc.errors(include_url=False)]


def format_validation_error(exc: ValidationError, source: str, root: type[BaseModel]) -> str:
    """The problems as text: one line for one problem, else a count and one line per problem."""
    return format_problems(validation_problems(exc, root), source)


def format_problems(problems: list[str], source: str) -> str:
    if len(problems) == 1:
        return f"{source}: {problems[0]}"
    return f"{source}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)
