"""The simulated-forward launch: the stand-in's config, the server's environment, the executor block.

A simulated-forward server is SGLang's real server with only the model forward replaced
(:mod:`dpbench.sglang_compat.simforward`). Before it starts, :func:`sim_launch` writes the
stand-in's config (cost model, time scale, where each rank writes its step records) and
returns the environment that installs the stand-in in every SGLang process, with the
executor block every result of the run records. :func:`mark_simulated` then marks each
number of a result as the simulated executor's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpbench.core import faults
from dpbench.server import simcost
from dpbench.server.errors import ServerRunError
from dpbench.sglang_compat.simforward import SimForwardConfig, server_env
from dpbench.sglang_compat.simforward.vclock import VirtualClock

if TYPE_CHECKING:  # prepare imports this module (SIM_SERVER_MODEL): names for types only
    from dpbench.server.options import RunOptions
    from dpbench.server.prepare import Prepared

# SGLang loads this config (shape only, no weights) in simulated-forward runs: DeepSeek-V3's
# attention shapes and vocabulary with 4 layers, so its KV pool fits a CPU's memory. The
# forward's time comes from the cost model of the spec's own model.
SIM_SERVER_MODEL = "deepseek-v3-tiny"


@dataclass(frozen=True)
class SimLaunch:
    """What a simulated-forward server needs to start, and what its results say about it."""

    env: dict[str, str]  # installs the stand-in in every SGLang process of this node
    executor: dict[str, Any]  # the results' ``extra.executor``
    clock_file: Path | None  # the virtual clock's file (None: the real clock)


def step_dir(opts: RunOptions, run_dir: Path) -> Path:
    """Where every rank writes its step records: ``--step-records-dir``, else ``<run>/steps``."""
    return Path(opts.step_records_dir) if opts.step_records_dir else run_dir / "steps"


def sim_launch(prep: Prepared, log: Path) -> SimLaunch:
    """Write the stand-in's config beside ``log``; refuse a records directory already used."""
    faults.inject_if_requested("server-sim")
    run_dir = log.with_suffix("")
    records = step_dir(prep.options, run_dir)
    if prep.config.node_rank == 0 and records.is_dir() and any(records.glob("rank*.jsonl")):
        raise ServerRunError(
            f"{records} already holds step records; give a new --step-records-dir (records of "
            f"two runs in one file cannot be lined up)"
        )
    opts, cfg = prep.options, prep.config
    cost_args = {
        "model": str(prep.spec.model),
        "dp_size": cfg.dp_size,
        "calibration": opts.calibration,
        "profile": opts.cost_profile,
    }
    conf = SimForwardConfig(
        record_dir=str(records),
        cost_factory=simcost.FACTORY,
        cost_args=cost_args,
        time_scale=opts.time_scale,
        virtual_device=not opts.serial_forward,
        dp_size=cfg.dp_size,
        clock=opts.clock,
        device_sync=opts.sync,
        pass_charge_s=opts.pass_charge_ms / 1e3,
        pass_charge=opts.pass_charge,
        start_method=opts.start_method,
    )
    path = conf.write(run_dir / "simforward.json")
    if opts.clock == "virtual":  # created before any process maps it
        records.mkdir(parents=True, exist_ok=True)
        VirtualClock(conf.clock_file, cfg.dp_size, create=True).close()
    local = cfg.dp_size // cfg.nnodes
    env = server_env(path, dp_size=local, first_rank=cfg.node_rank * local)
    return SimLaunch(
        env=env,
        executor=_executor(opts, simcost.describe(**cost_args)),
        clock_file=conf.clock_file if opts.clock == "virtual" else None,
    )


def sim_launch_env(prep: Prepared, log: Path) -> dict[str, str]:
    """The environment for a simulated-forward server on this node (also the other nodes' `launch`)."""
    return sim_launch(prep, log).env


def _executor(opts: RunOptions, described: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "simulated",
        "cost_model": described["name"],
        "cost_model_description": described["description"],
        "cost": described["cost"],
        "time_scale": opts.time_scale,
        "clock": opts.clock,
        "device_sync": opts.sync,
        "pass_charge_ms": opts.pass_charge_ms,
        "pass_charge": opts.pass_charge,
        "start_method": opts.start_method,
        "forward_timing": "slept on the scheduler thread"
        if opts.serial_forward
        else "virtual device (launch returns; results wait for the device)",
        "server_model_shape": SIM_SERVER_MODEL,
        "real": "HTTP server, tokenizer manager, DP controller, schedulers, PrefillDelayer, "
        "radix cache, KV pool, metrics, gloo MLP sync",
        "simulated": "forward time (cost model), next tokens, CUDA-only setup (weights, "
        "attention backends, CUDA graphs, NCCL)",
    }


def mark_simulated(result: dict[str, Any], cost_model: str) -> None:
    """Mark a run result and each of its metrics as the simulated executor's, naming the cost model."""
    result["executor"] = "simulated"
    result["cost_model"] = cost_model
    for m in result["metrics"].values():
        m["executor"] = "simulated"
        m["cost_model"] = cost_model
