"""What an asv ``setup_cache`` keeps: one entry per setting, run side by side where it may.

A benchmark class measures a grid of settings (its parameters × seeds, windows or replays).
:func:`run_settings` runs them, in forked processes ``jobs`` at a time or one by one, and
keeps one entry per setting under :func:`setting_key`: what the run returned,
``{"skip": why}`` (an unsupported SGLang: that setting and every later one) or
``{"error": what}`` (that setting failed; the others still ran). ``benchmarks/common.py``
turns an entry back into asv's outcome and reads it under the same key.

:func:`save_run` files a run result beside asv's results, so the dashboard shows its detail.
Each tier's ``bench`` module calls these; nothing here knows a tier.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dpbench.core import results
from dpbench.core.paths import results_dir

Outcome = tuple[str, Any]  # ("ok" | "skip" | "error", the result or why)
Skips = tuple[type[BaseException], ...]


def setting_key(*parts: Any) -> str:
    """The cache key of one setting: its parameter values and its sample, in order."""
    return "-".join(str(p) for p in parts)


def skipped(why: str) -> dict[str, str]:
    """A whole cache that is a skip (missing hardware, an unsupported SGLang, a missing file)."""
    return {"skip": why}


def cuda_count() -> int:
    """The CUDA GPUs visible. torch failing to import is a broken environment (every tier's
    environment has it), so it propagates and fails the benchmark: only missing hardware skips."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing_cuda(n: int = 1) -> str | None:
    """Why this machine cannot run a benchmark that needs ``n`` CUDA GPUs, or None."""
    found = cuda_count()
    return None if found >= n else f"needs ≥{n} CUDA GPU(s); found {found}"


def run_file(tier: str, name: str) -> Path:
    """results/runs/<commit>/<tier>/<name>.json, the commit being asv's (ASV_COMMIT) or 'local'."""
    commit = os.environ.get("ASV_COMMIT", "local")
    root = (
        Path(os.environ["ASV_CONF_DIR"]) / "results"
        if "ASV_CONF_DIR" in os.environ
        else results_dir()
    )
    safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)
    return root / "runs" / commit / tier / f"{safe}.json"


def save_run(tier: str, name: str, result: dict[str, Any]) -> Path:
    """File a run result beside asv's results (atomically), so the dashboard shows its detail."""
    return results.save(run_file(tier, name), result)


def bench_jobs() -> int:
    """How many of a twin benchmark's settings run at once: ``DPBENCH_BENCH_JOBS``, else the
    CPUs this process may use (at most 8). Each setting is one single-threaded twin run, so
    on the 2-core runner two run side by side; the simulated server's settings never do (a
    server's clock needs the CPU it waits on)."""
    raw = os.environ.get("DPBENCH_BENCH_JOBS")
    if raw is None:
        return max(1, min(len(os.sched_getaffinity(0)), 8))
    try:
        jobs = int(raw)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise ValueError(f"DPBENCH_BENCH_JOBS must be a whole number ≥ 1, got {raw!r}")
    return jobs


def _outcome(run: Callable[[], Any], skip_on: Skips) -> Outcome:
    import traceback

    try:
        return "ok", run()
    except skip_on as exc:
        return "skip", str(exc)
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc)[-6:])
        return "error", f"{type(exc).__name__}: {exc}\n{tail}"


def _in_child(run: Callable[[], Any], skip_on: Skips, conn: Any) -> None:
    from dpbench.core.procs import die_with_parent

    die_with_parent()  # asv killing the benchmark (timeout, Ctrl-C) takes the settings with it
    try:
        conn.send(_outcome(run, skip_on))
    finally:
        conn.close()


def _collect(running: dict[Any, tuple[int, Any]], out: dict[int, Outcome]) -> None:
    """Wait for at least one running setting; record what each finished one sent."""
    from multiprocessing.connection import wait

    for recv in wait(list(running)):
        i, proc = running.pop(recv)
        try:
            out[i] = recv.recv()
        except EOFError:
            proc.join()
            out[i] = ("error", f"the setting's process died with exit code {proc.exitcode}")
        recv.close()
        proc.join()


def _run_forked(runs: list[Callable[[], Any]], jobs: int, skip_on: Skips) -> list[Outcome]:
    """Each run in its own forked process, ``jobs`` at a time, outcomes in ``runs``' order.

    Forked, so closures need no pickling and each setting starts from the parent's state as
    a serial run would (SGLang imported once, nothing of another setting's run). Once a
    setting reports an unsupported shape no new one starts (the rest skip, as serially)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    out: dict[int, Outcome] = {}
    todo = list(enumerate(runs))
    running: dict[Any, tuple[int, Any]] = {}
    try:
        while todo or running:
            skipped_one = any(kind == "skip" for kind, _ in out.values())
            while todo and len(running) < jobs and not skipped_one:
                i, run = todo.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_in_child, args=(run, skip_on, send), name=f"setting-{i}")
                proc.start()
                send.close()
                running[recv] = (i, proc)
            if not running:
                break
            _collect(running, out)
    finally:
        for recv, (_, proc) in running.items():  # an error or Ctrl-C here: no orphans
            proc.kill()
            proc.join()
            recv.close()
    return [out.get(i, ("skip", None)) for i in range(len(runs))]


def _run_serially(runs: list[Callable[[], Any]], skip_on: Skips) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for run in runs:
        if any(kind == "skip" for kind, _ in outcomes):
            outcomes.append(("skip", None))
        else:
            outcomes.append(_outcome(run, skip_on))
    return outcomes


def run_settings(
    settings: Iterable[tuple[str, Callable[[], Any]]], jobs: int = 1, *, skip_on: Skips = ()
) -> dict[str, Any]:
    """``{key: what run() returned}`` over ``settings`` (``(key, run)`` pairs), ``jobs`` at a time
    (each in a forked process when ``jobs`` > 1; the entries are the same either way).

    A setting that fails is recorded as ``{"error": …}`` and the next ones still run; one that
    raises one of ``skip_on`` (an unsupported API shape, raised by the release, not by this
    suite) is recorded as ``{"skip": …}`` with every later one (the same SGLang will not grow
    the shape back). Completed settings are always kept.
    """
    pairs = list(settings)
    runs = [run for _, run in pairs]
    if jobs > 1 and len(pairs) > 1:
        outcomes = _run_forked(runs, jobs, skip_on)
    else:
        outcomes = _run_serially(runs, skip_on)
    out: dict[str, Any] = {}
    skip: str | None = None
    for (key, _), (kind, value) in zip(pairs, outcomes, strict=True):
        if skip is None and kind == "skip":
            skip = value or "an earlier setting's SGLang API shape is unsupported"
        if skip is not None:
            out[key] = {"skip": skip}
        elif kind == "error":
            out[key] = {"error": value}
        else:
            out[key] = value
    return out
