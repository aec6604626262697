"""`dpbench server sweep`: SGLang's real scheduler over the same seeds in several releases or
changes, in virtual time, with paired differences and their 95 % intervals.

Each arm (a release or a change) runs the simulated-forward server in virtual time
(docs/virtual-time.md), one start-up per DP size replaying every seed in turn, its caches
flushed between (:func:`dpbench.server.prepare.for_seed`: the KV pool is sized by the first
seed's plan). A seed's run repeats exactly in virtual time, so the only spread between runs is
the seeds' own; each later arm is then paired with the first, seed by seed, as `dpbench twin
sweep` pairs the twin's (:func:`dpbench.twin.sweep.compare`).
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import typer

from dpbench.core.cli_options import DpOpt, OutputOpt, SeedsOpt, SpecArg
from dpbench.core.progress import console, progress

ServerArmsOpt = Annotated[
    list[str],
    typer.Option(
        "--sglang",
        metavar="ARM",
        help="an arm: a release (0.5.16) or a change (dpbench change list). Repeat it: each "
        "arm is compared with the first",
    ),
]
FirstOpt = Annotated[
    int | None, typer.Option(metavar="N", help="replay only the first N requests of each seed")
]
# the paired table's rows (every metric with --all-metrics)
SERVER_SWEEP_METRICS = (
    "dp_mixed_step_fraction",
    "decode_rank_s_beside_prefill",
    "decode_rank_time_beside_prefill_fraction",
    "delayer_delay_fraction_prefillable",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "tpot_ms_p99",
    "itl_ms_p99",
    "goodput_requests_per_s",
    "request_throughput_per_s",
    "steps_count",
)
# measured on the wall clock, not in virtual time, or counting passes that the wall clock
# decides: SGLang's delayer outcomes also count the passes that launch no forward while the
# ranks wait, and how many of those run depends on this machine's speed (the same seed's
# steps repeat exactly, these counts do not). Carried, never compared.
NOT_VIRTUAL = frozenset(
    {
        "server_startup_s",
        "client_loop_lag_ms_p99",
        "client_send_lateness_ms_p99",
        "client_send_lateness_ms_max",
        "pickup_ms_p50",
        "first_token_return_ms_p99",
        "delayer_outcomes_total",
        "delayer_delay_fraction",
    }
)


def sweep(
    spec: SpecArg,
    sglang: ServerArmsOpt,
    seeds: SeedsOpt = 3,
    dp: DpOpt = None,
    chunked_prefill_size: Annotated[
        int, typer.Option(metavar="TOKENS", help="global --chunked-prefill-size")
    ] = 8192,
    requests: FirstOpt = None,
    output: OutputOpt = None,
    all_metrics: Annotated[
        bool, typer.Option(help="print every metric, not the main ones")
    ] = False,
) -> None:
    """Pair releases seed by seed on the real scheduler.

    Releases or changes run on SGLang's real scheduler with the forward simulated, in
    virtual time.

    Each arm starts the simulated-forward server once per DP size and replays seeds 0 … N−1
    in turn. Each later arm is paired with the first, seed by seed (95 % t intervals)."""
    from dpbench.core.atomic import write_json

    _check(sglang, seeds, requests)
    dps = dp or [4]
    t0 = time.perf_counter()
    arms = {
        arm: _arm(arm, spec, list(range(seeds)), dps, chunked_prefill_size, requests)
        for arm in sglang
    }
    wall = time.perf_counter() - t0
    comparisons = _print(arms, sglang, all_metrics)
    console().print(
        f"{len(sglang)} arms × {len(dps)} DP sizes × {seeds} seeds in {wall:.0f} s wall"
    )
    if output is not None:
        out = {"spec": spec, "clock": "virtual", "arms": arms, "comparisons": comparisons}
        write_json(output, {**out, "wall_s": wall})
        console().print(f"saved {output}")


def _check(arms: list[str], seeds: int, requests: int | None) -> None:
    if len(arms) < 2:
        raise typer.BadParameter(
            f"needs ≥ 2 arms to compare, got {len(arms)}", param_hint="--sglang"
        )
    for arm in arms:
        if ":" in arm:
            raise typer.BadParameter(
                f"{arm!r}: the twin's modes do not apply to SGLang's real scheduler; "
                "name a release or a change",
                param_hint="--sglang",
            )
    if len(set(arms)) != len(arms):
        raise typer.BadParameter(f"an arm is named twice: {arms}", param_hint="--sglang")
    if seeds < 2:
        raise typer.BadParameter(
            f"paired intervals need ≥ 2 seeds, got {seeds}", param_hint="--seeds"
        )
    if requests is not None and requests < 1:
        raise typer.BadParameter(f"must be ≥ 1, got {requests}", param_hint="--requests")


def _arm(
    arm: str, spec: str, seeds: list[int], dps: list[int], chunk: int, requests: int | None
) -> dict[str, Any]:
    """One arm's runs: ``{"sglang", "runs": [{dp, chunked_prefill_size, seed, metrics}]}``."""
    runs: list[dict[str, Any]] = []
    for dp in dps:
        for seed, result in zip(seeds, _runs(arm, spec, seeds, dp, chunk, requests), strict=True):
            metrics = {k: v["value"] for k, v in result["metrics"].items() if k not in NOT_VIRTUAL}
            runs.append({"dp": dp, "chunked_prefill_size": chunk, "seed": seed, "metrics": metrics})
    return {"sglang": arm, "runs": runs}


def _runs(
    arm: str, spec: str, seeds: list[int], dp: int, chunk: int, requests: int | None
) -> list[dict[str, Any]]:
    """Every seed against one virtual-time start-up of ``arm``'s server at ``dp``; a run that
    failed or lost requests ends the command, naming the arm."""
    from dpbench.envs.venv import EnvError
    from dpbench.server.launcher import ServerStartError
    from dpbench.server.prepare import for_seed
    from dpbench.server.run import RunOptions, ServerRunError, execute_replays, prepare

    opts = RunOptions(
        spec=spec,
        sglang=arm,
        dp_size=dp,
        tp_size=dp,
        seed=seeds[0],
        max_requests=requests,
        simulate_forward=True,
        clock="virtual",
        chunked_prefill_size=chunk,
        check_gpus=False,
    )
    try:
        prep = prepare(opts)
        clients = [for_seed(prep, s) for s in seeds]
        with progress() as bar:
            task = bar.add_task(f"{arm} · DP {dp}", total=len(seeds) * len(prep.requests))
            runs = execute_replays(
                prep, len(clients), clients=clients, on_done=lambda _o: bar.advance(task)
            )
    except (ServerRunError, ServerStartError, EnvError) as exc:
        console().print(f"[red]sweep failed:[/] {arm} at DP {dp}: {str(exc).splitlines()[0]}")
        raise typer.Exit(1) from None
    console().print(
        f"{arm} · DP {dp}: {len(seeds)} seeds, "
        f"{sum(r['wall_time_s'] for r in runs):.0f} s of replay wall time"
    )
    for seed, run in zip(seeds, runs, strict=True):
        errors = run["metrics"].get("errors_total", {}).get("value")
        if errors:
            console().print(
                f"[red]sweep failed:[/] {arm}, DP {dp}, seed {seed}: {errors:g} requests failed"
            )
            raise typer.Exit(1)
    return runs


def _print(
    arms: dict[str, Any], names: list[str], all_metrics: bool
) -> dict[str, list[dict[str, Any]]]:
    """Each later arm against the first, paired by seed: one table each; the rows returned."""
    from rich.console import Console

    from dpbench.core.tables import fit
    from dpbench.twin.cli import paired_table
    from dpbench.twin.sweep import compare

    out = Console(width=None if os.isatty(1) or "COLUMNS" in os.environ else 160)
    base = names[0]
    comparisons = {}
    for other in names[1:]:
        rows = compare(arms[base], arms[other])
        comparisons[f"{other} - {base}"] = rows
        shown = tuple(sorted({r["metric"] for r in rows})) if all_metrics else SERVER_SWEEP_METRICS
        title, columns, cells, setting = paired_table(rows, base, other, shown)
        fit(
            out,
            columns,
            cells,
            title=f"server, virtual time, {title}",
            group=setting,
            label=setting + 1,
        )
    return comparisons
