"""Shared checks and result filing for the asv suites: skips, SGLang detection, run files."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpbench.core import results
from dpbench.core.paths import results_dir

# The scenario the simulated-forward server and the twin both run (the fidelity view pairs
# them): a CPU-sized high-KV spec at SGLang's H200 default global chunk size, the device
# the cost model models (SGLang's own CPU default would be 4096).
FIDELITY_SPEC = "long-prompt-burst-small"
FIDELITY_CHUNKED_PREFILL = 8192


def require_cuda(n: int = 1) -> int:
    """Skip (asv: NotImplementedError in setup) unless at least ``n`` CUDA GPUs are visible.

    torch failing to import is a broken environment (every tier's environment has it), so it
    propagates and fails the benchmark: only missing hardware skips."""
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < n:
        raise NotImplementedError(f"needs ≥{n} CUDA GPU(s); found {found}")
    return found


def require_sglang(components: tuple[str, ...] = ("adder", "delayer")) -> dict[str, Any]:
    """The installed SGLang's provenance (``{"sglang", "placement"}``); skip with the one-line difference if unsupported.

    ``components`` names what the benchmark drives (see ``generations.COMPONENTS``): a
    release whose delayer changed can still run benchmarks that only drive the adder. An
    SGLang whose own module or name is missing is an unsupported shape (a skip, naming it); any
    other import failure (``detect.BrokenEnvironment``) or error propagates and fails the benchmark.
    """
    from dpbench.sglang_compat.detect import UnsupportedSGLang
    from dpbench.sglang_compat.provenance import provenance

    try:
        return provenance(components)
    except UnsupportedSGLang as exc:
        raise NotImplementedError(str(exc)) from exc


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


def metric(result: dict[str, Any], name: str) -> float:
    """A metric's value from a run result; a missing metric is an error naming what exists."""
    try:
        return result["metrics"][name]["value"]
    except KeyError:
        raise KeyError(
            f"metric {name!r} not in run result; has {sorted(result.get('metrics', {}))}"
        ) from None


def delayer_metric(result: dict[str, Any], name: str, delayer: str) -> float:
    """A metric only the delayer produces: NaN (not measured) with the delayer off; with it on a
    missing one fails the benchmark naming it (a renamed counter must not read as "not measured")."""
    if delayer == "off":
        found = result.get("metrics", {}).get(name)
        if found is not None:
            raise KeyError(f"metric {name!r} present in a delayer-off run; it is the delayer's")
        return float("nan")
    return metric(result, name)


def optional_metric(result: dict[str, Any], name: str) -> float:
    """A metric the run result may leave out because it was not measured: NaN (asv: no value) then.

    The run result's ``notes`` say why (e.g. "static analysis: unknown (…)").
    """
    found = result.get("metrics", {}).get(name)
    return float("nan") if found is None else found["value"]


class SettingFailed(RuntimeError):
    """One setting of a benchmark class's cache failed; the others were kept."""


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


def _outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    import traceback

    from dpbench.sglang_compat.detect import UnsupportedSGLang

    try:
        return "ok", run()
    except UnsupportedSGLang as exc:
        return "skip", str(exc)
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc)[-6:])
        return "error", f"{type(exc).__name__}: {exc}\n{tail}"


def _in_child(run: Callable[[], Any], conn: Any) -> None:
    from dpbench.core.procs import die_with_parent

    die_with_parent()  # asv killing the benchmark (timeout, Ctrl-C) takes the settings with it
    try:
        conn.send(_outcome(run))
    finally:
        conn.close()


def _run_forked(runs: list[Callable[[], Any]], jobs: int) -> list[tuple[str, Any]]:
    """Each run in its own forked process, ``jobs`` at a time, outcomes in ``runs``' order.

    Forked, so closures need no pickling and each setting starts from the parent's state as
    a serial run would (SGLang imported once, nothing of another setting's run). Once a
    setting reports an unsupported shape no new one starts (the rest skip, as serially)."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("fork")
    out: dict[int, tuple[str, Any]] = {}
    todo = list(enumerate(runs))
    running: dict[Any, tuple[int, Any]] = {}
    try:
        while todo or running:
            skipped = any(kind == "skip" for kind, _ in out.values())
            while todo and len(running) < jobs and not skipped:
                i, run = todo.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_in_child, args=(run, send), name=f"setting-{i}")
                proc.start()
                send.close()
                running[recv] = (i, proc)
            if not running:
                break
            for recv in wait(list(running)):
                i, proc = running.pop(recv)
                try:
                    out[i] = recv.recv()
                except EOFError:
                    proc.join()
                    out[i] = ("error", f"the setting's process died with exit code {proc.exitcode}")
                recv.close()
                proc.join()
    finally:
        for recv, (_, proc) in running.items():  # an error or Ctrl-C here: no orphans
            proc.kill()
            proc.join()
            recv.close()
    return [out.get(i, ("skip", None)) for i in range(len(runs))]


def cache_settings(settings: Any, jobs: int = 1) -> dict[str, Any]:
    """``{key: what run() returned}`` over ``settings`` (``(key, run)`` pairs), ``jobs`` at a time
    (each in a forked process when ``jobs`` > 1; the entries are the same either way).

    A setting that fails is recorded as ``{"error": …}`` and the next ones still run; an
    unsupported API shape (``UnsupportedSGLang``, raised by the release, not by this suite)
    is recorded as ``{"skip": …}`` for that setting and every later one (the same SGLang
    will not grow the shape back). Completed settings are always kept. :func:`cached`
    turns an entry back into its benchmark's outcome: a result, a skip, or a failure.
    """
    pairs = list(settings)
    if jobs > 1 and len(pairs) > 1:
        outcomes = _run_forked([run for _, run in pairs], jobs)
    else:
        outcomes = []
        for _, run in pairs:
            if any(kind == "skip" for kind, _ in outcomes):
                outcomes.append(("skip", None))
                continue
            outcomes.append(_outcome(run))
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


def cached(cache: dict[str, Any], key: str) -> dict[str, Any]:
    """A setting's entry from :func:`cache_settings`: the whole cache's skip, the setting's
    skip (asv: skipped), its failure (asv: failed, with the original error), or its result."""
    if "skip" in cache and isinstance(cache["skip"], str):
        raise NotImplementedError(cache["skip"])
    entry = cache[key]
    if "skip" in entry:
        raise NotImplementedError(entry["skip"])
    if "error" in entry:
        raise SettingFailed(f"setting {key} failed in setup_cache: {entry['error']}")
    return entry
