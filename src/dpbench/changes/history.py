"""Change commits in the release-history repository: add one, list them, read one, replay them.

A change's commit is a child of its base's release commit, on branch ``change/NAME`` and
tagged ``NAME`` (release commits never move: ``main`` is untouched). Its tree is the
base's tree plus ``change.json`` and ``change.patch``; it is written with git's plumbing
(no checkout), authored by "dpbench change" one second after its base, so the same change
on the same base always gets the same hash (rebuilding the history keeps results attached).
Both refs are created in one ``git update-ref`` transaction: all or nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dpbench.changes import ChangeError
from dpbench.changes.record import Change

BRANCH_PREFIX = "refs/heads/change/"
RECORD_FILE = "change.json"
PATCH_FILE = "change.patch"
AUTHOR = {"name": "dpbench change", "email": "dpbench@localhost"}


@dataclass(frozen=True)
class StoredChange:
    change: Change
    patch: bytes
    commit: str


def _git(repo: Path, *args: str, stdin: bytes | None = None, env: dict | None = None) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise ChangeError(f"git {args[0]} failed in {repo}: {err[-1] if err else proc.returncode}")
    return proc.stdout.decode().strip()


def _ref(repo: Path, ref: str) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "-q", ref + "^{commit}"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or None


def require_history(repo: Path) -> None:
    if not (repo / ".git").exists():
        raise ChangeError(f"no release history at {repo}: build it with `dpbench releases`")


def known_bases(repo: Path) -> list[str]:
    tags = _git(repo, "tag", "--list", "v*", "--sort=version:refname").split()
    return [t.removeprefix("v") for t in tags]


def base_commit(repo: Path, base: str) -> str:
    sha = _ref(repo, f"refs/tags/v{base}")
    if sha is None:
        raise ChangeError(f"unknown base {base!r}; the history has {' '.join(known_bases(repo))}")
    return sha


def check_free(repo: Path, name: str) -> None:
    """ChangeError when ``name`` is taken by a change (or any tag) in the history."""
    for ref in (BRANCH_PREFIX + name, f"refs/tags/{name}"):
        if (sha := _ref(repo, ref)) is not None:
            raise ChangeError(
                f"a change named {name!r} already exists (commit {sha[:12]}); "
                "pick another name (dpbench change list)"
            )
    proc = subprocess.run(
        ["git", "check-ref-format", f"refs/tags/{name}"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ChangeError(f"change name {name!r} is not a valid git ref name")


def commit_change(repo: Path, change: Change, patch: bytes) -> str:
    """Write the change's commit on its base and create its branch and tag (atomically)."""
    check_free(repo, change.name)
    parent = base_commit(repo, change.base)
    record = (json.dumps(change.as_dict(), indent=2, sort_keys=True) + "\n").encode()
    entries = [_git(repo, "ls-tree", parent)]
    for fname, data in ((RECORD_FILE, record), (PATCH_FILE, patch)):
        blob = _git(repo, "hash-object", "-w", "--stdin", stdin=data)
        entries.append(f"100644 blob {blob}\t{fname}")
    tree = _git(repo, "mktree", stdin=("\n".join(entries) + "\n").encode())
    base_date = dt.datetime.fromisoformat(_git(repo, "log", "-1", "--format=%cI", parent))
    stamp = (base_date + dt.timedelta(seconds=1)).isoformat()
    ident = {
        "GIT_AUTHOR_NAME": AUTHOR["name"],
        "GIT_AUTHOR_EMAIL": AUTHOR["email"],
        "GIT_COMMITTER_NAME": AUTHOR["name"],
        "GIT_COMMITTER_EMAIL": AUTHOR["email"],
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_DATE": stamp,
    }
    message = f"change {change.name} on sglang {change.base}\n\n{_describe(change)}\n"
    sha = _git(repo, "commit-tree", tree, "-p", parent, "-m", message, env=ident)
    refs = f"create {BRANCH_PREFIX}{change.name} {sha}\ncreate refs/tags/{change.name} {sha}\n"
    _git(repo, "update-ref", "--stdin", stdin=refs.encode())
    return sha


def _describe(change: Change) -> str:
    src = change.source
    what = f"patch {src.get('file')}" if src["kind"] == "patch" else f"tree {src.get('path')}"
    return (
        f"{what} (sha256 {change.patch_sha256}); files: {', '.join(change.files)}; "
        f"placement (static): {change.placement.get('label')}"
    )


def read_change(repo: Path, name: str) -> StoredChange:
    sha = _ref(repo, BRANCH_PREFIX + name)
    if sha is None:
        have = ", ".join(list_names(repo)) or "none"
        raise ChangeError(f"no change named {name!r} in {repo}; changes: {have}")
    data = json.loads(_git(repo, "show", f"{sha}:{RECORD_FILE}"))
    patch = subprocess.run(
        ["git", "-C", str(repo), "show", f"{sha}:{PATCH_FILE}"], capture_output=True, check=True
    ).stdout
    return StoredChange(Change.from_dict(data, f"{name} ({sha[:12]})"), patch, sha)


def list_names(repo: Path) -> list[str]:
    if not (repo / ".git").exists():
        return []
    out = _git(repo, "for-each-ref", "--format=%(refname)", BRANCH_PREFIX.rstrip("/"))
    return sorted(line.removeprefix(BRANCH_PREFIX) for line in out.splitlines() if line)


def list_changes(repo: Path) -> list[StoredChange]:
    return [read_change(repo, n) for n in list_names(repo)]


def replay(changes: list[StoredChange], repo: Path) -> list[tuple[str, str]]:
    """Re-create ``changes`` (read from an old history) in a rebuilt one: [(name, new sha)]."""
    return [(s.change.name, commit_change(repo, s.change, s.patch)) for s in changes]
