"""A change's record (``change.json`` in its commit): base, patch digest, files, detected placement.

:func:`prepare` checks a change before anything is written: the name, the patch (parsed,
and applied to the base's wheel), and the placement of the negotiation in the changed
``schedule_policy.py``, read statically (the same AST reading the placement tier does).
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from dpbench.changes import ChangeError, diff
from dpbench.changes.apply import changed_files
from dpbench.sglang_compat.negotiation import analyse_source
from dpbench.sglang_compat.provenance import detected_placement

SCHEMA = "dpbench-change-1"
SCHEDULE_POLICY = "sglang/srt/managers/schedule_policy.py"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$")


@dataclass(frozen=True)
class Change:
    """What ``change.json`` holds; the patch itself is ``change.patch`` beside it."""

    name: str
    base: str
    source: dict[str, Any]  # {"kind": "patch", "file"} or {"kind": "tree", "path", "git_commit"}
    patch_sha256: str
    path_form: str  # how the patch names files: "python" (python/sglang/…) or "package"
    files: list[str]  # package paths the change writes (sglang/…)
    skipped: list[str] = field(default_factory=list)  # patch files outside the package
    wheel_only_files: int = 0  # a tree: files of the base wheel the tree lacks (kept)
    placement: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    @property
    def key(self) -> str:
        """Short digest of base + patch: the change's environment is keyed by it."""
        return hashlib.sha256(f"{self.base}\n{self.patch_sha256}".encode()).hexdigest()[:10]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Change:
        if data.get("schema") != SCHEMA:
            raise ChangeError(f"{where}: schema {data.get('schema')!r}, want {SCHEMA!r}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ChangeError(f"{where}: not a change record ({exc})") from None

    def marker(self) -> dict[str, Any]:
        """What an environment holding this change says about it (the provenance block)."""
        return {
            "name": self.name,
            "base": self.base,
            "patch_sha256": self.patch_sha256,
            "source": self.source["kind"],
            "files": self.files,
        }


def check_name(name: str) -> None:
    if not NAME.match(name):
        raise ChangeError(
            f"change name {name!r}: use 1-63 letters, digits, '.', '_', '+' or '-', "
            "starting with a letter or digit"
        )
    try:
        Version(name)
    except InvalidVersion:
        return
    raise ChangeError(f"change name {name!r} reads as a release version; name the change")


def static_placement(source: bytes, origin: str) -> dict[str, Any]:
    """The run results' ``placement`` block for a changed ``schedule_policy.py``."""
    return detected_placement(analyse_source(source.decode("utf-8", "replace"), origin=origin))


def prepare(
    name: str, base: str, patch_text: str, source: dict[str, Any], wheel: Path, **extra: Any
) -> tuple[Change, dict[str, bytes | None]]:
    """(the change's record, the files it writes over the installed package); ChangeError (one
    line) for a bad name, a patch that does not parse or apply, or one that deletes the scheduler."""
    check_name(name)
    parsed = diff.parse(patch_text)
    files = changed_files(wheel, parsed)
    if SCHEDULE_POLICY in files:
        policy = files[SCHEDULE_POLICY]
        if policy is None:
            raise ChangeError(f"the patch deletes {SCHEDULE_POLICY}: the scheduler must stay")
    else:
        with zipfile.ZipFile(wheel) as zf:
            policy = zf.read(SCHEDULE_POLICY)
    change = Change(
        name=name,
        base=base,
        source=source,
        patch_sha256=hashlib.sha256(patch_text.encode()).hexdigest(),
        path_form=parsed.form,
        files=sorted(files),
        skipped=list(parsed.skipped),
        placement=static_placement(policy, f"{name}: {SCHEDULE_POLICY}"),
        **extra,
    )
    return change, files
