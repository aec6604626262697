"""Whether a simulated-forward server run measured SGLang or this machine: the instrument's health.

A server run on a CPU host is a measuring instrument: the load client, the tokenizer /
detokenizer path and the virtual device share two cores with SGLang's schedulers. When
the machine falls behind, the run's timings are the machine's, not SGLang's. Each
:class:`Limit` is one such check with a stated threshold and the timings it spoils:

- ``scheduling``: every timing (the schedulers' steps ran late: device idle);
- ``client``: what the load client measured (TTFT, TPOT, ITL, throughput as the client
  saw them), not the scheduler's own clock (TTFT at the scheduler);
- ``load``: the offered load was not the spec's (requests sent late). The twin replaying
  the run's own arrivals is still a fair comparison; a comparison with the spec is not.

The scheduling decisions (which rank extended, DP-mixed steps, delay verdicts) are compared
with the twin on the run's own arrivals and stay valid either way. A run that breaks a
limit is flagged, its spoiled timings are left out of fidelity verdicts, and the reason
names the metric, its value and the limit. These metrics never get a better/worse
direction (``dashboard.metrics``: "instrument").

Not a limit: the pick-up delay (client send → the scheduler takes the request in). Most of
it is SGLang's loop finishing its current forward before it reads the socket, which is the
scheduling under test, not the instrument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


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


SCOPES = ("scheduling", "client", "load")
# a run that ran late spoils what the client measured too
IMPLIES = {"scheduling": ("scheduling", "client"), "client": ("client",), "load": ("load",)}


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
