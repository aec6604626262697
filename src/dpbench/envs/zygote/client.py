"""The caller's side: start a run by a zygote (starting the zygote first if need be)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dpbench.envs.zygote.protocol import ENV_DIR, ENV_OWNER, START_TIMEOUT_S, import_time


class ZygoteProcess:
    """A run forked by a zygote: the part of ``subprocess.Popen``'s interface the tiers use.

    It leads a session of its own (``os.killpg(proc.pid, …)`` reaches all it started); its
    exit status comes from the zygote, which reaps it. Several threads may wait on it at
    once (a timeout's timer beside the reader), as on a ``Popen``: one reads at a time.
    """

    def __init__(self, args: Sequence[str], pid: int, conn: socket.socket, stdout: IO[Any] | None):
        self.args, self.pid, self.stdout, self.returncode = list(args), pid, stdout, None
        self._conn, self._buf, self._reading = conn, b"", threading.Lock()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._read(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, timeout: float | None) -> None:
        if not self._reading.acquire(timeout=-1 if timeout is None else timeout):
            return
        try:
            if self.returncode is not None:  # another thread read it meanwhile
                return
            self._conn.settimeout(timeout)
            try:
                chunk = self._conn.recv(64)
            except (TimeoutError, BlockingIOError):
                return
            if not chunk:  # the zygote is gone: its runs were killed with it
                self.returncode = -signal.SIGKILL
                self._conn.close()
            self._take(chunk)
        finally:
            self._reading.release()

    def _take(self, chunk: bytes) -> None:
        """Read the exit status (``exit N``) once its whole line is here."""
        self._buf += chunk
        if self.returncode is None and b"\n" in self._buf:
            self.returncode = int(self._buf.split(b"\n", 1)[0].split()[1])
            self._conn.close()

    def __enter__(self) -> ZygoteProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.stdout is not None:
            self.stdout.close()
        if self.returncode is None:
            self.wait()


def popen(
    cmd: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    text: bool = True,
) -> ZygoteProcess | subprocess.Popen[Any]:
    """``subprocess.Popen(cmd, …, start_new_session=True)``, forked from ``cmd[0]``'s zygote
    where it can be (see the module's docstring). ``stdout`` may be ``subprocess.PIPE``."""
    where = _zygote_for(str(cmd[0]), env) if len(cmd) > 2 and cmd[1] in ("-m", "-c") else None
    conn = None if where is None else _connect(where)
    if conn is None:
        return subprocess.Popen(list(cmd), cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr,
                                text=text, start_new_session=True)  # fmt: skip
    read_end = None
    with contextlib.ExitStack() as closing:
        null = closing.enter_context(open(os.devnull, "rb"))
        if stdout == subprocess.PIPE:
            read_end, write_end = os.pipe()
            closing.callback(os.close, write_end)
            out_fd = write_end
        else:
            out_fd = _fd(stdout, 1)
        err_fd = out_fd if stderr == subprocess.STDOUT else _fd(stderr, 2)
        request = {"argv": list(cmd[1:]), "cwd": str(Path(cwd).resolve()), "env": dict(env)}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"],
                        [null.fileno(), out_fd, err_fd])  # fmt: skip
        line, rest = _read_line(conn)
    reader = None if read_end is None else os.fdopen(read_end, "r" if text else "rb")
    proc = ZygoteProcess(cmd, int(line), conn, reader)
    proc._take(rest)  # a quick run's exit status may come with its pid
    return proc


def run(
    cmd: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, …)`` by :func:`popen`; on a
    timeout the run's whole session is killed and reaped before ``TimeoutExpired`` is raised."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        try:
            proc.wait(timeout)
        except BaseException:
            kill_session(proc)
            raise
        out.seek(0)
        err.seek(0)
        status = proc.returncode
        assert status is not None
        return subprocess.CompletedProcess(list(cmd), status, out.read(), err.read())


def kill_session(proc: ZygoteProcess | subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL, to the session ``proc`` leads, and reap ``proc``."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stop_all(directory: str | os.PathLike[str]) -> None:
    """SIGTERM to every zygote started under ``directory`` (each kills its runs, then exits)."""
    for meta in Path(directory).glob("*.json"):
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            os.kill(int(json.loads(meta.read_text())["pid"]), signal.SIGTERM)


def _fd(stream: int | IO[Any] | None, default: int) -> int:
    if stream is None:
        return default
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"a zygote run takes a file or PIPE (stdout), not {stream}")
        return stream
    stream.flush()
    return stream.fileno()


def _read_line(conn: socket.socket) -> tuple[bytes, bytes]:
    """The first line from the zygote, and what came after it."""
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(64)
        if not chunk:
            raise RuntimeError("the zygote closed the connection before it started the run")
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    return line.strip(), rest


def _connect(sock: Path) -> socket.socket | None:
    """A connection to the zygote at ``sock``, or None if it is gone (its owner ended it)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(sock))
    except OSError:
        conn.close()
        return None
    return conn


def _zygote_for(python: str, env: Mapping[str, str]) -> Path | None:
    """The socket of the zygote for ``python`` and ``env``'s import-time variables (started
    now if need be), or None: start afresh. An environment rebuilt in place (its stamp
    rewritten) gets a zygote of its own."""
    directory = os.environ.get(ENV_DIR)
    if not directory or not Path(python).is_file():
        return None
    wanted = import_time(env)
    stamp = Path(python).parent.parent / "dpbench-env.json"
    built = (stamp.stat().st_ino, stamp.stat().st_mtime_ns) if stamp.exists() else None
    key = json.dumps([python, built, sorted(wanted.items())])
    base = Path(directory) / hashlib.sha1(key.encode()).hexdigest()[:16]
    if not _started(base, python, wanted):
        return None
    return base.with_suffix(".sock")


def _started(base: Path, python: str, wanted: dict[str, str]) -> bool:
    meta, failed = base.with_suffix(".json"), base.with_suffix(".failed")
    if not meta.exists() and not failed.exists():
        base.parent.mkdir(parents=True, exist_ok=True)
        with open(base.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not meta.exists() and not failed.exists():
                _start(base, python, wanted)
    return meta.exists() and not failed.exists()


def _start(base: Path, python: str, wanted: dict[str, str]) -> None:
    from dpbench.core.paths import project_root

    owner = os.environ.get(ENV_OWNER, str(os.getpid()))
    ours = import_time(os.environ)  # replaced by the run's own import-time variables
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and k not in ours}
    env.update(wanted)
    with open(base.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(
            [python, "-m", "dpbench.envs.zygote", str(base), owner],
            cwd=project_root(), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
    end = time.monotonic() + START_TIMEOUT_S
    while not base.with_suffix(".json").exists():
        if proc.poll() is not None or time.monotonic() > end:
            kill_session(proc)
            base.with_suffix(".failed").write_text(f"status {proc.returncode}; see the .log\n")
            return
        time.sleep(0.1)
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it exits
