"""`dpbench workload …`: list, show, generate and plan workload specs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dpbench.core.cli_help import Typer, choices
from dpbench.core.progress import progress
from dpbench.core.schema import InputError, cli_names, with_options
from dpbench.workload import arrivals, distributions
from dpbench.workload.importers.base import SPEC_NAMES, TraceImportError
from dpbench.workload.importers.source import TraceSource
from dpbench.workload.models import ModelConfigError, load_model_config
from dpbench.workload.planner import (
    GIB,
    SGLANG_LOAD_BALANCE_METHOD,
    KVPlan,
    plan_kv,
    pool_tokens,
)
from dpbench.workload.spec import (
    DISPATCH_POLICIES,
    KV_DTYPE_BYTES,
    WorkloadSpec,
    WorkloadSpecError,
    known_specs,
    load_spec,
    spec_hash,
)
from dpbench.workload.summary import summarize
from dpbench.workload.trace import (
    TraceColumns,
    TraceFormatError,
    columns_of,
    generate_columns,
    generate_trace,
    load_trace,
    to_requests,
    write_trace,
)

app = Typer(
    help="Workload specs, request traces and the KV planner.\n\n"
    "Specs are YAML files; traces are JSONL, the same bytes for the same spec and seed."
)

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

NameArg = Annotated[
    str,
    typer.Argument(metavar="SPEC", help="a shipped spec name (see `list`) or a YAML spec's path"),
]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="seed (default: the spec's)")]
# `workload import`'s names for the import's inputs: its flags, and PATH
IMPORT_NAMES = {**cli_names(TraceSource), "window": "--window"}


@contextmanager
def _clean_errors(names: Mapping[str, str] | None = None):
    """Turn expected input errors into one red line and exit status 2 (no traceback); an
    input named in the message is spelled as ``names`` says (default: as a spec says)."""
    try:
        yield
    except (WorkloadSpecError, ModelConfigError, TraceFormatError, TraceImportError) as exc:
        text = exc.spelled(names or {}) if isinstance(exc, InputError) else str(exc)
        err.print(f"[red]error:[/red] {text}")
        raise typer.Exit(2) from None


def _warn(report, window: str = SPEC_NAMES["window"]) -> None:
    """The import's warning (a window cut short by the trace's end) on stderr, one line."""
    line = report.warning(window)
    if line:
        err.print(f"[yellow]warning:[/yellow] {line}")


def _requests(spec: WorkloadSpec, seed: int | None, bar, task) -> tuple[TraceColumns, list]:
    """The spec's requests and their columns (a ``trace:`` spec imports its window)."""
    if spec.trace is not None:
        reqs = generate_trace(spec, seed, on_progress=lambda k: bar.advance(task, k))
        return columns_of(reqs), reqs
    cols = generate_columns(spec, seed)
    reqs = to_requests(cols, ignore_eos=spec.ignore_eos, on_progress=lambda k: bar.advance(task, k))
    return cols, reqs


def _plannable(cols: TraceColumns, reqs: list) -> TraceColumns | list:
    """What the planner reads: the requests where they carry KV block ids (the columns do not)."""
    return reqs if reqs and reqs[0].blocks is not None else cols


def _generate(spec: WorkloadSpec, seed: int | None):
    with progress(transient=True) as bar:
        task = bar.add_task(f"generating {spec.name}", total=spec.num_requests)
        return _requests(spec, seed, bar, task)


def _print_import(spec: WorkloadSpec, seed: int | None, reqs: list) -> None:
    """A ``trace:`` spec's source, what its import kept and cut, and its prefix reuse."""
    from dpbench.workload.importers.reuse import block_reuse
    from dpbench.workload.trace import import_spec_trace

    assert spec.trace is not None
    _, report = import_spec_trace(spec, seed)
    _warn(report)
    out.print(f"  source           {spec.trace.describe()}")
    for line in report.lines():
        out.print(f"                   {line}")
    if reqs and reqs[0].blocks is not None:
        reused, total = block_reuse(reqs)
        out.print(
            f"  prefix reuse     {reused / total:.1%} of prompt tokens are a prefix an earlier "
            f"request of this window had (by the trace's block ids, unbounded cache)"
        )


@app.command("list")
def list_specs() -> None:
    """List the shipped specs (workloads/*.yaml)."""
    table = Table(title="workload specs (workloads/*.yaml)", title_justify="left")
    table.add_column("name", no_wrap=True)
    for col in ("requests", "arrival", "target KV", "DP", "model"):
        table.add_column(col)
    notes = []
    with _clean_errors():
        for name in known_specs():
            spec = load_spec(name)
            table.add_row(
                spec.name,
                f"{spec.num_requests:,}" if spec.num_requests else "trace",
                arrivals.describe(spec.arrival, short=True)
                if spec.arrival is not None
                else f"{spec.trace.format} ×{spec.trace.rate_scale:g}",
                f"{spec.target_kv_util:.0%}",
                str(spec.dp_size),
                Path(spec.model).parent.name,
            )
            notes.append(f"  {spec.name}: {spec.description}")
    out.print(table)
    out.print("\n".join(notes))


@app.command()
def show(name: NameArg, seed: SeedOpt = None) -> None:
    """Show a spec, its trace's summary and its KV plan.

    The KV plan is at the spec's DP size; `plan` shows its arithmetic."""
    with _clean_errors():
        spec = load_spec(name)
        cols, reqs = _generate(spec, seed)
        plan = plan_kv(spec, _plannable(cols, reqs), spec.dp_size, spec.planner.dispatch)
        out.print(f"[bold]{spec.name}[/bold]: {spec.description}")
        out.print(f"  hash             {spec_hash(spec)}")
        out.print(f"  model            {spec.model}")
        if spec.trace is not None:
            out.print(f"  window           {spec.seed if seed is None else seed} (the seed)")
            _print_import(spec, seed, reqs)
    s = summarize(cols)
    if spec.trace is None:
        _print_synthetic(spec, seed)
    out.print(f"  target KV util   {spec.target_kv_util:.0%} at DP {spec.dp_size}")
    _print_summary(s)
    out.print("[bold]KV plan[/bold]")
    out.print(
        f"  --max-total-tokens {plan.max_total_tokens_per_rank:,} per rank = "
        f"{plan.gib_per_rank:.2f} GiB per rank ({plan.model_name}, {plan.dispatch}); "
        f"`dpbench workload plan {spec.name} --dp {spec.dp_size}` shows the arithmetic"
    )


def _print_synthetic(spec: WorkloadSpec, seed: int | None) -> None:
    assert spec.input_len is not None and spec.output_len is not None
    assert spec.arrival is not None and spec.num_requests is not None
    out.print(
        f"  requests         {spec.num_requests:,}  (seed {spec.seed if seed is None else seed})"
    )
    out.print(
        f"  input_len        {distributions.describe(spec.input_len)}"
        f"  (mean {distributions.mean_length(spec.input_len):,.0f})"
    )
    out.print(
        f"  output_len       {distributions.describe(spec.output_len)}"
        f"  (mean {distributions.mean_length(spec.output_len):,.0f}), ignore_eos {spec.ignore_eos}"
    )
    if spec.shared_prefix:
        sp = spec.shared_prefix
        out.print(
            f"  shared prefix    {sp.share:.0%} in {sp.groups} group(s) of {sp.prefix_len:,} tokens"
        )
    if spec.sessions:
        out.print(
            f"  sessions         turns {distributions.describe(spec.sessions.turns)}, "
            f"think time {distributions.describe(spec.sessions.think_time_s)} s"
        )
    starts = " (session starts)" if spec.sessions else ""
    out.print(f"  arrival          {arrivals.describe(spec.arrival)}{starts}")


def _print_summary(s) -> None:
    out.print("[bold]trace[/bold]")
    rate = f"{s.mean_rate_per_s:,.2f} req/s" if s.mean_rate_per_s else "n/a (closed loop)"
    out.print(f"  arrivals         span {s.span_s:,.1f} s, mean rate {rate}")
    out.print(f"  input_len        {s.input_len.line()}")
    out.print(f"  max_new_tokens   {s.output_len.line()}")
    shared = (
        f" ({s.shared_prefix_tokens:,} in shared prefixes, {s.prefix_share:.0%} of requests in "
        f"{s.prefix_groups} group(s))"
        if s.prefix_groups
        else ""
    )
    out.print(f"  prompt tokens    {s.prompt_tokens:,}{shared}; output tokens {s.output_tokens:,}")
    if s.sessions:
        out.print(
            f"  sessions         {s.sessions:,} ({s.requests / s.sessions:.1f} turns on average)"
        )


@app.command()
def gen(
    name: NameArg,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", metavar="FILE", help="JSONL file to write (atomically)"),
    ],
    seed: SeedOpt = None,
    num_requests: Annotated[
        int | None, typer.Option("--num-requests", help="override the spec's count")
    ] = None,
    token_ids: Annotated[
        bool, typer.Option("--token-ids", help="also write each prompt's input_ids")
    ] = False,
) -> None:
    """Write a spec's trace as JSONL (same seed, same bytes)."""
    with _clean_errors():
        spec = load_spec(name)
        if num_requests is not None:
            spec = spec.with_overrides(num_requests=num_requests)
        vocab = load_model_config(spec.model).vocab_size if token_ids else None
        with progress() as bar:
            task = bar.add_task(f"generating {spec.name}", total=spec.num_requests)
            cols, reqs = _requests(spec, seed, bar, task)
            wtask = bar.add_task(f"writing {output.name}", total=len(reqs))
            write_trace(reqs, output, vocab_size=vocab, on_progress=lambda k: bar.advance(wtask, k))
        if spec.trace is not None:
            from dpbench.workload.trace import import_spec_trace

            _warn(import_spec_trace(spec, seed)[1])
    digest = hashlib.sha256(output.read_bytes()).hexdigest()
    s = summarize(cols)
    out.print(f"wrote {len(reqs):,} requests to {output} (sha256 {digest})")
    out.print(f"  seed {spec.seed if seed is None else seed}, spec {spec_hash(spec)}")
    out.print(f"  input_len {s.input_len.line()}")
    out.print(f"  max_new_tokens {s.output_len.line()}")


@app.command("import")
@with_options(TraceSource, param="source", error=TraceImportError)
def import_(
    source: TraceSource,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", metavar="FILE", help="JSONL trace to write (atomically)"),
    ],
    window: Annotated[
        int, typer.Option("--window", min=0, help="which window (0 = the first)")
    ] = 0,
    model: Annotated[
        str, typer.Option("--model", help="model config name or path: its context limits prompts")
    ] = "deepseek-v3",
) -> None:
    """Import a Mooncake or Azure trace as a JSONL trace.

    It takes one window of the trace, rate-scaled and capped, with prompts fitted to the
    model. The same inputs give the same bytes. Mooncake's block ids become token ids, so two
    requests share exactly the prompt blocks the trace says they share. A spec can name the
    same source in a `trace:` block instead.
    """
    from dpbench.workload.importers.load import import_trace
    from dpbench.workload.importers.reuse import block_reuse
    from dpbench.workload.importers.source import file_sha256

    with _clean_errors(IMPORT_NAMES):
        cfg = load_model_config(model)
        with progress(transient=True) as bar:
            bar.add_task(f"importing {source.path}", total=None)
            reqs, report = import_trace(
                source, window=window, context_len=cfg.max_position_embeddings or None
            )
        write_trace(reqs, output)
    _warn(report, IMPORT_NAMES["window"])
    digest = hashlib.sha256(output.read_bytes()).hexdigest()
    out.print(f"wrote {len(reqs):,} requests to {output} (sha256 {digest})")
    out.print(f"  from {source.describe()} ({file_sha256(Path(report.path))})")
    for line in report.lines():
        out.print(f"  {line}")
    if reqs[0].blocks is not None:
        reused, total = block_reuse(reqs)
        out.print(
            f"  prefix reuse {reused / total:.1%} of {total:,} prompt tokens (block ids, "
            f"unbounded cache, this window alone)"
        )
    _print_summary(summarize(columns_of(reqs)))


def print_plan(plan: KVPlan, *, spec: WorkloadSpec, seed: int, trace_source: str) -> None:
    """The plan with every input, so a reader can redo the arithmetic by hand."""
    out.print(
        f"[bold]KV plan[/bold]: {plan.workload} on {plan.model_name}, DP {plan.dp_size}, "
        f"dispatch {plan.dispatch}"
    )
    _print_plan_inputs(plan, spec=spec, seed=seed, trace_source=trace_source)
    out.print(_rank_peaks_table(plan))
    _print_plan_result(plan)
    _print_sharing_and_expected(plan)


def _print_plan_inputs(plan: KVPlan, *, spec: WorkloadSpec, seed: int, trace_source: str) -> None:
    out.print("[bold]inputs[/bold]")
    out.print(
        f"  trace              {plan.num_requests:,} requests from {trace_source} (seed {seed}, "
        f"spec {spec_hash(spec)})"
    )
    out.print(f"  model              {plan.model_path}")
    if plan.is_mla:
        out.print(
            f"                     MLA: kv_lora_rank {plan.kv_lora_rank}, qk_rope_head_dim "
            f"{plan.qk_rope_head_dim}, num_hidden_layers {plan.num_hidden_layers}"
        )
    else:
        out.print(
            f"                     num_key_value_heads {plan.num_key_value_heads}, head_dim "
            f"{plan.head_dim}, num_hidden_layers {plan.num_hidden_layers}"
        )
    out.print(f"  KV dtype           {plan.dtype_bytes} B per element")
    out.print(f"  KV bytes/token     {plan.bytes_formula()}")
    out.print(f"  target util        {plan.target_util:g}")
    out.print(f"  service model      {plan.service_assumption()}")


def _rank_peaks_table(plan: KVPlan) -> Table:
    table = Table(title="peak KV demand per DP rank", title_justify="left")
    for col in (
        "rank",
        "requests",
        "peak KV tokens",
        "peak at (s)",
        "requests held at peak",
        "peak if nothing shared",
        "util at planned size",
    ):
        table.add_column(col, justify="right")
    for rank in range(plan.dp_size):
        table.add_row(
            str(rank),
            f"{plan.requests_per_rank[rank]:,}",
            f"{plan.peak_tokens_per_rank[rank]:,}",
            f"{plan.peak_time_s_per_rank[rank]:.3f}",
            f"{plan.peak_requests_per_rank[rank]:,}",
            f"{plan.peak_tokens_unshared_per_rank[rank]:,}",
            f"{plan.util_at_peak_per_rank[rank]:.1%}",
        )
    return table


def _print_plan_result(plan: KVPlan) -> None:
    peak = plan.peak_tokens
    raw = pool_tokens(peak, plan.target_util)
    out.print("[bold]result[/bold] (one --max-total-tokens for every rank, sized from the busiest)")
    out.print(f"  busiest rank       {plan.busiest_rank}: peak {peak:,} tokens")
    rounding = (
        f", rounded up to a multiple of page size {plan.page_size}"
        if plan.page_size > 1 and raw != plan.max_total_tokens_per_rank
        else ""
    )
    out.print(
        f"  max-total-tokens   ceil({peak:,} / {plan.target_util:g}) = "
        f"{plan.max_total_tokens_per_rank:,} tokens per rank{rounding}"
    )
    out.print(
        f"  KV memory          {plan.max_total_tokens_per_rank:,} × {plan.bytes_per_token:,} B = "
        f"{plan.bytes_per_rank:,} B = {plan.gib_per_rank:.2f} GiB per rank "
        f"(1 GiB = {GIB:,} B)"
    )
    out.print(
        f"  SGLang flags       --dp-size {plan.dp_size} --enable-dp-attention "
        f"--load-balance-method {SGLANG_LOAD_BALANCE_METHOD[plan.dispatch]} "
        f"--max-total-tokens {plan.max_total_tokens_per_rank}"
    )
    lowest = min(plan.util_at_peak_per_rank)
    out.print(
        f"  per-rank peaks     {lowest:.1%} .. {max(plan.util_at_peak_per_rank):.1%} of the pool "
        f"(busiest rank at the target)"
    )


def _print_sharing_and_expected(plan: KVPlan) -> None:
    out.print(
        f"  shared prefixes    {plan.shared_by} the radix cache shares count once per rank; "
        f"were nothing shared, the busiest peak would be "
        f"{max(plan.peak_tokens_unshared_per_rank):,} tokens"
    )
    out.print(
        f"  expected KV util   {plan.planned_peak_util:.1%} at the busiest rank's peak "
        "(a twin run reports it as kv_utilization_planned, beside its kv_utilization_max)"
    )


def _check_plan_options(
    dispatch: str | None, kv_dtype: str | None, target_util: float | None
) -> None:
    """A BadParameter naming the first of these options given outside what it allows."""
    if dispatch is not None and dispatch not in DISPATCH_POLICIES:
        raise typer.BadParameter(
            f"found {dispatch!r}; allowed: {', '.join(DISPATCH_POLICIES)}", param_hint="--dispatch"
        )
    if kv_dtype is not None and kv_dtype not in KV_DTYPE_BYTES:
        raise typer.BadParameter(
            f"found {kv_dtype!r}; allowed: {', '.join(KV_DTYPE_BYTES)}", param_hint="--kv-dtype"
        )
    if target_util is not None and not 0 < target_util <= 1:
        raise typer.BadParameter(
            f"found {target_util!r}; allowed: a number in (0, 1]", param_hint="--target-util"
        )


def _planned_trace(spec: WorkloadSpec, trace: Path | None, seed: int | None) -> tuple[str, Any]:
    """(where the trace came from, in words; the trace the planner reads): ``trace`` when
    given, else the spec's, generated with ``seed``."""
    if trace is not None:
        loaded = load_trace(trace)
        return str(trace), _plannable(columns_of(loaded), loaded)
    return "the spec", _plannable(*_generate(spec, seed))


@app.command()
def plan(
    name: NameArg,
    dp: Annotated[
        int | None, typer.Option("--dp", min=1, help="DP size (default: the spec's)")
    ] = None,
    dispatch: Annotated[
        str | None,
        typer.Option(
            "--dispatch",
            metavar=choices(DISPATCH_POLICIES),
            help="how requests reach the ranks (default: the spec's)",
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="model config name or path (default: the spec's)")
    ] = None,
    target_util: Annotated[
        float | None,
        typer.Option(
            "--target-util", help="KV utilization at peak, in (0, 1] (default: the spec's)"
        ),
    ] = None,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar=choices(KV_DTYPE_BYTES),
            help="KV cache type (default: the spec's)",
        ),
    ] = None,
    seed: SeedOpt = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace", metavar="FILE", help="plan an existing JSONL trace instead of generating one"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Size the KV pool from each DP rank's peak KV demand.

    It prints the --max-total-tokens that puts the busiest rank's peak at the target."""
    _check_plan_options(dispatch, kv_dtype, target_util)
    with _clean_errors():
        spec = load_spec(name)
        if model is not None:
            spec = spec.with_overrides(model=model)
        source, planned = _planned_trace(spec, trace, seed)
        result = plan_kv(
            spec,
            planned,
            dp or spec.dp_size,
            dispatch or spec.planner.dispatch,
            target_util=target_util,
            dtype_bytes=KV_DTYPE_BYTES[kv_dtype] if kv_dtype else None,
        )
    if as_json:
        out.print_json(json.dumps(result.as_dict()))
        return
    print_plan(result, spec=spec, seed=spec.seed if seed is None else seed, trace_source=source)
