"""Length, duration and arrival samplers: moments within stated tolerances.

Sample size 200,000 with fixed seeds; each tolerance below is at least 5 standard errors of the
estimate, so a correct sampler fails with negligible probability (and, seeded, never flakes).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpbench.workload.arrivals import arrival_offsets, split_counts
from dpbench.workload.distributions import mean_length, sample_lengths, sample_seconds
from dpbench.workload.spec import (
    BurstArrivals,
    ClosedLoopArrivals,
    EmpiricalLength,
    ExponentialSeconds,
    FixedLength,
    GammaArrivals,
    LogNormalLength,
    PoissonArrivals,
    UniformLength,
    UniformSeconds,
)

N = 200_000


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_fixed_is_exact():
    out = sample_lengths(FixedLength(kind="fixed", value=77), rng(), 1000)
    assert out.dtype == np.int64 and (out == 77).all()


def test_uniform_mean_variance_and_bounds():
    dist = UniformLength(kind="uniform", low=100, high=300)
    x = sample_lengths(dist, rng(1), N)
    assert x.min() == 100 and x.max() == 300  # both ends inclusive
    # discrete uniform on 201 values: mean 200, variance (201² − 1) / 12 = 3366.67
    assert x.mean() == pytest.approx(200, rel=0.005)  # s.e. 0.13 → tolerance 1.0 = 7 s.e.
    assert x.var() == pytest.approx((201**2 - 1) / 12, rel=0.02)
    assert mean_length(dist) == 200


def test_lognormal_unclipped_mean_median_and_log_sd():
    dist = LogNormalLength(kind="lognormal", median=1000, sigma=0.5, min=1, max=1_000_000)
    x = sample_lengths(dist, rng(2), N)
    expected_mean = 1000 * math.exp(0.5**2 / 2)  # 1133.15
    assert mean_length(dist) == pytest.approx(expected_mean, rel=1e-6)
    assert x.mean() == pytest.approx(expected_mean, rel=0.01)  # s.e. 1.35 → 11.3 = 8 s.e.
    assert np.median(x) == pytest.approx(1000, rel=0.01)
    assert np.log(x).std() == pytest.approx(0.5, rel=0.01)


def test_lognormal_clipped_mean_matches_closed_form():
    dist = LogNormalLength(kind="lognormal", median=1000, sigma=1.0, min=200, max=3000)
    x = sample_lengths(dist, rng(3), N)
    assert x.min() == 200 and x.max() == 3000
    assert x.mean() == pytest.approx(mean_length(dist), rel=0.01)
    # P(X > 3000) = 1 − Φ(ln 3) = 0.1357
    tail = 1 - 0.5 * (1 + math.erf(math.log(3) / math.sqrt(2)))
    assert (x == 3000).mean() == pytest.approx(tail, abs=0.005)


def test_empirical_bin_frequencies_and_mean():
    dist = EmpiricalLength(kind="empirical", edges=[1, 11, 101], weights=[3, 1])
    x = sample_lengths(dist, rng(4), N)
    assert x.min() >= 1 and x.max() <= 100
    assert (x < 11).mean() == pytest.approx(0.75, abs=0.005)
    # 0.75 × mean(1..10) + 0.25 × mean(11..100) = 0.75 × 5.5 + 0.25 × 55.5 = 18
    assert mean_length(dist) == pytest.approx(18.0)
    assert x.mean() == pytest.approx(18.0, rel=0.01)


def test_seconds_samplers():
    x = sample_seconds(ExponentialSeconds(kind="exponential", mean=3.0), rng(5), N)
    assert x.min() >= 0 and x.mean() == pytest.approx(3.0, rel=0.015)
    assert x.std() == pytest.approx(3.0, rel=0.02)
    u = sample_seconds(UniformSeconds(kind="uniform", low=1.0, high=2.0), rng(6), N)
    assert u.min() >= 1 and u.max() <= 2 and u.mean() == pytest.approx(1.5, rel=0.005)


def test_poisson_gaps_mean_and_cv():
    t = arrival_offsets(PoissonArrivals(process="poisson", rate_per_s=10), rng(7), N)
    assert t[0] == 0 and (np.diff(t) >= 0).all()
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.1, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)  # exponential: CV 1


def test_gamma_burstiness_sets_cv_squared():
    t = arrival_offsets(GammaArrivals(process="gamma", rate_per_s=10, burstiness=0.25), rng(8), N)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.1, rel=0.02)
    assert (gaps.std() / gaps.mean()) ** 2 == pytest.approx(1 / 0.25, rel=0.05)


def test_bursts_put_each_share_inside_its_window():
    process = BurstArrivals(
        process="bursts",
        bursts=[
            {"at_s": 0.0, "share": 0.5, "over_s": 1.0},
            {"at_s": 10.0, "share": 0.3, "over_s": 0.0},
            {"at_s": 20.0, "share": 0.2, "over_s": 2.0},
        ],
    )
    t = arrival_offsets(process, rng(9), 7)
    assert (np.diff(t) >= 0).all()
    # 7 × (0.5, 0.3, 0.2) = (3.5, 2.1, 1.4) → floors (3, 2, 1), the spare one to the .5 remainder
    assert ((t >= 0) & (t < 1)).sum() == 4
    assert (t == 10.0).sum() == 2
    assert ((t >= 20) & (t < 22)).sum() == 1


def test_split_counts_largest_remainder():
    assert split_counts([0.5, 0.3, 0.2], 7).tolist() == [4, 2, 1]
    assert split_counts([0.25] * 4, 10).tolist() == [3, 3, 2, 2]  # ties go to earlier bursts
    assert split_counts([1.0], 5).tolist() == [5]


def test_closed_loop_has_no_schedule():
    t = arrival_offsets(ClosedLoopArrivals(process="closed_loop", concurrency=4), rng(), 10)
    assert (t == 0).all() and len(t) == 10


def test_same_generator_seed_same_samples():
    dist = LogNormalLength(kind="lognormal", median=500, sigma=0.7, max=8000)
    assert (sample_lengths(dist, rng(11), 1000) == sample_lengths(dist, rng(11), 1000)).all()
    assert (sample_lengths(dist, rng(11), 1000) != sample_lengths(dist, rng(12), 1000)).any()
