"""Process housekeeping shared by the tiers: free loopback ports, parent-death signals, /proc scans."""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port_with(
    offsets: Iterable[int], host: str = "127.0.0.1", low: int = 20000, high: int = 30000
) -> int:
    """A free port ``p`` with ``p + o`` free too for every offset, drawn from [low, high).

    For servers that derive more ports from the one they are given (SGLang: ``--port +
    10000`` for gRPC, which must stay ≤ 65535): the kernel's own choice comes from the
    ephemeral range (32768–60999), where such a derived port can fall off the end.
    """
    rng = random.SystemRandom()
    wanted = (0, *offsets)
    for _ in range(500):
        port = rng.randrange(low, high)
        if all(_is_free(host, port + o) for o in wanted):
            return port
    raise RuntimeError(
        f"no port p in [{low}, {high}) on {host} with p + {list(offsets)} free as well "
        "after 500 tries; is something holding most of that range?"
    )


def _is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def die_with_parent() -> None:
    """In a child: ask Linux to SIGKILL this process when its parent dies (no orphans)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _live_processes() -> Iterator[tuple[int, int, int]]:
    """(pid, ppid, pgrp) of every process that is not a zombie, read from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # fields after the parenthesised command: state ppid pgrp ...
        rest = stat.rsplit(")", 1)[1].split()
        if rest[0] != "Z":
            yield int(entry), int(rest[1]), int(rest[2])


def group_members(pgid: int) -> list[int]:
    """PIDs whose process group is ``pgid`` (zombies excluded)."""
    return [pid for pid, _, pgrp in _live_processes() if pgrp == pgid]


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (zombies excluded)."""
    return [p for p, ppid, _ in _live_processes() if ppid == pid]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, …), whatever their process group."""
    table = [(p, ppid) for p, ppid, _ in _live_processes()]
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, ppid in table if ppid == parent]
        found += kids
        frontier += kids
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
