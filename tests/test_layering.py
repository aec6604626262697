"""The package layering of src/dpbench: who may import whom, and no import circle.

Read from the source (every ``import`` statement, function-local ones included), never
from a list kept beside it. Each package's ``__init__`` docstring says what it may import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# package -> the dpbench packages it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # the tiers never reach up into the dashboard or the main job
    "dpbench.placement": ("dpbench.dashboard", "dpbench.mainjob"),
    "dpbench.twin": ("dpbench.dashboard", "dpbench.mainjob"),
    "dpbench.kernels": ("dpbench.dashboard", "dpbench.mainjob"),
    "dpbench.server": ("dpbench.dashboard",),
    "dpbench.workload": ("dpbench.dashboard", "dpbench.mainjob", "dpbench.twin", "dpbench.server"),
    "dpbench.metrics": ("dpbench.dashboard", "dpbench.mainjob", "dpbench.twin", "dpbench.server"),
    # a change is a record and a patch: no environment, tier or job behind it
    "dpbench.changes": (
        "dpbench.dashboard",
        "dpbench.mainjob",
        "dpbench.envs",
        "dpbench.twin",
        "dpbench.server",
        "dpbench.placement",
    ),
}
# packages that import nothing of dpbench outside themselves (plus what is listed)
LEAVES: dict[str, tuple[str, ...]] = {
    "dpbench.sglang_compat": (),
    "dpbench.core": (),
}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The dpbench modules ``path`` imports anywhere in its body (``from a import b`` counts
    ``a.b`` where that is a module, else ``a``); ``if TYPE_CHECKING:`` blocks are skipped."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out.update(subs or {node.module})
    return {m for m in out if m in known}


def graph(src: Path = SRC) -> dict[str, set[str]]:
    files = {module_name(p, src): p for p in src.rglob("*.py")}
    known = set(files)
    return {m: imports_of(p, known) - {m} for m, p in files.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def violations(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(g.items()):
        for pkg, banned in FORBIDDEN.items():
            if mod.endswith(".cli") and banned != FORBIDDEN["dpbench.workload"]:
                # a tier's command line may read the main job's release list
                banned = tuple(b for b in banned if b != "dpbench.mainjob")
            if mod == pkg or mod.startswith(pkg + "."):
                bad += [
                    f"{mod} imports {d}"
                    for d in sorted(deps)
                    if any(d == b or d.startswith(b + ".") for b in banned)
                ]
        for pkg, allowed in LEAVES.items():
            if mod == pkg or mod.startswith(pkg + "."):
                bad += [
                    f"{mod} imports {d} (a leaf package)"
                    for d in sorted(deps)
                    if not (d == pkg or d.startswith(pkg + "."))
                    and not any(d == a or d.startswith(a + ".") for a in allowed)
                ]
    return bad


def test_no_import_circle_in_src() -> None:
    assert cycles(graph()) == []


def test_layering_holds() -> None:
    assert violations(graph()) == []


def _copy_with(tmp_path: Path, rel: str, line: str) -> dict[str, set[str]]:
    import shutil

    dst = tmp_path / "src"
    shutil.copytree(SRC, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    target = dst / rel
    target.write_text(target.read_text() + f"\n\ndef _added():\n    {line}\n")
    return graph(dst)


@pytest.mark.parametrize(
    ("rel", "line", "expect"),
    [
        # an upward import: the twin reaching into the dashboard
        ("dpbench/twin/cost.py", "from dpbench.dashboard import compare", "imports"),
        # sglang_compat importing the rest of dpbench
        ("dpbench/sglang_compat/detect.py", "from dpbench.twin import cost", "leaf"),
        # a circle: the request record importing the generator that imports it
        ("dpbench/workload/request.py", "from dpbench.workload import trace", "circle"),
    ],
)
def test_the_checks_fail_on_a_deliberate_bad_import(
    tmp_path: Path, rel: str, line: str, expect: str
) -> None:
    g = _copy_with(tmp_path, rel, line)
    if expect == "circle":
        assert any("dpbench.workload.request" in c for c in cycles(g))
    else:
        assert violations(g), f"{line} in {rel} was not caught"
