"""`dpbench twin …`: run the scheduler twin (real PrefillAdder + PrefillDelayer on N gloo ranks) for a workload."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from dpbench.core.cli_help import Typer
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
from dpbench.core.schema import with_options
from dpbench.core.tables import fit
from dpbench.twin.arms import check_arms
from dpbench.twin.config import TwinConfig, TwinConfigError, TwinInputs
from dpbench.twin.job import arm_overrides

app = Typer(
    help="Run the scheduler twin: SGLang's real scheduler on CPU.\n\n"
    "The twin runs SGLang's PrefillAdder and PrefillDelayer on N DP ranks joined by gloo."
)

DEFAULT_SGLANG = "0.5.23"
SUMMARY_METRICS = (
    "dp_mixed_step_fraction",
    "decode_rank_s_beside_prefill",
    "decode_rank_time_beside_prefill_fraction",
    "false_prefillable_reports_count",
    "steps_count",
    "steps_mixed_count",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "request_throughput_req_per_s",
    "output_tokens_per_s",
    "kv_utilization_p50",
    "kv_utilization_max",
    "kv_utilization_planned",
    "retractions_count",
    "scheduler_pass_us_p50",
    "passes_per_s",
)


def _installed_sglang() -> str | None:
    if importlib.util.find_spec("sglang") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def _run_in_release_env(version: str, args: list[str], deadline_s: float, on_event: Any) -> None:
    """``python -m dpbench.twin.run`` in SGLang ``version``'s environment, streaming its progress events."""
    from dpbench.core.paths import project_root
    from dpbench.envs import ensure_env, zygote

    python = ensure_env(version).python
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = zygote.popen(
            [str(python), "-m", "dpbench.twin.run", *args],
            cwd=project_root(), env=env, stdout=subprocess.PIPE, stderr=errf,
        )  # fmt: skip
        error: dict[str, Any] | None = None
        try:
            assert proc.stdout is not None
            end = time.monotonic() + deadline_s + 120  # the run enforces its own deadline first
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event.get("event") == "error":
                    error = event
                on_event(event)
                if time.monotonic() > end:
                    break
            proc.wait(timeout=max(1.0, end - time.monotonic()))
        finally:
            if proc.poll() is None:
                zygote.kill_session(proc)
        if proc.returncode != 0:
            errf.seek(0)
            tail = errf.read()[-3000:]
            if error is not None:
                raise RuntimeError(error["message"])
            raise RuntimeError(
                f"the twin exited with status {proc.returncode} under SGLang {version}:\n{tail}"
            )


def _run_here(
    spec: str, config: TwinConfig, inputs: TwinInputs, *, output: Path, on_event: Any
) -> None:
    from dpbench.core.results import save
    from dpbench.twin.ranks import TwinRankError
    from dpbench.twin.run import run_job

    def progress(done: int, total: int, steps: int, sim: float) -> None:
        on_event({"event": "progress", "done": done, "total": total, "steps": steps, "sim_s": sim})

    try:
        result = run_job(spec, config, inputs, on_progress=progress)
    except (TwinRankError, ValueError) as exc:
        raise RuntimeError(str(exc)) from None
    save(output, result)


def summary_table(result: dict[str, Any]) -> Any:
    from rich.table import Table

    s = result["sglang"]
    title = (
        f"twin · {result['workload']['name']} · SGLang {s.get('version')} "
        f"({(result.get('placement') or {}).get('label', '?')} placement) · "
        f"dp {result['extra']['config']['dp_size']}"
    )
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    metrics = result["metrics"]
    for name in SUMMARY_METRICS:
        if name in metrics:
            m = metrics[name]
            v = m["value"]
            table.add_row(name, f"{v:,.4g}" if isinstance(v, float) else f"{v:,}", m["unit"])
    return table


@app.command()
@with_options(TwinInputs, param="inputs")
@with_options(TwinConfig, error=TwinConfigError)
def run(
    spec: SpecArg,
    *,
    config: TwinConfig,
    inputs: TwinInputs,
    sglang: Annotated[
        str | None,
        typer.Option(
            help=f"SGLang release, or a change (dpbench change list), to run in its environment (default: the installed one, else {DEFAULT_SGLANG})"
        ),
    ] = None,
    output: OutputOpt = None,
    plot: Annotated[
        Path | None, typer.Option(metavar="FILE", help="write a plotly timeline (HTML) here")
    ] = None,
) -> None:
    """Replay a spec's trace through N twin ranks.

    It prints a summary table. The job file and the run result record every option except
    --sglang, --output and --plot."""
    from dpbench.core.schema import replace

    config = replace(config, record_timeline=plot is not None)
    config, inputs = _absolute_paths(config, inputs)
    installed = _installed_sglang()
    version = sglang or installed or DEFAULT_SGLANG
    result = _run_with_progress(spec, config, inputs, version, in_process=installed == version)
    _report_run(result, output, plot)


def _absolute_paths(config: TwinConfig, inputs: TwinInputs) -> tuple[TwinConfig, TwinInputs]:
    """The calibration (which must exist) and replayed-arrivals files as absolute paths, so a
    run in another environment's directory finds them."""
    from dpbench.core.schema import replace

    calibration = Path(inputs.calibration) if inputs.calibration is not None else None
    if calibration is not None and not calibration.is_file():
        raise typer.BadParameter(f"no such file: {calibration}", param_hint="--calibration")
    if calibration is not None:
        inputs = replace(inputs, calibration=str(calibration.resolve()))
    if config.replay_arrivals is not None:
        config = replace(config, replay_arrivals=str(Path(config.replay_arrivals).resolve()))
    return config, inputs


def _run_with_progress(
    spec: str, config: TwinConfig, inputs: TwinInputs, version: str, *, in_process: bool
) -> dict[str, Any]:
    """The run result, with a progress bar: in this process when SGLang ``version`` is the one
    installed here (an asv or release env), else in its release environment."""
    from dpbench.core.progress import console, progress
    from dpbench.core.results import load
    from dpbench.twin.job import write_job

    dp = config.dp_size
    with tempfile.TemporaryDirectory() as tmp, progress() as bar:
        task = bar.add_task(
            f"twin {spec} · SGLang {version} · dp {dp}: importing SGLang", total=None
        )

        def on_event(event: dict[str, Any]) -> None:
            if event.get("event") == "progress":
                bar.update(
                    task,
                    completed=event["done"],
                    total=event["total"],
                    description=f"twin {spec} · SGLang {version} · dp {dp}: "
                    f"{event['steps']:,} steps, {event['sim_s']:.0f} simulated s",
                )

        out = Path(tmp) / "result.json"
        job = write_job(Path(tmp) / "job.json", spec, config, inputs)
        args = [str(job), "-o", str(out), "--events"]
        try:
            if in_process:
                _run_here(spec, config, inputs, output=out, on_event=on_event)
            else:
                _run_in_release_env(version, args, config.deadline_s, on_event)
        except RuntimeError as exc:
            console().print(f"[red]twin failed:[/] {exc}")
            raise typer.Exit(1) from None
        return load(out)


def _report_run(result: dict[str, Any], output: Path | None, plot: Path | None) -> None:
    """The summary table and notes; the result saved to ``output`` (its timeline only with a
    plot) and the timeline plotted to ``plot``."""
    from dpbench.core.progress import console
    from dpbench.core.results import save

    err = console()
    console_out = __import__("rich.console", fromlist=["Console"]).Console()
    console_out.print(summary_table(result))
    for note in result.get("notes", []):
        err.print(f"[dim]{note}[/]")
    err.print(f"wall time {result['wall_time_s']:.1f} s")
    if output is not None:
        if plot is None:
            result["extra"].pop("timeline", None)
        save(output, result)
        err.print(f"saved {output}")
    if plot is not None:
        from dpbench.twin.plot import write_timeline

        write_timeline(result, plot)
        err.print(f"plot {plot}")


def _sweep_arm(
    arm: str,
    spec: str,
    seeds: list[int],
    dps: list[int],
    chunks: list[int],
    requests: int | None,
    out: Path,
    timeout: float,
    on_progress: Any,
    rates: list[float] | None = None,
) -> dict[str, Any]:
    """One arm of a sweep (``VERSION`` or ``VERSION:ablation``) in its release environment."""
    from dpbench.twin.arms import run_arm_module
    from dpbench.twin.sweep import arm_base_config, write_sweep_job

    version, modes = arm_overrides(arm)
    job = write_sweep_job(
        out.with_suffix(".job.json"),
        spec=spec,
        seeds=seeds,
        dps=dps,
        chunks=chunks,
        requests=requests,
        base=arm_base_config(modes),
        rates=rates,
    )
    return run_arm_module(
        arm,
        version,
        "dpbench.twin.sweep",
        job,
        out,
        timeout=timeout,
        on_progress=lambda a, e: on_progress(a, e["done"], e["total"]),
        what="sweep",
    )


def paired_table(
    rows: list[dict[str, Any]], a: str, b: str, metrics: tuple[str, ...]
) -> tuple[str, list[Any], list[list[str]], int]:
    """(title, columns, rows, how many leading columns name a setting) of the paired table,
    for :func:`dpbench.core.tables.fit`: a table where it fits, a block per metric where not."""
    from dpbench.core.tables import Column

    title = f"paired over seeds: {b} − {a} (mean, 95 % t interval); * = interval excludes 0"
    rated = len({r.get("rate_scale", 1.0) for r in rows}) > 1
    setting = [Column("DP", True, True), Column("chunk", True, True)]
    setting += [Column("rate ×", True, True)] if rated else []
    columns = [*setting, Column("metric"), Column(a, True), Column(b, True)]
    columns += [Column("B − A", True), Column("95 % CI", True), Column("rel", True)]
    columns += [Column("multi-modal", True)]
    if rated:  # a metric's rows over the load axis together: its curve against the rate
        order = {m: i for i, m in enumerate(metrics)}
        rows = sorted(
            (r for r in rows if r["metric"] in order),
            key=lambda r: (r["dp"], r["chunked_prefill_size"], order[r["metric"]], r["rate_scale"]),
        )
    cells = []
    for r in rows:
        if r["metric"] not in metrics:
            continue
        star = "*" if r["excludes_zero"] else ""
        mm = ",".join(x for x, f in ((a, r["multimodal_a"]), (b, r["multimodal_b"])) if f) or "-"
        cells.append(
            [
                str(r["dp"]),
                str(r["chunked_prefill_size"]),
                *((f"{r.get('rate_scale', 1.0):g}",) if rated else ()),
                r["metric"],
                f"{r['mean_a']:.4g}",
                f"{r['mean_b']:.4g}",
                f"{r['mean_diff']:+.4g}{star}",
                f"[{r['ci95_low']:+.4g}, {r['ci95_high']:+.4g}]",
                f"{100 * r['rel_diff']:+.1f} %" if r["rel_diff"] == r["rel_diff"] else "-",
                mm,
            ]
        )
    return title, columns, cells, len(setting)


SWEEP_TABLE_METRICS = (
    "dp_mixed_step_fraction",
    "decode_rank_s_beside_prefill",
    "decode_rank_time_beside_prefill_fraction",
    "false_prefillable_reports_count",
    "false_report_mixed_steps_count",
    "delayer_delay_count",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "tpot_ms_p99",
    "goodput_requests_per_s",
    "slo_attainment",
    "request_throughput_req_per_s",
)


@app.command()
def sweep(
    spec: SpecArg,
    sglang: ArmsOpt,
    seeds: SeedsOpt = 20,
    dp: DpOpt = None,
    chunked_prefill_size: ChunkOpt = None,
    rate_scale: Annotated[
        list[float] | None,
        typer.Option(
            metavar="X",
            help="offered rates as multiples of the spec's (repeatable: a load axis; the table "
            "then has a row per rate, the curve of each metric against load)",
        ),
    ] = None,
    requests: RequestsOpt = None,
    jobs: JobsOpt = 2,
    timeout: TimeoutOpt = 3600.0,
    output: OutputOpt = None,
    all_metrics: Annotated[
        bool, typer.Option(help="print every metric, not the main ones")
    ] = False,
) -> None:
    """Compare arms over the same seeds, with 95 % intervals.

    Each arm runs its ranks in one process. Each later arm is paired with the first, seed by
    seed."""
    from dpbench.core.atomic import write_json
    from dpbench.core.progress import console

    err = console()
    _check_sweep(sglang, seeds, rate_scale or [])
    dps = dp or [4]
    chunks = chunked_prefill_size or [8192]
    rates = rate_scale or [1.0]
    t0 = time.perf_counter()
    arms = _run_sweep(
        spec, sglang, jobs, timeout, (list(range(seeds)), dps, chunks, requests, rates)
    )
    wall = time.perf_counter() - t0
    comparisons = _print_comparisons(arms, sglang, all_metrics)
    err.print(
        f"{len(sglang)} arms × {len(dps) * len(chunks) * len(rates)} settings × {seeds} seeds "
        f"in {wall:.0f} s wall"
    )
    if output is not None:
        write_json(
            output,
            {
                "spec": spec,
                "arms": arms,
                "comparisons": comparisons,
                "wall_s": wall,
                "jobs": jobs,
            },
        )
        err.print(f"saved {output}")


def _run_sweep(
    spec: str, sglang: list[str], jobs: int, timeout: float, grid: tuple
) -> dict[str, Any]:
    """Every arm over the grid ``(seeds, dps, chunks, requests, rates)``, ``jobs`` at once,
    each with its progress bar."""
    from dpbench.core.progress import progress
    from dpbench.twin.arms import run_arms

    seed_list, dps, chunks, requests, rates = grid
    with tempfile.TemporaryDirectory() as tmp, progress() as bar:
        per_arm = len(dps) * len(chunks) * len(rates) * len(seed_list)
        tasks = {arm: bar.add_task(f"sweep {spec} · {arm}", total=per_arm) for arm in sglang}

        def on_progress(arm: str, done: int, total: int) -> None:
            bar.update(tasks[arm], completed=done, total=total)

        return run_arms(
            sglang,
            jobs,
            lambda i, arm: _sweep_arm(
                arm,
                spec,
                seed_list,
                dps,
                chunks,
                requests,
                Path(tmp) / f"arm{i}.json",
                timeout,
                on_progress,
                rates,
            ),
            "sweep",
        )


def _check_sweep(arms: list[str], seeds: int, rates: list[float]) -> None:
    check_arms(arms, at_least=2)
    if seeds < 2:
        raise typer.BadParameter(
            f"paired intervals need ≥ 2 seeds, got {seeds}", param_hint="--seeds"
        )
    for r in rates:
        if not 0 < r <= 1000:
            raise typer.BadParameter(f"must be in (0, 1000], got {r}", param_hint="--rate-scale")


def _print_comparisons(
    arms: dict[str, Any], names: list[str], all_metrics: bool
) -> dict[str, list[dict[str, Any]]]:
    """Each later arm against the first, paired by seed: one table each; the rows returned."""
    from rich.console import Console

    from dpbench.twin.sweep import compare

    # a pipe gets 160 columns unless COLUMNS says otherwise
    out_console = Console(width=None if os.isatty(1) or "COLUMNS" in os.environ else 160)
    base = names[0]
    comparisons = {}
    for other in names[1:]:
        rows = compare(arms[base], arms[other])
        comparisons[f"{other} - {base}"] = rows
        shown = tuple(sorted({r["metric"] for r in rows})) if all_metrics else SWEEP_TABLE_METRICS
        title, columns, cells, setting = paired_table(rows, base, other, shown)
        fit(out_console, columns, cells, title=title, group=setting, label=setting + 1)
    return comparisons


from dpbench.twin.capacity_cli import capacity as _capacity  # noqa: E402  (a module of its own)

app.command(name="capacity")(_capacity)

from dpbench.twin.clock_cli import clock as _clock  # noqa: E402  (a module of its own)

app.command(name="clock")(_clock)
