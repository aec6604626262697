"""A forked run: take the caller's streams, directory and environment, run as ``python`` would."""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import signal
import sys
import threading
import traceback
import types
from typing import Any


def child_main(request: dict[str, Any], fds: list[int]) -> None:
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        _stdio(unbuffered=bool(request["env"].get("PYTHONUNBUFFERED")))
        os.chdir(request["cwd"])
        zygote_paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        os.environ.clear()
        os.environ.update(request["env"])
        wanted = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        rest = [p for p in sys.path[1:] if p not in zygote_paths and p not in wanted]
        argv = request["argv"]
        sys.path[:] = ["" if argv[0] == "-c" else request["cwd"], *wanted, *rest]
        code = _main(argv)
    except BaseException:  # a run's own failure is reported as Python would
        traceback.print_exc()
    finally:
        _exit(code)


def _stdio(unbuffered: bool) -> None:
    """New ``sys.std*`` over the run's descriptors, buffered as ``python`` (``-u``) buffers them."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    for name, fd in (("stdout", 1), ("stderr", 2)):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding="utf-8",
            errors="backslashreplace" if name == "stderr" else "strict",
            line_buffering=name == "stderr" or raw.isatty(),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _main(argv: list[str]) -> int:
    """Run ``-m MOD args`` or ``-c CODE args`` as ``__main__``; its exit status."""
    import runpy

    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]
        else:
            sys.argv = ["-c", *argv[2:]]
            main.__dict__["__builtins__"] = __builtins__
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException as e:  # as the interpreter: the traceback (from the run's code), status 1
        tb = e.__traceback__.tb_next if e.__traceback__ and argv[0] == "-c" else e.__traceback__
        traceback.print_exception(type(e), e, tb)
        return 1
    return 0


def _exit(code: int) -> None:
    """End as the interpreter would: wait for non-daemon threads, run atexit, flush."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)
