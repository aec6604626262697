"""A server run up to (not including) the start: spec → trace → KV plan → checked command.

:func:`prepare` needs no GPU and starts nothing, so it is testable on a CPU: it loads the
spec, generates (or imports) the trace once, plans the KV pool, reads the install's
``launch_server`` flags and builds the command. :class:`Prepared` carries all of it to
:func:`dpbench.server.run.execute`.
"""

from __future__ import annotations

import dataclasses
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.core.paths import cache_dir, workloads_dir
from dpbench.core.procs import free_port_with
from dpbench.envs.resolve import ensure_env
from dpbench.server.client import GenerateRequest
from dpbench.server.config import DelayerConfig, ServerConfig, build_command
from dpbench.server.errors import ServerRunError
from dpbench.server.loadgen import Schedule
from dpbench.server.options import RunOptions
from dpbench.server.simlaunch import SIM_SERVER_MODEL
from dpbench.sglang_compat.server import (
    DERIVED_PORT_OFFSETS,
    SERVER_PORT_RANGE,
    ServerFlags,
    server_flags,
)
from dpbench.twin.router import planner_route, prefix_keys
from dpbench.workload.models import load_model_config
from dpbench.workload.planner import plan_kv
from dpbench.workload.spec import WorkloadSpec, load_spec, spec_hash
from dpbench.workload.trace import generate_trace, import_spec_trace


def free_server_port() -> int:
    """A --port for a server of ours, with every port SGLang derives from it free too."""
    return free_port_with(DERIVED_PORT_OFFSETS, low=SERVER_PORT_RANGE[0], high=SERVER_PORT_RANGE[1])


# what a run result keeps of the KV plan (``extra.kv_plan``)
KV_PLAN_KEPT = (
    "bytes_per_token",
    "peak_tokens_per_rank",
    "max_total_tokens_per_rank",
    "gib_per_rank",
    "target_util",
    "planned_peak_util",
)

RouteKeys = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]


@dataclass
class Prepared:
    """What :func:`prepare` found: all that starting the server and driving the load need."""

    options: RunOptions
    spec: Any
    spec_hash: str
    requests: list[GenerateRequest]
    schedule: Schedule
    config: ServerConfig
    flags: ServerFlags
    command: list[str]
    kv_plan: dict[str, Any] | None
    notes: list[str]
    python: str = sys.executable
    # cache-aware dispatch: each request's prompt as the router compares it (block keys, sizes)
    route_keys: RouteKeys | None = None
    # a ``trace:`` spec: what the import kept, cut and dropped (the window is the seed)
    trace_import: dict[str, Any] | None = None


def prepare(opts: RunOptions, *, flags: ServerFlags | None = None) -> Prepared:
    """Everything up to (not including) starting the server; no GPU needed."""
    spec = load_spec(opts.spec)
    if opts.seed is not None and opts.seed != spec.seed:
        spec = spec.with_overrides(seed=opts.seed)
    dp = opts.dp_size or spec.dp_size
    trace, trace_import = trace_of(spec)
    if opts.max_requests is not None:
        trace = trace[: opts.max_requests]
    vocab = load_model_config(spec.model).vocab_size
    kv_plan = _kv_plan(spec, trace, dp, opts.dispatch, vocab) if opts.use_kv_plan else None
    python = release_python(opts.sglang) if opts.sglang else (opts.python or sys.executable)
    notes: list[str] = []
    max_total_tokens = None if kv_plan is None else int(kv_plan["max_total_tokens_per_rank"])
    cfg = _server_config(opts, spec, dp, max_total_tokens, notes)
    flags = flags or server_flags(python, cache_dir=cache_dir() / "sglang-help")
    route_keys = None
    if opts.dispatch == "cache_aware":
        route_keys = {r.id: prefix_keys(r, vocab) for r in trace}
        notes.append("cache-aware dispatch: the load client routes each request (routed_dp_rank)")
    return Prepared(
        options=opts,
        spec=spec,
        spec_hash=spec_hash(spec),
        requests=requests_of(trace, vocab),
        schedule=schedule_for(spec, trace, opts.time_scale),
        config=cfg,
        flags=flags,
        command=build_command(cfg, flags, python=python),
        kv_plan=kv_plan,
        notes=notes,
        python=python,
        route_keys=route_keys,
        trace_import=trace_import,
    )


def for_seed(prep: Prepared, seed: int) -> Prepared:
    """``prep``'s server with workload seed ``seed`` on the client's side: the same command
    (so the same KV pool, sized by ``prep``'s own plan), another draw of the spec's requests.
    Replays of several seeds then share one start-up (``execute_replays(clients=…)``); each
    result records its seed, and a note says whose plan sized the pool."""
    if seed == prep.spec.seed:
        return prep
    spec = prep.spec.with_overrides(seed=seed)
    trace, trace_import = trace_of(spec)
    if prep.options.max_requests is not None:
        trace = trace[: prep.options.max_requests]
    vocab = load_model_config(spec.model).vocab_size
    notes = list(prep.notes)
    if prep.kv_plan is not None:
        notes.append(
            f"KV pool sized by seed {prep.spec.seed}'s plan (shared start-up across seeds)"
        )
    route_keys = None
    if prep.route_keys is not None:
        route_keys = {r.id: prefix_keys(r, vocab) for r in trace}
    return dataclasses.replace(
        prep,
        options=dataclasses.replace(prep.options, seed=seed),
        spec=spec,
        spec_hash=spec_hash(spec),
        requests=requests_of(trace, vocab),
        schedule=schedule_for(spec, trace, prep.options.time_scale),
        notes=notes,
        route_keys=route_keys,
        trace_import=trace_import,
    )


def trace_of(spec: WorkloadSpec) -> tuple[list[Any], dict[str, Any] | None]:
    """The spec's requests, and for a ``trace:`` spec the import's report (imported once)."""
    if spec.trace is None:
        return generate_trace(spec), None
    requests, report = import_spec_trace(spec)
    return requests, report.as_dict()


def requests_of(trace: list[Any], vocab_size: int) -> list[GenerateRequest]:
    """What the load client sends for each trace request: its prompt as token ids."""
    return [
        GenerateRequest(r.id, r.token_ids(vocab_size), r.max_new_tokens, r.ignore_eos)
        for r in trace
    ]


def _kv_plan(
    spec: WorkloadSpec, trace: list[Any], dp: int, dispatch: str, vocab: int
) -> dict[str, Any]:
    """The planned KV pool (``--max-total-tokens`` per rank) and the figures behind it.

    A run the load client routes cache-aware is planned as the client will route it."""
    routed = dispatch == "cache_aware"
    keys = {r.id: prefix_keys(r, vocab) for r in trace} if routed else {}
    plan = plan_kv(
        spec,
        trace,
        dp_size=dp,
        dispatch="cache_aware" if routed else spec.planner.dispatch,
        route=planner_route(dp, keys) if routed else None,
    )
    return {k: getattr(plan, k) for k in KV_PLAN_KEPT}


def _server_config(
    opts: RunOptions,
    spec: WorkloadSpec,
    dp: int,
    max_total_tokens: int | None,
    notes: list[str],
) -> ServerConfig:
    """The server's config: weights (or their shape), parallelism, delayer, pool and port."""
    model_path, load_format, tp_size, extra_args = _model_and_parallelism(opts, spec, dp, notes)
    if opts.port:
        check_port_free(opts.port)
    port = opts.port or free_server_port()
    return ServerConfig(
        model_path=model_path,
        load_format=load_format,
        tp_size=tp_size,
        dp_size=dp,
        delayer=DelayerConfig(
            enabled=opts.delayer,
            max_delay_passes=opts.delayer_max_delay_passes,
            token_usage_low_watermark=opts.delayer_token_usage_low_watermark,
        ),
        max_total_tokens=max_total_tokens,
        kv_cache_dtype=None if spec.planner.kv_dtype == "bf16" else spec.planner.kv_dtype,
        mem_fraction_static=opts.mem_fraction_static,
        chunked_prefill_size=opts.chunked_prefill_size,
        max_running_requests=opts.max_running_requests,
        attention_backend=opts.attention_backend,
        trust_remote_code=False,
        host="0.0.0.0" if opts.nnodes > 1 else "127.0.0.1",
        port=port,
        nnodes=opts.nnodes,
        node_rank=opts.node_rank,
        dist_init_addr=opts.dist_init_addr,
        extra_args=extra_args,
    )


def _model_and_parallelism(
    opts: RunOptions, spec: WorkloadSpec, dp: int, notes: list[str]
) -> tuple[str, str | None, int, tuple[str, ...]]:
    """``(model path, load format, tp size, extra flags)``: a real checkpoint, the spec's config
    with dummy weights, or (simulated forward) the small shape SGLang loads on a CPU."""
    extra_args = tuple(opts.extra_args)
    if opts.simulate_forward:
        if opts.model_path:
            raise ServerRunError(
                "--model and --simulate-forward exclude each other: the simulated forward loads no weights"
            )
        notes.append(
            f"simulated forward: SGLang loads {SIM_SERVER_MODEL}'s shape (no weights) on the CPU; "
            f"forward time from the cost model of {Path(spec.model).parent.name}"
        )
        # one scheduler per DP rank (attention TP 1)
        model_path = str(workloads_dir() / "models" / SIM_SERVER_MODEL)
        return model_path, "dummy", dp, ("--device", "cpu", *extra_args)
    if opts.model_path:
        return opts.model_path, None, opts.tp_size, extra_args
    model_path = str(Path(spec.model).parent)
    notes.append(f"dummy weights from the config at {model_path}")
    return model_path, "dummy", opts.tp_size, extra_args


def schedule_for(spec: Any, trace: list[Any], time_scale: float = 1.0) -> Schedule:
    """When the load client sends each request: the trace's arrivals (scaled), or closed loop."""
    arrival = spec.arrival
    if getattr(arrival, "process", None) == "closed_loop":
        return Schedule.closed_loop(int(arrival.concurrency))
    return Schedule.from_arrivals([r.arrival_s * time_scale for r in trace])


def release_python(version: str) -> str:
    """The interpreter of SGLang ``version``'s release environment (or a change's: dpbench change
    list), with the server tier's extras."""
    return str(ensure_env(version, server=True).python)


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ServerRunError(
                f"port {port} on {host} is taken ({exc.strerror}); pass another --port or leave it out "
                f"to get a free one"
            ) from None
