"""`dpbench server …`: run a workload against a real SGLang DP-attention server, or launch one by hand."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.table import Table

from dpbench.core import results
from dpbench.core.cli_help import Typer
from dpbench.core.cli_options import OutputOpt
from dpbench.core.progress import console, progress
from dpbench.core.schema import with_options
from dpbench.core.tables import Column, fit
from dpbench.server.client import RequestOutcome
from dpbench.server.fidelity import Inputs
from dpbench.server.launcher import ServerProcess
from dpbench.server.run import RunOptions, ServerRunError, execute, prepare

# whose bench_serving client-bench compares against by default
BENCH_SERVING_RELEASE = "0.5.23"

app = Typer(
    help="Run a workload against a real SGLang DP-attention server.\n\n"
    "The server is sglang.launch_server; a client replays the workload's trace against it."
)

_SHOWN = (
    "request_throughput_per_s",
    "output_tokens_per_s",
    "goodput_requests_per_s",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p99",
    "tpot_ms_p99",
    "e2e_ms_p99",
    "errors_total",
    "client_loop_lag_ms_p99",
    "delayer_outcomes_total",
    "delayer_delay_fraction",
    "delayer_delay_fraction_prefillable",
    "kv_pool_occupied_p50",
    "kv_utilization_max",
    "kv_utilization_planned",
    "kv_token_usage_fraction_max",
    "server_startup_s",
    "dp_mixed_step_fraction",
    "decode_rank_s_beside_prefill",
    "decode_rank_time_beside_prefill_fraction",
    "simulated_step_ms_p50",
    "device_idle_ms_p50",
    "device_idle_ms_p90",
    "device_idle_fraction",
    "steps_count",
)


def _fail(message: str) -> NoReturn:
    console().print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _first_line_and_log(exc: BaseException) -> str:
    """One line: what failed, SGLang's own last error line, and where the server log is."""
    import re

    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    log = None
    m = re.search(r"\. (?:Last lines of|See the log at) (\S+?):?$", first) or re.search(
        r"see the log at (\S+?):?$", first
    )
    if m:
        log = m.group(1)
        first = first[: m.start()]
    cause = next((ln.strip() for ln in reversed(lines[1:]) if "Error" in ln or "error" in ln), None)
    return f"{first}{' — ' + cause if cause else ''}{'; server log: ' + log if log else ''}"


Delayer = Annotated[
    bool, typer.Option("--delayer/--no-delayer", help="enable SGLang's PrefillDelayer")
]


@app.command()
@with_options(RunOptions, param="opts", error=ServerRunError)
def run(
    *,
    opts: RunOptions,
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="FILE", help="run-result JSON to write")
    ] = Path("run.json"),
    dry_run: Annotated[bool, typer.Option(help="print the launch command and exit")] = False,
) -> None:
    """Launch SGLang, replay a spec's trace, write a run result.

    It scrapes /metrics, then stops the server. The run result records every option except
    --output and --dry-run."""
    from dpbench.envs.venv import EnvError

    try:
        prep = prepare(opts)
    except (ServerRunError, EnvError) as exc:
        _fail(_first_line_and_log(exc))
    con = console()
    con.print(f"[bold]launch:[/bold] {' '.join(prep.command)}")
    for note in prep.notes:
        con.print(f"note: {note}")
    if dry_run:
        return
    result = _execute_with_progress(prep, output)
    results.save(output, result)
    con.print(_run_table(prep, opts, result))
    con.print(f"wrote {output}")


def _execute_with_progress(prep: Any, output: Path) -> dict[str, Any]:
    """The run result, with a bar counting finished requests; on a run that stopped early its
    partial result is saved to ``output`` and the command fails, as on a failed start."""
    from dpbench.server.launcher import ServerStartError
    from dpbench.server.run import RunIncomplete

    with progress() as bar:
        task = bar.add_task("starting server", total=len(prep.requests))
        t_start = [0.0]
        done = [0]

        def on_done(o: RequestOutcome) -> None:
            if not t_start[0]:
                t_start[0] = time.monotonic()
            done[0] += 1
            rate = done[0] / max(time.monotonic() - t_start[0], 1e-6)
            bar.update(task, advance=1, description=f"requests ({rate:.1f}/s)")

        try:
            return execute(prep, on_done=on_done)
        except RunIncomplete as exc:
            results.save(output, exc.result)
            _fail(f"{exc} (partial result: {output})")
        except (ServerStartError, ServerRunError) as exc:
            _fail(_first_line_and_log(exc))


def _run_table(prep: Any, opts: RunOptions, result: dict[str, Any]) -> Table:
    """The shown metrics of a run, titled with its setting and executor."""
    executor = result["extra"].get("executor", {})
    kind = (
        f"simulated forward, cost model {executor.get('cost_model')}, time scale {executor.get('time_scale')}"
        if executor.get("kind") == "simulated"
        else "GPU"
    )
    table = Table(
        title=f"{prep.spec.name}: tp={prep.config.tp_size} dp={prep.config.dp_size} "
        f"delayer={'on' if opts.delayer else 'off'} (SGLang {result['sglang'].get('version')}; {kind})"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for name in _SHOWN:
        m = result["metrics"].get(name)
        if m is not None:
            table.add_row(name, f"{m['value']:.4g}", m["unit"])
    return table


@app.command()
@with_options(
    RunOptions,
    param="opts",
    error=ServerRunError,
    exclude=("max_requests", "slo_ttft_ms", "slo_tpot_ms", "log_dir", "serial_forward"),
)
def launch(
    *,
    opts: RunOptions,
    log: Annotated[Path, typer.Option(metavar="FILE", help="server log file")] = Path(
        "results/server-logs/manual.log"
    ),
) -> None:
    """Start a server as `run` would; keep it up until Ctrl-C.

    On node 0 it waits until the server is ready. On the other nodes of a multi-node server,
    run it with the same SPEC, --dp, --nnodes and --dist-init-addr, and this node's
    --node-rank.
    """
    from dpbench.server.run import sim_launch_env

    simulate_forward, node_rank, startup_deadline_s = (
        opts.simulate_forward,
        opts.node_rank,
        opts.startup_deadline_s,
    )
    try:
        prep = prepare(opts)
        env = sim_launch_env(prep, log) if simulate_forward else None
    except ServerRunError as exc:
        _fail(_first_line_and_log(exc))
    con = console()
    con.print(f"[bold]launch:[/bold] {' '.join(prep.command)}\nlog: {log}")
    with ServerProcess(
        prep.command, base_url=f"http://127.0.0.1:{prep.config.port}", log_path=log, env=env
    ) as server:
        if node_rank == 0:
            took = server.wait_ready(deadline_s=startup_deadline_s)
            con.print(f"ready in {took:.0f} s at {server.base_url} (Ctrl-C stops it)")
        try:
            while server.alive():
                time.sleep(1.0)
        except KeyboardInterrupt:
            con.print("stopping…")
    con.print(f"stopped ({server.stopped_with})")


@app.command("client-bench")
def client_bench(
    sglang_python: Annotated[
        str | None,
        typer.Option(
            help="interpreter whose SGLang provides bench_serving (default: the 0.5.23 release env)"
        ),
    ] = None,
    requests: int = 3000,
    concurrency: int = 1000,
    output_len: int = 16,
    first_token_delay_ms: float = 250.0,
    itl_ms: float = 50.0,
    output: OutputOpt = None,
    extra_pythonpath: Annotated[
        str | None, typer.Option(help="PYTHONPATH for bench_serving's interpreter")
    ] = None,
    repeats: Annotated[int, typer.Option(help="rounds, alternating which client goes first")] = 1,
) -> None:
    """Compare this client with SGLang's bench_serving.

    Both drive the protocol test double, on the CPU only."""
    import json

    from dpbench.core.atomic import write_json
    from dpbench.server.client_bench import ComparisonConfig, compare

    cfg = ComparisonConfig(
        num_requests=requests,
        concurrency=concurrency,
        output_len=output_len,
        first_token_delay_s=first_token_delay_ms / 1e3,
        itl_s=itl_ms / 1e3,
    )
    env = {"PYTHONPATH": extra_pythonpath} if extra_pythonpath else None
    if sglang_python is None:
        sglang_python = _bench_serving_python()
    res = compare(cfg, sglang_python=sglang_python, extra_env=env, repeats=repeats)
    console().print(_client_bench_table(res, cfg, first_token_delay_ms, itl_ms))
    if output:
        write_json(output, res)
    else:
        print(json.dumps(res, indent=2))


def _bench_serving_python() -> str | None:
    """The release environment's interpreter whose bench_serving is compared by default; None,
    said on the terminal, when it is not built."""
    from dpbench.envs.venv import env_path

    built = env_path(BENCH_SERVING_RELEASE) / "bin" / "python"
    if built.exists():
        return str(built)
    console().print(
        f"[yellow]bench_serving not run: no SGLang interpreter; pass --sglang-python or build "
        f"one with `dpbench env create {BENCH_SERVING_RELEASE}`[/]"
    )
    return None


def _client_bench_table(
    res: dict[str, Any], cfg: Any, first_token_delay_ms: float, itl_ms: float
) -> Table:
    """One row per client and round: its rate, TTFT errors and the double's lateness."""
    table = Table(
        title=f"{cfg.concurrency} concurrent streams, {cfg.num_requests} requests, first token {first_token_delay_ms:g} ms, "
        f"ITL {itl_ms:g} ms (ideal {res['ideal_request_rate_per_s']:.1f} req/s)"
    )
    cols = (
        "request_rate_per_s",
        "ttft_error_ms_mean",
        "ttft_error_ms_p50",
        "ttft_error_ms_p99",
        "double_first_token_lateness_ms_mean",
        "completed",
        "errors",
    )
    table.add_column("client")
    table.add_column("round", justify="right")
    for c in cols:
        table.add_column(c, justify="right")
    for row in res["clients"]:
        table.add_row(row["client"], str(row["round"]), *(f"{row[c]:.4g}" for c in cols))
    return table


def _fidelity_diff(row: dict[str, Any], key: str, rel_key: str) -> str:
    if row[key] != row[key]:
        return "n/a"
    if row["unit"] == "fraction":
        return f"{row[key] * 100:+.2f} pts"
    rel = f" ({row[rel_key]:+.0%})" if row[rel_key] == row[rel_key] else ""
    return f"{row[key]:+.4g}{rel}"


def _ci(row: dict[str, Any]) -> str:
    lo, hi = row.get("replay_ci95", [float("nan")] * 2)
    if lo != lo:
        return ""
    scale = 100 if row["unit"] == "fraction" else 1  # points for a fraction
    return f" [{lo * scale:+.3g}, {hi * scale:+.3g}]"


FIDELITY_COLUMNS = [
    Column("metric"),
    Column("twin", True),
    Column("server mean", True),
    Column("server runs", True),
    Column("server − twin", True),
    Column("twin on each run's arrivals", True),
    Column("server − that (paired mean [95 % CI])", True),
]


def _fidelity_row(row: dict[str, Any]) -> list[str]:
    return [
        f"{row['metric']} ({row['unit']})",
        f"{row['twin']:.4g}" + (" (in range)" if row["within_range"] else ""),
        f"{row['server']:.4g}",
        " ".join(
            f"{v:.4g}" + ("" if ok else "(x)")
            for v, ok in zip(row["server_runs"], row["valid_runs"], strict=True)
        ),
        _fidelity_diff(row, "diff", "rel"),
        " ".join(f"{v:.4g}" for v in row["replay_runs"]),
        _fidelity_diff(row, "replay_diff", "replay_rel") + _ci(row),
    ]


@app.command()
@with_options(Inputs, param="base", error=ValueError)
def fidelity(
    *,
    base: Inputs,
    sglang: Annotated[
        list[str],
        typer.Option(
            "--sglang", metavar="VERSION", help="release(s) to compare under (repeatable)"
        ),
    ] = ["0.5.23"],  # noqa: B006 - typer reads the default
    reuse_server_runs: Annotated[
        bool,
        typer.Option(
            "--reuse-server-runs",
            help="read server runs already in results/fidelity instead of running them again "
            "(re-measure a twin change against the same runs)",
        ),
    ] = False,
) -> None:
    """Compare the twin with the simulated-forward server.

    Both run the same spec, seed, DP size and chunk size, under each release. The report
    records every option except --sglang and --reuse-server-runs."""
    from dpbench.server.fidelity import FidelityError
    from dpbench.server.fidelity import run as run_fidelity

    spec, dp, chunked_prefill_size, repeats = (
        base.spec,
        base.dp,
        base.chunked_prefill_size,
        base.repeats,
    )
    con = console()
    for release in sglang:
        inp = dataclasses.replace(base, release=release)
        try:
            report = run_fidelity(inp, reuse_server_runs=reuse_server_runs)
        except FidelityError as exc:
            _fail(str(exc))
        idle = ", ".join(f"{v:.1%}" for v in report["server_device_idle_fraction"])
        title = (
            f"twin vs server (forward simulated, cost model {report['cost_model']}): {spec}, "
            f"dp {dp}, chunk {chunked_prefill_size}, SGLang {release}, {repeats} server run(s); "
            f"server device idle (CPU work not hidden) {idle}"
        )
        fit(con, FIDELITY_COLUMNS, [_fidelity_row(row) for row in report["rows"]], title=title)
        for i, health in enumerate(report["server_health"]):
            for line in health["broken"]:
                con.print(
                    f"server run r{i}: {line}; its values marked (x) are left out of the "
                    "means and differences",
                    markup=False,
                )


@app.command()
def diverge(
    server_run: Annotated[
        Path,
        typer.Argument(
            metavar="SERVER_RUN", help="a simulated-forward server run result (its JSON file)"
        ),
    ],
    twin_result: Annotated[
        Path | None,
        typer.Option(
            "--twin-result",
            metavar="FILE",
            help="a replayed twin result with its timeline (default: run the twin on the "
            "server run's arrivals now)",
        ),
    ] = None,
    twin_mode: Annotated[
        str,
        typer.Option(
            "--twin-modes",
            metavar="MODES",
            help="the replayed twin as an arm's modes (dpbench twin sweep --sglang's part after "
            "':'), e.g. no-chunk-reset,finished-filter=every_pass",
        ),
    ] = "",
    output: OutputOpt = None,
    top: Annotated[int, typer.Option(min=1, help="rows per table")] = 8,
) -> None:
    """Show where the twin and SGLang's scheduler part ways.

    It compares them step by step, on one server run."""
    import tempfile

    from dpbench.core.atomic import write_json
    from dpbench.server import diverge as dv
    from dpbench.server.fidelity import FidelityError
    from dpbench.twin.job import arm_overrides

    try:
        _, modes = arm_overrides(f"run:{twin_mode}")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--twin-modes") from None
    try:
        server = dv.load(server_run)
        if twin_result is None:
            with tempfile.TemporaryDirectory(prefix="dpbench-diverge-") as tmp:
                twin = dv.replay_twin(server_run, Path(tmp) / "twin.json", modes=modes)
        else:
            twin = dv.load(twin_result)
        report = dv.compare(dv.server_steps(server), dv.twin_steps(twin), top=top)
    except (dv.DivergeError, FidelityError) as exc:
        _fail(str(exc))
    report["server_run"] = str(server_run)
    report["twin_modes"] = modes
    print(dv.render(report, top=top, width=console().width))
    if output:
        write_json(output, report)


from dpbench.server.sweep_cli import sweep as _sweep  # noqa: E402  (a module of its own)

app.command(name="sweep")(_sweep)
