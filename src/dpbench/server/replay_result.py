"""One replay's run result: the client's metrics, the server's counters, the simulated steps'
metrics and the instrument's health, put together in the suite's run-result schema.

Everything here works on what a replay measured (:class:`Replay`) and what the whole run
shares (:class:`RunContext`); it starts nothing and reads only the step records, so a stored
run's result can be derived again offline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpbench.core.results import Metric, make_run_result
from dpbench.server.client import GenerateRequest
from dpbench.server.health import check
from dpbench.server.lifetime import Measured
from dpbench.server.loadgen import LoadResult
from dpbench.server.metrics import server_metrics
from dpbench.server.prepare import Prepared
from dpbench.server.sim_steps import WindowSpec, step_window
from dpbench.server.simlaunch import mark_simulated, step_dir
from dpbench.server.stats import per_rank_counts, prefix_hits_by_rank, summarize
from dpbench.server.steps import trace_id

# failed requests whose client-side error a run result keeps (``extra.failed_requests``)
FAILED_REQUESTS_KEPT = 10


@dataclass(frozen=True)
class RunContext:
    """What every replay of one server run shares."""

    replays: int
    ready_s: float  # the server's start-up, seconds
    log: Path  # the server's log
    run_dir: Path  # beside the log: the stand-in's config and (by default) the step records
    executor: dict[str, Any]  # ``extra.executor``: gpu, or the simulated forward's cost model
    provenance: dict[str, Any]  # the SGLang installed: version, commit, placement
    launch_note: str  # where the launch flags were read from


@dataclass(frozen=True)
class Replay:
    """One replay of the trace against the running server, as measured."""

    index: int
    suffix: str  # appended to each trace id (SGLang refuses a request id it has seen)
    requests: list[GenerateRequest]
    routed: dict[str, int] | None  # cache-aware dispatch: the rank each request id was sent to
    measured: Measured


def replay_result(
    prep: Prepared, rep: Replay, run: RunContext, *, until: float | None, wall_s: float
) -> dict[str, Any]:
    """The run result of replay ``rep``; ``until``: when the next replay started (its window
    of the step records ends there), ``wall_s``: the wall time it is charged."""
    opts, m = prep.options, rep.measured
    notes = [*prep.notes, run.launch_note]
    metrics: dict[str, Metric] = {**summarize(m.load, opts.slo), **m.proc.as_metrics()}
    extra = _extra(prep, rep, run)
    if run.replays > 1:
        extra["replay"] = _replay_block(rep, run.replays, until)
        notes.append(
            f"replay {rep.index + 1} of {run.replays} against one server"
            + (" (caches flushed after the previous replay)" if rep.index else "")
        )
    if rep.routed is not None:  # the rank the load client routed each request to
        extra["routed_dp_ranks"] = {trace_id(i, rep.suffix): r for i, r in rep.routed.items()}
    if prep.trace_import is not None:  # what the import kept, cut and dropped (window = seed)
        extra["trace_import"] = prep.trace_import
    if m.after is not None and m.before is not None:
        srv = server_metrics(m.before, m.after)
        metrics.update(_on_this_clock(srv.as_metrics(), run.executor, notes))
        extra["server_metrics"] = asdict(srv)
    metrics["server_startup_s"] = Metric(run.ready_s, "s", "lower")
    # beside kv_utilization_max: the utilization the plan expected at its peak (a run stored
    # before plans reported it has none)
    if prep.kv_plan and "planned_peak_util" in prep.kv_plan:
        metrics["kv_utilization_planned"] = Metric(
            prep.kv_plan["planned_peak_util"], "fraction", "none"
        )
    if opts.simulate_forward:
        steps = step_window(
            _window(prep, rep, run, until), m.load, prep.schedule, [r.id for r in rep.requests]
        )
        metrics.update(steps.metrics)
        extra.update(steps.extra)
        notes.extend(steps.notes)
    if m.died is not None:
        extra["incomplete"] = f"server process died during the run: {m.died}"
        notes.append(extra["incomplete"])
    return _finish(prep, run, metrics, extra, notes, wall_s)


# SGLang's own metrics that it times on the wall clock (absent from a virtual-clock run's
# metrics: they would mix wall seconds into virtual ones; kept raw in extra.server_metrics)
WALL_TIMED = ("prefill_delayer_wait_seconds_mean", "prefill_delayer_wait_pass_ms")


def _on_this_clock(
    metrics: dict[str, Metric], executor: dict[str, Any], notes: list[str]
) -> dict[str, Metric]:
    if executor.get("clock") != "virtual":
        return metrics
    dropped = [k for k in WALL_TIMED if k in metrics]
    if dropped:
        notes.append(
            f"virtual clock: {', '.join(dropped)} left out (SGLang times them on the wall clock)"
        )
    return {k: v for k, v in metrics.items() if k not in WALL_TIMED}


def _extra(prep: Prepared, rep: Replay, run: RunContext) -> dict[str, Any]:
    """What the result records about the setting and the load beside its metrics."""
    opts, load = prep.options, rep.measured.load
    extra: dict[str, Any] = {
        "executor": run.executor,
        "command": prep.command,
        "server_config": asdict(prep.config),
        "run_options": asdict(opts),  # the schema this run was given (dpbench.core.schema)
        "kv_plan": prep.kv_plan,
        "schedule": prep.schedule.kind,
        "slo": asdict(opts.slo),
        "requests_per_dp_rank": per_rank_counts(load.outcomes),
        "prefix_hits_by_rank": prefix_hits_by_rank(load.outcomes),
        "dispatch": opts.dispatch,
        "server_log": str(run.log),
    }
    if rep.measured.proc.waits:
        extra["run_queue_wait_by_process"] = rep.measured.proc.waits
    failed = _failed_requests(load)
    if failed:  # what went wrong, in the client's words, not only a count by kind
        extra["failed_requests"] = failed
    return extra


def _failed_requests(load: LoadResult) -> list[dict[str, Any]]:
    return [
        {
            "id": o.id,
            "kind": o.error_kind,
            "error": o.error,
            "http_status": o.http_status,
            "sent_s": round(o.start_s - load.t0, 3),  # after the first send
        }
        for o in [o for o in load.outcomes if not o.ok][:FAILED_REQUESTS_KEPT]
    ]


def _replay_block(rep: Replay, replays: int, until: float | None) -> dict[str, Any]:
    return {
        "index": rep.index,
        "of": replays,
        "flushed_before": rep.index > 0,  # /flush_cache after the previous replay
        "rid_suffix": rep.suffix,  # what this replay appended to each trace id
        "from_t": rep.measured.t_load,  # its window of the stand-in's records (monotonic)
        "to_t": until,
    }


def _window(prep: Prepared, rep: Replay, run: RunContext, until: float | None) -> WindowSpec:
    return WindowSpec(
        records_dir=step_dir(prep.options, run.run_dir),
        dp_size=prep.config.dp_size,
        nnodes=prep.config.nnodes,
        t_load=rep.measured.t_load,
        until=until,
        suffix=rep.suffix,
        died=rep.measured.died,
    )


def _finish(
    prep: Prepared,
    run: RunContext,
    metrics: dict[str, Metric],
    extra: dict[str, Any],
    notes: list[str],
    wall_s: float,
) -> dict[str, Any]:
    """The result in the run-result schema, marked simulated where it was, with its health."""
    result = make_run_result(
        tier="server",
        sglang=run.provenance["sglang"],
        placement=run.provenance.get("placement"),
        metrics=metrics,
        wall_time_s=wall_s,
        # "spec": the name or path it was given, so a replay (the divergence finder) loads it
        workload={
            "name": prep.spec.name,
            "hash": prep.spec_hash,
            "spec": prep.options.spec,
            "seed": prep.spec.seed,
        },
        notes=notes,
        extra=extra,
    )
    if prep.options.simulate_forward:
        mark_simulated(result, run.executor["cost_model"])
        if "cost" in run.executor:  # a run stored before cost profiles has no cost block
            result["cost"] = run.executor["cost"]
    # whether this run measured SGLang or this machine (stated limits; a broken one says which)
    result["extra"]["instrument_health"] = check(result).as_dict()
    for line in result["extra"]["instrument_health"]["broken"]:
        result["notes"].append(f"instrument: {line}")
    return result
