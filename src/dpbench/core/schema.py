"""One definition per option: a tier's frozen dataclass is the schema its CLI, its job files and
its results are built from.

A field of a schema dataclass is an option. Its ``metadata`` says how it shows on the
command line (all optional):

- ``help``: the option's help text;
- ``flag``: the option's declaration if not ``--field-name`` (``"--dp"``, or
  ``"--delayer/--no-delayer"`` for a boolean with both spellings);
- ``metavar``: what its value is called in help (default: the choices, or
  :mod:`dpbench.core.cli_help`'s rule for its name and type);
- ``cli: False``: not on the command line (set by the command itself);
- ``prefix``: on a nested schema field, what goes before its fields' names.

A nested dataclass field's own fields are options too, flattened (prefixed with ``prefix``).
:func:`options` lists them; :func:`build` makes the schema from flat option values;
:func:`to_dict` / :func:`from_dict` carry an instance through a JSON file, rejecting unknown
keys; :func:`with_options` adds a schema's options to a typer command, which receives the
built instance; :func:`parse_overrides` reads ``name=value`` settings against the schema.
Every check of a value stays in the dataclass's ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal


class SchemaError(ValueError):
    """A value or key that the schema does not have or cannot take."""


class InputError(ValueError):
    """Bad input whose message names inputs by field, so each caller can say them its own way.

    ``template`` writes an input as ``{field_name}``; ``str()`` spells it as :attr:`SPELLING`
    says (a spec's key, for instance), :meth:`spelled` as the caller says (a command's flag:
    :func:`cli_names`). Braces around anything but a known field stay as they are."""

    SPELLING: Mapping[str, str] = {}

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.spelled({}))

    def spelled(self, names: Mapping[str, str]) -> str:
        known = {**self.SPELLING, **names}
        return re.sub(r"\{(\w+)\}", lambda m: known.get(m[1], m[0]), self.template)


@dataclass(frozen=True)
class Option:
    """One command-line option of a schema: its place in the (nested) dataclass and its type."""

    path: tuple[str, ...]  # field names from the top schema down
    name: str  # the flat name: the CLI parameter and the ``name=value`` key
    hint: Any  # the resolved type, Optional unwrapped in ``base``
    base: type  # int, float, str, bool or tuple
    optional: bool
    choices: tuple[str, ...] | None
    default: Any
    help: str
    flag: str | None
    cli: bool
    argument: bool = False  # a positional typer Argument rather than an option
    metavar: str | None = None  # what help calls its value

    @property
    def decls(self) -> list[str]:
        if self.flag:
            return [self.flag]
        dashed = "--" + self.name.replace("_", "-")
        return [f"{dashed}/--no-{dashed[2:]}" if self.base is bool else dashed]


def _unwrap(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def options(cls: type, *, _path: tuple[str, ...] = (), _prefix: str = "") -> list[Option]:
    """Every option of the schema ``cls``, nested schemas flattened, in field order."""
    hints = typing.get_type_hints(cls)
    out: list[Option] = []
    for f in dataclasses.fields(cls):
        hint, optional = _unwrap(hints[f.name])
        if dataclasses.is_dataclass(hint):
            out += options(
                hint, _path=(*_path, f.name), _prefix=_prefix + f.metadata.get("prefix", "")
            )
            continue
        choices = None
        if typing.get_origin(hint) is Literal:
            choices = tuple(str(a) for a in typing.get_args(hint))
            base: type = str
        elif typing.get_origin(hint) is tuple:
            base = tuple
        elif hint in (int, float, str, bool):
            base = hint
        else:
            raise TypeError(
                f"{cls.__name__}.{f.name}: an option type the schema cannot carry: {hint}"
            )
        out.append(
            Option(
                path=(*_path, f.name),
                name=_prefix + f.name,
                hint=hint,
                base=base,
                optional=optional,
                choices=choices,
                default=_default(f),
                help=f.metadata.get("help", ""),
                flag=f.metadata.get("flag"),
                cli=f.metadata.get("cli", True),
                argument=f.metadata.get("argument", False),
                metavar=f.metadata.get("metavar"),
            )
        )
    names = [o.name for o in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TypeError(f"{cls.__name__}: options named twice once flattened: {sorted(dup)}")
    return out


def _nested(cls: type, flat: Mapping[str, Any], opts: list[Option], depth: int) -> Any:
    kwargs: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint, _ = _unwrap(hints[f.name])
        if dataclasses.is_dataclass(hint):
            inner = [o for o in opts if len(o.path) > depth + 1 and o.path[depth] == f.name]
            kwargs[f.name] = _nested(hint, flat, inner, depth + 1)
            continue
        opt = next(o for o in opts if len(o.path) == depth + 1 and o.path[depth] == f.name)
        if opt.name in flat:
            kwargs[f.name] = flat[opt.name]
    return cls(**kwargs)


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """The schema ``cls`` from flat option values (missing ones take their defaults); an
    unknown name fails naming the known ones. The dataclass checks the values."""
    opts = options(cls)
    known = {o.name for o in opts}
    unknown = sorted(set(values) - known)
    if unknown:
        raise SchemaError(
            f"{cls.__name__} has no option {', '.join(map(repr, unknown))}; "
            f"options: {', '.join(sorted(known))}"
        )
    values = {
        k: tuple(v) if next(o for o in opts if o.name == k).base is tuple and v is not None else v
        for k, v in values.items()
    }
    return _nested(cls, values, opts, 0)


def flat_values(obj: Any) -> dict[str, Any]:
    """``{option name: value}`` of an instance: :func:`build`'s inverse."""
    out = {}
    for o in options(type(obj)):
        v = obj
        for part in o.path:
            v = getattr(v, part)
        out[o.name] = v
    return out


def replace(obj: Any, **values: Any) -> Any:
    """``obj`` with the given flat options changed (nested ones too), checked again."""
    return build(type(obj), {**flat_values(obj), **values})


def to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-able dict of an instance, nested schemas nested (tuples become lists)."""
    return dataclasses.asdict(obj)


def from_dict(cls: type, data: Mapping[str, Any], *, where: str = "") -> Any:
    """The schema ``cls`` from :func:`to_dict`'s output; an unknown or misplaced key fails."""
    if not isinstance(data, Mapping):
        raise SchemaError(f"{where or cls.__name__}: want a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SchemaError(
            f"{where or cls.__name__}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"{cls.__name__} has {', '.join(fields)}"
        )
    kwargs = {}
    for name, value in data.items():
        hint, _ = _unwrap(hints[name])
        if dataclasses.is_dataclass(hint) and value is not None:
            value = from_dict(hint, value, where=f"{where or cls.__name__}.{name}")
        elif typing.get_origin(hint) is tuple and value is not None:
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def _coerce(opt: Option, text: str) -> Any:
    """A ``name=value`` setting's value as the option's type."""
    if opt.optional and text.lower() in ("none", "null"):
        return None
    if opt.base is bool:
        low = text.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise SchemaError(f"{opt.name}= takes true or false, got {text!r}")
    if opt.choices is not None and text not in opt.choices:
        raise SchemaError(f"{opt.name}= takes one of {', '.join(opt.choices)}, got {text!r}")
    if opt.base is tuple:
        return tuple(x for x in text.split(" ") if x)
    try:
        return opt.base(text)
    except ValueError:
        raise SchemaError(
            f"{opt.name}= takes a{'n' if opt.base is int else ''} {opt.base.__name__}, got {text!r}"
        ) from None


def parse_overrides(cls: type, settings: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["dp_size=2", "record_timeline=false"]`` → flat option values of ``cls``, typed."""
    opts = {o.name: o for o in options(cls)}
    out: dict[str, Any] = {}
    for item in settings:
        name, eq, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or name not in opts:
            raise SchemaError(
                f"{item!r}: want NAME=VALUE with NAME one of {', '.join(sorted(opts))}"
            )
        out[name] = _coerce(opts[name], text.strip())
    return out


# -- typer ----------------------------------------------------------------------------------


def _typer_param(opt: Option) -> inspect.Parameter:
    import typer

    from dpbench.core.cli_help import choices

    hint: Any
    if opt.base is tuple:
        hint = list[str] | None
    elif opt.optional:
        hint = opt.base | None
    else:
        hint = opt.base
    text = opt.help
    metavar = opt.metavar or (choices(opt.choices) if opt.choices is not None else None)
    default = list(opt.default) if opt.base is tuple else opt.default
    if opt.argument:
        return inspect.Parameter(
            opt.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=Annotated[hint, typer.Argument(help=text, metavar=metavar)],
            **({} if default is dataclasses.MISSING else {"default": default}),
        )
    info = typer.Option(
        *opt.decls, help=text, metavar=metavar, show_default=opt.default is not None
    )
    return inspect.Parameter(
        opt.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[hint, info]
    )


def cli_names(cls: type) -> dict[str, str]:
    """``{field: how the command line names it}``: an option's flag (``--rate-scale``), an
    argument's metavar (``PATH``)."""
    return {
        o.name: (o.metavar or o.name.upper()) if o.argument else o.decls[0].split("/")[0]
        for o in options(cls)
    }


def with_options(
    cls: type, *, param: str = "config", exclude: tuple[str, ...] = (), error: type = SchemaError
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a typer command: ``cls``'s options (all but ``exclude`` and ``cli: False``
    ones) join its parameters, and it is called with ``param=`` the instance built from
    them. A value the schema rejects (``error`` or :class:`SchemaError`) is a usage error."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        import typer

        opts = [o for o in options(cls) if o.cli and o.name not in exclude]
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != param]
        clash = {p.name for p in own} & {o.name for o in opts}
        if clash:
            raise TypeError(f"{fn.__name__}: parameters named like {cls.__name__} options: {clash}")
        added = [_typer_param(o) for o in opts if o.argument]
        added += [_typer_param(o) for o in opts if not o.argument]

        def command(**kwargs: Any) -> Any:
            values = {o.name: kwargs.pop(o.name) for o in opts}
            try:
                built = build(cls, values)
            except (SchemaError, error) as exc:
                text = exc.spelled(cli_names(cls)) if isinstance(exc, InputError) else str(exc)
                raise typer.BadParameter(text) from None
            return fn(**kwargs, **{param: built})

        command.__name__ = fn.__name__
        command.__qualname__ = fn.__qualname__
        command.__doc__ = fn.__doc__
        command.__module__ = fn.__module__
        positional = [p for p in [*added, *own] if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        keyword = [p for p in [*own, *added] if p.kind is inspect.Parameter.KEYWORD_ONLY]
        params = [*positional, *keyword]
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


def metadata_of(cls: type, name: str) -> Mapping[str, Any]:
    """Field ``name``'s metadata in schema ``cls``: an option another schema shares (same help, flag)."""
    return next(f.metadata for f in dataclasses.fields(cls) if f.name == name)
