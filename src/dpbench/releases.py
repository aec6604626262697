"""A local git repository whose history is SGLang's PyPI releases, for `asv run` without GitHub.

One commit per release, in version order, authored and committed at the release
wheel's build time (the zip timestamp of its METADATA), with a message naming the
version. Each commit's tree holds ``release.json``; ``asv.releases.json`` installs the
release it names with ``python -m dpbench.envs.install {build_dir}``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from dpbench.envs.venv import wheel_path
from dpbench.paths import cache_dir

DEFAULT_RELEASES = ("0.5.16", "0.5.17", "0.5.23")


class ReleasesError(RuntimeError):
    pass


@dataclass(frozen=True)
class Release:
    version: str
    wheel: str
    sha256: str
    built: dt.datetime

    def tree(self) -> dict:
        return {
            "sglang": self.version,
            "wheel": self.wheel,
            "wheel_sha256": self.sha256,
            "wheel_built": self.built.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


def default_repo() -> Path:
    return cache_dir() / "sglang-releases"


def _parse_versions(versions: Sequence[str]) -> list[str]:
    parsed = []
    for v in versions:
        try:
            parsed.append((Version(v), v))
        except InvalidVersion as exc:
            raise ReleasesError(
                f"{v!r} is not a version; give SGLang release versions like 0.5.16"
            ) from exc
    if len({p for p, _ in parsed}) != len(parsed):
        raise ReleasesError(f"duplicate versions in {list(versions)}")
    return [v for _, v in sorted(parsed)]


def describe(version: str) -> Release:
    wheel = wheel_path(version)
    with zipfile.ZipFile(wheel) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(".dist-info/METADATA"))
    built = dt.datetime(*info.date_time, tzinfo=dt.UTC)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return Release(version=version, wheel=wheel.name, sha256=digest, built=built)


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise ReleasesError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def build(
    versions: Sequence[str] = DEFAULT_RELEASES, repo: Path | None = None
) -> list[tuple[str, str]]:
    """(Re)build the history repository; returns [(version, commit sha)] oldest first.

    Rebuilding with the same versions gives the same commit hashes (fixed author,
    dates from the wheels), so asv results stay attached to their commits.
    """
    ordered = _parse_versions(versions)
    if not ordered:
        raise ReleasesError("no versions given")
    releases = [describe(v) for v in ordered]
    repo = Path(repo or default_repo())
    tmp = repo.with_name(repo.name + ".partial")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    tmp.mkdir(parents=True)
    _git(tmp, "init", "-q", "-b", "main")
    out = []
    for rel in releases:
        (tmp / "release.json").write_text(json.dumps(rel.tree(), indent=2, sort_keys=True) + "\n")
        (tmp / "README.md").write_text(
            f"SGLang {rel.version} from PyPI ({rel.wheel}), for dpbench's asv.releases.json.\n"
        )
        _git(tmp, "add", "release.json", "README.md")
        stamp = rel.built.strftime("%Y-%m-%dT%H:%M:%S+00:00")
        ident = {
            "GIT_AUTHOR_NAME": "dpbench releases",
            "GIT_AUTHOR_EMAIL": "dpbench@localhost",
            "GIT_COMMITTER_NAME": "dpbench releases",
            "GIT_COMMITTER_EMAIL": "dpbench@localhost",
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_DATE": stamp,
        }
        _git(tmp, "commit", "-q", "--no-gpg-sign", "-m", f"sglang {rel.version}", env=ident)
        _git(tmp, "tag", f"v{rel.version}")
        out.append((rel.version, _git(tmp, "rev-parse", "HEAD")))
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    tmp.rename(repo)
    return out


def read_history(repo: Path | None = None) -> list[dict]:
    """[{version, commit, date}] of an existing history repository, oldest first (for the dashboard)."""
    repo = Path(repo or default_repo())
    if not (repo / ".git").exists():
        return []
    log = _git(repo, "log", "--reverse", "--format=%H%x09%cI%x09%s")
    rows = []
    for line in log.splitlines():
        sha, date, subject = line.split("\t", 2)
        rows.append({"commit": sha, "date": date, "version": subject.removeprefix("sglang ")})
    return rows
