"""`dpbench change …`: add a change to SGLang (a patch or a source tree) as a commit of the release history."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dpbench.changes import ChangeError
from dpbench.changes import history as changes
from dpbench.core.cli_help import Typer

app = Typer(
    help="Benchmark a change to SGLang as a commit.\n\n"
    "A change is a patch or a local source tree on a release. It becomes a child commit of "
    "that release in the release history, and every tier takes its name."
)
EXIT_BAD_INPUT = 2
HistoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--history",
        metavar="DIR",
        help="the release history (default: $DPBENCH_HISTORY, else "
        ".cache/sglang-releases; built when missing)",
    ),
]


def _fail(command: str, exc: Exception) -> typer.Exit:
    print(f"dpbench change {command}: {exc}", file=sys.stderr)
    return typer.Exit(EXIT_BAD_INPUT)


def _history(repo: Path | None) -> Path:
    from dpbench.mainjob import releases

    repo = Path(repo or releases.default_repo())
    if not (repo / ".git").exists():
        releases.build(repo=repo)
        print(f"built the release history at {repo}", file=sys.stderr)
    return repo


def _read_patch(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ChangeError(f"cannot read the patch {path}: {exc.strerror}") from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ChangeError(f"the patch {path} is not UTF-8 text") from None
    return data


def _source(base: str, patch: Path | None, tree: Path | None) -> tuple[bytes, dict, dict]:
    """(the patch bytes, the record's source, extra record fields) from --patch or --tree."""
    from dpbench.changes.diff import diff_tree
    from dpbench.envs.venv import wheel_path

    if (patch is None) == (tree is None):
        raise ChangeError("give exactly one of --patch FILE and --tree DIR")
    if patch is not None:
        return _read_patch(patch), {"kind": "patch", "file": patch.name}, {}
    assert tree is not None
    text, kept = diff_tree(tree.resolve(), wheel_path(base))
    if not text:
        raise ChangeError(f"{tree} holds SGLang {base}'s sources unchanged: nothing to benchmark")
    source = {"kind": "tree", "path": str(tree.resolve()), "git_commit": _tree_commit(tree)}
    return text.encode(), source, {"wheel_only_files": kept}


def _tree_commit(tree: Path) -> str | None:
    import subprocess

    proc = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


@app.command()
def add(
    name: Annotated[
        str,
        typer.Argument(metavar="NAME", help="the change's name (its tag and branch change/NAME)"),
    ],
    base: Annotated[
        str, typer.Option(metavar="VERSION", help="the release it changes, e.g. 0.5.17")
    ],
    patch: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="a unified diff with python/sglang/ paths (git diff in an SGLang "
            "clone) or sglang/ paths (the installed package)",
        ),
    ] = None,
    tree: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="a local SGLang checkout: its python/sglang is the change"
        ),
    ] = None,
    history: HistoryOpt = None,
    env: Annotated[
        bool,
        typer.Option(
            "--env/--no-env",
            help="build its environment now (and check that "
            "SGLang's scheduler imports); --no-env leaves that to its first run",
        ),
    ] = True,
) -> None:
    """Add a change as a child commit of its base release.

    It installs as its base does (the base's wheel and pins), with its files laid over them."""
    from dpbench.changes.record import check_name, prepare
    from dpbench.envs.change_env import change_env_path, ensure_change_env
    from dpbench.envs.venv import wheel_path

    try:
        check_name(name)
        repo = _history(history)
        changes.check_free(repo, name)
        changes.base_commit(repo, base)
        data, source, extra = _source(base, patch, tree)
        change, _ = prepare(name, base, data.decode("utf-8"), source, wheel_path(base), **extra)
        started = time.perf_counter()
        if env:
            ensure_change_env(change, data)
        env_s = time.perf_counter() - started
        sha = changes.commit_change(repo, change, data)
    except ChangeError as exc:
        raise _fail("add", exc) from None
    out = Console(markup=False, highlight=False, soft_wrap=True)
    out.print(f"change {name}: commit {sha[:12]} on {base} (branch change/{name}, tag {name})")
    _print_change(out, change, sha)
    if env:
        out.print(f"environment {change_env_path(change)} ready in {env_s:.0f} s")


def _print_change(out: Console, change, sha: str) -> None:
    from dpbench.changes.diff import PATH_FORMS

    src = change.source
    where = src.get("file") if src["kind"] == "patch" else src.get("path")
    p = change.placement
    out.print(
        f"  source      {src['kind']} {where}"
        + (f" (git {src['git_commit'][:12]})" if src.get("git_commit") else "")
    )
    out.print(f"  sha256      {change.patch_sha256}")
    out.print(f"  paths       {PATH_FORMS.get(change.path_form, change.path_form)}")
    out.print(f"  files       {', '.join(change.files)}")
    if change.skipped:
        out.print(f"  left out    {', '.join(change.skipped)} (outside the sglang package)")
    if change.wheel_only_files:
        out.print(f"  kept        {change.wheel_only_files} files of the wheel the tree lacks")
    out.print(
        f"  placement   {p.get('label')} (static, changed code): KV exits before negotiation "
        f"{p.get('kv_exits_before_negotiation')}, add_chunked_req negotiates "
        f"{p.get('chunked_negotiates')}"
    )


@app.command("list")
def list_(history: HistoryOpt = None) -> None:
    """List the changes: base, commit, source and placement.

    Each row also gives the patch digest and the environment."""
    from dpbench.envs.change_env import change_env_path
    from dpbench.mainjob import releases

    repo = Path(history or releases.default_repo())
    stored = changes.list_changes(repo)
    if not stored:
        print(f"no changes in {repo} (add one with `dpbench change add`)")
        return
    rows = [("name", "base", "commit", "source", "sha256", "placement", "environment")]
    for s in stored:
        c = s.change
        built = (change_env_path(c) / "dpbench-env.json").exists()
        where = c.source.get("file") or c.source.get("path")
        rows.append(
            (
                c.name,
                c.base,
                s.commit[:12],
                f"{c.source['kind']} {where}",
                c.patch_sha256[:12],
                str(c.placement.get("label")),
                "built" if built else "not built",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


@app.command()
def show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the change's name")],
    history: HistoryOpt = None,
    patch: Annotated[bool, typer.Option("--patch", help="also print the patch")] = False,
) -> None:
    """Show one change: commit, source, files and placement.

    It also gives the patch digest and the environment."""
    from dpbench.envs.change_env import change_env_path
    from dpbench.mainjob import releases

    repo = Path(history or releases.default_repo())
    try:
        stored = changes.read_change(repo, name)
    except ChangeError as exc:
        raise _fail("show", exc) from None
    out = Console(markup=False, highlight=False, soft_wrap=True)
    c = stored.change
    out.print(f"change {c.name}: commit {stored.commit} on {c.base} (branch change/{c.name})")
    _print_change(out, c, stored.commit)
    env = change_env_path(c)
    state = "built" if (env / "dpbench-env.json").exists() else "not built yet"
    out.print(f"  environment {env} ({state})")
    if patch:
        sys.stdout.write(stored.patch.decode("utf-8"))
