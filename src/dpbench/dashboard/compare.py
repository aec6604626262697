"""Compare two commits metric by metric: values, noise band, ratio and which side is better.

The rules match the comparison page's JavaScript (``dashboard/assets/dashboard.js``,
``compareValues``), so the terminal and the site agree:

- both values carry a band (asv's 99 % confidence interval, from repeats) and the
  bands overlap → "within noise";
- otherwise the side the metric's direction favours is better; without bands the
  verdict says "(single run)";
- a metric without a direction ("none", e.g. a placement code) only "differs".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class CommitNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Side:
    value: float
    lo: float | None
    hi: float | None

    @property
    def banded(self) -> bool:
        return self.lo is not None and self.hi is not None


@dataclass(frozen=True)
class Row:
    tier: str
    source: str
    metric: str
    params: tuple[str, ...]
    machine: str
    env: str
    unit: str
    better: str
    a: Side | None
    b: Side | None
    ratio: float | None
    winner: str  # "A", "B" or ""
    verdict: str


def compare_values(a: Side | None, b: Side | None, better: str) -> tuple[float | None, str, str]:
    """(ratio B/A, winner, verdict) for one metric."""
    if a is None and b is None:
        return None, "", "no data"
    if a is None:
        return None, "", "only B"
    if b is None:
        return None, "", "only A"
    ratio = b.value / a.value if a.value != 0 else (1.0 if b.value == 0 else None)
    if a.value == b.value:
        return ratio, "", "same"
    banded = a.banded and b.banded
    if banded and a.lo <= b.hi and b.lo <= a.hi:  # type: ignore[operator]
        return ratio, "", "within noise"
    if better not in ("higher", "lower"):
        return ratio, "", "differs"
    b_wins = b.value > a.value if better == "higher" else b.value < a.value
    winner = "B" if b_wins else "A"
    return ratio, winner, f"{winner} better" + ("" if banded else " (single run)")


def resolve_commit(model: dict[str, Any], name: str) -> int:
    """Index of a commit named by sha prefix, tag (v0.5.16), version (0.5.16) or label."""
    commits = model["commits"]
    want = name.strip()
    exact = [
        i
        for i, c in enumerate(commits)
        if want in c["tags"] or f"v{want}" in c["tags"] or c["label"] == want
    ]
    if len(exact) == 1:
        return exact[0]
    if len(want) >= 4:
        by_sha = [i for i, c in enumerate(commits) if c["sha"].startswith(want.lower())]
        if len(by_sha) == 1:
            return by_sha[0]
        if len(by_sha) > 1:
            raise CommitNotFound(f"{name!r} matches {len(by_sha)} commits; give more of the hash")
    known = ", ".join(c["label"] for c in commits[-12:]) or "none (no results yet)"
    raise CommitNotFound(f"no commit with results matches {name!r}; commits with results: {known}")


def _side(series: dict[str, Any], index: int) -> Side | None:
    for i, value, lo, hi in series["points"]:
        if i == index:
            return Side(value, lo, hi)
    return None


def compare_commits(
    model: dict[str, Any], ia: int, ib: int, machine: str | None = None
) -> list[Row]:
    """One row per chart series (metric × machine × env × params) measured on either commit."""
    rows = []
    for chart in model["charts"]:
        for s in chart["series"]:
            if machine and s["machine"] != machine:
                continue
            a, b = _side(s, ia), _side(s, ib)
            if a is None and b is None:
                continue
            ratio, winner, verdict = compare_values(a, b, chart["better"])
            rows.append(
                Row(
                    chart["tier"],
                    chart["source"],
                    chart["title"],
                    tuple(s["params"]),
                    s["machine"],
                    s["env"],
                    chart["unit"],
                    chart["better"],
                    a,
                    b,
                    ratio,
                    winner,
                    verdict,
                )
            )
    return rows
