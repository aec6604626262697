"""Run the scheduler twin for a workload spec inside an SGLang environment; ``python -m dpbench.twin.run``.

:func:`run_twin` is the library entry (asv benchmarks and the CLI call it, the CLI
through a release environment): spec → trace → KV plan → cost model → SGLang imported
once → rank processes (:mod:`dpbench.twin.ranks`) → metrics → a run result.

As a module it writes the run result to ``-o`` and, with ``--events``, one JSON line
per progress event on stdout (the CLI draws its progress bar from them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.core.procs import free_port
from dpbench.core.results import Metric
from dpbench.core.schema import to_dict
from dpbench.sglang_compat.scheduling import SchedulerDefaults
from dpbench.twin.config import TwinConfig, TwinConfigError, TwinInputs
from dpbench.twin.cost import RankWork, cost_block, make_cost_model
from dpbench.twin.metrics import classify_steps, compute
from dpbench.twin.ranks import (
    Arrivals,
    GlooExchange,
    RankJob,
    RankResult,
    SharedMemoryExchange,
    run_ranks,
)
from dpbench.twin.router import planner_route, prefix_keys
from dpbench.twin.threads import Baton, BatonExchange, run_rank_threads

ProgressFn = Callable[[int, int, int, float], None]  # finished, total, steps, simulated s


def prepare_release(config: TwinConfig) -> tuple[Any, dict[str, Any], SchedulerDefaults]:
    """Import the release's admission and delayer once (the rank processes inherit them), resolve its
    scheduler defaults for ``config``, and describe it (``{"sglang", "placement"}`` from
    ``sglang_compat.provenance``)."""
    from dpbench.sglang_compat import delayer as compat
    from dpbench.sglang_compat.adder import AdderKit
    from dpbench.sglang_compat.scheduling import (
        delayer_needs_runtime_context,
        release_info,
        resolve_scheduler_defaults,
    )

    s = config.scheduler
    defaults = resolve_scheduler_defaults(
        dp_size=config.dp_size,
        tp_size=config.gpus,
        chunked_prefill_size=s.chunked_prefill_size,
        schedule_conservativeness=s.schedule_conservativeness,
    )
    if s.batch_is_full_rule is not None:
        defaults = dataclasses.replace(
            defaults,
            batch_is_full_on_no_token=s.batch_is_full_rule,
            sources={**defaults.sources, "batch_is_full_on_no_token": "--batch-is-full-rule"},
        )
    if s.skip_finishing_decode is not None:
        defaults = dataclasses.replace(
            defaults,
            skip_finishing_decode=s.skip_finishing_decode,
            sources={**defaults.sources, "skip_finishing_decode": "--skip-finishing-decode"},
        )
    if s.finished_filter_rule is not None:
        defaults = dataclasses.replace(
            defaults,
            finished_filter=s.finished_filter_rule,
            sources={**defaults.sources, "finished_filter": "--finished-filter-rule"},
        )
    if s.enable_prefill_delayer and delayer_needs_runtime_context():
        compat.publish_runtime_context(
            config.dp_size,
            compat.DelayerSettings(
                max_delay_passes=s.prefill_delayer_max_delay_passes,
                token_usage_low_watermark=s.prefill_delayer_token_usage_low_watermark,
            ),
        )
    kit = AdderKit(page_size=s.page_size)
    return kit, release_info(), defaults


def load_replay(path: str, trace: list[Any], dp_size: int) -> dict[str, tuple[float, int]]:
    """``{id: (seconds, dp rank)}`` for every trace request, from a server run result or a plain map."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TwinConfigError(f"--replay-arrivals {path}: cannot read it as JSON ({exc})") from exc
    if "extra" in data:
        if "scheduler_arrivals" not in data["extra"]:
            raise TwinConfigError(
                f"--replay-arrivals {path}: a run result without extra.scheduler_arrivals "
                "(only simulated-forward server runs record them)"
            )
        data = data["extra"]["scheduler_arrivals"]
    missing = [r.id for r in trace if r.id not in data]
    if missing:
        raise TwinConfigError(
            f"--replay-arrivals {path}: {len(missing)} of the trace's {len(trace)} requests have no "
            f"arrival there (first: {missing[0]}); it must come from a run of the same spec and seed"
        )
    out = {}
    for r in trace:
        t, rank = data[r.id]
        if not (0 <= int(rank) < dp_size) or not float(t) >= 0:
            raise TwinConfigError(
                f"--replay-arrivals {path}: request {r.id} at {t} s on rank {rank}; "
                f"want seconds ≥ 0 and a rank in 0 … {dp_size - 1}"
            )
        out[r.id] = (float(t), int(rank))
    return out


def closed_loop_concurrency(spec: Any, config: TwinConfig) -> int | None:
    """A closed-loop spec's concurrency (None for any other arrival process)."""
    from dpbench.workload.spec import ClosedLoopArrivals

    if not isinstance(spec.arrival, ClosedLoopArrivals):
        return None
    if config.rate_scale != 1.0:
        raise TwinConfigError(
            f"rate_scale must be 1 for a closed-loop spec (its load is its concurrency, "
            f"{spec.arrival.concurrency}), got {config.rate_scale}"
        )
    return int(spec.arrival.concurrency)


def _kv_budget(
    spec: Any, trace: list[Any], config: TwinConfig, model: Any, keys: dict[str, Any]
) -> tuple[Any, int]:
    """(the KV plan, or None when the config gives the pool; each rank's KV tokens)."""
    from dpbench.workload.planner import plan_kv

    if config.max_total_tokens_per_rank is not None:
        return None, config.max_total_tokens_per_rank
    route = planner_route(config.dp_size, keys) if config.dispatch == "cache_aware" else None
    kv_plan = plan_kv(spec, trace, config.dp_size, config.dispatch, model=model, route=route)
    return kv_plan, kv_plan.max_total_tokens_per_rank


def _arrivals(
    spec: Any, trace: list[Any], config: TwinConfig, keys: dict[str, Any], vocab: int
) -> tuple[list[Any], Arrivals]:
    """The trace in arrival order (replayed arrivals, else the spec's times over the rate
    scale) and the ranks' view of it."""
    given = (
        load_replay(config.replay_arrivals, trace, config.dp_size)
        if config.replay_arrivals
        else None
    )
    # the load axis: every trace arrival rate_scale times sooner (1: the spec's own rate)
    at = {r.id: (given[r.id][0] if given else r.arrival_s / config.rate_scale) for r in trace}
    order = sorted(range(len(trace)), key=lambda i: (at[trace[i].id], i))
    ordered = [trace[i] for i in order]
    arrivals = Arrivals(
        ids=tuple(r.id for r in ordered),
        arrival_s=np.array([at[r.id] for r in ordered], dtype=np.float64),
        input_len=np.array([r.input_len for r in ordered], dtype=np.int64),
        max_new_tokens=np.array([r.max_new_tokens for r in ordered], dtype=np.int64),
        ignore_eos=bool(spec.ignore_eos),
        token_ids=lambda i: ordered[i].token_ids(vocab),
        rank=np.array([given[r.id][1] for r in ordered], dtype=np.int64) if given else None,
        sent_s=np.array([r.arrival_s for r in ordered], dtype=np.float64) if given else None,
        prefix_keys=tuple(keys[r.id] for r in ordered)
        if config.dispatch == "cache_aware" and not given
        else None,
        concurrency=closed_loop_concurrency(spec, config) if not given else None,
    )
    return ordered, arrivals


def _exchange(config: TwinConfig) -> Any:
    """How the ranks exchange each pass's step: a baton (threads), gloo or shared memory."""
    if config.rank_mode == "threads":
        return BatonExchange(Baton(config.dp_size, config.deadline_s))
    if config.step_exchange == "gloo":
        return GlooExchange(config.dp_size)
    return SharedMemoryExchange(mp.get_context("fork"), config.dp_size, config.deadline_s)


def _run_notes(config: TwinConfig, cost: Any, job: RankJob, results: list[RankResult]) -> list[str]:
    """The run result's notes: the cost model, the delayer, the cache, and each setting that
    departs from SGLang's own behaviour."""
    s = config.scheduler
    notes = [f"cost model: {cost.describe()}"]
    if config.scheduler.enable_prefill_delayer:
        notes.append(
            f"delayer: SGLang's own PrefillDelayer negotiating over "
            f"{'an in-process group (rank threads)' if config.rank_mode == 'threads' else 'gloo'}; its queue trigger is off "
            "(prefill_delayer_queue_min_ratio unset, SGLang's default), so no wall-clock reading "
            "(max_delay_ms) reaches a verdict"
        )
    notes.append(
        (
            "radix cache on (SGLang's default): add_one_req's general path; requests' KV is cached in "
            "SGLang's RadixCache (prefix reuse, evictable entries, LRU eviction)"
            if s.radix_cache
            else "radix cache off (--disable-radix-cache): add_one_req hands ignore_eos requests to "
            "add_one_req_ignore_eos"
        )
        + f"; overlap scheduler lag {'on' if s.overlap_schedule else 'off (--disable-overlap-schedule)'}"
        + f"; max_prefill_bs tracking: {results[0].max_prefill_bs_kind}"
    )
    if s.batch_is_full_rule is not None:
        notes.append(
            f"batch_is_full on NO_TOKEN: {s.batch_is_full_rule} (--batch-is-full-rule, not the release's)"
        )
    if job.arrivals.concurrency is not None:
        notes.append(
            f"closed loop: {job.arrivals.concurrency} requests in flight; each arrives when one "
            "finishes, and its latencies count from then"
        )
    if config.replay_arrivals:
        notes.append(
            f"arrivals replayed from {config.replay_arrivals}: each request arrived when and on the "
            "DP rank where that server's scheduler took it in; latencies count from its trace "
            "time (when that server's client sent it)"
        )
    notes.append(
        f"a pass in which no rank runs a forward lasts {job.idle_pass_s * 1e3:.3g} ms of simulated "
        + (
            "time (--idle-pass-s)"
            if config.idle_pass_s is not None
            else "time (the cost model's per-step overhead, an estimate of SGLang's event-loop "
            "iteration on a GPU host): it sets how many delay verdicts a wait of given length yields"
        )
    )
    if s.hide_delayer_from_chunked_req:
        notes.append(
            "ablation arm: add_chunked_req ran without the delayer (placement measured alone)"
        )
    return notes


def _run_config(
    config: TwinConfig, job: RankJob, cost: Any, seed: int | None, spec_seed: int, total: int
) -> dict[str, Any]:
    """``extra.config``: the settings the run ran with, as numbers and names."""
    return {
        "dp_size": config.dp_size,
        "tp_size": config.gpus,
        "attn_tp_size": config.attn_tp_size,
        "dispatch": config.dispatch,
        "kv_tokens_per_rank": job.kv_tokens,
        "scheduler": config.scheduler.__dict__,
        "seed": spec_seed if seed is None else seed,
        "num_requests": total,
        "cost_model": cost.name,
        "cost_profile": config.cost_profile,
        "cost_topology": config.cost_topology,
        "step_exchange": job.exchange.name,
        "rank_mode": config.rank_mode,
        "replay_arrivals": config.replay_arrivals,
        "idle_pass_s": job.idle_pass_s,
    }


def _rank_job(
    config: TwinConfig, arrivals: Arrivals, kv_tokens: int, cost: Any, kit: Any, defaults: Any
) -> RankJob:
    exchange = _exchange(config)  # before the rank group's port is drawn, as it always was
    return RankJob(
        config=config,
        arrivals=arrivals,
        kv_tokens=kv_tokens,
        cost=cost,
        port=free_port(),
        make_kit=lambda: kit,
        defaults=defaults,
        exchange=exchange,
        idle_pass_s=config.idle_pass_s
        if config.idle_pass_s is not None
        else cost.step_time([RankWork("idle")] * config.dp_size),
    )


def _run_ranks(job: RankJob, on_progress: ProgressFn | None) -> list[RankResult]:
    """The ranks' results (threads or processes), progress reported against the trace's size."""
    total = len(job.arrivals.ids)
    return (run_rank_threads if job.config.rank_mode == "threads" else run_ranks)(
        job,
        on_progress=(lambda done, steps, sim: on_progress(done, total, steps, sim))
        if on_progress
        else None,
    )


def _workload(
    spec_name: str | Path, config: TwinConfig, seed: int | None, num_requests: int | None
) -> tuple[Any, list[Any], Any, dict[str, Any]]:
    """(the spec, its trace, its model config, the router's view of each prompt: its blocks,
    for the plan and the dispatcher; empty unless the dispatch is cache-aware)."""
    from dpbench.core.faults import inject_if_requested
    from dpbench.workload.models import load_model_config
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    inject_if_requested("twin")
    spec = load_spec(spec_name)
    if num_requests is not None:
        spec = spec.with_overrides(num_requests=num_requests)
    trace = generate_trace(spec, seed)
    model = load_model_config(spec.model)
    keys = (
        {r.id: prefix_keys(r, model.vocab_size) for r in trace}
        if config.dispatch == "cache_aware"
        else {}
    )
    return spec, trace, model, keys


def _measured(
    spec: Any,
    config: TwinConfig,
    seed: int | None,
    results: list[RankResult],
    ordered: list[Any],
    kv_plan: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metrics, extra) of the ranks' results: the twin's metrics, prefix hits, the plan's
    expected peak and an imported trace's record."""
    from dpbench.twin.prefix import prefix_hits
    from dpbench.workload.trace import import_spec_trace

    metrics, extra = compute(
        results, delayer_on=config.scheduler.enable_prefill_delayer, slo=config.slo
    )
    hits, hit_rows = prefix_hits(results, ordered)
    metrics.update(hits)
    extra.update(hit_rows)
    if kv_plan is not None:  # beside kv_utilization_max: what the plan expected at its peak
        metrics["kv_utilization_planned"] = Metric(kv_plan.planned_peak_util, "fraction", "none")
    if spec.trace is not None:
        extra["trace_import"] = import_spec_trace(spec, seed)[1].as_dict()
    return metrics, extra


def run_twin(
    spec_name: str | Path,
    config: TwinConfig,
    *,
    calibration: str | Path | None = None,
    seed: int | None = None,
    num_requests: int | None = None,
    on_progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Run the twin once; returns a run result (``dpbench.core.results`` schema, tier ``twin``)."""
    from dpbench.core.results import make_run_result
    from dpbench.workload.spec import spec_hash

    t_start = time.perf_counter()
    spec, trace, model, keys = _workload(spec_name, config, seed, num_requests)
    vocab = model.vocab_size
    kv_plan, kv_tokens = _kv_budget(spec, trace, config, model, keys)
    physical = config.cost_topology == "physical"
    cost = make_cost_model(
        model,
        config.dp_size,
        calibration,
        tp_size=config.gpus if physical else None,
        mixed_step_charge=physical,
        profile=config.cost_profile,
    )
    kit, provenance, defaults = prepare_release(config)
    ordered, arrivals = _arrivals(spec, trace, config, keys, vocab)
    job = _rank_job(config, arrivals, kv_tokens, cost, kit, defaults)
    results = _run_ranks(job, on_progress)
    metrics, extra = _measured(spec, config, seed, results, ordered, kv_plan)
    wall = time.perf_counter() - t_start
    notes = _run_notes(config, cost, job, results)
    extra.update(
        config=_run_config(config, job, cost, seed, spec.seed, len(ordered)),
        twin_config=to_dict(config),  # the schema as given: TwinConfig rebuilt from it is this run
        scheduler_defaults=defaults.as_dict(),
        kv_plan=kv_plan.as_dict() if kv_plan is not None else None,
    )
    if config.record_timeline:
        extra["timeline"] = timeline(results)
        extra["timeline"]["request_ids"] = list(arrivals.ids)  # rank_admitted's indices
    return make_run_result(
        cost=cost_block(cost),
        tier="twin",
        sglang=provenance["sglang"],
        placement=provenance["placement"],
        workload={"name": spec.name, "hash": spec_hash(spec)},
        metrics=metrics,
        wall_time_s=wall,
        notes=notes,
        extra=extra,
    )


def timeline(results: list[RankResult]) -> dict[str, Any]:
    """Per-step, per-rank records for the plot (plain lists)."""
    steps = classify_steps(results)
    labels = [r.outcome_labels for r in results]
    return {
        "step_end_s": results[0].step_end_s.tolist() if results[0].step_end_s is not None else [],
        "step_kind": steps.tolist(),
        "rank_kind": [r.kind.tolist() for r in results],
        "rank_new_tokens": [r.new_tokens.tolist() for r in results],
        "rank_kv_util": [np.round(r.kv_used / r.kv_capacity, 4).tolist() for r in results],
        "rank_verdict": [
            [("" if o < 0 else f"{lab[o][0]}/{lab[o][2] or 'none'}") for o in r.outcome.tolist()]
            for r, lab in zip(results, labels, strict=True)
        ],
        "rank_admitted": [r.admitted.tolist() for r in results],
        "rank_chunk_continued": [r.chunk_continued.tolist() for r in results],
        "rank_reported": [r.reported.tolist() for r in results],
        "rank_allowed": [r.allowed.tolist() for r in results],
        "rank_waiting": [r.waiting.tolist() for r in results],
        "rank_running": [r.running.tolist() for r in results],
        "rank_chunked": [r.chunked.tolist() for r in results],
        "rank_token_usage": [np.round(r.token_usage, 4).tolist() for r in results],
        "rank_finishing": [r.finishing.tolist() for r in results],
        "rank_finished": [r.finished.tolist() for r in results],
        "rank_admitted_idx": [r.admitted_idx for r in results],
        "rank_false_report": [
            ((r.reported == 1) & (r.allowed == 1) & (r.admitted == 0)).astype(int).tolist()
            for r in results
        ],
    }


def run_job(
    spec: str, config: TwinConfig, inputs: TwinInputs, *, on_progress: ProgressFn | None = None
) -> dict[str, Any]:
    """:func:`run_twin` with a job's inputs (the schema's fields, unpacked in one place)."""
    return run_twin(
        spec,
        config,
        calibration=inputs.calibration,
        seed=inputs.seed,
        num_requests=inputs.requests,
        on_progress=on_progress,
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m dpbench.twin.run",
        description=__doc__.splitlines()[0],
        epilog="Several jobs (JOB1 JOB2 -o OUT1 -o OUT2) run one after another in this "
        "process: SGLang is imported once for all of them. The first that fails stops the rest.",
    )
    p.add_argument(
        "job", nargs="+", help="a twin job file (dpbench.twin.job.write_job): spec, inputs, config"
    )
    p.add_argument("-o", "--output", action="append", required=True, help="one per job, in order")
    p.add_argument("--events", action="store_true", help="JSON progress lines on stdout")
    args = p.parse_args(argv)
    if len(args.output) != len(args.job):
        p.error(f"{len(args.job)} job(s) need as many -o outputs, got {len(args.output)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    for job, output in zip(args.job, args.output, strict=True):
        status = _run_one(job, output, args.events)
        if status != 0:
            if len(args.job) > 1:
                print(f"twin: job {job} failed; the jobs after it did not run", file=sys.stderr)
            return status
    return 0


def _run_one(job: str, output: str, events: bool) -> int:
    from dpbench.core.results import save
    from dpbench.twin.job import read_job
    from dpbench.twin.ranks import TwinRankError

    try:
        spec, config, inputs = read_job(job)
    except ValueError as exc:
        print(json.dumps({"event": "error", "rank": None, "message": str(exc)}), flush=True)
        print(f"twin: {exc}", file=sys.stderr)
        return 2

    def emit(done: int, total: int, steps: int, sim: float) -> None:
        if events:
            print(
                json.dumps(
                    {
                        "event": "progress",
                        "done": done,
                        "total": total,
                        "steps": steps,
                        "sim_s": sim,
                    }
                ),
                flush=True,
            )

    try:
        result = run_job(spec, config, inputs, on_progress=emit)
    except TwinRankError as exc:
        print(json.dumps({"event": "error", "rank": exc.rank, "message": str(exc)}), flush=True)
        print(f"twin failed: {exc}", file=sys.stderr)
        return 2
    except (
        ValueError
    ) as exc:  # a bad spec, model config, calibration or setting: the message says which
        print(json.dumps({"event": "error", "rank": None, "message": str(exc)}), flush=True)
        print(f"twin: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("twin interrupted; every rank process was stopped", file=sys.stderr)
        return 130
    save(output, result)
    if events:
        print(json.dumps({"event": "done", "output": str(output)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
