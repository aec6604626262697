"""Shared pytest set-up: the SGLang releases the tests run, and per-release environments."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

# pytest-xdist's workers run with SIGINT ignored, and an ignored signal stays ignored across
# exec in every child: the Ctrl-C tests' subprocesses would never see their SIGINT. Python's
# own handler here is reset to the default in children, as in a shell.
signal.signal(signal.SIGINT, signal.default_int_handler)

# The real wheels the CPU tests exercise: the before/after pair of PR #31835 and the newest.
TEST_RELEASES = ("0.5.16", "0.5.17", "0.5.23")


@pytest.fixture(scope="session")
def release_env():
    """Build-or-reuse an SGLang release environment: ``release_env("0.5.23").python``."""
    from dpbench.envs import ensure_env

    return ensure_env


def asv_releases_config(tmp: Path, history: Path, **overrides: str) -> Path:
    """asv.releases.json for a test: its history and outputs in ``tmp``, benchmarks from this
    checkout, and one asv environment shared by every test that runs asv (kept in .cache/),
    installed without the server tier's extras (no test here runs that tier through asv)."""
    from asv.util import load_json

    from dpbench.paths import cache_dir, project_root

    root = project_root()
    conf = load_json(str(root / "asv.releases.json"), js_comments=True)
    conf.update(
        {
            "repo": str(history),
            "results_dir": "results",
            "html_dir": "html",
            "env_dir": str(cache_dir() / "asv-env-tests"),
            "benchmark_dir": str(root / "benchmarks"),
            "install_command": [
                c.replace("{conf_dir}", str(root)) + (" --no-server" if "envs.install" in c else "")
                for c in conf["install_command"]
            ],
            **overrides,
        }
    )
    path = tmp / "asv.json"
    path.write_text(json.dumps(conf, indent=2))
    return path
