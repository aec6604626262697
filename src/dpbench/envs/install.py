"""`python -m dpbench.envs.install RELEASE_JSON`: asv's install step for one commit of the release history.

Run by asv with the environment's own interpreter; reads the commit's ``release.json``
(written by ``dpbench releases``) and installs that SGLang release the CPU way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dpbench.envs.venv import install_release


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dpbench.envs.install <build_dir>/release.json", file=sys.stderr)
        return 2
    path = Path(argv[0])
    if path.is_dir():
        path = path / "release.json"
    meta = json.loads(path.read_text())
    # with_server: the simulated-forward server benchmark runs SGLang's real server here
    info = install_release(sys.executable, meta["sglang"], with_dpbench=False, with_server=True)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
