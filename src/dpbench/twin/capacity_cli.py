"""`dpbench twin capacity`: capacity at SLO per release, over seeds, and paired between releases.

Each arm (a release, optionally with modes, as in ``twin sweep``) runs
:mod:`dpbench.twin.capacity` in its own environment; the same seeds go through every arm.
Per (DP size, chunk size): each arm's capacity (the offered rate, as a multiple of the
spec's, at which the SLO attainment still held) as a mean over seeds with its 95 % t
interval, and each later arm against the first, paired by seed. A seed whose capacity lies
outside the searched range is counted, not averaged in.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console

from dpbench.core.cli_options import (
    ArmsOpt,
    ChunkOpt,
    DpOpt,
    JobsOpt,
    OutputOpt,
    RequestsOpt,
    SeedsOpt,
    SpecArg,
    TimeoutOpt,
)
from dpbench.core.tables import Column, fit
from dpbench.metrics.latency import Slo, with_slo_options
from dpbench.twin.arms import check_arms
from dpbench.twin.job import arm_overrides


def _arm(arm: str, job: dict[str, Any], out: Path, timeout: float, on_progress: Any) -> dict:
    from dpbench.core.atomic import write_json
    from dpbench.core.schema import to_dict
    from dpbench.twin.arms import run_arm_module
    from dpbench.twin.sweep import arm_base_config

    version, modes = arm_overrides(arm)
    job_path = out.with_suffix(".job.json")
    write_json(job_path, {**job, "config": to_dict(arm_base_config({**modes, **job["config"]}))})
    return run_arm_module(
        arm,
        version,
        "dpbench.twin.capacity",
        job_path,
        out,
        timeout=timeout,
        on_progress=lambda a, e: on_progress(a, e["done"]),
        what="capacity",
    )


def summarise(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (DP, chunk) and arm: capacities over seeds (mean, 95 % t interval, how many seeds lay
    outside the range), and each later arm − the first, paired by seed."""
    from dpbench.twin.stats import paired, t_quantile_975

    names = list(arms)
    by: dict[tuple[int, int], dict[str, dict[int, dict[str, Any]]]] = {}
    for name, res in arms.items():
        for r in res["rows"]:
            by.setdefault((r["dp"], r["chunked_prefill_size"]), {}).setdefault(name, {})[
                r["seed"]
            ] = r
    out = []
    for (dp, chunk), per_arm in sorted(by.items()):
        row: dict[str, Any] = {"dp": dp, "chunked_prefill_size": chunk, "arms": {}, "paired": {}}
        for name in names:
            seeds = per_arm.get(name, {})
            caps = np.array(
                [r["capacity"] for r in seeds.values() if r["bound"] == "bracket"], dtype=float
            )
            n = caps.size
            half = (
                t_quantile_975(n - 1) * float(caps.std(ddof=1)) / np.sqrt(n)
                if n >= 2
                else float("nan")
            )
            row["arms"][name] = {
                "n": n,
                "mean": float(caps.mean()) if n else float("nan"),
                "ci95": [float(caps.mean()) - half, float(caps.mean()) + half]
                if n >= 2
                else [float("nan")] * 2,
                "below": sum(r["bound"] == "below" for r in seeds.values()),
                "above": sum(r["bound"] == "above" for r in seeds.values()),
            }
        first = per_arm.get(names[0], {})
        for name in names[1:]:
            other = per_arm.get(name, {})
            common = sorted(
                s
                for s in set(first) & set(other)
                if first[s]["bound"] == other[s]["bound"] == "bracket"
            )
            p = paired(
                [first[s]["capacity"] for s in common], [other[s]["capacity"] for s in common]
            )
            row["paired"][name] = p.as_dict()
        out.append(row)
    return out


def _fmt_arm(a: dict[str, Any]) -> str:
    if not a["n"]:
        text = "—"
    elif a["n"] == 1:
        text = f"{a['mean']:.3g}"
    else:
        text = f"{a['mean']:.3g} [{a['ci95'][0]:.3g}, {a['ci95'][1]:.3g}]"
    if a["below"] or a["above"]:
        text += f" ({a['below']} below range, {a['above']} above)"
    return text


def capacity_table(
    rows: list[dict[str, Any]],
    sglang: list[str],
    attainment: float,
    slo: Slo,
) -> tuple[str, list[Column], list[list[str]]]:
    """(title, columns, rows) of the capacity table: per DP and chunk size, each release's
    capacity and each later release's paired difference from the first."""
    title = (
        f"capacity at SLO ({attainment:.0%} of requests with {slo.label}): offered rate "
        "× the spec's, mean over seeds [95 % CI]"
    )
    columns = [Column("DP", True, True), Column("chunk", True, True)]
    columns += [
        Column(c, True) for c in (*sglang, *(f"{b} − {sglang[0]} (paired)" for b in sglang[1:]))
    ]
    cells = []
    for r in rows:
        row = [str(r["dp"]), str(r["chunked_prefill_size"])]
        row += [_fmt_arm(r["arms"][a]) for a in sglang]
        for b in sglang[1:]:
            p = r["paired"][b]
            row.append(
                f"{p['mean_diff']:+.3g} [{p['ci95_low']:+.3g}, {p['ci95_high']:+.3g}] (n={p['n']})"
                if p["n"] >= 2
                else f"n={p['n']}"
            )
        cells.append(row)
    return title, columns, cells


@with_slo_options
def capacity(
    spec: SpecArg,
    sglang: ArmsOpt,
    seeds: SeedsOpt = 3,
    dp: DpOpt = None,
    chunked_prefill_size: ChunkOpt = None,
    requests: RequestsOpt = None,
    attainment: Annotated[
        float,
        typer.Option(
            metavar="FRACTION", help="the SLO attainment that must hold (fraction of requests)"
        ),
    ] = 0.99,
    lo: Annotated[float, typer.Option(metavar="X", help="lowest rate searched (× the spec's)")] = 1
    / 64,
    hi: Annotated[
        float, typer.Option(metavar="X", help="highest rate searched (× the spec's)")
    ] = 4.0,
    steps: Annotated[
        int, typer.Option(metavar="N", help="bisection halvings after the two ends")
    ] = 6,
    jobs: JobsOpt = 2,
    timeout: TimeoutOpt = 7200.0,
    output: OutputOpt = None,
    *,
    slo: Slo,  # --ttft-slo-ms, --tpot-slo-ms (with_slo_options)
) -> None:
    """Find each arm's capacity at the SLO, over seeds.

    Capacity is the highest offered rate (× the spec's) whose SLO attainment holds. A bisection
    over the twin finds it for each release and seed; releases are paired by seed."""
    from dpbench.core.atomic import write_json
    from dpbench.core.progress import console

    err = console()
    check_arms(sglang)
    _check_search(attainment, lo, hi, steps, seeds)
    dps, chunks = dp or [4], chunked_prefill_size or [8192]
    job = {
        "spec": spec,
        "seeds": list(range(seeds)),
        "dps": dps,
        "chunks": chunks,
        "requests": requests,
        "attainment": attainment,
        "lo": lo,
        "hi": hi,
        "steps": steps,
        "config": {"slo_ttft_ms": slo.ttft_ms, "slo_tpot_ms": slo.tpot_ms},
    }
    t0 = time.perf_counter()
    arms = _search_arms(job, sglang, jobs, timeout)
    wall = time.perf_counter() - t0
    rows = summarise(arms)
    title, columns, cells = capacity_table(rows, sglang, attainment, slo)
    fit(Console(), columns, cells, title=title, group=2, label=2)
    _print_curves(arms, err)
    err.print(
        f"{len(sglang)} arms × {len(dps) * len(chunks)} settings × {seeds} seeds in {wall:.0f} s"
    )
    if output is not None:
        write_json(output, {"spec": spec, "arms": arms, "rows": rows, "wall_s": wall})
        err.print(f"saved {output}")


def _check_search(attainment: float, lo: float, hi: float, steps: int, seeds: int) -> None:
    """A BadParameter naming the first search option out of its range."""
    problems = [
        (not 0 < attainment <= 1, "--attainment", f"must be in (0, 1], got {attainment}"),
        (not 0 < lo < hi, "--lo/--hi", f"need 0 < lo < hi, got {lo} and {hi}"),
        (steps < 0, "--steps", f"must be ≥ 0, got {steps}"),
        (seeds < 1, "--seeds", f"must be ≥ 1, got {seeds}"),
    ]
    for bad, hint, why in problems:
        if bad:
            raise typer.BadParameter(why, param_hint=hint)


def _search_arms(
    job: dict[str, Any], sglang: list[str], jobs: int, timeout: float
) -> dict[str, dict[str, Any]]:
    """Each arm's capacity search (``jobs`` arms at a time), a progress bar per arm."""
    from dpbench.core.progress import progress
    from dpbench.twin.arms import run_arms

    settings = len(job["dps"]) * len(job["chunks"]) * len(job["seeds"])
    per_arm = settings * (job["steps"] + 2)
    with tempfile.TemporaryDirectory() as tmp, progress() as bar:
        tasks = {a: bar.add_task(f"capacity {job['spec']} · {a}", total=per_arm) for a in sglang}
        return run_arms(
            sglang,
            jobs,
            lambda i, a: _arm(
                a,
                job,
                Path(tmp) / f"arm{i}.json",
                timeout,
                lambda arm, done: bar.update(tasks[arm], completed=done),
            ),
            "capacity search",
        )


def _print_curves(arms: dict[str, dict[str, Any]], err: Any) -> None:
    """The curve each search walked: rate → attainment, one line per arm, setting and seed."""
    for a, res in arms.items():
        for r in res["rows"]:
            pts = ", ".join(
                f"×{p['rate_scale']:.3g}: {p['slo_attainment']:.1%}"
                for p in sorted(r["points"], key=lambda p: p["rate_scale"])
            )
            err.print(f"{a} dp {r['dp']} chunk {r['chunked_prefill_size']} seed {r['seed']}: {pts}")
