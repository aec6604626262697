"""The zygote's side: import SGLang once, then fork a run for each caller until the owner exits."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from pathlib import Path

from dpbench.core.procs import alive
from dpbench.envs.zygote.child import child_main
from dpbench.envs.zygote.protocol import ENV_PRELOAD, PRELOAD, import_time


def serve(base: Path, owner: int) -> None:
    """Import :data:`PRELOAD`, then fork a run for each request until ``owner`` exits."""
    for name in os.environ.get(ENV_PRELOAD, ",".join(PRELOAD)).split(","):
        if name:
            __import__(name)
    sys.stdout.flush()
    sys.stderr.flush()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock = base.with_suffix(".sock")
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    listener.bind(str(sock))
    listener.listen(64)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    meta = {"pid": os.getpid(), "python": sys.executable, "import_time": import_time(os.environ)}
    tmp = base.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta))
    tmp.replace(base.with_suffix(".json"))
    try:
        _loop(listener, owner, stopping)
    finally:
        for path in (base.with_suffix(".json"), sock):
            path.unlink(missing_ok=True)


def _loop(listener: socket.socket, owner: int, stopping: list[int]) -> None:
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    runs: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, the caller's connection)
    while not stopping and alive(owner):
        for key, _ in sel.select(timeout=1.0):
            if key.data is None:
                conn, _addr = listener.accept()
                started = _fork_run(conn, listener, sel, runs)
                if started is not None:
                    pidfd = os.pidfd_open(started)
                    runs[pidfd] = (started, conn)
                    sel.register(pidfd, selectors.EVENT_READ, "run")
            else:
                pid, conn = runs.pop(key.fd)
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()
    for pid, _conn in runs.values():  # the owner is gone: so are its runs
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for pid, _conn in runs.values():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _fork_run(
    conn: socket.socket,
    listener: socket.socket,
    sel: selectors.BaseSelector,
    runs: dict[int, tuple[int, socket.socket]],
) -> int | None:
    """Fork the run ``conn`` asks for; its pid, once it leads its own session."""
    try:
        msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        while not msg.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                raise ValueError("the request ended early")
            msg += more
        request = json.loads(msg)
        if len(fds) != 3:
            raise ValueError(f"the request carried {len(fds)} file descriptors, not 3")
    except (OSError, ValueError) as e:
        print(f"zygote: a bad request: {e}", file=sys.stderr, flush=True)
        conn.close()
        return None
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        for pidfd, (_pid, other) in runs.items():  # the other runs' callers see their own ends
            os.close(pidfd)
            other.close()
        sel.close()
        listener.close()
        conn.close()
        os.setsid()
        os.close(ready_w)  # the caller may now signal the session
        child_main(request, fds)  # never returns
    os.close(ready_w)
    for fd in fds:
        os.close(fd)
    os.read(ready_r, 1)  # EOF once the child leads its session (or died)
    os.close(ready_r)
    with contextlib.suppress(OSError):
        conn.sendall(f"{pid}\n".encode())
    return pid
