"""What a user chooses for one server run on top of the workload spec, and its checks.

:class:`RunOptions` is a schema (:mod:`dpbench.core.schema`): `dpbench server run` and
`launch` build their command-line options from its fields, asv's benchmarks set them, and
every run result records them (``extra.run_options``). Options that contradict each other
fail at construction with :class:`~dpbench.server.errors.RunOptionsError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from dpbench.server.errors import RunOptionsError
from dpbench.server.stats import Slo
from dpbench.sglang_compat.simforward.config import (
    PASS_CHARGES,
    START_METHODS,
    PassCharge,
    StartMethod,
)
from dpbench.twin.profiles import COST_PROFILES, DEFAULT_PROFILE, CostProfile

# round_robin: SGLang's DP controller; cache_aware: the load client routes (SGLang's router)
ServerDispatch = Literal["round_robin", "cache_aware"]
DISPATCHES: tuple[str, ...] = get_args(ServerDispatch)
# real: the simulated device's time passes on the wall clock; virtual: a shared clock jumps it
ServerClock = Literal["real", "virtual"]
CLOCKS: tuple[str, ...] = get_args(ServerClock)
DeviceSync = Literal["own", "group"]
DEVICE_SYNCS: tuple[str, ...] = get_args(DeviceSync)


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
    seed: int | None = field(
        default=None,
        metadata={
            "help": "the workload's seed (None: the spec's): another draw of the same spec, "
            "as the twin's --seeds (a trace spec's window)"
        },
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
    clock: ServerClock = field(
        default="real",
        metadata={
            "help": "simulated forward: real (the device's time passes on the wall clock) or "
            "virtual (a shared clock jumps over it when nothing else can happen; times reported "
            "are virtual)"
        },
    )
    device_sync: DeviceSync | None = field(
        default=None,
        metadata={
            "help": "simulated forward: a rank's results are ready at its own forward's end "
            "(own) or the step's last rank's (group: a DP forward's collectives); None: own "
            "on the real clock, group on the virtual one (which needs it)"
        },
    )
    pass_charge_ms: float = field(
        default=0.0,
        metadata={
            "help": "virtual clock: milliseconds charged for the scheduler's own work before "
            "each forward it launches and on each pass in which the delayer holds prefill "
            "back while no rank runs a forward (0: its CPU work takes no virtual time)"
        },
    )
    pass_charge: PassCharge = field(
        default="fixed",
        metadata={
            "help": "virtual clock: fixed (--pass-charge-ms each time) or measured (each charge "
            "is the wall time the scheduler worked since it last waited on the clock, the "
            "largest over the DP ranks: this machine's CPU time, so runs no longer repeat "
            "exactly and a busy machine moves them)"
        },
    )
    start_method: StartMethod = field(
        default="fork",
        metadata={
            "help": "simulated forward: SGLang's DP controller, schedulers and detokenizer fork "
            "from its launcher, which already imported SGLang (fork), or each imports it anew "
            "as SGLang does for CUDA (spawn, ~11 s of CPU a process)"
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
    cost_profile: CostProfile = field(
        default=DEFAULT_PROFILE,
        metadata={
            "help": "simulated forward: the cost model's efficiencies, roofline or "
            "published-fit (`dpbench twin clock`)"
        },
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
        if self.cost_profile not in COST_PROFILES:
            raise RunOptionsError(
                f"cost_profile must be one of {COST_PROFILES}, got {self.cost_profile!r}"
            )
        if not 0 < self.time_scale <= 100:
            raise RunOptionsError(f"time_scale must be in (0, 100], got {self.time_scale}")
        if self.max_requests is not None and self.max_requests < 1:
            raise RunOptionsError(f"max_requests must be ≥ 1, got {self.max_requests}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise RunOptionsError(f"seed must be in [0, 2**63), got {self.seed}")
        if not self.client_read_timeout_s > 0:
            raise RunOptionsError(
                f"client_read_timeout_s must be > 0, got {self.client_read_timeout_s}"
            )
        if self.serial_forward and not self.simulate_forward:
            raise RunOptionsError("--serial-forward needs --simulate-forward")
        self._check_clock()
        if self.dispatch not in DISPATCHES:
            raise RunOptionsError(f"dispatch must be one of {DISPATCHES}, got {self.dispatch!r}")
        if self.start_method not in START_METHODS:
            raise RunOptionsError(
                f"start_method must be one of {START_METHODS}, got {self.start_method!r}"
            )

    def _check_clock(self) -> None:
        if self.clock not in CLOCKS:
            raise RunOptionsError(f"clock must be one of {CLOCKS}, got {self.clock!r}")
        if self.device_sync is not None and self.device_sync not in DEVICE_SYNCS:
            raise RunOptionsError(
                f"device_sync must be one of {DEVICE_SYNCS}, got {self.device_sync!r}"
            )
        if self.pass_charge not in PASS_CHARGES:
            raise RunOptionsError(
                f"pass_charge must be one of {PASS_CHARGES}, got {self.pass_charge!r}"
            )
        if self.clock == "real":
            if self.pass_charge_ms or self.pass_charge != "fixed":
                raise RunOptionsError("--pass-charge-ms and --pass-charge need --clock virtual")
            return
        if self.pass_charge == "measured" and self.pass_charge_ms:
            raise RunOptionsError("--pass-charge measured excludes --pass-charge-ms")
        if not self.simulate_forward or self.serial_forward or self.nnodes != 1:
            raise RunOptionsError(
                "--clock virtual needs --simulate-forward on one node, without --serial-forward"
            )
        if self.device_sync == "own":
            raise RunOptionsError(
                "--clock virtual needs --device-sync group: a rank blocked in a collective "
                "must never wait on a rank whose device ends later"
            )
        if not 0 <= self.pass_charge_ms < 10_000:
            raise RunOptionsError(
                f"pass_charge_ms must be in [0, 10000), got {self.pass_charge_ms}"
            )

    @property
    def sync(self) -> str:
        """The device sync in effect: as given, else own on the real clock, group on the virtual."""
        return self.device_sync or ("group" if self.clock == "virtual" else "own")
