"""Shared pytest set-up: the SGLang releases the tests run, and per-release environments."""

from __future__ import annotations

import json
import os
import resource
import signal
import time
from pathlib import Path

import pytest

# pytest-xdist's workers run with SIGINT ignored, and an ignored signal stays ignored across
# exec in every child: the Ctrl-C tests' subprocesses would never see their SIGINT. Python's
# own handler here is reset to the default in children, as in a shell.
signal.signal(signal.SIGINT, signal.default_int_handler)

# The real wheels the CPU tests exercise: the before/after pair of PR #31835 and the newest.
TEST_RELEASES = ("0.5.16", "0.5.17", "0.5.23")

# The files that take longest, longest first: seconds of one pytest worker on a fresh clone of
# the 2-core VM (`--durations`, 2026-12-03, three workers). pytest-xdist hands out whole files
# (--dist loadfile) in collection order when told not to reorder them (--no-loadscope-reorder;
# its default, most tests first, started these one- and two-test files last, so the
# Mooncake-window servers ran alone at the end of the run); here they go first.
SLOWEST_FILES = (
    # two 0.5.23 servers, three Mooncake-window replays: 638 of set-up on the fresh clone at 51193b2
    "test_server_routing_replays.py",
    # two asv runs over a change and an SGLang-shaped history: 585 on the fresh clone at 51193b2,
    # building its asv env (~210 with the env kept, 2026-12-04); the second longest there
    "test_changes_asv.py",
    "test_dashboard_site.py",  # asv builds its environment and runs three releases: ~320
    "test_twin_releases.py",  # ~270
    "test_server_simulated.py",  # ~220
    "test_server_virtual_clock.py",  # a virtual-clock server, three replays: ~90 (its real-clock check is quiet)
    "test_twin_radix.py",  # ~190
    "test_server_simulated_early.py",  # ~190
    "test_server_production_trace.py",  # one 0.5.16 server on a Mooncake window: ~175
    "test_server_lifecycle.py",  # ~160
    "test_kernels_interpreter.py",  # ~120
    # ten twin runs against the reference, one process a release: ~50 alone on an idle machine
    # (2026-12-04; ~200-290 in the suite when each run was a process of its own)
    "test_identity.py",
    "test_changes_envs.py",  # ~115 with its change envs built (2026-12-04); ~60 more building them
    "test_foundation_envs.py",  # ~90
    "test_server_two_nodes.py",  # ~75
    "test_twin_capacity.py",  # ~60
    "test_server_simforward_hooks.py",  # ~55
    "test_server_run.py",  # ~50
    "test_twin_production_trace.py",  # ~40
    "test_foundation_mainjob_faults.py",  # ~31
)


def pytest_collection_modifyitems(config, items):
    """The slowest files first, one to each worker, then as many quick ones, then the rest of
    the slow ones: before any file finishes, xdist gives a second file to each worker whose
    first has at most two tests left, and a quick one there waits behind the slow one at
    little cost. Every other file keeps its order."""
    workers = getattr(config, "workerinput", {}).get("workercount") or 1
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    files = list(dict.fromkeys(item.path.name for item in items))
    slow = sorted((f for f in files if f in rank), key=rank.__getitem__)
    quick = [f for f in files if f not in rank]
    order = slow[:workers] + quick[:workers] + slow[workers:] + quick[workers:]
    at = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: at[item.path.name])  # stable: a file's own order is kept


# One zygote per release environment for the whole session (dpbench.envs.zygote): the twin's
# runs, the placement probes and the tests' own probes fork from a process that imported SGLang
# once, instead of importing it (~11 s of CPU) each. DPBENCH_TEST_ZYGOTE=0 turns it off.
def pytest_configure(config):
    if hasattr(config, "workerinput") or os.environ.get("DPBENCH_TEST_ZYGOTE") == "0":
        return
    if os.environ.get("DPBENCH_ZYGOTE_DIR"):
        return  # an outer session's
    import tempfile

    from dpbench.envs import zygote

    config._dpbench_zygotes = tempfile.mkdtemp(prefix="dpbench-zygote-")
    os.environ[zygote.ENV_DIR] = config._dpbench_zygotes
    os.environ[zygote.ENV_OWNER] = str(os.getpid())


def release_run(cmd, *, timeout: float, cwd=None, env=None):
    """``subprocess.run(cmd, capture_output=True, text=True, …)`` for ``python -m``/``-c`` of a
    release environment, forked from its zygote when the session has them. Not for code that
    must run before SGLang is imported (simulated-forward hooks, Triton's interpreter)."""
    from dpbench.envs import zygote

    return zygote.run(
        cmd, cwd=cwd or os.getcwd(), env=os.environ if env is None else env, timeout=timeout
    )


def pytest_unconfigure(config):
    where = getattr(config, "_dpbench_zygotes", None)
    if where:
        import shutil

        from dpbench.envs import zygote

        zygote.stop_all(where)
        shutil.rmtree(where, ignore_errors=True)
        os.environ.pop(zygote.ENV_DIR, None)
        os.environ.pop(zygote.ENV_OWNER, None)


# Where the suite's CPU goes, by test (``DPBENCH_TEST_CPU_LOG=DIR``): one JSON line a test, per
# worker, with the CPU its worker and the children it reaped used over the test's set-up, call
# and tear-down (a module fixture's cost lands on its first test, its tear-down on its last).
# The servers' processes are counted once reaped: SGLang's launcher reaps its schedulers, the
# worker reaps the launcher. docs/performance.md reads the files with a few lines of Python.
CPU_LOG = os.environ.get("DPBENCH_TEST_CPU_LOG")


def _cpu_s() -> float:
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    cpu0, wall0 = _cpu_s(), time.monotonic()
    yield
    row = {"file": item.path.name, "test": item.nodeid, "cpu_s": round(_cpu_s() - cpu0, 2),
           "wall_s": round(time.monotonic() - wall0, 2)}  # fmt: skip
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(CPU_LOG).mkdir(parents=True, exist_ok=True)
    with open(Path(CPU_LOG) / f"{worker}.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


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

    from dpbench.core.paths import cache_dir, project_root

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


def sglang_checkout(root: Path, version: str) -> Path:
    """An SGLang-shaped checkout at ``root``: ``python/sglang`` holding ``version``'s package
    sources, taken from its real wheel."""
    import zipfile

    from dpbench.envs.venv import wheel_path

    with zipfile.ZipFile(wheel_path(version)) as zf:
        for name in zf.namelist():
            if name.startswith("sglang/") and not name.endswith("/"):
                dest = root / "python" / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(zf.read(name))
    return root
