"""What a simulated-forward server's processes are told: one JSON file named by ``$DPBENCH_SIMFORWARD``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

CONFIG_ENV = "DPBENCH_SIMFORWARD"
# fork: SGLang's processes fork from its launcher; spawn: SGLang's own (CUDA needs it)
StartMethod = Literal["fork", "spawn"]
START_METHODS: tuple[str, ...] = get_args(StartMethod)
# what the virtual clock charges for a scheduler's own work: a fixed time, or what it took
PassCharge = Literal["fixed", "measured"]
PASS_CHARGES: tuple[str, ...] = get_args(PassCharge)


@dataclass(frozen=True, kw_only=True)
class SimForwardConfig:
    """The stand-in's settings, shared by every SGLang process of one server."""

    record_dir: str = field(
        metadata={"help": "each DP rank appends its steps to rank<N>.jsonl here"}
    )
    cost_factory: str = field(
        metadata={"help": "module:function returning cost(own_work, global_tokens) -> seconds"}
    )
    cost_args: dict[str, Any] = field(default_factory=dict)
    time_scale: float = field(default=1.0, metadata={"help": "device time = modelled time × this"})
    virtual_device: bool = field(
        default=True,
        metadata={
            "help": "forwards queue on a virtual device and results wait for it (the overlap "
            "scheduler hides CPU work, as on a GPU); False: the forward sleeps on the "
            "scheduler's thread"
        },
    )
    dp_size: int = field(
        default=1,
        metadata={
            "help": "DP ranks whose virtual devices are coupled: a step starts on every rank "
            "only when all of them finished the previous one, as a GPU's collectives force"
        },
    )
    token_id: int = field(
        default=1000, metadata={"help": "the token every request generates (not EOS: runs to max)"}
    )
    clock: str = field(
        default="real",
        metadata={
            "help": "real: the device's time passes on the wall clock; virtual: one shared clock "
            "(vclock.py) that jumps over the device's time when nothing else can happen"
        },
    )
    device_sync: str = field(
        default="own",
        metadata={
            "help": "own: a rank's results are ready when its own forward ends; group: when the "
            "step's last rank ends (a DP-attention forward's collectives; virtual needs it)"
        },
    )
    pass_charge_s: float = field(
        default=0.0,
        metadata={
            "help": "virtual clock: seconds charged for the scheduler's own work before each "
            "forward it launches and on each pass in which the delayer holds prefill back "
            "while no rank runs a forward (0: CPU work takes no time)"
        },
    )
    pass_charge: str = field(
        default="fixed",
        metadata={
            "help": "virtual clock: fixed (pass_charge_s each time) or measured (each charge is "
            "the wall time the scheduler worked since it last waited on the clock, the largest "
            "over the DP ranks: real CPU time, so runs no longer repeat exactly)"
        },
    )

    start_method: StartMethod = field(
        default="fork",
        metadata={
            "help": "how SGLang starts its DP controller, schedulers and detokenizer: fork (from "
            "the launcher, which already imported SGLang: no CPU-only stand-in needs a fresh "
            "interpreter) or spawn (SGLang's own choice, which CUDA needs; each process then "
            "imports SGLang anew, ~11 s of CPU)"
        },
    )

    @property
    def clock_file(self) -> Path:
        return Path(self.record_dir) / "virtual-clock.f64"

    def __post_init__(self) -> None:
        if not 0 < self.time_scale <= 100:
            raise ValueError(f"time_scale must be in (0, 100], got {self.time_scale}")
        if ":" not in self.cost_factory:
            raise ValueError(f"cost_factory must read 'module:function', got {self.cost_factory!r}")
        if self.clock not in ("real", "virtual"):
            raise ValueError(f"clock must be real or virtual, got {self.clock!r}")
        if self.device_sync not in ("own", "group"):
            raise ValueError(f"device_sync must be own or group, got {self.device_sync!r}")
        if self.clock == "virtual" and (self.device_sync != "group" or not self.virtual_device):
            raise ValueError(
                "the virtual clock needs device_sync='group' and the virtual device (a rank "
                "blocked in a collective must never wait on a rank whose device ends later)"
            )
        if self.start_method not in START_METHODS:
            raise ValueError(f"start_method must be fork or spawn, got {self.start_method!r}")
        if not 0 <= self.pass_charge_s < 10:
            raise ValueError(f"pass_charge_s must be in [0, 10) seconds, got {self.pass_charge_s}")
        if self.pass_charge_s and self.clock != "virtual":
            raise ValueError("pass_charge_s applies to the virtual clock only")
        if self.pass_charge not in PASS_CHARGES:
            raise ValueError(f"pass_charge must be one of {PASS_CHARGES}, got {self.pass_charge!r}")
        if self.pass_charge == "measured" and (self.clock != "virtual" or self.pass_charge_s):
            raise ValueError(
                "pass_charge='measured' needs the virtual clock and no fixed pass_charge_s"
            )

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def from_env(cls) -> SimForwardConfig:
        where = os.environ.get(CONFIG_ENV)
        if not where:
            raise RuntimeError(
                f"${CONFIG_ENV} is not set: no simulated-forward config for this process"
            )
        return cls(**json.loads(Path(where).read_text()))


def boot_dir() -> Path:
    """The directory holding the start-up ``sitecustomize`` (put it first on PYTHONPATH)."""
    return Path(__file__).resolve().parent / "_boot"


def omp_bind(local_ranks: int, cores: int | None = None, first_rank: int = 0) -> str:
    """``SGLANG_CPU_OMP_THREADS_BIND``: one core per local rank, round-robin over this machine's cores.

    ``first_rank`` (the node's first global rank) spreads several nodes on one machine
    (the loopback multi-node test) over different cores.
    """
    n = cores or os.cpu_count() or 1
    return "|".join(str((first_rank + r) % n) for r in range(local_ranks))


def server_env(config_path: str | Path, *, dp_size: int, first_rank: int = 0) -> dict[str, str]:
    """Environment for ``sglang.launch_server`` so that every process it starts is hooked."""
    pythonpath = os.pathsep.join(
        p for p in (str(boot_dir()), os.environ.get("PYTHONPATH", "")) if p
    )
    return {
        CONFIG_ENV: str(Path(config_path).resolve()),
        "PYTHONPATH": pythonpath,
        # SGLang's CPU engine path; without the bind list its scheduler asserts ranks <= NUMA nodes
        "SGLANG_USE_CPU_ENGINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "SGLANG_CPU_OMP_THREADS_BIND": omp_bind(dp_size, first_rank=first_rank),
        # DP cooperation metrics (num_prefill_ranks) on /metrics
        "SGLANG_ENABLE_METRICS_DP_ATTENTION": "1",
    }
