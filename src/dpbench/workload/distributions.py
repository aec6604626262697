"""Vectorised samplers for token-length and duration distributions, and their exact means."""

from __future__ import annotations

import math

import numpy as np

from dpbench.workload.spec import (
    EmpiricalLength,
    ExponentialSeconds,
    FixedLength,
    FixedSeconds,
    LengthDist,
    LogNormalLength,
    SecondsDist,
    UniformLength,
    UniformSeconds,
)


def sample_lengths(dist: LengthDist, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` token counts (int64, each ≥ 1) drawn from ``dist``."""
    match dist:
        case FixedLength():
            return np.full(n, dist.value, dtype=np.int64)
        case UniformLength():
            return rng.integers(dist.low, dist.high, size=n, endpoint=True, dtype=np.int64)
        case LogNormalLength():
            raw = dist.median * np.exp(dist.sigma * rng.standard_normal(n))
            return np.clip(np.rint(raw), dist.min, dist.max).astype(np.int64)
        case EmpiricalLength():
            edges = np.asarray(dist.edges, dtype=np.int64)
            weights = np.asarray(dist.weights, dtype=np.float64)
            bins = rng.choice(len(weights), size=n, p=weights / weights.sum())
            low, width = edges[bins], edges[bins + 1] - edges[bins]
            return low + np.floor(rng.random(n) * width).astype(np.int64)
    raise TypeError(f"unknown length distribution {dist!r}")


def sample_seconds(dist: SecondsDist, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` durations in seconds (float64, each ≥ 0) drawn from ``dist``."""
    match dist:
        case FixedSeconds():
            return np.full(n, dist.value, dtype=np.float64)
        case UniformSeconds():
            return rng.uniform(dist.low, dist.high, size=n)
        case ExponentialSeconds():
            return rng.exponential(dist.mean, size=n)
    raise TypeError(f"unknown duration distribution {dist!r}")


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def mean_length(dist: LengthDist) -> float:
    """The exact mean of ``sample_lengths(dist, …)``, clipping included (rounding aside, which
    moves a lognormal mean by well under one token)."""
    match dist:
        case FixedLength():
            return float(dist.value)
        case UniformLength():
            return (dist.low + dist.high) / 2
        case LogNormalLength():
            # E[clip(X, a, b)] for X = m·exp(sN): a·P(X<a) + b·P(X>b) + ∫_a^b x f(x) dx.
            mu, s = math.log(dist.median), dist.sigma
            za, zb = (math.log(dist.min) - mu) / s, (math.log(dist.max) - mu) / s
            inner = dist.median * math.exp(s * s / 2) * (_phi(zb - s) - _phi(za - s))
            return dist.min * _phi(za) + dist.max * (1 - _phi(zb)) + inner
        case EmpiricalLength():
            w = np.asarray(dist.weights, dtype=np.float64)
            e = np.asarray(dist.edges, dtype=np.float64)
            return float((w * (e[:-1] + e[1:] - 1) / 2).sum() / w.sum())
    raise TypeError(f"unknown length distribution {dist!r}")


def mean_seconds(dist: SecondsDist) -> float:
    match dist:
        case FixedSeconds():
            return dist.value
        case UniformSeconds():
            return (dist.low + dist.high) / 2
        case ExponentialSeconds():
            return dist.mean
    raise TypeError(f"unknown duration distribution {dist!r}")


def describe(dist: LengthDist | SecondsDist) -> str:
    """A one-line human description, e.g. ``lognormal(median 6000, σ 0.5) clipped to 1024..16384``."""
    match dist:
        case FixedLength() | FixedSeconds():
            return f"fixed {dist.value:g}"
        case UniformLength() | UniformSeconds():
            return f"uniform {dist.low:g}..{dist.high:g}"
        case LogNormalLength():
            return (
                f"lognormal(median {dist.median:g}, σ {dist.sigma:g}) clipped to "
                f"{dist.min}..{dist.max}"
            )
        case EmpiricalLength():
            return f"empirical histogram, {len(dist.weights)} bins over {dist.edges[0]}..{dist.edges[-1]}"
        case ExponentialSeconds():
            return f"exponential(mean {dist.mean:g})"
    return repr(dist)
