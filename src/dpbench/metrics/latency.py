"""The user-facing latencies, one definition for the twin and the server's load client.

SGLang ``bench_serving``'s meanings, per completed request:

- TTFT: first output token − the request's send (trace) time;
- ITL: every gap between consecutive output tokens of a request (all of them, pooled over
  requests, so a long gap a DP-mixed step puts on a decoding rank counts once per request
  it stretched);
- TPOT: (E2E − TTFT) / (output tokens − 1), for requests with ≥ 2 output tokens;
- E2E: last output token − send time.

Each is reported as ``<name>_ms_{mean,p50,p90,p99}`` (numpy's linear percentiles); a
distribution with no values is absent, never 0. **Goodput** is the completed requests per
second that met both SLOs (TTFT ≤ ``Slo.ttft_ms`` and TPOT ≤ ``Slo.tpot_ms``; a one-token
request has no TPOT and meets that part); **SLO attainment** is the fraction of completed
requests that met both.

:class:`Slo` is the one SLO: its defaults are what every tier, benchmark and page judges by,
and :attr:`Slo.label` is how each of them names it. Its fields also make the
``--ttft-slo-ms``/``--tpot-slo-ms`` options of every command (:func:`with_slo_options`,
or :mod:`dpbench.core.schema` where a command's whole config carries an ``Slo``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpbench.core.results import Metric

PERCENTILES = (50, 90, 99)


def _duration_text(ms: float) -> str:
    """``5000`` → ``5 s``, ``250`` → ``250 ms``: a duration as people write it."""
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


@dataclass(frozen=True)
class Slo:
    """Service-level objectives for goodput (milliseconds). The defaults are the suite's SLO.

    TTFT 5 s and TPOT 250 ms: DeepSeek-V3 on H200s, as the cost model prices it, misses a
    100 ms TPOT at any load (decode steps stretched by mixed steps)."""

    ttft_ms: float = field(
        default=5000.0, metadata={"help": "goodput's TTFT SLO, ms", "flag": "--ttft-slo-ms"}
    )
    tpot_ms: float = field(
        default=250.0, metadata={"help": "goodput's TPOT SLO, ms", "flag": "--tpot-slo-ms"}
    )

    def __post_init__(self) -> None:
        if self.ttft_ms <= 0 or self.tpot_ms <= 0:
            raise ValueError(
                f"SLOs must be > 0 ms, got ttft_ms={self.ttft_ms}, tpot_ms={self.tpot_ms}"
            )

    @property
    def label(self) -> str:
        """``TTFT ≤ 5 s and TPOT ≤ 250 ms``: the SLO as every unit, table and page names it."""
        return f"TTFT ≤ {_duration_text(self.ttft_ms)} and TPOT ≤ {_duration_text(self.tpot_ms)}"

    @property
    def goodput_unit(self) -> str:
        return f"req/s meeting {self.label}"

    @property
    def attainment_unit(self) -> str:
        return f"fraction of completed requests within {self.label}"

    def met(self, r: RequestLatency) -> bool:
        if r.ttft_s is None or r.ttft_s * 1e3 > self.ttft_ms:
            return False
        tpot = r.tpot_s
        return tpot is None or tpot * 1e3 <= self.tpot_ms


def tpot_of(ttft_s: float | None, e2e_s: float | None, output_tokens: int) -> float | None:
    """(E2E − TTFT) / (output − 1): mean time per output token after the first."""
    if ttft_s is None or e2e_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


@dataclass(frozen=True)
class RequestLatency:
    """One completed request's times, in seconds from its send time."""

    ttft_s: float | None
    e2e_s: float | None
    itl_s: Sequence[float]
    output_tokens: int

    @property
    def tpot_s(self) -> float | None:
        return tpot_of(self.ttft_s, self.e2e_s, self.output_tokens)

    @classmethod
    def from_token_times(cls, sent_s: float, token_s: Sequence[float]) -> RequestLatency:
        """From the times its output tokens appeared (the twin: the end of each step that
        produced one for it)."""
        t = np.asarray(token_s, dtype=np.float64)
        if t.size == 0:
            return cls(None, None, (), 0)
        return cls(float(t[0] - sent_s), float(t[-1] - sent_s), np.diff(t).tolist(), int(t.size))


def distribution(name: str, values_s: Sequence[float], out: dict[str, Metric]) -> None:
    """``name_ms_{mean,p50,p90,p99}`` (lower is better) into ``out``; nothing if no values."""
    if not len(values_s):
        return
    a = np.asarray(values_s, dtype=np.float64) * 1e3
    out[f"{name}_ms_mean"] = Metric(float(a.mean()), "ms", "lower")
    for p, v in zip(PERCENTILES, np.percentile(a, PERCENTILES), strict=True):
        out[f"{name}_ms_p{p}"] = Metric(float(v), "ms", "lower")


def latency_metrics(
    completed: Iterable[RequestLatency], duration_s: float, slo: Slo = Slo()
) -> dict[str, Metric]:
    """TTFT, ITL, TPOT and E2E distributions of the completed requests, and goodput over
    ``duration_s``."""
    done = list(completed)
    m: dict[str, Metric] = {}
    distribution("ttft", [r.ttft_s for r in done if r.ttft_s is not None], m)
    distribution("itl", [x for r in done for x in r.itl_s], m)
    distribution("tpot", [t for r in done if (t := r.tpot_s) is not None], m)
    distribution("e2e", [r.e2e_s for r in done if r.e2e_s is not None], m)
    met = sum(slo.met(r) for r in done)
    if duration_s > 0:
        m["goodput_requests_per_s"] = Metric(met / duration_s, slo.goodput_unit, "higher")
    if done:
        m["slo_attainment"] = Metric(met / len(done), slo.attainment_unit, "higher")
    return m


def with_slo_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """A typer command's ``--ttft-slo-ms``/``--tpot-slo-ms``, made from :class:`Slo`'s fields
    (flags, defaults, help); the command is called with ``slo=`` the checked :class:`Slo`."""
    from dpbench.core.schema import with_options

    return with_options(Slo, param="slo", error=ValueError)(command)
