"""The runs behind the twin tier's asv benchmarks (``benchmarks/twin.py``): one function per
benchmark class, returning what its ``setup_cache`` keeps.

Each function checks that the installed SGLang can drive the twin (else the whole cache is
a skip), runs the class's settings side by side on the runner's cores
(:func:`dpbench.core.asvcache.run_settings`), files each run result beside asv's results,
and keys each setting by the class's parameter values and its seed or window
(:func:`~dpbench.core.asvcache.setting_key`), the key ``benchmarks/common.py`` reads it
back under. Run files keep the names the dashboard and asv's history know.

Every run is judged by one SLO (``slo``, the suite's :class:`~dpbench.metrics.latency.Slo`
unless a caller names another), and each entry records it, so a benchmark can check that
its units name the SLO its numbers were judged by.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

from dpbench.core.asvcache import bench_jobs, run_settings, save_run, setting_key, skipped
from dpbench.metrics.latency import Slo
from dpbench.sglang_compat.detect import UnsupportedSGLang

# The twin drives both the adder and the delayer; an unknown shape of either skips.
TWIN_COMPONENTS = ("adder", "delayer")
CHUNK_SIZES = {"default": 8192, "2x": 16384}  # global --chunked-prefill-size: H200's, twice it
DELAYER_MODES = ("on", "off")
DEADLINE_S = 900.0
SUITE_SLO = Slo()

Params = Sequence[Sequence[Any]]


def chunk_size(chunk: str) -> int:
    if chunk not in CHUNK_SIZES:
        raise ValueError(f"chunked_prefill must be one of {tuple(CHUNK_SIZES)}; found {chunk!r}")
    return CHUNK_SIZES[chunk]


def delayer_on(delayer: str) -> bool:
    if delayer not in DELAYER_MODES:
        raise ValueError(f"delayer must be one of {DELAYER_MODES}; found {delayer!r}")
    return delayer == "on"


def run_name(spec: str, dp: int, chunk: str, delayer: str, seed: int) -> str:
    """The run file of one seed of a (spec, DP, chunk, delayer) setting."""
    return f"{spec}-dp{dp}-chunk{chunk_size(chunk)}-delayer_{delayer}-seed{seed}"


def unsupported() -> str | None:
    """Why the installed SGLang cannot drive the twin (a shape of its adder or delayer that
    dpbench does not know), or None. Any other failure propagates: a broken environment."""
    from dpbench.sglang_compat.provenance import provenance

    try:
        provenance(TWIN_COMPONENTS)
    except UnsupportedSGLang as exc:
        return str(exc)
    return None


def _run(
    spec: str, slo: Slo, *, requests: int | None = None, seed: int | None = None, **values: Any
) -> dict:
    """One twin run in in-process ranks, no timeline, judged by ``slo``."""
    from dpbench.twin.config import make_config
    from dpbench.twin.run import run_twin

    config = make_config(
        rank_mode=values.pop("rank_mode", "threads"),
        record_timeline=False,
        deadline_s=DEADLINE_S,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        **values,
    )
    return run_twin(spec, config, num_requests=requests, seed=seed)


def _kept(result: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a run: its metrics and the SLO they were judged by."""
    return {"metrics": result["metrics"], "slo": result["extra"]["twin_config"]["slo"]}


def _grid(settings: Iterable[tuple[Any, ...]], one: Callable[..., Any]) -> dict[str, Any]:
    """``one(*setting)`` per setting, side by side, keyed by the setting; a skip if this SGLang
    cannot drive the twin."""
    why = unsupported()
    if why is not None:
        return skipped(why)
    pairs = [(setting_key(*s), lambda s=s: one(*s)) for s in settings]
    return run_settings(pairs, bench_jobs(), skip_on=(UnsupportedSGLang,))


def _seeded(
    spec: str, dp: int, chunk: str, delayer: str, seed: int, *, requests: int, slo: Slo, name: str
) -> dict[str, Any]:
    """One seed of a (spec, DP, chunk, delayer) setting, filed as ``name`` + its run name."""
    result = _run(
        spec,
        slo,
        requests=requests,
        seed=seed,
        dp_size=dp,
        enable_prefill_delayer=delayer_on(delayer),
        chunked_prefill_size=chunk_size(chunk),
    )
    save_run("twin", name + run_name(spec, dp, chunk, delayer, seed), result)
    return _kept(result)


def high_kv(params: Params, seeds: Sequence[int], *, requests: int, slo: Slo = SUITE_SLO) -> dict:
    """Per (spec, DP size, chunk, delayer) and seed: one run of ``requests`` requests."""
    one = functools.partial(_seeded, requests=requests, slo=slo, name="")
    return _grid(itertools.product(*params, seeds), one)


def headline(
    params: Params, seeds: Sequence[int], *, spec: str, requests: int, slo: Slo = SUITE_SLO
) -> dict:
    """Per (DP size, chunk) and seed: ``spec`` with the delayer on (run files ``headline-…``)."""

    def one(dp: int, chunk: str, seed: int) -> dict[str, Any]:
        return _seeded(spec, dp, chunk, "on", seed, requests=requests, slo=slo, name="headline-")

    return _grid(itertools.product(*params, seeds), one)


def capacity(
    params: Params,
    seeds: Sequence[int],
    *,
    spec: str,
    requests: int,
    attainment: float,
    rates: tuple[float, float, int],
    slo: Slo = SUITE_SLO,
) -> dict:
    """Per DP size and seed: capacity at SLO (:mod:`dpbench.twin.capacity`) at chunk 8192,
    bisecting between ``rates`` (lo, hi, halvings), and the search's wall time. One search per
    (DP, seed): the DP-8 searches are the long ones, so these share the cores better than one
    setting per DP size."""
    from dpbench.twin.capacity import capacity_release
    from dpbench.twin.sweep import arm_base_config

    lo, hi, steps = rates
    base = arm_base_config({"slo_ttft_ms": slo.ttft_ms, "slo_tpot_ms": slo.tpot_ms})

    def one(dp: int, seed: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        found = capacity_release(
            spec,
            seeds=[seed],
            dps=[dp],
            chunks=[8192],
            requests=requests,
            base=base,
            attainment=attainment,
            lo=lo,
            hi=hi,
            steps=steps,
        )
        return {"rows": found["rows"], "wall_s": time.perf_counter() - t0, "slo": asdict(slo)}

    return _grid(itertools.product(*params, seeds), one)


def capacity_samples(searches: list[dict[str, Any]]) -> list[float]:
    """The capacities the searches found, one per seed; an edge outside the searched range is
    not a number, so it fails naming the seeds."""
    rows = [row for s in searches for row in s["rows"]]
    outside = [r for r in rows if r["bound"] != "bracket"]
    if outside:
        raise ValueError(
            f"capacity outside the searched range for seeds {[r['seed'] for r in outside]}: "
            f"{[r['bound'] for r in rows]}; widen the benchmark's searched rates"
        )
    return [r["capacity"] for r in rows]


def load(
    params: Params,
    seeds: Sequence[int],
    *,
    spec: str,
    dp: int,
    requests: int,
    slo: Slo = SUITE_SLO,
) -> dict:
    """Per offered rate (× the spec's) and seed: ``spec`` at DP ``dp`` with the delayer on."""

    def one(rate: float, seed: int) -> dict[str, Any]:
        result = _run(spec, slo, requests=requests, seed=seed, dp_size=dp, rate_scale=rate)
        save_run("twin", f"load-{spec}-dp{dp}-rate{rate:g}-seed{seed}", result)
        return _kept(result)

    return _grid(itertools.product(*params, seeds), one)


def on_server_scenario(params: Params, *, chunk: int, slo: Slo = SUITE_SLO) -> dict:
    """Per (spec, DP size, delayer): the simulated-forward server's own scenario (the spec's
    seed, all its requests, one GPU per DP rank, global chunk size ``chunk``)."""

    def one(spec: str, dp: int, delayer: str) -> dict[str, Any]:
        result = _run(
            spec,
            slo,
            dp_size=dp,
            tp_size=dp,
            enable_prefill_delayer=delayer_on(delayer),
            chunked_prefill_size=chunk,
        )
        save_run("twin", f"server-scenario-{spec}-dp{dp}-delayer_{delayer}", result)
        return _kept(result)

    return _grid(itertools.product(*params), one)


def scale(modes: Sequence[str], *, spec: str, dp: int, requests: int, slo: Slo = SUITE_SLO) -> dict:
    """Per rank mode, one after the other (each owns the machine): ``spec`` at DP ``dp``,
    delayer on, its metrics with the run's wall time (``wall_time_s``) among them. A failed
    run fails the whole cache."""
    why = unsupported()
    if why is not None:
        return skipped(why)
    out: dict[str, Any] = {}
    for mode in modes:
        result = _run(
            spec,
            slo,
            requests=requests,
            dp_size=dp,
            enable_prefill_delayer=True,
            chunked_prefill_size=8192,
            rank_mode=mode,
        )
        save_run("twin", f"scale-{spec}-dp{dp}-{requests}-{mode}", result)
        kept = _kept(result)
        wall = {"value": result["wall_time_s"], "unit": "s", "better": "lower"}
        out[setting_key(mode)] = {**kept, "metrics": {**kept["metrics"], "wall_time_s": wall}}
    return out


def production_trace(
    params: Params, windows: Sequence[int], *, spec: str, requests: int, slo: Slo = SUITE_SLO
) -> dict:
    """Per (DP size, dispatch) and window of the Mooncake trace: the first ``requests`` requests
    of the window, delayer on. A skip, naming the file, where the trace is not on this machine."""
    from dpbench.workload.importers.source import missing_shared_trace

    why = missing_shared_trace("mooncake")
    if why is not None:
        return skipped(why)

    def one(dp: int, dispatch: str, window: int) -> dict[str, Any]:
        result = _run(spec, slo, requests=requests, seed=window, dp_size=dp, dispatch=dispatch)
        save_run("twin", f"{spec}-dp{dp}-{dispatch}-window{window}", result)
        return _kept(result)

    return _grid(itertools.product(*params, windows), one)


def published_clock() -> dict[str, dict[str, float]]:
    """``PublishedClock``: predicted / published for each published figure, by cost profile."""
    from dpbench.twin.clock import clock_rows

    return {r.figure: {p: r.ratio(p) for p in r.predicted} for r in clock_rows()}
