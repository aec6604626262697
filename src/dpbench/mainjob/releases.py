"""A local git repository whose history is SGLang's PyPI releases, for `asv run` without GitHub.

One commit per release, authored and committed at the release wheel's build time (the
zip timestamp of its METADATA), with a message naming the version. Each commit's tree
holds ``release.json``; ``asv.releases.json`` installs the release it names with
``python -m dpbench.envs.install {build_dir}``.

The history is always every release of :data:`KNOWN_RELEASES` (wheel name, sha256 and
build time recorded here, so building it downloads nothing), in that order, followed by
any newer release asked for (described from its wheel). The same known releases always
give the same commit hashes, whatever a run selects to benchmark, so results stay
attached; a new release is *appended* (add it at the end of KNOWN_RELEASES), which never
moves an earlier commit. Which commits a run benchmarks is the main job's choice
(:mod:`dpbench.mainjob.job`), not the history's.
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

from dpbench.changes import history as changes
from dpbench.core.paths import history_dir
from dpbench.envs.venv import wheel_path


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


def _utc(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp).replace(tzinfo=dt.UTC)


# Append-only: every commit's hash depends on all before it.
KNOWN_RELEASES: tuple[Release, ...] = (
    Release(
        "0.5.14",
        "sglang-0.5.14-cp311-cp311-manylinux_2_34_x86_64.whl",
        "4fe16056b45c8aca00f5f90ceb174dc3a62a3f5dccf159c791370795cd00fc99",
        _utc("2026-06-26T04:23:18"),
    ),
    Release(
        "0.5.15",
        "sglang-0.5.15-cp311-cp311-manylinux_2_34_x86_64.whl",
        "21492759b4b99e117bd81610f633422f3fdae2896c2cde6931eab886deccc44f",
        _utc("2026-07-10T09:34:52"),
    ),
    Release(
        "0.5.16",
        "sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl",
        "d5f345a18953dd35df568ac56bdcb7f5ee910ab39efea4469b714556d1070713",
        _utc("2026-07-25T00:06:38"),
    ),
    Release(
        "0.5.17",
        "sglang-0.5.17-cp311-cp311-manylinux_2_34_x86_64.whl",
        "575e38f5683624ded3b4bb267f637a098e5ed37d13a1d1ff5ea09bd781a04d16",
        _utc("2026-08-08T00:14:24"),
    ),
    Release(
        "0.5.18",
        "sglang-0.5.18-cp311-cp311-manylinux_2_34_x86_64.whl",
        "e97b585dd2d5db2802599feba47c84cce972f5e1231a6816fef996200207b5cf",
        _utc("2026-08-21T20:07:36"),
    ),
    Release(
        "0.5.19",
        "sglang-0.5.19-cp311-cp311-manylinux_2_34_x86_64.whl",
        "425e87377e725d03db8262382008f3fd9561a6cf5d82f485f8b9929f02ffe12b",
        _utc("2026-09-04T19:49:14"),
    ),
    Release(
        "0.5.20",
        "sglang-0.5.20-cp311-cp311-manylinux_2_34_x86_64.whl",
        "1573527042f4f6b4ead838302818595fc77fdc611dbcc2e40cd150fbc8f8513c",
        _utc("2026-09-18T09:47:14"),
    ),
    Release(
        "0.5.21",
        "sglang-0.5.21-cp311-cp311-manylinux_2_34_x86_64.whl",
        "96c029f75dec99baa33a5db3d41b1bebefdd6bcfba3a2f7c807fe1cf49a87c20",
        _utc("2026-10-01T06:36:48"),
    ),
    Release(
        "0.5.22",
        "sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl",
        "cc9a0f15bd8f877a0584fdb7a1702240177a1f1cc8d17c978715161717b9037b",
        _utc("2026-10-15T23:48:12"),
    ),
    Release(
        "0.5.23",
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
        _utc("2026-10-30T01:04:36"),
    ),
)
KNOWN_VERSIONS: tuple[str, ...] = tuple(r.version for r in KNOWN_RELEASES)


def default_repo() -> Path:
    return history_dir()


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


def history_releases(extra: Sequence[str] = ()) -> list[Release]:
    """Every known release, then the releases in ``extra`` that are not known (each newer than the last known)."""
    asked = _parse_versions(extra) if extra else []
    newest = Version(KNOWN_VERSIONS[-1])
    new = [v for v in asked if v not in KNOWN_VERSIONS]
    older = [v for v in new if Version(v) <= newest]
    if older:
        raise ReleasesError(
            f"{', '.join(older)} not in the known release history ({KNOWN_VERSIONS[0]} … "
            f"{KNOWN_VERSIONS[-1]}) and not newer than {KNOWN_VERSIONS[-1]}: inserting it would "
            "change every later commit's hash. Known: " + " ".join(KNOWN_VERSIONS)
        )
    return [*KNOWN_RELEASES, *(describe(v) for v in new)]


def partial_repo(repo: Path) -> Path:
    """An empty git repository beside ``repo`` to build a new one in (``replace_repo`` then
    swaps it in), so a failed build leaves the old one whole."""
    tmp = repo.with_name(repo.name + ".partial")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    tmp.mkdir(parents=True)
    _git(tmp, "init", "-q", "-b", "main")
    return tmp


def replace_repo(repo: Path, tmp: Path) -> None:
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    tmp.rename(repo)


def build(extra: Sequence[str] = (), repo: Path | None = None) -> list[tuple[str, str]]:
    """(Re)build the history repository; returns [(version, commit sha)] oldest first.

    The history holds every known release plus any newer one in ``extra``; rebuilding
    gives the same commit hashes (fixed author, dates from the wheels, fixed order), so
    asv results stay attached to their commits. Changes added to the old history
    (:mod:`dpbench.changes`) are carried over, each with the same hash.
    """
    releases = history_releases(extra)
    repo = Path(repo or default_repo())
    tmp = partial_repo(repo)
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
    # the changes added to the old history, each again on its base (the same hashes)
    changes.replay(changes.list_changes(repo), tmp)
    replace_repo(repo, tmp)
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
