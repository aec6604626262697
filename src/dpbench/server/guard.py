"""``python -m dpbench.server.guard [--metrics-dir DIR] -- CMD…``: run CMD in this process group and take the whole group down with us.

The launcher starts every server through this guard as the leader of a new session.
SGLang's helper processes set a parent-death signal only once their imports are done
(and ``multiprocessing``'s resource tracker never does), so a server whose parent is
SIGKILLed during start-up would leave orphans. The guard asks Linux for SIGTERM when
its own parent dies, and on SIGTERM or SIGINT it signals its whole process group:
SIGTERM, a grace period, then SIGKILL (which ends the guard too). When CMD exits by
itself, the guard clears what CMD left in the group and exits with CMD's status.

SGLang keeps its Prometheus counters in files under ``$PROMETHEUS_MULTIPROC_DIR``; unset,
it makes a ``/tmp/tmpXXXXXXXX`` folder that a killed server never removes (a test suite
left 17). The guard gives CMD a folder of its own and removes it when the group is gone:
``--metrics-dir`` (the launcher's, which the launcher also removes, since it SIGKILLs the
group, guard included, when a server outlasts its grace period), else one it makes (inside
the caller's ``$PROMETHEUS_MULTIPROC_DIR`` when that is set).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from types import FrameType

from dpbench.core.procs import group_members

GRACE_S = 15.0
PR_SET_PDEATHSIG = 1
PROMETHEUS_ENV = "PROMETHEUS_MULTIPROC_DIR"
_metrics_dir: list[str] = []  # CMD's counters folder, for the signal handler to remove


def new_metrics_dir(env: dict[str, str] | os._Environ[str]) -> str:
    """A fresh folder for a server's counters, inside ``env``'s ``$PROMETHEUS_MULTIPROC_DIR``
    when that is set (the launcher's and this guard's own)."""
    return tempfile.mkdtemp(prefix="dpbench-prometheus-", dir=env.get(PROMETHEUS_ENV))


def _remove_metrics_dir() -> None:
    while _metrics_dir:
        shutil.rmtree(_metrics_dir.pop(), ignore_errors=True)


def _others() -> list[int]:
    me = os.getpid()
    return [p for p in group_members(os.getpgrp()) if p != me]


def _take_down_group(grace_s: float) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.killpg(os.getpgrp(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _others() and time.monotonic() < deadline:
        time.sleep(0.1)
    _remove_metrics_dir()  # before the SIGKILL that ends this process too
    os.killpg(os.getpgrp(), signal.SIGKILL)  # ends the guard as well


def main(argv: list[str]) -> int:
    usage = "usage: python -m dpbench.server.guard [--metrics-dir DIR] -- CMD [ARGS…]"
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print(usage, file=sys.stderr)
        return 2
    cmd, options = argv[argv.index("--") + 1 :], argv[: argv.index("--")]
    if options and (len(options) != 2 or options[0] != "--metrics-dir"):
        print(usage, file=sys.stderr)
        return 2
    parent = os.getppid()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1

    def on_signal(signum: int, frame: FrameType | None) -> None:
        _take_down_group(GRACE_S)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if options:
        os.makedirs(options[1], exist_ok=True)
    _metrics_dir.append(options[1] if options else new_metrics_dir(os.environ))
    child = subprocess.Popen(cmd, env={**os.environ, PROMETHEUS_ENV: _metrics_dir[0]})
    rc = child.wait()
    if _others():  # CMD is gone; nothing it started may outlive it
        _take_down_group(GRACE_S)
    _remove_metrics_dir()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
