"""One server-tier run: workload → KV plan → launch SGLang → scrape → replay → scrape → stop → run result.

The run reads top to bottom through these modules:

- :mod:`.options`: what the user chooses (:class:`RunOptions`) and its checks;
- :mod:`.prepare`: everything that needs no GPU (spec, trace, KV plan, the install's flags,
  the command), so it is testable on a CPU;
- :mod:`.simlaunch`: with ``simulate_forward``, the stand-in's config and environment
  (SGLang's real server on a CPU with only the model forward simulated,
  :mod:`dpbench.sglang_compat.simforward`); every number it reports is marked
  ``executor: simulated`` with the cost model's name;
- :mod:`.lifetime`: the running server as a context manager (start, readiness, ``/proc``
  probes, a watch on its processes, always reaped);
- here: :func:`execute` / :func:`execute_replays` start the server and drive the load;
- :mod:`.replay_result`: one replay's run result, with the client's metrics
  (:mod:`.stats`) and the simulated steps' (:mod:`.sim_steps`) derived apart.

The names callers import from here stay importable from here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpbench.core.paths import results_dir
from dpbench.server.client import RequestOutcome
from dpbench.server.errors import RunIncomplete, RunOptionsError, ServerRunError
from dpbench.server.launcher import check_gpus
from dpbench.server.lifetime import LiveServer, Measured, running_server
from dpbench.server.loadclock import VirtualLoadClock, WallClock
from dpbench.server.loadgen import drive, run_load
from dpbench.server.options import DISPATCHES, RunOptions, ServerDispatch
from dpbench.server.prepare import Prepared, prepare, release_python
from dpbench.server.provenance import provenance_of
from dpbench.server.replay_result import Replay, RunContext, replay_result
from dpbench.server.routing import routed_requests
from dpbench.server.simlaunch import sim_launch, sim_launch_env
from dpbench.server.steps import replay_suffix, trace_id
from dpbench.workload.spec import spec_hash

__all__ = [
    "DISPATCHES",
    "Prepared",
    "RunIncomplete",
    "RunOptions",
    "RunOptionsError",
    "ServerDispatch",
    "ServerRunError",
    "execute",
    "execute_replays",
    "prepare",
    "provenance_of",
    "release_python",
    "sim_launch_env",
]

OnDone = Callable[[RequestOutcome], None]


def execute(
    prep: Prepared, *, on_done: OnDone | None = None, log_path: str | Path | None = None
) -> dict[str, Any]:
    """Start the server, wait until ready, replay the trace, scrape metrics, stop; return the run result.

    Raises :class:`RunIncomplete` (carrying the partial result) when a server process
    died during the run, and :class:`ServerStartError` when it never became ready.
    """
    return execute_replays(prep, 1, on_done=on_done, log_path=log_path)[0]


def execute_replays(
    prep: Prepared,
    replays: int,
    *,
    on_done: OnDone | None = None,
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
    preps = _replay_clients(prep, replays, clients)
    _check_can_run(prep, len(preps))
    t0 = time.monotonic()
    log = Path(log_path or default_log_path(prep))
    provenance = provenance_of(prep.python)
    sim = sim_launch(prep, log) if prep.options.simulate_forward else None
    done: list[Replay] = []
    clock = (
        WallClock()
        if sim is None or sim.clock_file is None
        else VirtualLoadClock(sim.clock_file, prep.config.dp_size)
    )
    with running_server(
        prep.command,
        port=prep.config.port,
        log=log,
        env=None if sim is None else sim.env,
        startup_deadline_s=prep.options.startup_deadline_s,
    ) as server:
        for k, client in enumerate(preps):
            done.append(_replay(server, prep, client, k, len(preps), on_done, clock))
            if done[-1].measured.died is not None:
                break
    run = RunContext(
        replays=len(preps),
        ready_s=server.ready_s,
        log=log,
        run_dir=log.with_suffix(""),
        executor={"kind": "gpu"} if sim is None else sim.executor,
        provenance=provenance,
        launch_note=f"launch_server flags read from {prep.flags.source}",
    )
    return _results(preps, done, run, t0)


def _replay_clients(
    prep: Prepared, replays: int, clients: Sequence[Prepared] | None
) -> list[Prepared]:
    """One preparation per replay; shared replays may differ on the client's side only."""
    if clients is None:
        return [prep] * replays
    for k, other in enumerate(clients):
        # another seed of the same spec is the client's side (prepare.for_seed)
        same_spec = spec_hash(other.spec.with_overrides(seed=prep.spec.seed)) == prep.spec_hash
        if other.command != prep.command or not same_spec:
            raise RunOptionsError(
                f"replay {k} needs another server (its command or spec differs from the "
                f"first's): only the client's side (or the workload seed) may differ between "
                f"shared replays"
            )
    return list(clients)


def _check_can_run(prep: Prepared, replays: int) -> None:
    """What must hold before anything starts: replays, node 0, the GPUs for a GPU run."""
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


def default_log_path(prep: Prepared) -> Path:
    """``<log dir>/<spec>-<sim|gpu>-tp<T>-dp<D>-<delayer|nodelayer>-<unix time>-<pid>.log``."""
    opts, cfg = prep.options, prep.config
    log_dir = Path(opts.log_dir) if opts.log_dir else results_dir() / "server-logs"
    mode = "sim" if opts.simulate_forward else "gpu"
    delayer = "delayer" if cfg.delayer.enabled else "nodelayer"
    stem = f"{prep.spec.name}-{mode}-tp{cfg.tp_size}-dp{cfg.dp_size}-{delayer}"
    return log_dir / f"{stem}-{int(time.time())}-{os.getpid()}.log"


def _replay(
    server: LiveServer,
    prep: Prepared,
    client: Prepared,
    k: int,
    replays: int,
    on_done: OnDone | None,
    clock: WallClock,
) -> Replay:
    """Replay ``client``'s trace once (after the first, on flushed caches) and measure it."""
    if k:
        try:
            server.flush()
        except RuntimeError as exc:
            raise ServerRunError(f"replay {k} of {replays}: {exc}") from None
    suffix = replay_suffix(k)
    requests = [r if not suffix else replace(r, id=r.id + suffix) for r in client.requests]
    route_keys = (
        None
        if client.route_keys is None
        else {r.id: client.route_keys[trace_id(r.id, suffix)] for r in requests}
    )
    request_func = routed_requests(route_keys, prep.config.dp_size)
    measured = server.measure(
        lambda: run_load(
            drive(
                requests,
                client.schedule,
                base_url=server.base_url,
                on_done=on_done,
                request_func=request_func,
                read_timeout_s=prep.options.client_read_timeout_s,
                clock=clock,
            )
        ),
        clock,
    )
    routed = getattr(request_func, "decisions", None)
    return Replay(index=k, suffix=suffix, requests=requests, routed=routed, measured=measured)


def _wall_end(m: Measured) -> float:
    return m.t_end if m.wall_end is None else m.wall_end


def _results(
    preps: list[Prepared], done: list[Replay], run: RunContext, t0: float
) -> list[dict[str, Any]]:
    """One result per replay, each with its window of the step records and its wall time;
    raises :class:`RunIncomplete` when the last one lost a server process."""
    results = []
    for i, rep in enumerate(done):
        until = done[i + 1].measured.t_load if i + 1 < len(done) else None
        started = t0 if i == 0 else _wall_end(done[i - 1].measured)
        results.append(
            replay_result(
                preps[rep.index], rep, run, until=until, wall_s=_wall_end(rep.measured) - started
            )
        )
    if done[-1].measured.died is not None:
        raise RunIncomplete(
            f"the server lost {done[-1].measured.died} during the run; partial result kept "
            f"(marked incomplete); server log: {run.log}",
            results[-1],
            results[:-1],
        )
    return results
