"""Arrival offsets (seconds from the start) for each arrival process, from a seeded Generator."""

from __future__ import annotations

import numpy as np

from dpbench.workload.spec import (
    ArrivalProcess,
    BurstArrivals,
    ClosedLoopArrivals,
    GammaArrivals,
    PoissonArrivals,
)


def split_counts(shares: list[float], n: int) -> np.ndarray:
    """Split ``n`` items by ``shares`` (summing to 1) into integers, largest remainder first."""
    exact = np.asarray(shares, dtype=np.float64) * n
    counts = np.floor(exact).astype(np.int64)
    leftover = n - int(counts.sum())
    if leftover > 0:
        # stable sort: equal remainders go to the earlier entry
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:leftover]] += 1
    return counts


def arrival_offsets(process: ArrivalProcess, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` non-decreasing offsets in seconds; the first open-loop arrival is at 0 s.

    Closed loop has no schedule: every offset is 0 and the replaying client (or the planner)
    starts a request whenever one of the ``concurrency`` slots frees.
    """
    if n <= 0:
        return np.zeros(0, dtype=np.float64)
    match process:
        case PoissonArrivals():
            gaps = rng.exponential(1.0 / process.rate_per_s, size=n - 1)
        case GammaArrivals():
            shape = process.burstiness
            gaps = rng.gamma(shape, 1.0 / (process.rate_per_s * shape), size=n - 1)
        case BurstArrivals():
            counts = split_counts([b.share for b in process.bursts], n)
            parts = [
                burst.at_s + rng.random(int(count)) * burst.over_s
                for burst, count in zip(process.bursts, counts, strict=True)
            ]
            return np.sort(np.concatenate(parts), kind="stable")
        case ClosedLoopArrivals():
            return np.zeros(n, dtype=np.float64)
        case _:
            raise TypeError(f"unknown arrival process {process!r}")
    return np.concatenate(([0.0], np.cumsum(gaps)))


def describe(process: ArrivalProcess, *, short: bool = False) -> str:
    match process:
        case PoissonArrivals():
            return f"Poisson, {process.rate_per_s:g} req/s"
        case GammaArrivals():
            return f"gamma, {process.rate_per_s:g} req/s, burstiness {process.burstiness:g}"
        case BurstArrivals() if short:
            return f"{len(process.bursts)} bursts"
        case BurstArrivals():
            parts = ", ".join(
                f"{b.share:.0%} at {b.at_s:g}s (over {b.over_s:g}s)" for b in process.bursts
            )
            return f"bursts: {parts}"
        case ClosedLoopArrivals():
            return f"closed loop, {process.concurrency} in flight"
    return repr(process)
