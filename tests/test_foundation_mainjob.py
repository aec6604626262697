"""The main job's step runner: Ctrl-C or SIGTERM stops a step and every process under it.

asv starts benchmarks and installs in process groups of their own, so a step's tree is
modelled here by a leader that ignores SIGTERM and a grandchild in a new session.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dpbench.core.procs import alive, descendants

TREE = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
        start_new_session=True)
    print("TREE", child.pid, flush=True)
    time.sleep(600)
    """
)

DRIVER = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    from dpbench.mainjob import job as mainjob
    signal.signal(signal.SIGTERM, mainjob._sigterm_to_exit)
    mainjob._run([sys.executable, "-c", sys.argv[1]], cwd=Path("."))
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_step_leaves_no_process(sig):
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, TREE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = driver.stdout.readline()
        assert line.startswith("TREE"), line
        grandchild = int(line.split()[1])
        deadline = time.monotonic() + 10
        while len(descendants(driver.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = descendants(driver.pid)
        assert grandchild in tree and len(tree) >= 2
        driver.send_signal(sig)
        rc = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert rc != 0
    deadline = time.monotonic() + 10
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in tree if alive(p)], (
        "processes left behind after the main job was interrupted"
    )


def test_a_niced_step_runs_at_the_lowest_priority_of_its_own_session(capfd):
    """Beside a simulated server the twin's steps must yield the CPU: with autogroup scheduling
    a session is one group whatever its processes' nice values, so the step's session (its
    autogroup) is set to 19 as well, and its children inherit both."""
    from pathlib import Path

    from dpbench.mainjob import job as mainjob

    probe = (
        "import os, subprocess, sys; from pathlib import Path;"
        "group = Path('/proc/self/autogroup').read_text().split() if Path('/proc/self/autogroup').exists() else ['-', '-', '-'];"
        "child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'], capture_output=True, text=True).stdout.strip();"
        "print('PROBE', os.nice(0), group[-1], child, flush=True)"
    )
    assert mainjob._run([sys.executable, "-c", probe], cwd=Path("."), nice=True) == 0
    line = next(x for x in capfd.readouterr().out.splitlines() if x.startswith("PROBE"))
    _, own, group, child = line.split()
    assert own == "19" and child == "19"
    if (
        Path("/proc/self/autogroup").exists()
        and Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    ):
        assert group == "19"
    assert mainjob._run([sys.executable, "-c", probe], cwd=Path(".")) == 0
    line = next(x for x in capfd.readouterr().out.splitlines() if x.startswith("PROBE"))
    assert line.split()[1] == "0"  # not niced unless asked
