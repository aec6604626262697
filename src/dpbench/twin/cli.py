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

from dpbench.core.schema import with_options
from dpbench.twin.arms import ChunkOpt, DpOpt, JobsOpt, RequestsOpt, SpecArg
from dpbench.twin.config import TwinConfig, TwinConfigError, TwinInputs
from dpbench.twin.job import arm_overrides

app = typer.Typer(
    rich_markup_mode=None,  # click's plain help: full option names at 80 columns
    help="Scheduler twin: SGLang's real PrefillAdder and PrefillDelayer on N DP ranks joined by gloo, on CPU.",
    no_args_is_help=True,
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
    from dpbench.envs import ensure_env

    python = ensure_env(version).python
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen(
            [str(python), "-m", "dpbench.twin.run", *args],
            stdout=subprocess.PIPE,
            stderr=errf,
            text=True,
            cwd=project_root(),
            env=env,
        )
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
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
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
    spec: Annotated[
        str,
        typer.Argument(help="workload spec: a shipped name (long-prompt-burst, …) or a YAML path"),
    ],
    *,
    config: TwinConfig,
    inputs: TwinInputs,
    sglang: Annotated[
        str | None,
        typer.Option(
            help=f"SGLang release, or a change (dpbench change list), to run in its environment (default: the installed one, else {DEFAULT_SGLANG})"
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="write the run result JSON here")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="write a plotly timeline (HTML) here")] = None,
) -> None:
    """Replay SPEC's trace through N twin ranks and print a summary table.

    Every option but --sglang, --output and --plot is a field of dpbench.twin.config's
    TwinConfig or TwinInputs (the schema the job file and the run result carry)."""
    from dpbench.core.progress import console, progress
    from dpbench.core.results import load, save
    from dpbench.core.schema import replace
    from dpbench.twin.job import write_job

    err = console()
    config = replace(config, record_timeline=plot is not None)
    calibration = Path(inputs.calibration) if inputs.calibration is not None else None
    if calibration is not None and not calibration.is_file():
        raise typer.BadParameter(f"no such file: {calibration}", param_hint="--calibration")
    if calibration is not None:
        inputs = replace(inputs, calibration=str(calibration.resolve()))
    if config.replay_arrivals is not None:
        config = replace(config, replay_arrivals=str(Path(config.replay_arrivals).resolve()))
    dp = config.dp_size
    deadline = config.deadline_s

    installed = _installed_sglang()
    version = sglang or installed or DEFAULT_SGLANG
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
            if installed is not None and version == installed:
                # SGLang is importable here (an asv or release env): run in-process
                _run_here(spec, config, inputs, output=out, on_event=on_event)
            else:
                _run_in_release_env(version, args, deadline, on_event)
        except RuntimeError as exc:
            err.print(f"[red]twin failed:[/] {exc}")
            raise typer.Exit(1) from None
        result = load(out)
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


def paired_table(rows: list[dict[str, Any]], a: str, b: str, metrics: tuple[str, ...]) -> Any:
    from rich.table import Table

    table = Table(
        title=f"paired over seeds: {b} − {a} (mean, 95 % t interval); * = interval excludes 0"
    )
    rated = len({r.get("rate_scale", 1.0) for r in rows}) > 1
    cols = ("DP", "chunk", *(("rate ×",) if rated else ()), "metric", a, b, "B − A", "95 % CI")
    for col in (*cols, "rel", "multi-modal"):
        table.add_column(col, justify="right" if col not in ("metric",) else "left")
    if rated:  # a metric's rows over the load axis together: its curve against the rate
        order = {m: i for i, m in enumerate(metrics)}
        rows = sorted(
            (r for r in rows if r["metric"] in order),
            key=lambda r: (r["dp"], r["chunked_prefill_size"], order[r["metric"]], r["rate_scale"]),
        )
    for r in rows:
        if r["metric"] not in metrics:
            continue
        star = "*" if r["excludes_zero"] else ""
        mm = ",".join(x for x, f in ((a, r["multimodal_a"]), (b, r["multimodal_b"])) if f) or "-"
        table.add_row(
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
        )
    return table


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
    sglang: Annotated[
        list[str],
        typer.Option(
            help="an arm: a release (0.5.16) or a change (dpbench change list), optionally with modes after ':' (0.5.17:ablation: add_chunked_req "
            "without the delayer; no-radix; no-overlap; no-chunk-reset; physical; conservativeness=X; "
            "batch-is-full=always|if_admitted_or_running; finished-filter=every_pass|at_decode; or "
            "any 'dpbench twin run' option as NAME=VALUE, e.g. overlap_schedule=false); give two "
            "or more, each is compared with the first"
        ),
    ],
    seeds: Annotated[int, typer.Option(help="seeds 0 … N−1, the same through every arm")] = 20,
    dp: DpOpt = None,
    chunked_prefill_size: ChunkOpt = None,
    rate_scale: Annotated[
        list[float] | None,
        typer.Option(
            help="offered rates as multiples of the spec's (repeatable: a load axis; the table "
            "then has a row per rate, the curve of each metric against load)"
        ),
    ] = None,
    requests: RequestsOpt = None,
    jobs: JobsOpt = 2,
    timeout: Annotated[float, typer.Option(help="wall-clock limit per arm, seconds")] = 3600.0,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="write arms, rows and timing as JSON")
    ] = None,
    all_metrics: Annotated[
        bool, typer.Option(help="print every metric, not the main ones")
    ] = False,
) -> None:
    """Same seeds through each arm (in-process ranks); paired differences with 95 % intervals."""
    from dpbench.core.atomic import write_json
    from dpbench.core.progress import console, progress
    from dpbench.twin.arms import run_arms
    from dpbench.twin.sweep import compare

    err = console()
    if len(sglang) < 2:
        raise typer.BadParameter(
            "give at least two arms (--sglang A --sglang B)", param_hint="--sglang"
        )
    for arm in sglang:
        try:
            arm_overrides(arm)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--sglang") from None
    if seeds < 2:
        raise typer.BadParameter(
            f"paired intervals need ≥ 2 seeds, got {seeds}", param_hint="--seeds"
        )
    dps = dp or [4]
    chunks = chunked_prefill_size or [8192]
    rates = rate_scale or [1.0]
    for r in rates:
        if not 0 < r <= 1000:
            raise typer.BadParameter(f"must be in (0, 1000], got {r}", param_hint="--rate-scale")
    seed_list = list(range(seeds))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, progress() as bar:
        per_arm = len(dps) * len(chunks) * len(rates) * seeds
        tasks = {arm: bar.add_task(f"sweep {spec} · {arm}", total=per_arm) for arm in sglang}

        def on_progress(arm: str, done: int, total: int) -> None:
            bar.update(tasks[arm], completed=done, total=total)

        arms = run_arms(
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
    wall = time.perf_counter() - t0
    base = sglang[0]
    from rich.console import Console

    out_console = Console(width=None if os.isatty(1) else 160)
    comparisons = {}
    for other in sglang[1:]:
        rows = compare(arms[base], arms[other])
        comparisons[f"{other} - {base}"] = rows
        names = tuple(sorted({r["metric"] for r in rows})) if all_metrics else SWEEP_TABLE_METRICS
        out_console.print(paired_table(rows, base, other, names))
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


from dpbench.twin.capacity_cli import capacity as _capacity  # noqa: E402  (a module of its own)

app.command(name="capacity")(_capacity)
