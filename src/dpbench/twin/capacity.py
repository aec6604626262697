"""Capacity at SLO: the highest offered load whose SLO attainment holds, by bisection over the twin.

For one release (run inside its environment: ``python -m dpbench.twin.capacity JOB -o OUT``),
each (DP size, chunk size, seed) searches the offered rate as a multiple of the spec's
(``TwinConfig.rate_scale``) for the highest one at which every request finished and at
least ``attainment`` of them met both SLOs (``TwinConfig.slo``: TTFT and TPOT; see
:mod:`dpbench.metrics.latency`). The search is a bisection in log-rate between ``lo`` and ``hi``:

- ``hi`` holds: it is at least ``hi`` (``capacity`` = hi, ``bound`` "above");
- else ``steps`` halvings of the bracket [lo, hi]; ``capacity`` is the highest rate that
  held, within a factor ``(hi/lo) ** (1 / 2**steps)`` of the true edge;
- no halving held and ``lo`` fails too: the capacity is below ``lo`` (``capacity`` None,
  ``bound`` "below"). ``lo`` runs only then, and last: it is the dearest rate to run.

Attainment falls as load rises (more queueing), which the bisection assumes; every rate it
ran is kept (``points``: rate, attainment, TTFT p99, TPOT p99, goodput), so a curve that is
not monotone shows. The same seeds go through every release, so two releases' capacities
pair by seed (``dpbench twin capacity``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from dpbench.core.schema import from_dict, replace, to_dict
from dpbench.twin.config import TwinConfig

POINT_METRICS = ("slo_attainment", "ttft_ms_p99", "tpot_ms_p99", "goodput_requests_per_s")


def _holds(metrics: dict[str, float], attainment: float) -> bool:
    """Every request of the run finished (``requests_total``: the ranks' own count) and enough
    of them met the SLOs."""
    done = metrics.get("requests_finished_count", 0)
    return done == metrics["requests_total"] and metrics.get("slo_attainment", 0.0) >= attainment


def search(run: Any, *, attainment: float, lo: float, hi: float, steps: int) -> dict[str, Any]:
    """Bisection with ``run(rate) -> metrics`` (values); see the module docstring.

    ``lo`` runs last, and only when no rate above it held: the lowest rate is by far the
    dearest run (16x the spec's duration at lo = 1/16), and a rate that held above it already
    says, as the bisection assumes, that ``lo`` holds. The answer is the one that running
    ``lo`` first gives."""
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    points: list[dict[str, float]] = []

    def probe(rate: float) -> bool:
        m = run(rate)
        points.append({"rate_scale": rate, **{k: m.get(k, math.nan) for k in POINT_METRICS}})
        return _holds(m, attainment)

    if probe(hi):
        return {"capacity": hi, "bound": "above", "bracket": [hi, None], "points": points}
    good, bad, held = lo, hi, False
    for _ in range(steps):
        mid = math.sqrt(good * bad)
        if probe(mid):
            good, held = mid, True
        else:
            bad = mid
    if not held and not probe(lo):
        return {"capacity": None, "bound": "below", "bracket": [None, lo], "points": points}
    return {"capacity": good, "bound": "bracket", "bracket": [good, bad], "points": points}


def capacity_release(
    spec: str,
    *,
    seeds: list[int],
    dps: list[int],
    chunks: list[int],
    requests: int | None,
    base: TwinConfig,
    attainment: float,
    lo: float,
    hi: float,
    steps: int,
    on_run: Any = None,
) -> dict[str, Any]:
    from dpbench.twin.run import run_twin

    rows = []
    info: dict[str, Any] = {}
    done = 0
    for dp in dps:
        for chunk in chunks:
            for seed in seeds:
                t0 = time.perf_counter()

                def run(rate: float, dp: int = dp, chunk: int = chunk, seed: int = seed) -> Any:
                    nonlocal done
                    config = replace(base, dp_size=dp, chunked_prefill_size=chunk, rate_scale=rate)
                    result = run_twin(spec, config, seed=seed, num_requests=requests)
                    info.setdefault("sglang", result["sglang"])
                    info.setdefault("placement", result["placement"])
                    done += 1
                    if on_run is not None:
                        on_run(done)
                    total = sum(r["requests"] for r in result["extra"]["rank_balance"])
                    info["requests"] = total
                    return {
                        **{k: v["value"] for k, v in result["metrics"].items()},
                        "requests_total": total,
                    }

                found = search(run, attainment=attainment, lo=lo, hi=hi, steps=steps)
                rows.append(
                    {
                        "dp": dp,
                        "chunked_prefill_size": chunk,
                        "seed": seed,
                        **found,
                        "wall_s": time.perf_counter() - t0,
                    }
                )
    return {
        **info,
        "grid": {
            "spec": spec,
            "seeds": seeds,
            "dp": dps,
            "chunked_prefill_size": chunks,
            "requests": info.get("requests"),
            "attainment": attainment,
            "lo": lo,
            "hi": hi,
            "steps": steps,
            "config": to_dict(base),
        },
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    from dpbench.core.atomic import write_json

    ap = argparse.ArgumentParser(prog="python -m dpbench.twin.capacity")
    ap.add_argument("job", help="a capacity job file (dpbench twin capacity writes it)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    job = json.loads(Path(args.job).read_text())
    out = capacity_release(
        job["spec"],
        seeds=job["seeds"],
        dps=job["dps"],
        chunks=job["chunks"],
        requests=job["requests"],
        base=from_dict(TwinConfig, job["config"]),
        attainment=job["attainment"],
        lo=job["lo"],
        hi=job["hi"],
        steps=job["steps"],
        on_run=lambda n: print(json.dumps({"event": "progress", "done": n}), flush=True),
    )
    write_json(Path(args.output), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
