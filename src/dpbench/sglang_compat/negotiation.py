"""Where ``negotiate_should_allow_prefill`` sits among ``add_one_req``'s KV-budget exits, read from SGLang's source.

The static half of the placement tier, and the "detected placement" every tier's run
result carries (:mod:`.provenance`); it lives here because it reads SGLang's own code.

Reads ``PrefillAdder`` in a ``schedule_policy.py`` with :mod:`ast` (nothing is imported)
and walks ``add_one_req`` in source order, descending into ``if`` / ``with`` / ``for`` /
``try`` blocks (a condition or context expression before its body; nested function
definitions are skipped: they do not run in line). Along the way it notes:

- ``kv-exit``: ``return AddReqResult.NO_TOKEN``;
- ``admission``: a call ``self.m(req, ...)`` handing the request to a ``PrefillAdder``
  method that can itself return ``AddReqResult.NO_TOKEN`` (directly or through methods
  it calls) and never negotiates, such as 0.5.23's ``_select_prefill_admission``: the
  budget-admission call that produces the NO_TOKEN exit. (``self.budget_state()``, which
  judges the adder's leftover budget for the *next* candidate, is not passed the request
  and is not counted.);
- ``delegation``: a call handing the request to a method that negotiates on its own
  path (``add_one_req_ignore_eos``), recorded but not counted as an exit;
- ``negotiation``: a call to ``*.negotiate_should_allow_prefill``.

KV-budget exits before negotiation = kv-exits + admission calls seen before the first
negotiation. Label: ``early`` (a negotiation, no exit before it), ``post-kv`` (a
negotiation after at least one exit), ``absent`` (``add_one_req`` never negotiates),
``unknown`` (the source does not parse, or has no ``PrefillAdder.add_one_req``).
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from dpbench.sglang_compat.source import schedule_policy_path

Label = Literal["early", "post-kv", "absent", "unknown"]
NEGOTIATE = "negotiate_should_allow_prefill"
ADDER_CLASS = "PrefillAdder"


@dataclass(frozen=True)
class Event:
    kind: Literal["kv-exit", "admission", "delegation", "negotiation"]
    line: int
    detail: str


@dataclass(frozen=True)
class StaticPlacement:
    """What the AST of ``PrefillAdder`` says about the negotiation's placement."""

    label: Label
    kv_exits_before_negotiation: int | None
    kv_exits_after_negotiation: int | None
    negotiation_line: int | None
    chunked_negotiates: bool | None
    events: list[Event] = field(default_factory=list)
    reason: str = ""
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_no_token(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "NO_TOKEN"
        and (isinstance(node.value, ast.Name) and node.value.id == "AddReqResult")
    )


def _self_call(node: ast.AST) -> str | None:
    """``m`` for a call ``self.m(...)``, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ):
        return node.func.attr
    return None


def _is_negotiation(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == NEGOTIATE
    )


def _walk_no_defs(node: ast.AST):
    """ast.walk that does not enter nested function/lambda/class definitions."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        for child in ast.iter_child_nodes(cur):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            stack.append(child)


class _Methods:
    """Per-method facts about a class: which can return NO_TOKEN, which negotiate (transitively)."""

    def __init__(self, cls: ast.ClassDef):
        self.defs = {
            n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self._memo: dict[tuple[str, str], bool] = {}

    def _has(self, name: str, what: str, seen: frozenset[str] = frozenset()) -> bool:
        key = (name, what)
        if key in self._memo:
            return self._memo[key]
        fn = self.defs.get(name)
        if fn is None or name in seen:
            return False
        found = False
        for node in _walk_no_defs(fn):
            if what == "no_token":
                found = isinstance(node, ast.Return) and _is_no_token(node.value)
            else:
                found = _is_negotiation(node)
            if not found and (callee := _self_call(node)) is not None and callee in self.defs:
                found = self._has(callee, what, seen | {name})
            if found:
                break
        self._memo[key] = found
        return found

    def can_return_no_token(self, name: str) -> bool:
        return self._has(name, "no_token")

    def negotiates(self, name: str) -> bool:
        return self._has(name, "negotiates")


def _own_exprs(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates itself, before any nested statement list."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    if hasattr(ast, "TryStar") and isinstance(stmt, ast.TryStar):
        return []
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    return [stmt]


def _child_blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    if isinstance(stmt, ast.Match):
        return [case.body for case in stmt.cases]
    blocks = []
    for name in ("body", "handlers", "orelse", "finalbody"):
        value = getattr(stmt, name, None)
        if not value:
            continue
        if name == "handlers":
            blocks.extend(h.body for h in value)
        else:
            blocks.append(value)
    return blocks


def _passes(call: ast.Call, name: str) -> bool:
    """Whether ``call`` hands the variable ``name`` (the request) to the callee."""
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(a, ast.Name) and a.id == name for a in args)


def _events(body: list[ast.stmt], methods: _Methods, req: str) -> list[Event]:
    out: list[Event] = []
    for stmt in body:
        found: list[tuple[int, int, Event]] = []
        for expr in _own_exprs(stmt):
            for node in _walk_no_defs(expr):
                pos = (getattr(node, "lineno", stmt.lineno), getattr(node, "col_offset", 0))
                if _is_negotiation(node):
                    found.append((*pos, Event("negotiation", pos[0], NEGOTIATE)))
                elif (
                    (callee := _self_call(node)) is not None
                    and callee in methods.defs
                    and _passes(node, req)
                ):
                    if methods.negotiates(callee):
                        found.append(
                            (*pos, Event("delegation", pos[0], f"self.{callee}({req}, ...)"))
                        )
                    elif methods.can_return_no_token(callee):
                        found.append(
                            (*pos, Event("admission", pos[0], f"self.{callee}({req}, ...)"))
                        )
        found.sort(key=lambda t: (t[0], t[1]))
        out.extend(e for _, _, e in found)
        # The return itself happens after its value is evaluated.
        if isinstance(stmt, ast.Return) and _is_no_token(stmt.value):
            out.append(Event("kv-exit", stmt.lineno, "return AddReqResult.NO_TOKEN"))
        for block in _child_blocks(stmt):
            out.extend(_events(block, methods, req))
    return out


def analyse_source(source: str, *, origin: str = "<source>") -> StaticPlacement:
    """Placement of the negotiation in ``PrefillAdder.add_one_req`` / ``add_chunked_req`` of ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticPlacement(
            "unknown", None, None, None, None, reason=f"does not parse: {exc}", source=origin
        )
    cls = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == ADDER_CLASS), None
    )
    if cls is None:
        return StaticPlacement(
            "unknown", None, None, None, None, reason=f"no class {ADDER_CLASS}", source=origin
        )
    methods = _Methods(cls)
    fn = methods.defs.get("add_one_req")
    if fn is None:
        return StaticPlacement(
            "unknown",
            None,
            None,
            None,
            None,
            reason=f"{ADDER_CLASS} has no add_one_req",
            source=origin,
        )
    chunked = methods.defs.get("add_chunked_req")
    chunked_negotiates = (
        None if chunked is None else any(_is_negotiation(n) for n in _walk_no_defs(chunked))
    )

    params = [a.arg for a in fn.args.args if a.arg != "self"]
    req = params[0] if params else "req"
    events = _events(fn.body, methods, req)
    first = next((i for i, e in enumerate(events) if e.kind == "negotiation"), None)
    exits = [e.kind in ("kv-exit", "admission") for e in events]
    if first is None:
        return StaticPlacement(
            "absent",
            None,
            sum(exits),
            None,
            chunked_negotiates,
            events,
            reason="add_one_req never calls negotiate_should_allow_prefill",
            source=origin,
        )
    before, after = sum(exits[:first]), sum(exits[first + 1 :])
    label: Label = "post-kv" if before else "early"
    return StaticPlacement(
        label, before, after, events[first].line, chunked_negotiates, events, source=origin
    )


def analyse_file(path: str | Path) -> StaticPlacement:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        return StaticPlacement(
            "unknown", None, None, None, None, reason=f"cannot read {p}: {exc}", source=str(p)
        )
    return analyse_source(text, origin=str(p))


def analyse_installed() -> StaticPlacement:
    """Placement in the installed SGLang's ``schedule_policy.py`` (located, not imported)."""
    try:
        path = schedule_policy_path()
    except FileNotFoundError as exc:
        return StaticPlacement("unknown", None, None, None, None, reason=str(exc))
    return analyse_file(path)
