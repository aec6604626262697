"""Seed-sweep statistics: Student-t quantiles, paired intervals, the bimodality flag, and asv's reading of samples."""

from __future__ import annotations

import numpy as np
import pytest

from dpbench.twin.stats import bimodality, multimodal, paired, t_quantile_975
from dpbench.twin.sweep import compare


@pytest.mark.parametrize(
    "df, expected",  # published two-sided 95 % critical values of Student's t
    [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (19, 2.093), (30, 2.042)],
)
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile_975(df) == pytest.approx(expected, abs=1e-3)


def test_paired_interval_calls_a_consistent_shift_and_not_noise():
    rng = np.random.default_rng(7)
    a = rng.normal(100, 10, 20)
    shifted = paired(a, a + 5 + rng.normal(0, 0.5, 20))
    assert shifted.excludes_zero and shifted.mean_diff == pytest.approx(5, abs=0.5)
    noise = paired(a, a + rng.normal(0, 1, 20))
    assert noise.ci95_low < 0 < noise.ci95_high and not noise.excludes_zero


def test_paired_interval_covers_the_true_difference_95_percent_of_the_time():
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(1000):
        a = rng.normal(0, 1, 20)
        p = paired(a, a + 1.0 + rng.normal(0, 1, 20))
        hits += p.ci95_low <= 1.0 <= p.ci95_high
    assert 0.93 <= hits / 1000 <= 0.97


def test_bimodality_flags_two_states_not_one():
    rng = np.random.default_rng(3)
    two = np.r_[rng.normal(62, 2, 10), rng.normal(95, 2, 10)]  # issue 35241's two throughput states
    one = rng.normal(80, 5, 20)
    assert bimodality(two) > 5 / 9 and multimodal(two)
    assert not multimodal(one)
    assert not multimodal(two[:6])  # too few seeds to say


def test_compare_pairs_by_setting_and_seed_and_skips_wall_metrics():
    def side(offset):
        return {
            "runs": [
                {
                    "dp": 4,
                    "chunked_prefill_size": 8192,
                    "seed": s,
                    "metrics": {"x": s + offset, "passes_per_s": 100.0 + s},
                }
                for s in range(5)
            ]
        }

    rows = compare(side(0.0), side(2.0))
    assert [r["metric"] for r in rows] == ["x"]
    assert rows[0]["mean_diff"] == pytest.approx(2.0) and rows[0]["n"] == 5
