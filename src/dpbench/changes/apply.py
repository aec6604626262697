"""Apply a change to a release's sources and lay the result over an installed SGLang.

:func:`changed_files` takes the files a patch touches from the base's wheel (the
sources the release shipped, whatever an environment did to its copy), applies the
patch with ``git apply`` (exact context, offsets allowed, no fuzz) and returns the new
contents. A hunk that does not apply is named with its file, number and header, every
one of them, in one line. :func:`overlay` writes the contents into an installed
package, records new files in the wheel's ``RECORD`` (so ``pip uninstall`` removes them
when asv reuses the environment for the next commit) and leaves a marker that the
run results' provenance reads (``sglang/_dpbench_change.json``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from dpbench.changes import ChangeError
from dpbench.changes.diff import ParsedPatch

MARKER = "sglang/_dpbench_change.json"
_REJECTED = re.compile(r"^Rejected hunk #(\d+)\.")
_APPLYING = re.compile(r"^Applying patch (\S+) with \d+ reject")


def _wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1] if wheel.name.count("-") >= 2 else wheel.name


def _extract(zf: zipfile.ZipFile, patch: ParsedPatch, root: Path, version: str) -> None:
    names = set(zf.namelist())
    for f in patch.files:
        if f.old is None:
            continue
        rel = patch.package_path(f.old)
        if rel not in names:
            raise ChangeError(
                f"the patch changes {patch.shown(f.old)}, which SGLang {version} does not have "
                "(is the base right?)"
            )
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(zf.read(rel))


def _rejections(stderr: str, patch: ParsedPatch) -> str:
    """'python/sglang/x.py hunks 2, 3 of 3 (@@ -10 @@, @@ -42 @@)' per file, from git's report."""
    by_path = {patch.package_path(f.path): f for f in patch.files}
    rejected: dict[str, list[int]] = {}
    current = None
    for line in stderr.splitlines():
        if m := _APPLYING.match(line):
            current = m.group(1)
        elif (m := _REJECTED.match(line)) and current in by_path:
            rejected.setdefault(current, []).append(int(m.group(1)))
    parts = []
    for rel, numbers in rejected.items():
        f = by_path[rel]
        heads = [f.hunks[n - 1].header.split(" +")[0] + " @@" for n in numbers]
        word = "hunk" if len(numbers) == 1 else "hunks"
        parts.append(
            f"{patch.shown(f.path)} {word} {', '.join(map(str, numbers))} of {len(f.hunks)} "
            f"({', '.join(heads)})"
        )
    if parts:
        return "; ".join(parts) + ": context not found in the base's file"
    errors = [ln.removeprefix("error: ") for ln in stderr.splitlines() if ln.startswith("error:")]
    return "; ".join(errors[-2:]) or stderr.strip().splitlines()[-1]


def changed_files(wheel: Path, patch: ParsedPatch) -> dict[str, bytes | None]:
    """``{package path: new content, or None when deleted}`` after applying ``patch`` to the
    wheel's sources; ChangeError naming the file and hunks when it does not apply."""
    version = _wheel_version(wheel)
    with tempfile.TemporaryDirectory(prefix="dpbench-change-") as tmp:
        root = Path(tmp) / "src"
        root.mkdir()
        with zipfile.ZipFile(wheel) as zf:
            _extract(zf, patch, root, version)
        diff = Path(tmp) / "change.diff"
        diff.write_text(patch.normalised())
        proc = subprocess.run(
            ["git", "apply", "--reject", "--verbose", "-p1", str(diff)],
            cwd=root,
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)},
        )
        if proc.returncode != 0:
            raise ChangeError(
                f"the patch does not apply to SGLang {version}: {_rejections(proc.stderr, patch)}"
            )
        out: dict[str, bytes | None] = {}
        for f in patch.files:
            rel = patch.package_path(f.path)
            out[rel] = None if f.new is None else (root / rel).read_bytes()
    return out


def _record_line(site: Path, rel: str) -> str:
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}\n"


def _add_to_record(site: Path, new: list[str]) -> None:
    records = sorted(site.glob("sglang-*.dist-info/RECORD"))
    if not records or not new:
        return
    record = records[0]
    listed = {line.split(",", 1)[0] for line in record.read_text().splitlines()}
    extra = [_record_line(site, rel) for rel in new if rel not in listed]
    if extra:
        tmp = record.with_name(record.name + ".tmp")
        tmp.write_text(record.read_text() + "".join(extra))
        tmp.replace(record)  # a new file: never writes through to another environment's copy


def overlay(site: Path, files: dict[str, bytes | None], marker: dict[str, Any]) -> list[Path]:
    """Write ``files`` into the SGLang installed under ``site`` (site-packages) and the marker;
    returns the written paths (to compile). Each file is replaced, never written in place."""
    written: list[Path] = []
    for rel, data in {**files, MARKER: json.dumps(marker, indent=2).encode() + b"\n"}.items():
        dest = site / rel
        if data is None:
            dest.unlink(missing_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".dpbench-tmp")
        tmp.write_bytes(data)
        tmp.replace(dest)
        written.append(dest)
    _add_to_record(site, [str(p.relative_to(site)) for p in written])
    return written
