"""`python -m dpbench.envs.install RELEASE_JSON [--no-server]`: asv's install step for one commit of the release history.

Run by asv with the environment's own interpreter; reads the commit's ``release.json``
(written by ``dpbench releases``) and installs that SGLang release the CPU way, with what
SGLang's real server needs (the simulated-forward server tier) unless ``--no-server``:
a config that runs only the placement and twin tiers saves ~2 GB and minutes per release.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dpbench.envs.venv import install_release


def main(argv: list[str]) -> int:
    with_server = "--no-server" not in argv
    args = [a for a in argv if a != "--no-server"]
    if len(args) != 1 or args[0].startswith("-"):
        print(
            "usage: python -m dpbench.envs.install <build_dir>/release.json [--no-server]",
            file=sys.stderr,
        )
        return 2
    path = Path(args[0])
    if path.is_dir():
        path = path / "release.json"
    meta = json.loads(path.read_text())
    info = install_release(
        sys.executable, meta["sglang"], with_dpbench=False, with_server=with_server
    )
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
