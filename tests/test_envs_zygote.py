"""Runs forked from a zygote behave as the processes ``subprocess`` would have started.

The zygotes here preload ``json`` (``DPBENCH_ZYGOTE_PRELOAD``) in this checkout's own
interpreter, in a directory of their own, owned by the test: the mechanics without SGLang's
11-second import. The release environments' zygotes (SGLang's scheduler preloaded) run the
twin and the placement probe in the rest of the suite, where the identity test holds their
numbers to the stored reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dpbench.core.procs import alive
from dpbench.envs import zygote

PY = str(Path(sys.executable).absolute())


@pytest.fixture
def zdir(tmp_path, monkeypatch):
    where = tmp_path / "z"
    monkeypatch.setenv(zygote.ENV_DIR, str(where))
    monkeypatch.setenv(zygote.ENV_OWNER, str(os.getpid()))
    monkeypatch.setenv("DPBENCH_ZYGOTE_PRELOAD", "json")
    yield where
    zygote.stop_all(where)


def _zygote_pids(where: Path) -> set[int]:
    return {json.loads(m.read_text())["pid"] for m in where.glob("*.json")}


ARGS_CWD_ENV = (
    "import os, sys; print(sys.argv, os.getcwd(), os.environ['ZT']); "
    "print('to stderr', file=sys.stderr); sys.exit(3)"
)
CASES = {
    "argv, cwd, env and both streams": ["-c", ARGS_CWD_ENV, "a", "b"],
    "an exception": ["-c", "raise ValueError('boom')"],
    "a message to sys.exit": ["-c", "import sys; sys.exit('went wrong')"],
    "a module with -m": ["-m", "json.tool", "--help"],
    "a module on PYTHONPATH": ["-m", "zt_mod", "x"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_forked_run_gives_what_a_fresh_process_gives(zdir, tmp_path, name):
    argv = CASES[name]
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "zt_mod.py").write_text("import sys\nprint('zt_mod', sys.argv[1:], __name__)\n")
    env = {**os.environ, "ZT": "here", "PYTHONPATH": str(mods)}
    fresh = subprocess.run([PY, *argv], capture_output=True, text=True, cwd=tmp_path, env=env)
    forked = zygote.run([PY, *argv], cwd=tmp_path, env=env, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert _zygote_pids(zdir), "no zygote started: the run was not forked"


def test_a_run_is_the_zygote_s_child_leading_its_own_session(zdir, tmp_path):
    code = "import os, json; print(json.dumps([os.getppid(), os.getsid(0), os.getpid()]))"
    proc = zygote.run([PY, "-c", code], cwd=tmp_path, env=os.environ, timeout=60)
    ppid, sid, pid = json.loads(proc.stdout)
    assert {ppid} == _zygote_pids(zdir)
    assert sid == pid


def test_streamed_lines_arrive_while_the_run_goes_on(zdir, tmp_path):
    code = "import sys, time\nfor i in range(3):\n    print(i)\n    time.sleep(0.3)\n"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with zygote.popen([PY, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE) as proc:
        assert isinstance(proc, zygote.ZygoteProcess)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == "0\n" and proc.poll() is None  # the run has not ended yet
        assert proc.stdout.read() == "1\n2\n"
    assert proc.returncode == 0


def test_a_timeout_kills_the_run_and_what_it_started(zdir, tmp_path):
    code = textwrap.dedent("""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    out = tmp_path / "out"
    with open(out, "w") as fh:
        proc = zygote.popen([PY, "-c", code], cwd=tmp_path, env=os.environ, stdout=fh)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)
        zygote.kill_session(proc)
    grandchild = int(out.read_text())
    assert proc.returncode == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(grandchild)
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env=os.environ,
                   timeout=1)  # fmt: skip


def test_an_import_time_variable_gets_a_zygote_started_with_it(zdir, tmp_path):
    code = "import os; print(os.environ.get('TRITON_INTERPRET'), os.getppid())"
    plain = zygote.run([PY, "-c", code], cwd=tmp_path, env=os.environ, timeout=60)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    interp = zygote.run([PY, "-c", code], cwd=tmp_path, env=env, timeout=60)
    (p_var, p_parent), (i_var, i_parent) = plain.stdout.split(), interp.stdout.split()
    assert (p_var, i_var) == ("None", "1")
    assert p_parent != i_parent and {int(p_parent), int(i_parent)} == _zygote_pids(zdir)
    (meta,) = [m for m in zdir.glob("*.json") if json.loads(m.read_text())["pid"] == int(i_parent)]
    assert json.loads(meta.read_text())["import_time"] == {"TRITON_INTERPRET": "1"}


def test_without_a_directory_a_run_is_a_fresh_process(monkeypatch, tmp_path):
    monkeypatch.delenv(zygote.ENV_DIR, raising=False)
    proc = zygote.popen([PY, "-c", "pass"], cwd=tmp_path, env=os.environ)
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(timeout=60) == 0


def test_a_zygote_ends_with_its_owner_and_takes_its_runs(tmp_path, monkeypatch):
    owner = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    where = tmp_path / "z"
    monkeypatch.setenv(zygote.ENV_DIR, str(where))
    monkeypatch.setenv(zygote.ENV_OWNER, str(owner.pid))
    monkeypatch.setenv("DPBENCH_ZYGOTE_PRELOAD", "json")
    try:
        run = zygote.popen([PY, "-c", "import time; time.sleep(120)"], cwd=tmp_path,
                           env=os.environ)  # fmt: skip
        (pid,) = _zygote_pids(where)
        owner.kill()
        owner.wait()
        assert run.wait(timeout=15) == -signal.SIGKILL
        deadline = time.monotonic() + 15
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid)
        assert not list(where.glob("*.json")) and not list(where.glob("*.sock"))
    finally:
        owner.kill()
        owner.wait()
        zygote.stop_all(where)


def test_an_exit_status_sent_with_the_pid_is_read():
    """A quick run may end before its caller reads its pid: both lines then come at once."""
    import socket

    from dpbench.envs.zygote import client

    ours, theirs = socket.socketpair()
    theirs.sendall(b"42\nexit 3\n")
    line, rest = client._read_line(ours)
    proc = zygote.ZygoteProcess(["x"], int(line), ours, None)
    proc._take(rest)
    assert (proc.pid, proc.poll(), proc.wait(timeout=0)) == (42, 3, 3)
    theirs.close()


def test_two_threads_waiting_on_one_run_both_see_its_end(zdir, tmp_path):
    """run_in_env waits on a run while its timeout's timer may kill and wait on it too."""
    import threading

    proc = zygote.popen([PY, "-c", "import time; time.sleep(1)"], cwd=tmp_path, env=os.environ)
    seen: list[object] = []

    def waiter(timeout: float | None) -> None:
        try:
            seen.append(proc.wait(timeout))
        except BaseException as e:
            seen.append(e)

    threads = [threading.Thread(target=waiter, args=(t,)) for t in (None, 0.3, 5.0, None)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ends = [x for x in seen if not isinstance(x, subprocess.TimeoutExpired)]
    assert ends == [0, 0, 0], seen
    for _ in range(3):  # once it has ended, every wait and poll answers at once
        assert (proc.wait(0), proc.poll()) == (0, 0)
