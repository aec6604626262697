"""Twin vs simulated-forward server on the same inputs: the suite's first fidelity figure.

For one SGLang release, the same spec (and its seed), DP size and global chunk size go
through the twin (``python -m dpbench.twin.run`` in the release environment) and through
SGLang's real server with only the forward simulated by the same cost model
(:mod:`dpbench.server.run` with ``simulate_forward``). :func:`compare` lines up the
metrics both report, with the server's value minus the twin's.

Both sides are simulations of a GPU deployment; the server side adds what the twin
leaves out (SGLang's real scheduler loop, overlap schedule, retraction, radix cache,
HTTP/tokenizer path and its CPU work, the part the overlap does not hide measured as
device idle per step), so a difference is the twin's simplification plus that CPU work,
never "error against a GPU".

The twin is deterministic per seed; the server is not (its steps meet wall-clock
arrivals), so the server side runs ``repeats`` times and each row carries the server's
mean, range and spread beside the twin's value. A fraction's difference is in points.

Each server run also records when every request reached its scheduler and on which DP
rank; the twin is run again on exactly those arrivals (``--replay-arrivals``), with its
passes that run no forward lasting as long as that server's did on average (the stand-in
times SGLang's passes that ran no batch on any rank while requests waited; a wait of
length W holds W / mean such passes; the twin's default is an estimate for a GPU host). The paired difference server run −
twin-on-its-arrivals leaves out the HTTP/tokenizer/DP controller path and the CPU's
loop speed, and measures the scheduling alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.core import results
from dpbench.core.paths import project_root, results_dir
from dpbench.core.schema import metadata_of, to_dict
from dpbench.envs import zygote
from dpbench.server.health import Health, check
from dpbench.server.options import DEVICE_SYNCS, DeviceSync, ServerClock
from dpbench.server.run import RunOptions, ServerDispatch
from dpbench.sglang_compat.simforward.config import PASS_CHARGES, PassCharge
from dpbench.twin.stats import paired

# (row label, server metric, twin metric, unit, the instrument scope its server value needs
# valid: "decisions" for what the schedulers decided (its inputs part when steps run late),
# "scheduling" for the schedulers' own clock, "client" for what the load client measured;
# see dpbench.server.health)
ROWS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "DP-mixed step fraction",
        "dp_mixed_step_fraction",
        "dp_mixed_step_fraction",
        "fraction",
        "decisions",
    ),
    (
        "decode-rank time beside prefill",
        "decode_rank_s_beside_prefill",
        "decode_rank_s_beside_prefill",
        "rank·s",
        "decisions",
    ),
    (
        "  … as a fraction of decode-rank time",
        "decode_rank_time_beside_prefill_fraction",
        "decode_rank_time_beside_prefill_fraction",
        "fraction",
        "decisions",
    ),
    (
        "delay-verdict fraction, passes with a prefillable rank",
        "delayer_delay_fraction_prefillable",
        "delayer_delay_fraction_prefillable",
        "fraction",
        "decisions",
    ),
    (
        "  … of every outcome (server counts idle passes)",
        "delayer_delay_fraction",
        "delayer_delay_fraction",
        "fraction",
        "decisions",
    ),
    ("TTFT p50", "ttft_ms_p50", "ttft_ms_p50", "ms", "client"),
    # first token computed on the virtual device − planned send: the twin's definition,
    # without the path back to the client
    ("TTFT p50 at the scheduler", "scheduler_ttft_ms_p50", "ttft_ms_p50", "ms", "scheduling"),
    (
        "KV pool occupied p50 (evictable included)",
        "kv_pool_occupied_p50",
        "kv_pool_occupied_p50",
        "fraction",
        "decisions",
    ),
    ("TTFT p99", "ttft_ms_p99", "ttft_ms_p99", "ms", "client"),
    ("TTFT p99 at the scheduler", "scheduler_ttft_ms_p99", "ttft_ms_p99", "ms", "scheduling"),
    ("TPOT p50", "tpot_ms_p50", "tpot_ms_p50", "ms", "client"),
    ("TPOT p99", "tpot_ms_p99", "tpot_ms_p99", "ms", "client"),
    ("ITL p99", "itl_ms_p99", "itl_ms_p99", "ms", "client"),
    ("throughput", "request_throughput_per_s", "request_throughput_req_per_s", "req/s", "client"),
    ("output tokens/s", "output_tokens_per_s", "output_tokens_per_s", "tok/s", "client"),
    # SGLang's meta_info.cached_tokens on the server; the twin's first-admission matches
    ("prefix-cache hit rate", "prefix_hit_rate", "prefix_hit_rate", "fraction", "decisions"),
    # rank balance (dpbench.metrics.balance): the same definitions on both sides
    (
        "rank tokens max/mean",
        "rank_tokens_imbalance",
        "rank_tokens_imbalance",
        "ratio",
        "decisions",
    ),
    ("rank busy time max/mean", "rank_busy_imbalance", "rank_busy_imbalance", "ratio", "decisions"),
    (
        "steps a rank idled while another's requests waited",
        "rank_idle_while_others_wait_fraction",
        "rank_idle_while_others_wait_fraction",
        "fraction",
        "decisions",
    ),
)


class FidelityError(RuntimeError):
    """One side of the comparison failed; the message names which and why."""


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """One fidelity setting (per release): the schema `dpbench server fidelity`'s options, its
    result files' names (:func:`run_stem`) and its report's ``inputs`` come from."""

    spec: str = field(
        metadata={
            "help": "workload name or spec path (its seed is used)",
            "argument": True,
            "stem": lambda v: Path(v).stem,
        }
    )
    dp: int = field(
        default=2, metadata={"help": "attention-DP size", "flag": "--dp", "stem": "dp{}".format}
    )
    chunked_prefill_size: int = field(
        default=4096,
        metadata={
            "help": "global --chunked-prefill-size given to both sides",
            "stem": "chunk{}".format,
        },
    )
    release: str = field(
        default="0.5.23",
        metadata={
            "help": "the SGLang release both sides run",
            "cli": False,
            "stem": "sglang{}".format,
        },
    )
    delayer: bool = field(
        default=True,
        metadata={
            **metadata_of(RunOptions, "delayer"),
            "stem": lambda v: None if v else "nodelayer",
        },
    )
    repeats: int = field(
        default=1,
        metadata={
            "help": "server runs per release (the twin is deterministic; the server is not)",
            "stem": lambda v: None,  # each repeat has its own file: -server-r<i>
        },
    )
    flush_replays: bool = field(
        default=False,
        metadata={
            "help": "run the repeats as replays against one server, SGLang's caches flushed "
            "(/flush_cache) between them, instead of a fresh server each: one start-up",
            "stem": lambda v: "flushed" if v else None,
        },
    )
    dispatch: ServerDispatch = field(
        default="round_robin",
        metadata={
            **metadata_of(RunOptions, "dispatch"),
            "stem": lambda v: None if v == "round_robin" else v.replace("_", "-"),
        },
    )
    serial_forward: bool = field(
        default=False,
        metadata={
            **metadata_of(RunOptions, "serial_forward"),
            "stem": lambda v: "serial" if v else None,
        },
    )

    clock: ServerClock = field(
        default="real",
        metadata={
            **metadata_of(RunOptions, "clock"),
            "stem": lambda v: None if v == "real" else v,
        },
    )
    pass_charge_ms: float = field(
        default=0.0,
        metadata={
            **metadata_of(RunOptions, "pass_charge_ms"),
            "stem": lambda v: f"charge{v:g}ms" if v else None,
        },
    )
    pass_charge: PassCharge = field(
        default="fixed",
        metadata={
            **metadata_of(RunOptions, "pass_charge"),
            "stem": lambda v: None if v == "fixed" else f"charge-{v}",
        },
    )
    device_sync: DeviceSync | None = field(
        default=None,
        metadata={
            **metadata_of(RunOptions, "device_sync"),
            "stem": lambda v: f"sync-{v}" if v else None,
        },
    )

    def __post_init__(self) -> None:
        if self.clock == "virtual" and self.serial_forward:
            raise ValueError("--clock virtual excludes --serial-forward")
        if (self.pass_charge_ms or self.pass_charge != "fixed") and self.clock != "virtual":
            raise ValueError("--pass-charge-ms and --pass-charge need --clock virtual")
        if self.pass_charge not in PASS_CHARGES:
            raise ValueError(f"pass_charge must be one of {PASS_CHARGES}, got {self.pass_charge!r}")
        if self.pass_charge == "measured" and self.pass_charge_ms:
            raise ValueError("--pass-charge measured excludes --pass-charge-ms")
        if self.device_sync is not None and self.device_sync not in DEVICE_SYNCS:
            raise ValueError(f"device_sync must be one of {DEVICE_SYNCS}, got {self.device_sync!r}")
        if self.clock == "virtual" and self.device_sync == "own":
            raise ValueError("--clock virtual needs --device-sync group (its default)")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        if self.dp < 2:
            raise ValueError(f"dp must be ≥ 2 (DP attention), got {self.dp}")
        from dpbench.server.run import DISPATCHES

        if self.dispatch not in DISPATCHES:
            raise ValueError(f"dispatch must be one of {DISPATCHES}, got {self.dispatch!r}")


def _value(result: dict[str, Any], name: str) -> float:
    m = result.get("metrics", {}).get(name)
    return float(m["value"]) if m is not None else math.nan


def twin_config(
    inp: Inputs,
    replay: Path | None = None,
    idle_pass_ms: float | None = None,
    *,
    timeline: bool = False,
    modes: dict[str, Any] | None = None,
) -> Any:
    """The twin's config for a fidelity setting: tp = dp (the server stand-in's shape), in-process
    ranks, the server run's arrivals and idle-pass time when replaying, then ``modes`` (an
    arm's options, e.g. ``{"chunk_merge_resets_batch_is_full": False}``)."""
    from dpbench.twin.config import make_config

    values: dict[str, Any] = {
        "dp_size": inp.dp,
        "tp_size": inp.dp,
        "chunked_prefill_size": inp.chunked_prefill_size,
        "enable_prefill_delayer": inp.delayer,
        "dispatch": inp.dispatch,
        "rank_mode": "threads",
        "record_timeline": timeline,
    }
    if replay is not None:
        values["replay_arrivals"] = str(replay)
    if idle_pass_ms is not None and not math.isnan(idle_pass_ms):
        values["idle_pass_s"] = idle_pass_ms / 1e3
    return make_config(**{**values, **(modes or {})})


@dataclasses.dataclass(frozen=True)
class TwinJob:
    """One twin run of a fidelity report: the setting, where its result goes, and (when
    replaying) the server run whose arrivals it replays and that run's idle-pass time."""

    inp: Inputs
    out: Path
    replay: Path | None = None
    idle_pass_ms: float | None = None
    timeline: bool = False
    modes: dict[str, Any] | None = None


def run_twin(
    inp: Inputs,
    out: Path,
    python: str,
    replay: Path | None = None,
    idle_pass_ms: float | None = None,
    *,
    timeline: bool = False,
    modes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The twin in the release's environment (a job file for ``python -m dpbench.twin.run``);
    ``timeline`` keeps its per-step records (the divergence finder reads them)."""
    (result,) = run_twins([TwinJob(inp, out, replay, idle_pass_ms, timeline, modes)], python)
    return result


def run_twins(jobs: list[TwinJob], python: str) -> list[dict[str, Any]]:
    """Several twin runs in one process of the release's environment, one after another:
    SGLang's scheduler is imported once for all of them (~11 s of CPU per process here)."""
    from dpbench.twin.job import write_job

    files, args = [], [python, "-m", "dpbench.twin.run"]
    for job in jobs:
        config = twin_config(
            job.inp, job.replay, job.idle_pass_ms, timeline=job.timeline, modes=job.modes
        )
        files.append(write_job(job.out.with_name(job.out.stem + ".job.json"), job.inp.spec, config))
    args += [str(f) for f in files]
    for job in jobs:
        args += ["-o", str(job.out)]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    try:
        proc = zygote.run(args, cwd=project_root(), env=env, timeout=1800)
    finally:
        for f in files:
            f.unlink(missing_ok=True)
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise FidelityError(
            f"the twin failed under SGLang {jobs[0].inp.release} (status {proc.returncode}): "
            f"{' / '.join(last[-2:]) if last else 'no output'}"
        )
    return [results.load(job.out) for job in jobs]


def run_server(inp: Inputs, out: Path, log_dir: Path) -> dict[str, Any]:
    from dpbench.server.run import execute, prepare

    result = execute(prepare(server_options(inp, log_dir)))
    results.save(out, result)
    return result


def run_server_replays(inp: Inputs, outs: list[Path], log_dir: Path) -> list[dict[str, Any]]:
    """Every repeat as a replay against one server, its caches flushed between replays."""
    from dpbench.server.run import execute_replays, prepare

    runs = execute_replays(prepare(server_options(inp, log_dir)), len(outs))
    for out, result in zip(outs, runs, strict=True):
        results.save(out, result)
    return runs


def server_options(inp: Inputs, log_dir: Path) -> Any:
    from dpbench.server.run import RunOptions

    return RunOptions(
        spec=inp.spec,
        dp_size=inp.dp,
        delayer=inp.delayer,
        simulate_forward=True,
        sglang=inp.release,
        chunked_prefill_size=inp.chunked_prefill_size,
        serial_forward=inp.serial_forward,
        dispatch=inp.dispatch,
        clock=inp.clock,
        pass_charge_ms=inp.pass_charge_ms,
        pass_charge=inp.pass_charge,
        device_sync=inp.device_sync,
        log_dir=str(log_dir),
    )


def check_complete(server: dict[str, Any], path: Path) -> None:
    """A server run is comparable with the twin only if every request completed: a request the
    client gave up on (a timeout, a disconnect) is aborted on the server and leaves its
    queue, which the twin, serving every request, never does. Such a run is invalid: it
    fails the comparison, naming the run and what went wrong."""
    m = server.get("metrics", {})
    total, ok = _value(server, "requests_total"), _value(server, "requests_ok_total")
    if math.isnan(total) or math.isnan(ok):
        raise FidelityError(f"{path}: no request counts; not a server run result")
    if ok < total:
        kinds = {
            k.removeprefix("errors_").removesuffix("_total"): int(v["value"])
            for k, v in m.items()
            if k.startswith("errors_") and k != "errors_total" and v["value"]
        }
        failed = server.get("extra", {}).get("failed_requests") or []
        first = (
            f"; first: {failed[0]['id']} {failed[0]['kind']} {failed[0]['sent_s']} s after "
            f"the first send: {failed[0]['error'] or 'no message'}"
            if failed
            else ""
        )
        raise FidelityError(
            f"{path}: {int(total - ok)} of {int(total)} requests did not complete ({kinds}"
            f"{first}); the server aborted them, so the run is not comparable with the twin "
            "(a client timeout: give a longer --client-read-timeout-s, or remove the file to "
            "re-run it)"
        )


def server_idle_pass_ms(server: dict[str, Any], dp: int) -> float:
    """Mean length of the server's passes that ran no batch on any rank while requests waited,
    from its stand-in's records, counted from the first trace request's arrival (SGLang's
    warm-up request before it can be held back too). NaN when there was no such pass."""
    from dpbench.server.steps import first_arrival, read_idle_passes, replay_records_view

    extra = server.get("extra", {})
    where = extra.get("step_records_dir")
    ids, _, t_end = replay_records_view(extra)  # one of several replays against one server
    t0 = first_arrival(where, dp, ids) if where and ids else None
    if t0 is None:
        return math.nan
    m = read_idle_passes(where, dp, t0, t_end).get("idle_pass_ms_mean")
    return m.value if m is not None else math.nan


def _mean(values: list[float]) -> float:
    seen = [v for v in values if not math.isnan(v)]
    return float(np.mean(seen)) if seen else math.nan


def compare(
    twin: dict[str, Any],
    servers: list[dict[str, Any]],
    replays: list[dict[str, Any]] | None = None,
    healths: list[Health] | None = None,
) -> list[dict[str, Any]]:
    """Per metric: the twin's value, the server runs' values, mean, range, and mean − twin.

    ``diff`` is in the metric's unit (×100 = points for a fraction); ``rel`` is diff over the
    twin's value; ``within_range`` says whether the twin lies inside the server's min–max.
    With ``replays`` (the twin run on each server run's own scheduler arrivals, same order),
    ``replay_runs`` holds those and ``replay_diff`` the mean of the paired differences
    server run − twin on that run's arrivals.

    With ``healths`` (:func:`dpbench.server.health.check` of each server run), a timing row
    leaves out the runs whose instrument spoiled it (``valid_runs`` says which were kept;
    ``excluded`` how many were not): its mean, differences and interval are over the valid
    runs only, NaN when none was valid. Decision rows keep every run.
    """
    rows = []
    for label, s_name, t_name, unit, scope in ROWS:
        t = _value(twin, t_name)
        valid = [healths is None or healths[i].valid_for(scope) for i in range(len(servers))]
        all_runs = [_value(srv, s_name) for srv in servers]
        runs = [v if ok else math.nan for v, ok in zip(all_runs, valid, strict=True)]
        seen = [v for v in runs if not math.isnan(v)]
        s = _mean(runs)
        diff = s - t if not (math.isnan(s) or math.isnan(t)) else math.nan
        rel = diff / abs(t) if t and not math.isnan(diff) else math.nan
        row = {
            "metric": label,
            "unit": unit,
            "twin": t,
            "server": s,
            "server_runs": all_runs,
            "valid_runs": valid,
            "excluded": valid.count(False),
            "server_min": min(seen) if seen else math.nan,
            "server_max": max(seen) if seen else math.nan,
            "server_sd": float(np.std(seen, ddof=1)) if len(seen) > 1 else math.nan,
            "diff": diff,
            "rel": rel,
            "within_range": bool(seen) and not math.isnan(t) and min(seen) <= t <= max(seen),
        }
        if replays is not None:
            rep_all = [_value(r, t_name) for r in replays]
            row["replay_runs"] = rep_all
            pairs = [(a, b) for a, b, ok in zip(all_runs, rep_all, valid, strict=True) if ok]
            rep = [b for _, b in pairs]
            row["replay_diff"] = _mean([a - b for a, b in pairs])
            rd, rm = row["replay_diff"], _mean(rep)
            row["replay_rel"] = rd / abs(rm) if rm and not math.isnan(rd) else math.nan
            # 95 % t interval of server run − twin on its arrivals (≥ 2 runs)
            pair = paired(rep, [a for a, _ in pairs])
            row["replay_ci95"] = [pair.ci95_low, pair.ci95_high]
        rows.append(row)
    return rows


def run_stem(inp: Inputs) -> str:
    """The file-name stem of a fidelity setting's results, built from every field of
    :class:`Inputs` by its ``stem`` metadata (a field without one fails: every input that
    changes a run is in the name, so a delayer-off run never overwrites, or is reused for, a
    delayer-on one, and a new input cannot be forgotten)."""
    parts = []
    for f in dataclasses.fields(inp):
        if "stem" not in f.metadata:
            raise TypeError(f"Inputs.{f.name} has no 'stem' metadata: say how it names a run")
        part = f.metadata["stem"](getattr(inp, f.name))
        if part is not None:
            parts.append(part)
    return "-".join(parts)


def run(
    inp: Inputs, *, out_dir: Path | None = None, reuse_server_runs: bool = False
) -> dict[str, Any]:
    """Run both sides and return ``{"inputs", "rows", "twin_result", "server_results", …}`` (also written).

    ``reuse_server_runs``: a server run whose result file is already there (same spec, DP,
    chunk, release, repeat index) is read instead of run again, so a twin change is
    measured against the same server runs in seconds rather than minutes.
    """
    from dpbench.server.run import release_python

    python = release_python(inp.release)
    stem = run_stem(inp)
    out_dir = out_dir or results_dir() / "fidelity"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    twin = run_twin(inp, out_dir / f"{stem}-twin.json", python)
    t_twin = time.monotonic() - t0
    paths = [out_dir / f"{stem}-server-r{i}.json" for i in range(inp.repeats)]
    if inp.flush_replays and not (reuse_server_runs and all(p.is_file() for p in paths)):
        servers = run_server_replays(inp, paths, out_dir / "server-logs")
    else:
        servers = [
            results.load(path)
            if reuse_server_runs and path.is_file()
            else run_server(inp, path, out_dir / "server-logs")
            for path in paths
        ]
    return _report(inp, out_dir, python, twin, t_twin, t0, paths, servers)


def run_on_one_server(inps: list[Inputs], *, out_dir: Path | None = None) -> list[dict[str, Any]]:
    """:func:`run` for several settings that need the same server and differ only on the
    client's side (``dispatch``, ``repeats``), with the same server command (a cache-aware
    setting plans its KV pool as the client routes, so it may need its own server; refused
    then, naming both pools): their repeats run as flushed replays against
    one SGLang start-up, in the order given, then each setting gets its own report (as
    :func:`run` writes it). A start-up costs as much as a replay on two cores."""
    from dpbench.server.run import execute_replays, prepare, release_python

    if not inps:
        raise ValueError("run_on_one_server needs at least one setting")
    first = inps[0]
    for inp in inps:
        if not inp.flush_replays:
            raise ValueError(f"{run_stem(inp)}: settings sharing a server run as flushed replays")
        same = dataclasses.replace(inp, dispatch=first.dispatch, repeats=first.repeats)
        if same != first:
            raise ValueError(
                f"{run_stem(inp)} and {run_stem(first)} need different servers: only dispatch "
                f"and repeats may differ between settings sharing one"
            )
    python = release_python(first.release)
    out_dir = out_dir or results_dir() / "fidelity"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    twins = run_twins(
        [TwinJob(inp, out_dir / f"{run_stem(inp)}-twin.json") for inp in inps], python
    )
    t_twin = time.monotonic() - t0
    log_dir = out_dir / "server-logs"
    server = prepare(server_options(first, log_dir))
    preps = [
        server if inp.dispatch == first.dispatch
        else prepare(dataclasses.replace(server_options(inp, log_dir), port=server.config.port))
        for inp in inps
    ]  # fmt: skip
    for inp, prep in zip(inps, preps, strict=True):
        if prep.command != server.command:  # cache-aware runs plan their pool as the client routes
            raise ValueError(
                f"{run_stem(inp)} and {run_stem(first)} need different servers: their commands "
                f"differ (KV pool {_pool(prep)} vs {_pool(server)} tokens per rank)"
            )
    clients = [prep for inp, prep in zip(inps, preps, strict=True) for _ in range(inp.repeats)]
    runs = execute_replays(server, len(clients), clients=clients)
    settings, at = [], 0
    for inp in inps:
        stem = run_stem(inp)
        paths = [out_dir / f"{stem}-server-r{i}.json" for i in range(inp.repeats)]
        servers = runs[at : at + inp.repeats]
        at += inp.repeats
        for path, result in zip(paths, servers, strict=True):
            results.save(path, result)
            check_complete(result, path)  # before a twin replays its arrivals
        settings.append((inp, paths, servers))
    # every setting's replays of its server runs in one twin process
    jobs = [
        job
        for inp, paths, servers in settings
        for job in _replay_jobs(inp, out_dir, paths, servers)
    ]
    replays = iter(run_twins(jobs, python))
    reports = []
    for (inp, paths, servers), twin in zip(settings, twins, strict=True):
        others = [run_stem(o) for o in inps if o is not inp]
        mine = [next(replays) for _ in servers]
        reports.append(
            _report(
                inp,
                out_dir,
                python,
                twin,
                t_twin,
                t0,
                paths,
                servers,
                shared_with=others,
                replays=mine,
            )
        )
    return reports


def _pool(prep: Any) -> Any:
    return (prep.kv_plan or {}).get("max_total_tokens_per_rank", "unplanned")


def report_runs(
    inp: Inputs,
    paths: list[Path],
    servers: list[dict[str, Any]],
    *,
    out_dir: Path,
    python: str,
    stem: str,
    made_by: str,
) -> dict[str, Any]:
    """The report of server runs made elsewhere (the main job's flushed replays, already
    saved at ``paths``): the twin on the spec and on each run's arrivals, the paired rows, as
    :func:`run` writes them, under ``stem`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    twin = run_twin(inp, out_dir / f"{stem}-twin.json", python)
    t_twin = time.monotonic() - t0
    return _report(
        inp, out_dir, python, twin, t_twin, t0, paths, servers, stem=stem, made_by=made_by
    )


def _replay_jobs(
    inp: Inputs,
    out_dir: Path,
    paths: list[Path],
    servers: list[dict[str, Any]],
    stem: str | None = None,
) -> list[TwinJob]:
    """The twin on each server run's own arrivals, its idle passes as long as that server's
    event loop took to come round with no batch anywhere and requests waiting (measured by
    the stand-in; absent if that never happened: the twin keeps its default)."""
    stem = stem or run_stem(inp)
    return [
        TwinJob(
            inp,
            out_dir / f"{stem}-twin-replay-r{i}.json",
            replay=path,
            idle_pass_ms=server_idle_pass_ms(srv, inp.dp),
        )
        for i, (path, srv) in enumerate(zip(paths, servers, strict=True))
    ]


def _report(
    inp: Inputs,
    out_dir: Path,
    python: str,
    twin: dict[str, Any],
    t_twin: float,
    t0: float,
    paths: list[Path],
    servers: list[dict[str, Any]],
    *,
    shared_with: list[str] | None = None,
    stem: str | None = None,
    made_by: str | None = None,
    replays: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The twin on each server run's arrivals, the rows and the instrument's health: the report
    (``shared_with``: the settings whose replays ran against the same server start-up;
    ``stem``: its files' name, default :func:`run_stem`; ``made_by``: what ran the server;
    ``replays``: the twin's replays of ``servers``, when already run with other settings')."""
    stem = stem or run_stem(inp)
    for path, srv in zip(paths, servers, strict=True):
        check_complete(srv, path)
    replay_paths = [job.out for job in _replay_jobs(inp, out_dir, paths, servers, stem)]
    if replays is None:
        replays = run_twins(_replay_jobs(inp, out_dir, paths, servers, stem), python)
    healths = [check(srv) for srv in servers]
    report = {
        "inputs": to_dict(inp),
        "executor": "simulated",
        "cost_model": servers[0].get("cost_model"),
        "rows": compare(twin, servers, replays, healths),
        # the instrument's health per server run (dpbench.server.health): a timing row leaves
        # out the runs it spoiled
        "server_health": [h.as_dict() for h in healths],
        "twin_result": str(out_dir / f"{stem}-twin.json"),
        "twin_replay_results": [str(p) for p in replay_paths],
        "server_results": [str(p) for p in paths],
        "twin_wall_s": t_twin,
        "server_wall_s": time.monotonic() - t0 - t_twin,
        "server_device_idle_fraction": [_value(srv, "device_idle_fraction") for srv in servers],
        "server_device_idle_ms_p50": [_value(srv, "device_idle_ms_p50") for srv in servers],
        "server_simulated_step_ms_p50": [_value(srv, "simulated_step_ms_p50") for srv in servers],
        "server_pickup_ms_p50": [_value(srv, "pickup_ms_p50") for srv in servers],
        "server_idle_pass_ms_mean": [server_idle_pass_ms(srv, inp.dp) for srv in servers],
    }
    if shared_with:
        report["server_shared_with"] = shared_with
    if made_by:
        report["made_by"] = made_by
    from dpbench.core.atomic import write_json

    write_json(out_dir / f"{stem}.json", json.loads(json.dumps(report, default=str)))
    return report
