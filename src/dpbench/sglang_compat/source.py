"""Where the installed SGLang's scheduler source files are, found without importing SGLang."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCHEDULE_POLICY = ("srt", "managers", "schedule_policy.py")


def sglang_package_dir() -> Path:
    """The installed ``sglang`` package folder (``sglang/__init__.py`` is not run)."""
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
