"""Run a dpbench module inside an SGLang release's environment: the one way every tier does it.

``run_in_env(version, module, args)`` builds (or reuses) the release's environment, runs
``python -m module args`` there from the project root in a process group of its own,
and returns a ``CompletedProcess``. With ``on_line`` it streams: each stdout line is
handed to the callback as it arrives (the twin's progress events) instead of being
collected. A timeout, a callback that raises, or Ctrl-C kills the whole group and
reaps it before the exception propagates. Under a test session the process is forked from
the environment's zygote, which imported SGLang once (:mod:`.zygote`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from dpbench.core.paths import project_root
from dpbench.envs import zygote
from dpbench.envs.resolve import ensure_env


def release_python(version: str) -> Path:
    """The interpreter of SGLang ``version``'s environment, or a change's (built on first use)."""
    return ensure_env(version).python


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child in a release environment: unbuffered, no VIRTUAL_ENV."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}
    env.pop("VIRTUAL_ENV", None)
    return env


def run_in_env(
    version: str,
    module: str,
    args: Sequence[str] = (),
    *,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in SGLang ``version``'s environment; the child's group is reaped on every exit.

    Returns the exit status, stdout (empty when ``on_line`` consumed it) and stderr.
    Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds, with the group killed.
    """
    python = release_python(version)
    cmd = [str(python), "-m", module, *args]
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = zygote.popen(
            cmd, cwd=project_root(), env=child_env(env), stdout=subprocess.PIPE, stderr=errf
        )
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            zygote.kill_session(proc)

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        out: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if on_line is None:
                    out.append(line)
                else:
                    on_line(line)
            proc.wait()
        except BaseException:
            zygote.kill_session(proc)
            raise
        finally:
            timer.cancel()
        errf.seek(0)
        stderr = errf.read()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout, output="".join(out), stderr=stderr)
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), stderr)
