"""One server-tier run: workload → KV plan → launch SGLang → scrape → replay → scrape → stop → run result.

:func:`prepare` does everything that needs no GPU (load the spec, generate the trace,
plan the KV pool, read the install's flags, build the command), so it is testable on
CPU; :func:`execute` starts the server and drives the load.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpbench.paths import results_dir
from dpbench.procs import free_port
from dpbench.results import Metric, make_run_result
from dpbench.server.client import GenerateRequest, RequestOutcome
from dpbench.server.config import DelayerConfig, ServerConfig, build_command
from dpbench.server.launcher import ServerProcess, check_gpus
from dpbench.server.loadgen import Schedule, drive, run_load
from dpbench.server.metrics import scrape, server_metrics
from dpbench.server.stats import Slo, per_rank_counts, summarize
from dpbench.sglang_compat.server import ServerFlags, server_flags


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a user chooses on top of the workload spec (the CLI's and asv's knobs)."""

    spec: str = field(metadata={"help": "shipped workload name or path to a spec YAML"})
    tp_size: int = 8
    dp_size: int | None = field(default=None, metadata={"help": "default: the spec's dp_size"})
    model_path: str | None = field(
        default=None, metadata={"help": "real checkpoint; default: spec config + dummy weights"}
    )
    delayer: bool = True
    delayer_max_delay_passes: int | None = None
    delayer_token_usage_low_watermark: float | None = None
    chunked_prefill_size: int | None = None
    attention_backend: str | None = None
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    use_kv_plan: bool = True
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    python: str = field(
        default_factory=lambda: sys.executable, metadata={"help": "interpreter with SGLang"}
    )
    port: int | None = None
    startup_deadline_s: float = 1200.0
    max_requests: int | None = field(
        default=None, metadata={"help": "replay only the first N requests"}
    )
    slo: Slo = field(default_factory=Slo)
    log_dir: str | None = field(
        default=None, metadata={"help": "server logs; default results/server-logs"}
    )
    extra_args: tuple[str, ...] = ()
    check_gpus: bool = True


@dataclass
class Prepared:
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


def _schedule_for(spec: Any, trace: list[Any]) -> Schedule:
    arrival = spec.arrival
    if getattr(arrival, "process", None) == "closed_loop":
        return Schedule.closed_loop(int(arrival.concurrency))
    return Schedule.from_arrivals([r.arrival_s for r in trace])


def prepare(opts: RunOptions, *, flags: ServerFlags | None = None) -> Prepared:
    """Everything up to (not including) starting the server; no GPU needed."""
    from dpbench.workload.models import load_model_config
    from dpbench.workload.spec import load_spec, spec_hash
    from dpbench.workload.trace import generate_trace

    spec = load_spec(opts.spec)
    dp = opts.dp_size or spec.dp_size
    trace = generate_trace(spec)
    if opts.max_requests is not None:
        trace = trace[: opts.max_requests]
    model = load_model_config(spec.model)
    notes: list[str] = []
    plan_info: dict[str, Any] | None = None
    max_total_tokens = None
    if opts.use_kv_plan:
        try:
            from dpbench.workload.planner import plan_kv
        except ImportError:
            notes.append(
                "KV plan unavailable (dpbench.workload.planner missing): --max-total-tokens left to SGLang"
            )
        else:
            plan = plan_kv(spec, trace, dp_size=dp, dispatch=spec.planner.dispatch)
            max_total_tokens = int(plan.max_total_tokens_per_rank)
            plan_info = {
                k: getattr(plan, k)
                for k in (
                    "bytes_per_token",
                    "peak_tokens_per_rank",
                    "max_total_tokens_per_rank",
                    "gib_per_rank",
                    "target_util",
                )
                if hasattr(plan, k)
            }
    if opts.model_path:
        model_path, load_format = opts.model_path, None
    else:
        model_path, load_format = str(Path(spec.model).parent), "dummy"
        notes.append(f"dummy weights from the config at {model_path}")
    port = opts.port or free_port()
    cfg = ServerConfig(
        model_path=model_path,
        load_format=load_format,
        tp_size=opts.tp_size,
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
        extra_args=opts.extra_args,
    )
    flags = flags or server_flags(opts.python)
    command = build_command(cfg, flags, python=opts.python)
    requests = [
        GenerateRequest(r.id, r.token_ids(model.vocab_size), r.max_new_tokens, r.ignore_eos)
        for r in trace
    ]
    return Prepared(
        opts,
        spec,
        spec_hash(spec),
        requests,
        _schedule_for(spec, trace),
        cfg,
        flags,
        command,
        plan_info,
        notes,
    )


def _sglang_info(python: str, version: str) -> dict[str, Any]:
    snippet = "import json; from dpbench.sglang_compat.detect import sglang_info; print(json.dumps(sglang_info()))"
    try:
        proc = subprocess.run([python, "-c", snippet], capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        pass
    return {"version": version, "commit": None, "generation": None}


def execute(
    prep: Prepared,
    *,
    on_done: Callable[[RequestOutcome], None] | None = None,
    log_path: str | Path | None = None,
) -> dict[str, Any]:
    """Start the server, wait until ready, replay the trace, scrape metrics, stop; return the run result."""
    opts, cfg = prep.options, prep.config
    if cfg.node_rank != 0:
        raise RuntimeError(
            f"node_rank={cfg.node_rank}: the load is driven from node 0; on the other nodes start SGLang with "
            f"`dpbench server launch SPEC --nnodes {cfg.nnodes} --node-rank N --dist-init-addr {cfg.dist_init_addr}`"
        )
    if opts.check_gpus:
        # At least the planned KV pool must fit on every GPU (weights come on top).
        check_gpus(
            cfg.gpus_per_node, min_free_gib=float((prep.kv_plan or {}).get("gib_per_rank", 0.0))
        )
    t0 = time.monotonic()
    base_url = f"http://127.0.0.1:{cfg.port}"
    log_dir = Path(opts.log_dir) if opts.log_dir else results_dir() / "server-logs"
    log = Path(
        log_path
        or log_dir
        / f"{prep.spec.name}-tp{cfg.tp_size}-dp{cfg.dp_size}-"
        f"{'delayer' if cfg.delayer.enabled else 'nodelayer'}-{int(time.time())}.log"
    )
    with ServerProcess(prep.command, base_url=base_url, log_path=log) as server:
        ready_s = server.wait_ready(deadline_s=opts.startup_deadline_s)
        before = scrape(base_url)
        load = run_load(drive(prep.requests, prep.schedule, base_url=base_url, on_done=on_done))
        after = scrape(base_url)
    srv = server_metrics(before, after)
    metrics: dict[str, Metric] = {**summarize(load, opts.slo), **srv.as_metrics()}
    metrics["server_startup_s"] = Metric(ready_s, "s", "lower")
    return make_run_result(
        tier="server",
        sglang=_sglang_info(opts.python, prep.flags.version),
        metrics=metrics,
        wall_time_s=time.monotonic() - t0,
        workload={"name": prep.spec.name, "hash": prep.spec_hash},
        notes=[*prep.notes, f"launch_server flags read from {prep.flags.source}"],
        extra={
            "command": prep.command,
            "server_config": asdict(cfg),
            "kv_plan": prep.kv_plan,
            "schedule": prep.schedule.kind,
            "slo": asdict(opts.slo),
            "server_metrics": asdict(srv),
            "requests_per_dp_rank": per_rank_counts(load.outcomes),
            "server_log": str(log),
        },
    )
