"""The runs behind the server tier's asv benchmarks (``benchmarks/server.py``): one function per
benchmark class, returning what its ``setup_cache`` keeps.

Each function checks what its class needs (GPUs, a hookable SGLang, CPU cores, a trace file)
and returns a skip naming what is missing; else it runs the class's settings one at a time
(a server's clock needs the CPU it waits on), files each run result beside asv's results and
keys each setting by the class's parameter values (:func:`~dpbench.core.asvcache.setting_key`).
A kept replay carries its metrics, its instrument's verdicts (:mod:`dpbench.server.health`)
and the SLO its goodput was judged by.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dpbench.core.asvcache import (
    cuda_count,
    missing_cuda,
    run_file,
    run_settings,
    save_run,
    setting_key,
    skipped,
)
from dpbench.sglang_compat.detect import UnsupportedSGLang

Params = Sequence[Sequence[Any]]


def _kept(result: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a run: its metrics, the SLO it was judged by and (a simulated
    forward's) its instrument's verdicts."""
    kept = {"metrics": result["metrics"], "slo": result["extra"]["slo"]}
    if "instrument_health" in result["extra"]:
        kept["health"] = result["extra"]["instrument_health"]
    return kept


def _one_at_a_time(settings: Iterable[tuple[Any, ...]], one: Callable[..., Any]) -> dict:
    pairs = [(setting_key(*s), lambda s=s: one(*s)) for s in settings]
    return run_settings(pairs, skip_on=(UnsupportedSGLang,))


def missing_server_gpus(tp: int) -> str | None:
    """Why this machine cannot run a GPU server at tensor-parallel size ``tp`` (≥2 CUDA GPUs,
    ``tp`` of them, SGLang's GPU dependencies importable), or None."""
    why = missing_cuda(2)
    if why is not None:
        return why
    found = cuda_count()
    if found < tp:
        return f"needs {tp} CUDA GPUs for tp={tp} (DPBENCH_SERVER_TP); found {found}"
    missing = [m for m in ("sgl_kernel", "flashinfer") if importlib.util.find_spec(m) is None]
    if missing:
        return f"SGLang's GPU dependencies missing: {', '.join(missing)} not importable"
    return None


def serve_throughput(params: Params) -> dict:
    """Per (workload, DP size, delayer): one GPU server run, DeepSeek-V3's config with dummy
    weights (``DPBENCH_SERVER_MODEL`` names a real checkpoint; ``DPBENCH_SERVER_TP`` the
    tensor-parallel size, default 8)."""
    from dpbench.server.run import RunOptions, execute, prepare

    tp = int(os.environ.get("DPBENCH_SERVER_TP", "8"))
    why = missing_server_gpus(tp)
    if why is not None:
        return skipped(why)

    def one(workload: str, dp: int, delayer: str) -> dict[str, Any]:
        opts = RunOptions(
            spec=workload,
            tp_size=tp,
            dp_size=dp,
            delayer=delayer == "on",
            model_path=os.environ.get("DPBENCH_SERVER_MODEL") or None,
            python=sys.executable,
        )
        result = execute(prepare(opts))
        save_run("server", f"{workload}-dp{dp}-delayer_{delayer}", result)
        return _kept(result)

    return _one_at_a_time(itertools.product(*params), one)


def _comparison_config() -> Any:
    """Client comparison at 1,000 concurrent streams against the protocol test double (CPU)."""
    from dpbench.server.client_bench import ComparisonConfig

    return ComparisonConfig(
        num_requests=3000, concurrency=1000, output_len=8, first_token_delay_s=0.25, itl_s=0.2
    )


def client_overhead() -> dict[str, Any]:
    """This suite's load client against the protocol test double: its row of the comparison."""
    from dpbench.server.client_bench import compare

    found = compare(_comparison_config(), sglang_python=None, double_python=sys.executable)
    return found["clients"][0]


def bench_serving_reference() -> dict[str, Any]:
    """SGLang's own bench_serving, same double and load as :func:`client_overhead`; a skip
    where SGLang is not installed. A failed bench_serving run fails here."""
    import tempfile
    from pathlib import Path

    from dpbench.server.client_bench import measure_bench_serving

    if importlib.util.find_spec("sglang") is None:
        return skipped("SGLang is not installed in this environment")
    with tempfile.TemporaryDirectory() as tmp:
        return measure_bench_serving(
            _comparison_config(),
            sglang_python=sys.executable,
            double_python=sys.executable,
            workdir=Path(tmp),
        )


def missing_cores(dp: int) -> str | None:
    """Why this machine cannot run the simulated server at ``dp``, or None.

    Its instrument holds (device idle ≤ 5 %, dpbench.server.health) with a CPU core per DP
    rank: DP 2 on two cores reads ≤ 0.3 %, DP 4 on two cores 1-9 % on the CPU-sized specs
    (docs/server.md) and, in the main job of 2026-12-03, 5.8-10.7 % in every replay of 0.5.16
    and over 5 % in two of 0.5.23's three: runs whose every metric is then left out as the
    instrument's. Missing hardware, so a skip naming it."""
    have = len(os.sched_getaffinity(0))
    if have >= dp:
        return None
    return (
        f"the simulated server at DP {dp} needs ≥ {dp} CPU cores for its instrument to hold "
        f"(device idle ≤ 5 %); this machine has {have}"
    )


def unhookable() -> str | None:
    """Why this SGLang cannot be hooked for a simulated forward (one line naming the member),
    or None. A check that prints nothing fails: a broken environment, not a skip."""
    import json
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "dpbench.sglang_compat.simforward.check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(
            f"simforward.check printed nothing (status {proc.returncode}): {proc.stderr[-1500:]}"
        )
    verdict = json.loads(lines[-1])
    return None if verdict["ok"] else f"cannot simulate this SGLang's forward: {verdict['error']}"


def replayed_twin_report(
    spec: str,
    dp: int,
    delayer: bool,
    runs: list[dict[str, Any]],
    paths: list[Any],
    *,
    key: str,
    chunk: int,
) -> None:
    """The twin replaying each of these replays' arrivals, paired with them, as `dpbench server
    fidelity` reports it (results/fidelity/main-job-<commit>-<key>.json): the dashboard's
    fidelity page shows it for the commit. A replay that lost requests fails the setting.
    ``key``: the runs' name; ``chunk``: the global chunked-prefill size."""
    from importlib.metadata import version

    from dpbench.server import fidelity

    inp = fidelity.Inputs(
        spec=spec,
        dp=dp,
        release=version("sglang"),
        chunked_prefill_size=chunk,
        delayer=delayer,
        repeats=len(runs),
        flush_replays=True,
    )
    commit = os.environ.get("ASV_COMMIT", "local")[:8]
    fidelity.report_runs(
        inp,
        paths,
        runs,
        out_dir=run_file("server", key).parents[3] / "fidelity",
        python=sys.executable,
        stem=f"main-job-{commit}-{key}",
        made_by="the main job (asv), its flushed replays",
    )


def _replays(spec: str, dp: int, key: str, *, replays: int, chunk: int, **opts: Any) -> dict:
    """``replays`` flushed replays against one simulated-forward server, filed as
    ``<key>-r<k>``, with the twin replaying them beside."""
    from dpbench.server.run import RunOptions, execute_replays, prepare

    options = RunOptions(
        spec=spec,
        dp_size=dp,
        simulate_forward=True,
        chunked_prefill_size=chunk,
        python=sys.executable,
        check_gpus=False,
        **opts,
    )
    runs = execute_replays(prepare(options), replays)
    paths = [save_run("server", f"{key}-r{k}", r) for k, r in enumerate(runs)]
    replayed_twin_report(spec, dp, options.delayer, runs, paths, key=key, chunk=chunk)
    return {"runs": [_kept(r) for r in runs]}


def simulated(params: Params, *, replays: int, chunk: int) -> dict:
    """Per (spec, DP size, delayer): ``replays`` flushed replays of the simulated-forward
    server; a DP size this machine has too few cores for is a skip naming them."""
    from dpbench.core import faults

    faults.inject_if_requested("server-sim")
    why = unhookable()
    if why is not None:
        return skipped(why)
    settings = list(itertools.product(*params))
    too_few = {s: why for s in settings if (why := missing_cores(s[1])) is not None}

    def one(spec: str, dp: int, delayer: str) -> dict[str, Any]:
        key = f"simulated-roofline-{spec}-dp{dp}-delayer_{delayer}"
        return _replays(spec, dp, key, replays=replays, chunk=chunk, delayer=delayer == "on")

    cache = _one_at_a_time((s for s in settings if s not in too_few), one)
    return {**cache, **{setting_key(*s): skipped(why) for s, why in too_few.items()}}


def simulated_virtual(params: Params, *, seeds: Sequence[int], chunk: int) -> dict:
    """Per (spec, DP size, delayer): the simulated-forward server in virtual time
    (``--clock virtual``, docs/virtual-time.md), one start-up replaying each workload seed in
    turn, its caches flushed between (the KV pool sized by the first seed's plan). In virtual
    time a run's numbers depend on its SGLang, spec and seed only, not on this machine's cores
    or load: a DP size needs no core per rank, a seed's run repeats exactly, and the spread
    between runs is the seeds' (other draws of the workload)."""
    from dpbench.core import faults

    faults.inject_if_requested("server-sim")
    why = unhookable()
    if why is not None:
        return skipped(why)

    def one(spec: str, dp: int, delayer: str) -> dict[str, Any]:
        key = f"simulated-virtual-{spec}-dp{dp}-delayer_{delayer}"
        return _virtual_runs(spec, dp, seeds, key, chunk=chunk, delayer=delayer == "on")

    return _one_at_a_time(itertools.product(*params), one)


def _virtual_runs(
    spec: str, dp: int, seeds: Sequence[int], key: str, *, chunk: int, delayer: bool
) -> dict[str, Any]:
    from dpbench.server.prepare import for_seed
    from dpbench.server.run import RunOptions, execute_replays, prepare

    options = RunOptions(
        spec=spec,
        dp_size=dp,
        seed=seeds[0],
        simulate_forward=True,
        clock="virtual",
        chunked_prefill_size=chunk,
        delayer=delayer,
        python=sys.executable,
        check_gpus=False,
    )
    prep = prepare(options)
    clients = [for_seed(prep, s) for s in seeds]
    runs = execute_replays(prep, len(clients), clients=clients)
    for seed, run in zip(seeds, runs, strict=True):
        save_run("server", f"{key}-s{seed}", run)
    return {"runs": [_kept(r) for r in runs]}


def simulated_production_trace(params: Params, *, replays: int, chunk: int) -> dict:
    """Per (spec, DP size, delayer) (one setting): the simulated-forward server on a Mooncake
    window behind SGLang's own round robin, delayer on (the server's default); a skip, naming
    the file, where the trace is not on this machine."""
    from dpbench.workload.importers.source import missing_shared_trace

    why = missing_shared_trace("mooncake") or unhookable()
    if why is not None:
        return skipped(why)

    def one(spec: str, dp: int, delayer: str) -> dict[str, Any]:
        key = f"simulated-production-trace-{spec}-dp{dp}"
        return _replays(spec, dp, key, replays=replays, chunk=chunk)

    return _one_at_a_time(itertools.product(*params), one)
