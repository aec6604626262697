"""Unified diffs against SGLang's sources: parse one, normalise its paths, or make one from a tree.

A patch may name files as in SGLang's repository (``python/sglang/srt/…``, with or
without git's ``a/`` ``b/``) or as in the installed package (``sglang/srt/…``). Either
way :func:`parse` finds where ``sglang/`` starts, and :func:`ParsedPatch.normalised`
rewrites every header to ``a/sglang/…`` ``b/sglang/…`` for ``git apply -p1`` against the
installed package. Files outside the ``sglang`` package (the repository's ``test/``,
``docs/``, ``python/pyproject.toml``) cannot change an installed SGLang: they are left out
and listed. Renames, copies and binary diffs are refused.
"""

from __future__ import annotations

import difflib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dpbench.changes import ChangeError

DEV_NULL = "/dev/null"
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
REFUSED = {
    "rename from": "renames",
    "rename to": "renames",
    "copy from": "copies",
    "copy to": "copies",
    "GIT binary patch": "binary diffs",
    "Binary files": "binary diffs",
}
PATH_FORMS = {
    "python": "SGLang's python/ tree (python/sglang/...)",
    "package": "the installed package (sglang/...)",
}


@dataclass(frozen=True)
class Hunk:
    header: str  # the @@ line as written
    old_start: int
    lines: tuple[str, ...]  # the hunk's body lines, newline kept


@dataclass(frozen=True)
class FileDiff:
    old: str | None  # the path as written, prefixes included; None for a new file
    new: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        return str(self.new or self.old)


@dataclass(frozen=True)
class ParsedPatch:
    files: tuple[FileDiff, ...]  # those inside the sglang package
    skipped: tuple[str, ...]  # files outside it, as written
    strip: int  # leading components before "sglang/"
    form: str  # "python" or "package": how the patch names files

    def package_path(self, path: str) -> str:
        """``a/python/sglang/srt/x.py`` → ``sglang/srt/x.py``."""
        return str(PurePosixPath(*PurePosixPath(path).parts[self.strip :]))

    def shown(self, path: str) -> str:
        """The path as a reader knows it: ``python/sglang/…`` or ``sglang/…``, no ``a/``."""
        parts = PurePosixPath(path).parts
        keep = self.strip - 1 if self.form == "python" else self.strip
        return str(PurePosixPath(*parts[keep:]))

    def touched(self) -> list[str]:
        return [self.package_path(f.path) for f in self.files]

    def normalised(self) -> str:
        """The patch's sglang files only, headers ``a/sglang/…`` ``b/sglang/…`` (git apply -p1)."""
        out: list[str] = []
        for f in self.files:
            old = DEV_NULL if f.old is None else "a/" + self.package_path(f.old)
            new = DEV_NULL if f.new is None else "b/" + self.package_path(f.new)
            out += [f"--- {old}\n", f"+++ {new}\n"]
            for h in f.hunks:
                out.append(h.header if h.header.endswith("\n") else h.header + "\n")
                out.extend(h.lines)
        return "".join(out)


def _header_path(line: str) -> str | None:
    raw = line[4:].rstrip("\n").split("\t", 1)[0].strip()
    if raw.startswith('"'):
        raise ChangeError(f"quoted file name {raw} in the patch: name files without quotes")
    return None if raw == DEV_NULL else raw


def _read_hunk(lines: list[str], i: int, where: str) -> tuple[Hunk, int]:
    m = HUNK.match(lines[i])
    if m is None:
        raise ChangeError(f"{where}: malformed hunk header {lines[i].strip()!r}")
    old_left = int(m.group(2) if m.group(2) is not None else 1)
    new_left = int(m.group(4) if m.group(4) is not None else 1)
    body: list[str] = []
    j = i + 1
    while (old_left > 0 or new_left > 0) and j < len(lines):
        line = lines[j]
        tag = line[:1]
        if tag in (" ", "\n", "\r"):  # an empty line is a context line some tools trim
            old_left, new_left = old_left - 1, new_left - 1
        elif tag == "-":
            old_left -= 1
        elif tag == "+":
            new_left -= 1
        elif tag != "\\":
            break
        body.append(line if tag not in ("\n", "\r") else " " + line)
        j += 1
    if old_left > 0 or new_left > 0:
        raise ChangeError(
            f"{where}: hunk {lines[i].strip()} ends early ({old_left} old and {new_left} new "
            "lines missing); is the patch cut short or hand-edited?"
        )
    while j < len(lines) and lines[j].startswith("\\"):
        body.append(lines[j])
        j += 1
    return Hunk(lines[i], int(m.group(1)), tuple(body)), j


def _read_files(text: str) -> list[FileDiff]:
    lines = text.splitlines(keepends=True)
    files: list[FileDiff] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        for start, what in REFUSED.items():
            if line.startswith(start):
                raise ChangeError(
                    f"the patch holds {what} (line {i + 1}): give a plain text diff "
                    "(git diff --no-renames, no binary files)"
                )
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _header_path(line), _header_path(lines[i + 1])
            where = f"file {new or old}"
            hunks: list[Hunk] = []
            i += 2
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _read_hunk(lines, i, where)
                hunks.append(hunk)
            if not hunks:
                raise ChangeError(f"{where}: no hunks under its --- / +++ header")
            files.append(FileDiff(old, new, tuple(hunks)))
            continue
        i += 1
    return files


def _sglang_start(path: str) -> int | None:
    """Where ``sglang/`` starts in a patch path: after nothing, ``python/``, one prefix such as
    ``a/``, or a prefix and ``python/``; None when the path is not in the sglang package."""
    parts = PurePosixPath(path).parts
    for strip in range(0, min(3, len(parts) - 1)):
        head = parts[:strip]
        ok = head in ((), ("python",)) or (len(head) == 1) or (head[1:] == ("python",))
        if ok and parts[strip] == "sglang":
            return strip
    return None


def parse(text: str) -> ParsedPatch:
    """The files a unified diff changes in the sglang package; ChangeError (one line) if none."""
    files = _read_files(text)
    if not files:
        raise ChangeError("no file diffs found: give a unified diff (--- a/… +++ b/… @@ hunks)")
    inside: list[FileDiff] = []
    skipped: list[str] = []
    strips: dict[int, str] = {}
    for f in files:
        starts = {p: _sglang_start(p) for p in (f.old, f.new) if p is not None}
        if any(s is None for s in starts.values()):
            skipped.append(f.path)
            continue
        for p, s in starts.items():
            strips.setdefault(int(s), p)  # type: ignore[arg-type]
        inside.append(f)
    if not inside:
        raise ChangeError(
            "the patch changes no file of the sglang package (python/sglang/... or sglang/...); "
            f"it names {', '.join(f.path for f in files[:4])}"
        )
    if len(strips) > 1:
        raise ChangeError(
            "the patch names files in more than one way: " + " and ".join(strips.values())
        )
    strip = next(iter(strips))
    first = PurePosixPath(next(iter(strips.values()))).parts
    form = "python" if "python" in first[:strip] else "package"
    return ParsedPatch(tuple(inside), tuple(skipped), strip, form)


# -- a source tree's diff against a wheel --------------------------------------------------
IGNORED_PARTS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache"}
IGNORED_SUFFIXES = {".pyc", ".pyo", ".orig", ".rej"}


def tree_package(tree: Path) -> Path:
    """The ``sglang`` package of a local SGLang checkout (DIR/python/sglang, or DIR/sglang when
    DIR is the checkout's python/ folder); ChangeError when DIR is not one."""
    for pkg in (tree / "python" / "sglang", tree / "sglang"):
        if (pkg / "srt" / "managers" / "schedule_policy.py").is_file():
            return pkg
    raise ChangeError(
        f"{tree} is not an SGLang checkout: no python/sglang/srt/managers/schedule_policy.py in it"
    )


def _text(data: bytes, rel: str) -> list[str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        raise ChangeError(
            f"{rel} differs from the base wheel and is binary: a change may alter only text files"
        )
    return text.splitlines(keepends=True)


def _file_diff(rel: str, old: bytes | None, new: bytes) -> str:
    a = [] if old is None else _text(old, rel)
    b = _text(new, rel)
    head_a = DEV_NULL if old is None else f"a/python/{rel}"
    lines = difflib.unified_diff(a, b, head_a, f"b/python/{rel}", n=3)
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            out.append(line.rstrip("\n") + "\n")
        elif not line.endswith("\n"):
            out.append(line + "\n\\ No newline at end of file\n")
        else:
            out.append(line)
    return "".join(out)


def diff_tree(tree: Path, wheel: Path) -> tuple[str, int]:
    """(the unified diff that turns ``wheel``'s sglang package into ``tree``'s, in python/ tree
    paths; how many of the wheel's files the tree lacks: those are kept, never deleted)."""
    pkg = tree_package(tree)
    with zipfile.ZipFile(wheel) as zf:
        wheel_files = {n for n in zf.namelist() if n.startswith("sglang/") and not n.endswith("/")}
        seen: set[str] = set()
        parts: list[str] = []
        for path in sorted(p for p in pkg.rglob("*") if p.is_file()):
            rel_parts = path.relative_to(pkg).parts
            if IGNORED_PARTS & set(rel_parts) or path.suffix in IGNORED_SUFFIXES:
                continue
            rel = "sglang/" + "/".join(rel_parts)
            seen.add(rel)
            new = path.read_bytes()
            old = zf.read(rel) if rel in wheel_files else None
            if old != new:
                parts.append(_file_diff(rel, old, new))
    return "".join(parts), len(wheel_files - seen)
