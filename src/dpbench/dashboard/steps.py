"""Changes that are real: steps in each series over the history, found by asv's own detector.

For every chart series (metric × scenario × machine × env) ``asv.step_detect.detect_steps``
fits a piecewise-constant function (asv's Potts-model fit, weighted by each point's band
width as ``asv publish`` weights by its 99 % CI). Each boundary between two fitted
segments is a candidate step; it is kept only when the jump exceeds the noise: the two segments' error estimates (asv's
mean absolute deviation within a segment) added together, as
``asv.step_detect.detect_regressions`` tests, and, where the points carry bands, only
when the two segments' median bands do not overlap (a one-point segment has no
deviation, but its value's 99 % CI still says how noisy it is; the same rule as the
comparison's "within noise"). A kept step reports:

- the commit range: the last commit of the segment before → the first commit after
  (the change happened somewhere in between, the earlier commit excluded);
- its size (B − A) / |A| in %, and an interval of ± the larger of the segments' error
  estimates and their band half-widths;
- "regression" or "improvement" from the metric's direction ("change" without one).

Series with a single run per commit and no spread (a deterministic twin metric, a
single-sample track) have zero within-segment error: every change of level is a step.
Two shortcuts keep the build fast without changing the answer: a series whose bands all
share one value has no step that could be kept, and a series without spread made of
exactly repeated levels (at most half as many runs as points) is split at its runs,
which is what asv's fit returns for noise-free data (tested against it).
"""

from __future__ import annotations

import itertools
from typing import Any


def _weights(points: list[list[Any]]) -> list[float | None] | None:
    w: list[float | None] = []
    any_w = False
    for _i, _v, lo, hi in points:
        if lo is not None and hi is not None and hi > lo:
            w.append(2.0 / (hi - lo))  # asv._stats.get_weight
            any_w = True
        else:
            w.append(None)
    return w if any_w else None


def _half_band(points: list[list[Any]]) -> float:
    """Median half-width of the points' bands in a segment (0 without bands)."""
    widths = sorted((p[3] - p[2]) / 2 for p in points if p[2] is not None and p[3] is not None)
    return widths[len(widths) // 2] if widths else 0.0


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _bands_overlap(before: list[list[Any]], after: list[list[Any]]) -> bool:
    """Both segments banded and their median bands overlap (the same rule as the comparison)."""
    bb = [p for p in before if p[2] is not None and p[3] is not None]
    ab = [p for p in after if p[2] is not None and p[3] is not None]
    if not bb or not ab:
        return False
    lo0, hi0 = _median([p[2] for p in bb]), _median([p[3] for p in bb])
    lo1, hi1 = _median([p[2] for p in ab]), _median([p[3] for p in ab])
    return lo0 <= hi1 and lo1 <= hi0


def _runs(ys: list[float]) -> list[tuple[int, int, float, float, float]]:
    """Maximal runs of equal consecutive values, as detect_steps' (left, right, value, min, err)."""
    out = []
    left = 0
    for j in range(1, len(ys) + 1):
        if j == len(ys) or ys[j] != ys[left]:
            out.append((left, j, ys[left], ys[left], 0.0))
            left = j
    return out


def series_steps(points: list[list[Any]]) -> list[dict[str, Any]]:
    """Steps in one series' points ([commit index, value, lo, hi], sorted): index-based."""
    from asv.step_detect import detect_steps

    if len(points) < 2:
        return []
    ys = [p[1] for p in points]
    if min(ys) == max(ys):
        return []
    banded = all(p[2] is not None and p[3] is not None for p in points)
    if banded and max(p[2] for p in points) <= min(p[3] for p in points):
        return []  # one value lies in every band: no segments' median bands can separate
    runs = _runs(ys) if not any(p[2] is not None for p in points) else None
    if runs is not None and len(runs) <= len(ys) // 2:
        segments = runs  # exact, noise-free levels: asv's fit of such data is these runs
    else:
        segments = detect_steps(ys, _weights(points))
    out = []
    for (l0, r0, v0, _m0, e0), (l1, _r1, v1, _m1, e1) in itertools.pairwise(segments):
        jump = v1 - v0
        before, after = points[l0:r0], points[l1:_r1]
        noise = max(e0 + e1, _half_band(before) + _half_band(after))
        if abs(jump) <= e0 + e1 or _bands_overlap(before, after):
            continue
        pct = lo = hi = None
        if v0 != 0:
            pct = jump / abs(v0) * 100
            lo = (jump - noise) / abs(v0) * 100
            hi = (jump + noise) / abs(v0) * 100
        out.append(
            {
                "before": points[r0 - 1][0],  # commit indices
                "after": points[l1][0],
                "value_before": v0,
                "value_after": v1,
                "pct": pct,
                "lo": lo,
                "hi": hi,
                "points_before": r0 - l0,
            }
        )
    return out


def detect(model: dict[str, Any]) -> list[dict[str, Any]]:
    """Every kept step of every series, regressions first, then by size."""
    found = []
    for n, chart in enumerate(model["charts"]):
        for k, s in enumerate(chart["series"]):
            for st in series_steps(s["points"]):
                up = st["value_after"] > st["value_before"]
                better = chart["better"]
                if better == "higher":
                    kind = "improvement" if up else "regression"
                elif better == "lower":
                    kind = "regression" if up else "improvement"
                else:
                    kind = "change"
                found.append({**st, "chart": n, "series": k, "kind": kind})
    order = {"regression": 0, "improvement": 1, "change": 2}

    def size(st: dict[str, Any]) -> float:
        return abs(st["pct"]) if st["pct"] is not None else float("inf")

    found.sort(key=lambda st: (order[st["kind"]], -size(st), st["after"]))
    return found
