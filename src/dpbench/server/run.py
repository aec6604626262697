"""One server-tier run: workload → KV plan → launch SGLang → scrape → replay → scrape → stop → run result.

:func:`prepare` does everything that needs no GPU (load the spec, generate the trace,
plan the KV pool, read the install's flags, build the command), so it is testable on
CPU; :func:`execute` starts the server and drives the load.

With ``simulate_forward`` the same launcher starts SGLang's real server on a CPU with
only the model forward simulated (:mod:`dpbench.sglang_compat.simforward`): every
number it reports is marked ``executor: simulated`` with the cost model's name.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

from dpbench.core.paths import cache_dir, results_dir, workloads_dir
from dpbench.core.procs import free_port_with, group_members
from dpbench.core.results import Metric, make_run_result
from dpbench.server.client import GenerateRequest, RequestOutcome
from dpbench.server.config import DelayerConfig, ServerConfig, build_command
from dpbench.server.health import (
    cpu_pressure_fraction,
    cpu_pressure_total_us,
    process_title,
    run_delay_ns,
    run_queue_wait_fraction,
    waits_by_process,
)
from dpbench.server.launcher import ServerProcess, check_gpus
from dpbench.server.loadgen import Schedule, drive, run_load
from dpbench.server.metrics import scrape, server_metrics
from dpbench.server.stats import Slo, per_rank_counts, prefix_hits_by_rank, summarize
from dpbench.server.steps import replay_suffix, trace_id
from dpbench.sglang_compat.detect import UnsupportedSGLang
from dpbench.sglang_compat.server import (
    DERIVED_PORT_OFFSETS,
    SERVER_PORT_RANGE,
    ServerFlags,
    flush_cache,
    server_flags,
)

# SGLang loads this config (shape only, no weights) in simulated-forward runs: DeepSeek-V3's
# attention shapes and vocabulary with 4 layers, so its KV pool fits a CPU's memory. The
# forward's time comes from the cost model of the spec's own model.
SIM_SERVER_MODEL = "deepseek-v3-tiny"
# failed requests whose client-side error a run result keeps (``extra.failed_requests``)
FAILED_REQUESTS_KEPT = 10


class ServerRunError(RuntimeError):
    """The server run could not start or did not finish; the message is one line."""


class RunIncomplete(ServerRunError):
    """The server (or one of its ranks) died during the run; ``result`` holds what was measured."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


class RunOptionsError(ServerRunError, ValueError):
    """Run options that contradict each other."""


# round_robin: SGLang's DP controller; cache_aware: the load client routes (SGLang's router)
ServerDispatch = Literal["round_robin", "cache_aware"]
DISPATCHES: tuple[str, ...] = get_args(ServerDispatch)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a user chooses on top of the workload spec: the schema `dpbench server run` and
    `launch` build their options from (dpbench.core.schema), asv's benchmarks set, and a run's
    result records."""

    spec: str = field(
        metadata={"help": "workload name (e.g. long-prompt-burst) or spec path", "argument": True}
    )
    tp_size: int = field(
        default=8, metadata={"help": "tensor-parallel size (GPUs, all nodes)", "flag": "--tp"}
    )
    dp_size: int | None = field(
        default=None,
        metadata={"help": "attention-DP size (None: the spec's dp_size)", "flag": "--dp"},
    )
    model_path: str | None = field(
        default=None,
        metadata={
            "help": "real checkpoint dir; None: the spec's config with dummy weights",
            "flag": "--model",
        },
    )
    delayer: bool = field(
        default=True,
        metadata={"help": "enable SGLang's PrefillDelayer", "flag": "--delayer/--no-delayer"},
    )
    delayer_max_delay_passes: int | None = field(
        default=None,
        metadata={
            "help": "--prefill-delayer-max-delay-passes (None: SGLang's default)",
            "flag": "--prefill-delayer-max-delay-passes",
        },
    )
    delayer_token_usage_low_watermark: float | None = field(
        default=None,
        metadata={
            "help": "--prefill-delayer-token-usage-low-watermark (None: SGLang's default)",
            "flag": "--prefill-delayer-token-usage-low-watermark",
        },
    )
    chunked_prefill_size: int | None = field(
        default=None,
        metadata={"help": "global --chunked-prefill-size (None: SGLang's default, not recorded)"},
    )
    attention_backend: str | None = field(
        default=None, metadata={"help": "--attention-backend (None: SGLang's choice)"}
    )
    mem_fraction_static: float | None = field(
        default=None, metadata={"help": "--mem-fraction-static (None: SGLang's default)"}
    )
    max_running_requests: int | None = field(
        default=None, metadata={"help": "--max-running-requests (None: SGLang's default)"}
    )
    use_kv_plan: bool = field(
        default=True,
        metadata={
            "help": "size the KV pool (--max-total-tokens) by the workload planner",
            "flag": "--kv-plan/--no-kv-plan",
        },
    )
    nnodes: int = field(default=1, metadata={"help": "nodes of a multi-node server"})
    node_rank: int = field(default=0, metadata={"help": "this node's rank (multi-node)"})
    dist_init_addr: str | None = field(
        default=None, metadata={"help": "node-0 host:port for multi-node"}
    )
    python: str | None = field(
        default=None, metadata={"help": "interpreter with SGLang installed (None: this one)"}
    )
    port: int | None = field(default=None, metadata={"help": "server port (None: a free one)"})
    startup_deadline_s: float = field(
        default=1200.0, metadata={"help": "seconds the server may take to become ready"}
    )
    client_read_timeout_s: float = field(
        default=6 * 60 * 60.0,
        metadata={
            "help": "seconds a request may wait for its next byte before the client gives up "
            "(and the server aborts it); bench_serving's 6 h by default: at 600 s a run of "
            "long-prompt-burst at DP 2 lost a quarter of its requests"
        },
    )
    max_requests: int | None = field(
        default=None, metadata={"help": "replay only the first N requests"}
    )
    slo: Slo = field(default_factory=Slo, metadata={"prefix": "slo_"})
    log_dir: str | None = field(
        default=None,
        metadata={"help": "server logs and step records (None: results/server-logs)"},
    )
    extra_args: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "extra launch_server flag (repeatable), checked against its --help",
            "flag": "--sglang-arg",
        },
    )
    check_gpus: bool = field(
        default=True,
        metadata={"help": "check the GPUs before a GPU run", "cli": False},
    )
    simulate_forward: bool = field(
        default=False,
        metadata={
            "help": "CPU: SGLang's real server with the model forward simulated by the twin's "
            "cost model (tp = dp, one scheduler per DP rank); results are marked executor: "
            "simulated",
            "flag": "--simulate-forward",
        },
    )
    time_scale: float = field(
        default=1.0,
        metadata={
            "help": "simulated forward times and arrival gaps are multiplied by this (0 < s ≤ 100)"
        },
    )
    serial_forward: bool = field(
        default=False,
        metadata={
            "help": "simulated forward: sleep on the scheduler's thread instead of queueing on "
            "the virtual device, so every step also pays the scheduler's CPU work (no overlap)",
            "flag": "--serial-forward",
        },
    )
    sglang: str | None = field(
        default=None,
        metadata={
            "help": "run from this SGLang release's environment (built on first use)",
            "flag": "--sglang",
        },
    )
    dispatch: ServerDispatch = field(
        default="round_robin",
        metadata={
            "help": "how requests reach the DP ranks: round_robin (SGLang's DP controller, its "
            "default) or cache_aware (the load client routes as SGLang's router does, longest "
            "cached prefix unless loads are imbalanced, and sends each request's rank as "
            "routed_dp_rank)"
        },
    )
    calibration: str | None = field(
        default=None, metadata={"help": "kernel calibration file for the cost model"}
    )
    step_records_dir: str | None = field(
        default=None,
        metadata={
            "help": "simulated forward: where every rank writes its step records (multi-node: "
            "a directory all nodes share); None: <log>/steps"
        },
    )

    def __post_init__(self) -> None:
        if self.sglang and self.python:
            raise RunOptionsError("give --sglang VERSION or --python, not both")
        if not 0 < self.time_scale <= 100:
            raise RunOptionsError(f"time_scale must be in (0, 100], got {self.time_scale}")
        if self.max_requests is not None and self.max_requests < 1:
            raise RunOptionsError(f"max_requests must be ≥ 1, got {self.max_requests}")
        if not self.client_read_timeout_s > 0:
            raise RunOptionsError(
                f"client_read_timeout_s must be > 0, got {self.client_read_timeout_s}"
            )
        if self.serial_forward and not self.simulate_forward:
            raise RunOptionsError("--serial-forward needs --simulate-forward")
        if self.dispatch not in DISPATCHES:
            raise RunOptionsError(f"dispatch must be one of {DISPATCHES}, got {self.dispatch!r}")


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
    python: str = sys.executable
    # cache-aware dispatch: each request's prompt as the router compares it (block keys, sizes)
    route_keys: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None


def _schedule_for(spec: Any, trace: list[Any], time_scale: float = 1.0) -> Schedule:
    arrival = spec.arrival
    if getattr(arrival, "process", None) == "closed_loop":
        return Schedule.closed_loop(int(arrival.concurrency))
    return Schedule.from_arrivals([r.arrival_s * time_scale for r in trace])


def routed_requests(
    route_keys: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] | None, dp_size: int
) -> Any:
    """The load client's request function: SGLang's own dispatch (``route_keys`` None), or
    cache-aware routing in front of the server (:class:`dpbench.twin.router.CacheAwareRouter`,
    the twin's router): at each send, the rank whose routed prompts share the longest
    prefix unless the in-flight loads are imbalanced, sent as ``routed_dp_rank``."""
    import dataclasses as dc

    from dpbench.server.client import sglang_generate

    if route_keys is None:
        return sglang_generate
    from dpbench.twin.router import CacheAwareRouter

    router = CacheAwareRouter(dp_size)
    in_flight = [0] * dp_size
    decisions: dict[str, int] = {}

    async def routed(session: Any, base_url: str, request: GenerateRequest) -> RequestOutcome:
        rank = router.route(*route_keys[request.id], in_flight)
        decisions[request.id] = rank
        in_flight[rank] += 1
        try:
            return await sglang_generate(
                session, base_url, dc.replace(request, routed_dp_rank=rank)
            )
        finally:
            in_flight[rank] -= 1

    routed.decisions = decisions  # type: ignore[attr-defined]  # the run result keeps them
    return routed


def release_python(version: str) -> str:
    """The interpreter of SGLang ``version``'s release environment (or a change's: dpbench change
    list), with the server tier's extras."""
    from dpbench.envs.resolve import ensure_env

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
        from dpbench.workload.planner import plan_kv

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
        }
    python = release_python(opts.sglang) if opts.sglang else (opts.python or sys.executable)
    extra_args = tuple(opts.extra_args)
    tp_size = opts.tp_size
    if opts.simulate_forward:
        if opts.model_path:
            raise ServerRunError(
                "--model and --simulate-forward exclude each other: the simulated forward loads no weights"
            )
        model_path, load_format = str(workloads_dir() / "models" / SIM_SERVER_MODEL), "dummy"
        tp_size = dp  # one scheduler per DP rank (attention TP 1)
        extra_args = ("--device", "cpu", *extra_args)
        notes.append(
            f"simulated forward: SGLang loads {SIM_SERVER_MODEL}'s shape (no weights) on the CPU; "
            f"forward time from the cost model of {Path(spec.model).parent.name}"
        )
    elif opts.model_path:
        model_path, load_format = opts.model_path, None
    else:
        model_path, load_format = str(Path(spec.model).parent), "dummy"
        notes.append(f"dummy weights from the config at {model_path}")
    if opts.port:
        check_port_free(opts.port)
    port = opts.port or free_port_with(
        DERIVED_PORT_OFFSETS, low=SERVER_PORT_RANGE[0], high=SERVER_PORT_RANGE[1]
    )
    cfg = ServerConfig(
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
    flags = flags or server_flags(python, cache_dir=cache_dir() / "sglang-help")
    command = build_command(cfg, flags, python=python)
    requests = [
        GenerateRequest(r.id, r.token_ids(model.vocab_size), r.max_new_tokens, r.ignore_eos)
        for r in trace
    ]
    route_keys = None
    if opts.dispatch == "cache_aware":
        from dpbench.twin.router import prefix_keys

        route_keys = {r.id: prefix_keys(r, model.vocab_size) for r in trace}
        notes.append("cache-aware dispatch: the load client routes each request (routed_dp_rank)")
    return Prepared(
        opts,
        spec,
        spec_hash(spec),
        requests,
        _schedule_for(spec, trace, opts.time_scale),
        cfg,
        flags,
        command,
        plan_info,
        notes,
        python,
        route_keys,
    )


def provenance_of(python: str) -> dict[str, Any]:
    """``{"sglang": …, "placement": …}`` of the SGLang installed for ``python`` (raises; never
    guesses): read once per installed SGLang (:mod:`dpbench.server.provenance`)."""
    from dpbench.server.provenance import ProvenanceError, read

    try:
        data = read(python)
    except ProvenanceError as exc:
        raise ServerRunError(str(exc)) from None
    if "unsupported" in data:
        raise UnsupportedSGLang(data["unsupported"])
    return data


class _RankWatch:
    """Notices a server process dying while the load runs, and stops the server so the load ends."""

    def __init__(self, server: ServerProcess, poll_s: float = 0.5) -> None:
        self.server = server
        self.poll_s = poll_s
        self.baseline = set(group_members(server.pgid))
        self.died: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _RankWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _title(pid: int) -> str:
        return _TITLES.get(pid, str(pid))

    def _run(self) -> None:
        for pid in self.baseline:
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                _TITLES[pid] = raw.replace(b"\0", b" ").decode(errors="replace").strip()[:80]
            except OSError:
                _TITLES[pid] = str(pid)
        while not self._stop.wait(self.poll_s):
            alive = set(group_members(self.server.pgid))
            gone = sorted(self.baseline - alive)
            if gone:
                self.died = ", ".join(f"pid {p} ({self._title(p)})" for p in gone)
                self.server.stop()  # in-flight requests fail now instead of hanging
                return


_TITLES: dict[int, str] = {}


def _sim_setup(prep: Prepared, run_dir: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """Write the stand-in's config; return the server's environment and the executor block."""
    from dpbench.server import simcost
    from dpbench.sglang_compat.simforward import SimForwardConfig, server_env

    opts, cfg = prep.options, prep.config
    model = str(prep.spec.model)
    cost_args = {"model": model, "dp_size": cfg.dp_size, "calibration": opts.calibration}
    conf = SimForwardConfig(
        record_dir=str(step_dir(opts, run_dir)),
        cost_factory=simcost.FACTORY,
        cost_args=cost_args,
        time_scale=opts.time_scale,
        virtual_device=not opts.serial_forward,
        dp_size=cfg.dp_size,
    )
    path = conf.write(run_dir / "simforward.json")
    described = simcost.describe(**cost_args)
    executor = {
        "kind": "simulated",
        "cost_model": described["name"],
        "cost_model_description": described["description"],
        "time_scale": opts.time_scale,
        "forward_timing": "slept on the scheduler thread"
        if opts.serial_forward
        else "virtual device (launch returns; results wait for the device)",
        "server_model_shape": SIM_SERVER_MODEL,
        "real": "HTTP server, tokenizer manager, DP controller, schedulers, PrefillDelayer, "
        "radix cache, KV pool, metrics, gloo MLP sync",
        "simulated": "forward time (cost model), next tokens, CUDA-only setup (weights, "
        "attention backends, CUDA graphs, NCCL)",
    }
    local = cfg.dp_size // cfg.nnodes
    return server_env(path, dp_size=local, first_rank=cfg.node_rank * local), executor


def step_dir(opts: RunOptions, run_dir: Path) -> Path:
    return Path(opts.step_records_dir) if opts.step_records_dir else run_dir / "steps"


def sim_launch_env(prep: Prepared, log: Path) -> dict[str, str]:
    """The environment for a simulated-forward server on this node (also the other nodes' `launch`)."""
    from dpbench.core import faults

    faults.inject_if_requested("server-sim")
    records = step_dir(prep.options, log.with_suffix(""))
    if prep.config.node_rank == 0 and records.is_dir() and any(records.glob("rank*.jsonl")):
        raise ServerRunError(
            f"{records} already holds step records; give a new --step-records-dir (records of "
            f"two runs in one file cannot be lined up)"
        )
    env, _ = _sim_setup(prep, log.with_suffix(""))
    return env


def mark_simulated(result: dict[str, Any], cost_model: str) -> None:
    """Mark a run result and each of its metrics as the simulated executor's, naming the cost model."""
    result["executor"] = "simulated"
    result["cost_model"] = cost_model
    for m in result["metrics"].values():
        m["executor"] = "simulated"
        m["cost_model"] = cost_model


def execute(
    prep: Prepared,
    *,
    on_done: Callable[[RequestOutcome], None] | None = None,
    log_path: str | Path | None = None,
) -> dict[str, Any]:
    """Start the server, wait until ready, replay the trace, scrape metrics, stop; return the run result.

    Raises :class:`RunIncomplete` (carrying the partial result) when a server process
    died during the run, and :class:`ServerStartError` when it never became ready.
    """
    return execute_replays(prep, 1, on_done=on_done, log_path=log_path)[0]


@dataclass
class _Replay:
    """What one replay against the running server measured, before it is turned into a run result."""

    index: int
    suffix: str
    requests: list[GenerateRequest]
    request_func: Any
    load: Any
    t_load: float
    t_end: float
    before: Any
    after: Any
    pressure: float | None
    waited: float | None  # all threads summed, the most-waiting process
    waited_main: float | None  # main threads, the most-waiting process
    waits: list[dict[str, Any]]  # per process (health.waits_by_process)
    died: str | None


def execute_replays(
    prep: Prepared,
    replays: int,
    *,
    on_done: Callable[[RequestOutcome], None] | None = None,
    log_path: str | Path | None = None,
    clients: Sequence[Prepared] | None = None,
) -> list[dict[str, Any]]:
    """Start the server once and replay the trace ``replays`` times against it, emptying
    SGLang's caches (``/flush_cache``: radix cache, KV pool, request slots) between replays;
    one run result per replay, each with its own metrics, step window and instrument health.

    A start-up costs as much as a small replay on two cores, so repeated runs of one setting
    share it. A flushed server is not a fresh process: the DP controller's round-robin
    position and warmed Python state carry over (each result says which replay it was,
    ``extra.replay``). ``clients``: one preparation per replay (``replays`` is then their
    count) for replays that differ only on the client's side (how requests are dispatched),
    so settings that need the same server share one start-up; each must start the very
    command ``prep`` starts. Raises :class:`RunIncomplete` with the replay in which a server
    process died (earlier replays' results on ``exc.results``), :class:`ServerStartError`
    when it never became ready.
    """
    preps = list(clients) if clients is not None else [prep] * replays
    if clients is not None:
        replays = len(preps)
        for k, other in enumerate(preps):
            if other.command != prep.command or other.spec_hash != prep.spec_hash:
                raise RunOptionsError(
                    f"replay {k} needs another server (its command or spec differs from the "
                    f"first's): only the client's side may differ between shared replays"
                )
    opts, cfg = prep.options, prep.config
    if replays < 1:
        raise RunOptionsError(f"replays must be ≥ 1, got {replays}")
    if cfg.node_rank != 0:
        raise ServerRunError(
            f"node_rank={cfg.node_rank}: the load is driven from node 0; on the other nodes start SGLang with "
            f"`dpbench server launch SPEC --nnodes {cfg.nnodes} --node-rank N --dist-init-addr {cfg.dist_init_addr}`"
        )
    if opts.check_gpus and not opts.simulate_forward:
        # At least the planned KV pool must fit on every GPU (weights come on top).
        check_gpus(
            cfg.gpus_per_node, min_free_gib=float((prep.kv_plan or {}).get("gib_per_rank", 0.0))
        )
    t0 = time.monotonic()
    base_url = f"http://127.0.0.1:{cfg.port}"
    log_dir = Path(opts.log_dir) if opts.log_dir else results_dir() / "server-logs"
    mode = "sim" if opts.simulate_forward else "gpu"
    stem = (
        f"{prep.spec.name}-{mode}-tp{cfg.tp_size}-dp{cfg.dp_size}-"
        f"{'delayer' if cfg.delayer.enabled else 'nodelayer'}-{int(time.time())}-{os.getpid()}"
    )
    log = Path(log_path or log_dir / f"{stem}.log")
    provenance = provenance_of(prep.python)
    env: dict[str, str] | None = None
    executor: dict[str, Any] = {"kind": "gpu"}
    run_dir = log.with_suffix("")
    launch_note = f"launch_server flags read from {prep.flags.source}"
    notes = [*prep.notes, launch_note]
    if opts.simulate_forward:
        env = sim_launch_env(prep, log)
        _, executor = _sim_setup(prep, run_dir)
    ready_s = float("nan")
    done: list[_Replay] = []
    with ServerProcess(prep.command, base_url=base_url, log_path=log, env=env) as server:
        ready_s = server.wait_ready(deadline_s=opts.startup_deadline_s)
        for k, client in enumerate(preps):
            if k:
                try:
                    flush_cache(base_url)
                except RuntimeError as exc:
                    raise ServerRunError(f"replay {k} of {replays}: {exc}") from None
            suffix = replay_suffix(k)
            requests = [r if not suffix else replace(r, id=r.id + suffix) for r in client.requests]
            route_keys = (
                None
                if client.route_keys is None
                else {r.id: client.route_keys[trace_id(r.id, suffix)] for r in requests}
            )
            request_func = routed_requests(route_keys, cfg.dp_size)
            before = scrape(base_url)
            t_load = time.monotonic()
            psi_before = cpu_pressure_total_us()
            server_pids = group_members(server.pgid)
            titles = {pid: process_title(pid) for pid in server_pids}
            waited_before = run_delay_ns(server_pids)
            main_before = run_delay_ns(server_pids, main_thread=True)
            with _RankWatch(server) as watch:
                load = run_load(
                    drive(
                        requests,
                        client.schedule,
                        base_url=base_url,
                        on_done=on_done,
                        request_func=request_func,
                        read_timeout_s=opts.client_read_timeout_s,
                    )
                )
            t_end = time.monotonic()
            waited_after = run_delay_ns(server_pids)
            main_after = run_delay_ns(server_pids, main_thread=True)
            load_wall = t_end - t_load
            done.append(
                _Replay(
                    index=k,
                    suffix=suffix,
                    requests=requests,
                    request_func=request_func,
                    load=load,
                    t_load=t_load,
                    t_end=t_end,
                    before=before,
                    after=scrape(base_url) if watch.died is None else None,
                    pressure=cpu_pressure_fraction(psi_before, cpu_pressure_total_us(), load_wall),
                    waited=run_queue_wait_fraction(waited_before, waited_after, load_wall),
                    waited_main=run_queue_wait_fraction(main_before, main_after, load_wall),
                    waits=waits_by_process(
                        titles, waited_before, waited_after, main_before, main_after, load_wall
                    ),
                    died=watch.died,
                )
            )
            if watch.died is not None:
                break
    results = []
    for i, rep in enumerate(done):
        until = done[i + 1].t_load if i + 1 < len(done) else None
        started = t0 if i == 0 else done[i - 1].t_end
        client = preps[rep.index]
        results.append(
            _replay_result(
                client, rep, replays, until, ready_s, log, run_dir, executor, provenance,
                notes if client is prep else [*client.notes, launch_note],
                wall_s=rep.t_end - started,
            )
        )  # fmt: skip
    if done[-1].died is not None:
        exc = RunIncomplete(
            f"the server lost {done[-1].died} during the run; partial result kept (marked "
            f"incomplete); server log: {log}",
            results[-1],
        )
        exc.results = results[:-1]  # type: ignore[attr-defined]
        raise exc
    return results


def _replay_result(
    prep: Prepared,
    rep: _Replay,
    replays: int,
    until: float | None,
    ready_s: float,
    log: Path,
    run_dir: Path,
    executor: dict[str, Any],
    provenance: dict[str, Any],
    notes: list[str],
    *,
    wall_s: float,
) -> dict[str, Any]:
    """One replay's run result: client metrics, the server's counters between its scrapes,
    and (simulated forward) its window of the stand-in's records, from its first request's
    send to the next replay's."""
    opts, cfg = prep.options, prep.config
    load, died, suffix = rep.load, rep.died, rep.suffix
    notes = list(notes)
    metrics: dict[str, Metric] = {**summarize(load, opts.slo)}
    if rep.pressure is not None:  # this machine's contention during the load (instrument health)
        metrics["cpu_pressure_fraction"] = Metric(rep.pressure, "fraction of wall time", "lower")
    if rep.waited is not None:  # all threads summed (gloo's many loop threads inflate it)
        metrics["server_run_queue_wait_fraction"] = Metric(
            rep.waited, "fraction of wall time", "lower"
        )
    if rep.waited_main is not None:  # how much the machine delayed the server's own loops
        metrics["server_main_thread_wait_fraction"] = Metric(
            rep.waited_main, "fraction of wall time", "lower"
        )
    extra: dict[str, Any] = {
        "executor": executor,
        "command": prep.command,
        "server_config": asdict(cfg),
        "run_options": asdict(opts),  # the schema this run was given (dpbench.core.schema)
        "kv_plan": prep.kv_plan,
        "schedule": prep.schedule.kind,
        "slo": asdict(opts.slo),
        "requests_per_dp_rank": per_rank_counts(load.outcomes),
        "prefix_hits_by_rank": prefix_hits_by_rank(load.outcomes),
        "dispatch": prep.options.dispatch,
        "server_log": str(log),
    }
    if rep.waits:
        extra["run_queue_wait_by_process"] = rep.waits
    failed = [o for o in load.outcomes if not o.ok]
    if failed:  # what went wrong, in the client's words, not only a count by kind
        extra["failed_requests"] = [
            {
                "id": o.id,
                "kind": o.error_kind,
                "error": o.error,
                "http_status": o.http_status,
                "sent_s": round(o.start_s - load.t0, 3),  # after the first send
            }
            for o in failed[:FAILED_REQUESTS_KEPT]
        ]
    if replays > 1:
        extra["replay"] = {
            "index": rep.index,
            "of": replays,
            "flushed_before": rep.index > 0,  # /flush_cache after the previous replay
            "rid_suffix": suffix,  # what this replay appended to each trace id
            "from_t": rep.t_load,  # its window of the stand-in's records (monotonic)
            "to_t": until,
        }
        notes.append(
            f"replay {rep.index + 1} of {replays} against one server"
            + (" (caches flushed after the previous replay)" if rep.index else "")
        )
    if hasattr(rep.request_func, "decisions"):  # the rank the load client routed each request to
        extra["routed_dp_ranks"] = {
            trace_id(i, suffix): r for i, r in rep.request_func.decisions.items()
        }
    if prep.spec.trace is not None:  # what the import kept, cut and dropped (window = seed)
        from dpbench.workload.trace import import_spec_trace

        extra["trace_import"] = import_spec_trace(prep.spec)[1].as_dict()
    if rep.after is not None and rep.before is not None:
        srv = server_metrics(rep.before, rep.after)
        metrics.update(srv.as_metrics())
        extra["server_metrics"] = asdict(srv)
    metrics["server_startup_s"] = Metric(ready_s, "s", "lower")
    if opts.simulate_forward:
        from dpbench.server.steps import (
            StepRecordError,
            rank_balance_of,
            read_arrivals,
            read_first_tokens,
            read_idle_passes,
            read_records,
            read_step_waiting,
            scheduler_latency,
            since_index,
            summarise,
            window,
        )

        t_load = rep.t_load
        records: list[list[dict[str, Any]]] = []
        first_step = last_step = None
        try:
            all_records = read_records(step_dir(opts, run_dir), cfg.dp_size)
            first_step = since_index(all_records, t_load)
            last_step = since_index(all_records, until) if until is not None else None
            records = window(all_records, t_load, until)
            step_metrics, table = summarise(records)
        except StepRecordError as exc:
            if died is None and cfg.nnodes == 1:
                raise
            # a dead rank's or another node's records: the step metrics stay absent
            extra["steps_error"] = str(exc)
            if cfg.nnodes > 1:
                notes.append(
                    f"step metrics absent: {exc} (other nodes write their ranks' records "
                    f"locally unless every node is given one shared --step-records-dir)"
                )
        else:
            metrics.update(step_metrics)
            extra["steps"] = table
        sent = {o.id: o.start_s for o in load.outcomes if o.start_s}
        arrivals, pickup = read_arrivals(step_dir(opts, run_dir), cfg.dp_size, sent, load.t0)
        metrics.update(pickup)
        metrics.update(read_idle_passes(step_dir(opts, run_dir), cfg.dp_size, t_load, until))
        offsets = prep.schedule.offsets_s
        planned = (
            {r.id: load.t0 + float(off) for r, off in zip(rep.requests, offsets, strict=True)}
            if offsets is not None
            else sent
        )
        received = {
            o.id: o.start_s + o.ttft_s for o in load.outcomes if o.start_s and o.ttft_s is not None
        }
        first = read_first_tokens(step_dir(opts, run_dir), cfg.dp_size)
        metrics.update(scheduler_latency(first, planned, received))
        # when each request reached its scheduler and which DP rank (by trace id): the twin
        # can replay these
        extra["scheduler_arrivals"] = {trace_id(i, suffix): v for i, v in arrivals.items()}
        if "steps" in extra:  # rank balance (dpbench.metrics.balance): the twin's definitions
            waiting = read_step_waiting(step_dir(opts, run_dir), cfg.dp_size)
            if waiting is not None and first_step is not None:
                waiting = [w[first_step:last_step] for w in waiting]
            given = Counter(rank for _, rank in arrivals.values())
            balance, extra["rank_balance"] = rank_balance_of(
                records, waiting, [given.get(r, 0) for r in range(cfg.dp_size)]
            )
            metrics.update(balance)
        extra["step_records_dir"] = str(step_dir(opts, run_dir))
    if died is not None:
        extra["incomplete"] = f"server process died during the run: {died}"
        notes.append(extra["incomplete"])
    result = make_run_result(
        tier="server",
        sglang=provenance["sglang"],
        placement=provenance.get("placement"),
        metrics=metrics,
        wall_time_s=wall_s,
        # "spec": the name or path it was given, so a replay (the divergence finder) loads it
        workload={"name": prep.spec.name, "hash": prep.spec_hash, "spec": opts.spec},
        notes=notes,
        extra=extra,
    )
    if opts.simulate_forward:
        mark_simulated(result, executor["cost_model"])
    from dpbench.server.health import check

    # whether this run measured SGLang or this machine (stated limits; a broken one says which)
    result["extra"]["instrument_health"] = check(result).as_dict()
    for line in result["extra"]["instrument_health"]["broken"]:
        result["notes"].append(f"instrument: {line}")
    return result
