"""Where a whole ``make test`` spends its CPU, SGLang servers included (a development tool).

``DPBENCH_TEST_CPU_LOG`` (tests/conftest.py) counts a test's worker and the children it
reaps; a server's processes live in a session of their own and are not counted there. This
reads every process in ``/proc`` twice a second instead, and names each after the test that
started it: ``PYTEST_CURRENT_TEST`` in its own environment, else in its session leader's
(SGLang retitles its processes, which overwrites their environment; the launcher's guard
leads their session and is never retitled). A process's CPU is its last reading, so one that
lives under half a second may be missed; one already alive when recording starts (the
machine's own daemons and kernel threads) counts only what it uses from then on. A run forked by a release environment's zygote
(dpbench.envs.zygote) keeps the zygote's command line and environment: it counts under the
zygote's kind, and under the test that started the zygote.

    python3 tests/cpu_sampler.py record OUT.json &   # stop it with SIGTERM when the run ends
    python3 tests/cpu_sampler.py files OUT.json      # CPU per test file
    python3 tests/cpu_sampler.py kinds OUT.json      # CPU per kind of process
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time
from pathlib import Path

KINDS = (
    ("server (launch_server)", "sglang.launch_server"),
    ("server (SGLang's spawned processes)", "spawn_main"),
    ("bytecode (compileall)", "compileall"),
    ("asv", "asv"),
    (
        "zygote: one SGLang import per environment, and the runs forked from it",
        "dpbench.envs.zygote",
    ),
    ("twin subprocess", "dpbench.twin.run"),
    ("twin batch (tests)", "twin_batch"),
    ("Chromium", "chrom"),
    ("other in a release environment", ".cache/envs/"),
)


def _test_name(pid: str) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    hits = [x for x in env if x.startswith(b"PYTEST_CURRENT_TEST=")]
    return hits[0].decode(errors="replace").split("=", 1)[1] if hits else None


def record(out: str) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[tuple[int, int], dict] = {}
    leaders: dict[int, str | None] = {}
    first = True  # processes alive at the start count only the CPU they use from then on
    while not stop:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    stat = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            key = (int(pid), int(stat[19]))  # a pid and its start time: one process
            cpu = (int(stat[11]) + int(stat[12])) / tick
            if key not in seen:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:160]
                except OSError:
                    cmd = "?"
                seen[key] = {"cmd": cmd, "session": int(stat[3]), "test": _test_name(pid)}
                seen[key]["before_s"] = cpu if first else 0.0
            seen[key]["cpu_s"] = cpu - seen[key]["before_s"]
            if int(pid) == int(stat[3]) and int(pid) not in leaders:
                leaders[int(pid)] = _test_name(pid)
        first = False
        time.sleep(0.5)
    rows = [{**row, "test": row["test"] or leaders.get(row["session"])} for row in seen.values()]
    with open(out + ".tmp", "w") as fh:
        json.dump(rows, fh)
    os.replace(out + ".tmp", out)


def summary(how: str, path: str) -> None:
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for row in json.loads(Path(path).read_text()):
        if how == "files":
            key = (row["test"] or "(no test)").split("::")[0]
        else:
            key = next((k for k, mark in KINDS if mark in row["cmd"]), "other")
        total[key] += row["cpu_s"]
        count[key] += 1
    for key, cpu in total.most_common(40):
        print(f"{cpu:8.1f} s  {count[key]:4d} processes  {key}")
    print(f"{sum(total.values()):8.1f} s  in all")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "files", "kinds"):
        sys.exit(__doc__)
    record(sys.argv[2]) if sys.argv[1] == "record" else summary(sys.argv[1], sys.argv[2])
