"""A local git repository shaped like SGLang's own, for asv's git-history path without GitHub.

One commit per release on ``main``, its ``python/`` folder holding that release's
``sglang`` package (from its PyPI wheel) and a ``pyproject.toml`` made from the wheel's
metadata (name, version, ``Requires-Dist``), so a checkout installs as SGLang's does
(``repo_subdir = python``). The release history's changes (:mod:`dpbench.changes`) follow,
each a commit on ``change/NAME`` branching from its base, its patch applied with ``git
apply`` under ``python/``. asv.conf.json then runs over it as over a clone of SGLang
(``dpbench asv-config --repo PATH``; ``--cpu`` installs each commit the CPU way).
"""

from __future__ import annotations

import email.parser
import json
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

from dpbench.changes import diff
from dpbench.changes.history import StoredChange
from dpbench.envs.venv import wheel_path
from dpbench.mainjob.releases import (
    ReleasesError,
    _git,
    history_releases,
    partial_repo,
    replace_repo,
)

IDENT = {"GIT_AUTHOR_NAME": "dpbench sources", "GIT_AUTHOR_EMAIL": "dpbench@localhost"}


def pyproject(wheel: Path) -> str:
    """A pyproject.toml that builds the wheel's sglang package: its name, version, requirements."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(name).decode())
    deps = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    lines = [
        "# Made by dpbench from the PyPI wheel's metadata (SGLang's own python/pyproject.toml",
        "# holds more: extras, scripts, build settings).",
        "[build-system]",
        'requires = ["setuptools>=61"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        'name = "sglang"',
        f"version = {json.dumps(meta['Version'])}",
        f"requires-python = {json.dumps(meta.get('Requires-Python') or '>=3.10')}",
        "dependencies = [",
        *(f"    {json.dumps(d)}," for d in deps),
        "]",
        "",
        "[tool.setuptools.packages.find]",
        'include = ["sglang*"]',
        "namespaces = true",
        "",
        "[tool.setuptools.package-data]",
        '"*" = ["*"]',
    ]
    return "\n".join(lines) + "\n"


def _commit(repo: Path, message: str, stamp: str) -> str:
    env = {
        **IDENT,
        "GIT_COMMITTER_NAME": IDENT["GIT_AUTHOR_NAME"],
        "GIT_COMMITTER_EMAIL": IDENT["GIT_AUTHOR_EMAIL"],
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_DATE": stamp,
    }
    _git(repo, "add", "-A", "python")
    _git(repo, "commit", "-q", "--no-gpg-sign", "-m", message, env=env)
    return _git(repo, "rev-parse", "HEAD")


def _release_tree(repo: Path, wheel: Path) -> None:
    python = repo / "python"
    subprocess.run(["rm", "-rf", str(python)], check=True)
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if member.startswith("sglang/") and not member.endswith("/"):
                dest = python / member
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(zf.read(member))
    (python / "pyproject.toml").write_text(pyproject(wheel))


def _change(repo: Path, stored: StoredChange) -> str:
    c = stored.change
    _git(repo, "checkout", "-q", "-b", f"change/{c.name}", f"v{c.base}")
    patch = repo.parent / f".{c.name}.patch"
    patch.write_text(diff.parse(stored.patch.decode("utf-8")).normalised())
    try:
        _git(repo, "apply", "-p1", "--directory=python", str(patch))
    finally:
        patch.unlink()
    date = _git(repo, "log", "-1", "--format=%ct", f"v{c.base}")
    sha = _commit(repo, f"change {c.name} on sglang {c.base}", f"@{int(date) + 1} +0000")
    _git(repo, "tag", c.name)
    _git(repo, "checkout", "-q", "main")
    return sha


def build(
    repo: Path, versions: Sequence[str], changes: Sequence[StoredChange] = ()
) -> list[tuple[str, str]]:
    """(Re)build the repository at ``repo``; returns [(release or change name, commit)]."""
    wanted = set(versions)
    rels = [r for r in history_releases(versions) if r.version in wanted]
    missing = [c.change.name for c in changes if c.change.base not in wanted]
    if missing:
        raise ReleasesError(f"changes {', '.join(missing)} need their base among the releases")
    tmp = partial_repo(repo)
    out = []
    for rel in rels:
        _release_tree(tmp, wheel_path(rel.version))
        stamp = rel.built.strftime("%Y-%m-%dT%H:%M:%S+00:00")
        out.append((rel.version, _commit(tmp, f"sglang {rel.version} (PyPI sources)", stamp)))
        _git(tmp, "tag", f"v{rel.version}")
    out += [(s.change.name, _change(tmp, s)) for s in changes]
    replace_repo(repo, tmp)
    return out
