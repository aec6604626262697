"""Whether a simulated-forward server run measured SGLang or this machine: the instrument's health.

A server run on a CPU host is a measuring instrument: the load client, the tokenizer /
detokenizer path and the virtual device share two cores with SGLang's schedulers. When
the machine falls behind, the run's timings are the machine's, not SGLang's. Each
:class:`Limit` is one such check with a stated threshold and the timings it spoils:

- ``scheduling``: every timing and every decision compared with the replay (the
  schedulers' steps ran late against their simulated clock: device idle, or the CPUs were
  contended: Linux's CPU pressure; the replay places the run's arrivals on the simulated
  clock, so late steps meet them at other steps and the decisions' inputs part);
- ``client``: what the load client measured (TTFT, TPOT, ITL, throughput as the client
  saw them), not the scheduler's own clock (TTFT at the scheduler);
- ``load``: the offered load was not the spec's (requests sent late). The twin replaying
  the run's own arrivals is still a fair comparison; a comparison with the spec is not.

A run that breaks a limit is flagged, what it spoiled is left out of fidelity's means,
differences and intervals, and the reason names the metric, its value and the limit. These metrics never get a better/worse
direction (``dashboard.metrics``: "instrument").

Not a limit: the pick-up delay (client send → the scheduler takes the request in). Most of
it is SGLang's loop finishing its current forward before it reads the socket, which is the
scheduling under test, not the instrument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PSI_CPU = Path("/proc/pressure/cpu")
# On the 2-core VM a full-scale DP-2 server run alone reads 1-4 % (20 s samples, 2026-12-02);
# beside three niced jobs (load 7.7) the machine read 51 % over a minute, and a Mooncake
# window run there missed the replay by +26 % TTFT at the scheduler with device idle 0.7 %.
CPU_PRESSURE_LIMIT = 0.25


def cpu_pressure_total_us() -> int | None:
    """Linux's CPU pressure (PSI) ``some`` total: microseconds in which at least one runnable
    task waited for a CPU, since boot. None where the kernel does not expose it."""
    try:
        for line in PSI_CPU.read_text().splitlines():
            if line.startswith("some "):
                return int(line.split("total=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return None


def cpu_pressure_fraction(
    before_us: int | None, after_us: int | None, wall_s: float
) -> float | None:
    """The share of a run's wall time in which some runnable task waited for a CPU (this
    machine's contention: the server's own processes, the client, anything else running)."""
    if before_us is None or after_us is None or wall_s <= 0:
        return None
    return (after_us - before_us) / 1e6 / wall_s


@dataclass(frozen=True)
class Limit:
    metric: str
    most: float
    spoils: str  # "scheduling" | "client" | "load"
    why: str


LIMITS: tuple[Limit, ...] = (
    Limit(
        "device_idle_fraction",
        0.05,
        "scheduling",
        "the virtual device waited for the scheduler's CPU work this often before a decode "
        "step: the steps ran late, so every timing is the CPU's",
    ),
    Limit(
        "cpu_pressure_fraction",
        CPU_PRESSURE_LIMIT,
        "scheduling",
        "some runnable task waited for a CPU this share of the run (Linux PSI): the machine "
        "was contended, so the schedulers' steps drifted from their simulated clock",
    ),
    Limit(
        "first_token_return_ms_p99",
        250.0,
        "client",
        "first tokens took this long from the scheduler back to the client (detokenizer, "
        "tokenizer manager, HTTP): the client's latencies are this machine's path",
    ),
    Limit(
        "client_loop_lag_ms_p99",
        100.0,
        "client",
        "the load client's event loop ran this late: its timestamps are late by as much",
    ),
    Limit(
        "client_send_lateness_ms_p99",
        500.0,
        "load",
        "the client sent requests this late: the offered load is not the spec's (a burst of "
        "256 requests at once costs ~0.1 s to send on two cores)",
    ),
)


SCOPES = ("decisions", "scheduling", "client", "load")
# a run whose steps ran late spoils the decisions' inputs and what the client measured too
IMPLIES = {
    "scheduling": ("decisions", "scheduling", "client"),
    "client": ("client",),
    "load": ("load",),
}


@dataclass
class Health:
    spoiled: set[str] = field(default_factory=set)  # of SCOPES
    broken: list[str] = field(default_factory=list)  # one line per broken limit
    unchecked: list[str] = field(default_factory=list)  # metrics the run does not report

    @property
    def valid(self) -> bool:
        return not self.spoiled

    def valid_for(self, scope: str) -> bool:
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}; got {scope!r}")
        return scope not in self.spoiled

    def as_dict(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            **{f"{scope}_valid": self.valid_for(scope) for scope in SCOPES},
            "broken": self.broken,
            "unchecked": self.unchecked,
            "limits": {lim.metric: lim.most for lim in LIMITS},
        }


def check(result: dict[str, Any]) -> Health:
    """The health of one server run result (``dpbench.results`` schema)."""
    h = Health()
    metrics = result.get("metrics", {})
    for lim in LIMITS:
        m = metrics.get(lim.metric)
        value = float(m["value"]) if m is not None and m.get("value") is not None else math.nan
        if math.isnan(value):
            h.unchecked.append(lim.metric)
            continue
        if value > lim.most:
            h.broken.append(f"{lim.metric} = {value:.4g} > {lim.most:g}: {lim.why}")
            h.spoiled.update(IMPLIES[lim.spoils])
    return h
