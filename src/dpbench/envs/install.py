"""`python -m dpbench.envs.install RELEASE_JSON [--no-server]`: asv's install step for one commit of the release history.

Run by asv with the environment's own interpreter; reads the commit's ``release.json``
(written by ``dpbench releases``) and installs that SGLang release the CPU way (a
change's commit, holding ``change.json`` too, then gets the change laid over it), with what
SGLang's real server needs (the simulated-forward server tier) unless ``--no-server``:
a config that runs only the placement and twin tiers saves ~2 GB and minutes per release.

Given a source tree instead (``BUILD_DIR`` holding ``pyproject.toml``: a commit of SGLang's
git history, ``repo_subdir = python``), it installs that tree the CPU way: the CPU imports
pinned as its pyproject pins them, the package itself ``--no-deps`` (no server extras).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dpbench.envs.venv import _site_packages, install_release, install_source


def install_change(record: Path, patch: Path) -> dict:
    """Lay the change in ``record`` over the SGLang installed in this interpreter's environment."""
    from dpbench.changes.record import Change
    from dpbench.envs.change_env import overlay_change

    change = Change.from_dict(json.loads(record.read_text()), str(record))
    site = _site_packages(sys.executable)
    written = overlay_change(Path(sys.executable), site, change, patch.read_bytes())
    return {**change.marker(), "written": written}


def main(argv: list[str]) -> int:
    with_server = "--no-server" not in argv
    args = [a for a in argv if a != "--no-server"]
    if len(args) != 1 or args[0].startswith("-"):
        print(
            "usage: python -m dpbench.envs.install <build_dir>[/release.json] [--no-server]",
            file=sys.stderr,
        )
        return 2
    path = Path(args[0])
    if path.is_dir() and not (path / "release.json").exists():
        if not (path / "pyproject.toml").exists():
            print(f"{path}: neither a release.json nor an SGLang pyproject.toml", file=sys.stderr)
            return 2
        # a commit of SGLang's own (shaped) history: its python/ folder, installed the CPU way
        print(json.dumps(install_source(sys.executable, path)))
        return 0
    if path.is_dir():
        path = path / "release.json"
    meta = json.loads(path.read_text())
    info = install_release(
        sys.executable, meta["sglang"], with_dpbench=False, with_server=with_server
    )
    record = path.parent / "change.json"
    if record.exists():  # a change's commit: its files over the base release just installed
        info["change"] = install_change(record, path.parent / "change.patch")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
