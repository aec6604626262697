"""Where the installed SGLang's scheduler source files are, found without importing SGLang."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

SCHEDULE_POLICY = ("srt", "managers", "schedule_policy.py")


def sglang_installed() -> bool:
    """Whether an ``sglang`` package is importable here (found, not imported)."""
    try:
        sglang_package_dir()
    except FileNotFoundError:
        return False
    return True


def sglang_package_dir() -> Path:
    """The installed ``sglang`` package folder (``sglang/__init__.py`` is not run)."""
    stub = sys.modules.get("sglang")
    if (
        stub is not None
        and getattr(stub, "__spec__", None) is None
        and getattr(stub, "__path__", None)
    ):
        # The kernel tier's kernel-modules-only import (sglang_compat.kernels) makes a bare
        # package module with a path and no spec; find_spec would raise ValueError on it.
        return Path(next(iter(stub.__path__)))
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SGLang is not installed in this Python environment (no 'sglang' package found)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def schedule_policy_path() -> Path:
    """``sglang/srt/managers/schedule_policy.py`` of the installed SGLang; FileNotFoundError if missing."""
    path = sglang_package_dir().joinpath(*SCHEDULE_POLICY)
    if not path.is_file():
        raise FileNotFoundError(
            f"the installed SGLang has no {'/'.join(SCHEDULE_POLICY)} (looked at {path})"
        )
    return path


def scheduler_source() -> str | None:
    """The text of the installed ``sglang/srt/managers/scheduler.py`` (it does not import on a CPU), or None."""
    try:
        path = sglang_package_dir() / "srt" / "managers" / "scheduler.py"
    except FileNotFoundError:
        return None
    return path.read_text() if path.is_file() else None


_DECAY_RE = re.compile(r"self\.max_prefill_bs\s*\*=\s*([0-9.]+)")


def max_prefill_bs_decay(scheduler_text: str) -> list[float]:
    """The factors ``scheduler.py`` multiplies ``max_prefill_bs`` by once per pass (0.5.17: ``[0.998]``)."""
    return [float(x) for x in _DECAY_RE.findall(scheduler_text)]


_COMMIT_RE = re.compile(r"""^__commit_id__\s*=\s*commit_id\s*=\s*['"]([0-9a-fA-Fg.]+)['"]""", re.M)


def version_file_commit() -> str | None:
    """The commit in the installed ``sglang/_version.py`` (written by the build; None in release wheels)."""
    try:
        path = sglang_package_dir() / "_version.py"
    except FileNotFoundError:
        return None
    if not path.is_file():
        return None
    found = _COMMIT_RE.search(path.read_text())
    return found.group(1) if found else None
