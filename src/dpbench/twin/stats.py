"""Statistics of seed sweeps: paired differences with 95 % intervals, and a multi-modality flag (numpy + math only).

- :func:`paired` — for the same seeds through two releases, the per-seed differences
  B − A, their mean and a two-sided 95 % Student-t interval (``mean ± t(0.975, n−1)·s/√n``).
  The t quantile is solved from Student's t distribution function, which has a closed form
  for integer degrees of freedom (Abramowitz & Stegun 26.7.3–26.7.4), so no table is used.
  ``excludes_zero`` says whether the interval calls a change.
- :func:`bimodality` — Sarle's bimodality coefficient ``(g² + 1) / (κ + 3(n−1)²/((n−2)(n−3)))``
  with the sample skewness ``g`` and excess kurtosis ``κ`` (bias-corrected). A uniform
  distribution gives 5/9; a value above 5/9 suggests two modes (the shape of SGLang issue
  35241: the same config landing in one of two throughput states). Flagged when n ≥ 10.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

BIMODAL_THRESHOLD = 5 / 9
MIN_SEEDS_FOR_MODALITY = 10


def t_two_sided_mass(t: float, df: int) -> float:
    """P(|T| ≤ t) for Student's t with integer ``df`` ≥ 1 (A&S 26.7.3/26.7.4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, got {df}")
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    s = math.sin(theta)
    if df % 2 == 1:
        if df == 1:
            return 2 * theta / math.pi
        term, total = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term, total = 1.0, 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (bisection on the closed form)."""
    lo, hi = 0.0, 200.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_mass(mid, df) < 0.95:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class Paired:
    n: int
    mean_a: float
    mean_b: float
    mean_diff: float  # B − A
    ci95_low: float
    ci95_high: float
    rel_diff: float  # mean_diff / |mean_a| (NaN when mean_a is 0)

    @property
    def excludes_zero(self) -> bool:
        return self.ci95_low > 0 or self.ci95_high < 0

    def as_dict(self) -> dict[str, float | int | bool]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def paired(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> Paired:
    """Paired difference B − A over the same seeds, with its 95 % t interval."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired samples need equal 1-D shapes, got {x.shape} and {y.shape}")
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    n = int(x.size)
    if n < 2:
        nan = float("nan")
        return Paired(n, nan, nan, nan, nan, nan, nan)
    d = y - x
    mean = float(d.mean())
    half = t_quantile_975(n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    ma = float(x.mean())
    return Paired(
        n=n,
        mean_a=ma,
        mean_b=float(y.mean()),
        mean_diff=mean,
        ci95_low=mean - half,
        ci95_high=mean + half,
        rel_diff=mean / abs(ma) if ma != 0 else float("nan"),
    )


def bimodality(values: np.ndarray | list[float]) -> float:
    """Sarle's bimodality coefficient of ``values`` (NaN when n < 4 or the values are constant)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    n = x.size
    if n < 4:
        return float("nan")
    m = x.mean()
    sd = x.std()
    if sd == 0:
        return float("nan")
    z = (x - m) / sd
    g1 = float((z**3).mean())
    g2 = float((z**4).mean()) - 3.0
    skew = g1 * math.sqrt(n * (n - 1)) / (n - 2)
    kurt = ((n + 1) * g2 + 6) * (n - 1) / ((n - 2) * (n - 3))
    return (skew**2 + 1) / (kurt + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def multimodal(values: np.ndarray | list[float]) -> bool:
    x = np.asarray(values, dtype=np.float64)
    if np.count_nonzero(~np.isnan(x)) < MIN_SEEDS_FOR_MODALITY:
        return False
    bc = bimodality(x)
    return bool(bc > BIMODAL_THRESHOLD)
