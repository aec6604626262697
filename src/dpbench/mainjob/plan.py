"""The main job's default plan (what `dpbench bench` runs where) and what each step costs.

The plan is printed before anything runs: each step, the releases it runs on (or how they
are picked from the placement tier's results) and its expected wall time, from what a fresh
clone's `make bench` measured on the 2-core development VM per release (``REFERENCE``). At the
end the job prints what each step took here and keeps it in ``results/mainjob-costs.json``.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench.core.atomic import write_json

# Which releases a step runs on, and how many the default history gives it.
PICKS = {
    "every": "every selected release",
    "heavy": "the first early, last early, first post-kv and newest (picked from placement)",
    "pair": "the placement change's pair: last early, first post-kv",
    "served": "the last early, first post-kv and newest",
    "newest": "the newest",
}
PICK_COUNT = {"heavy": 4, "pair": 2, "served": 3, "newest": 1}  # at most; "every" is all selected


@dataclass(frozen=True)
class Step:
    key: str  # short name, the costs file's key
    title: str
    regex: str  # asv --bench
    picks: str  # a key of PICKS
    side: bool = False  # in an asv run of its own beside the others (dpbench.mainjob.side)
    alone: bool = False  # a timing: after the side run, on an otherwise idle machine


PLAN = (
    Step("placement", "placement tier (and every release's environment)", r"^placement\.", "every"),
    Step(
        "headline",
        "twin at the headline settings, against load, capacity at SLO",
        r"^twin\.(TwinHeadline|TwinCapacity|TwinLoad)\.",
        "pair",
    ),
    Step(
        "twin",
        "twin",
        r"^twin\.(?!TwinProductionTrace|TwinHeadline|TwinCapacity|TwinLoad|TwinScale|SchedulerPass)",
        "heavy",
    ),
    Step("twin-trace", "twin on production traffic", r"^twin\.TwinProductionTrace\.", "pair"),
    Step(
        "server-trace",
        "simulated-forward server on production traffic",
        r"^server\.SimulatedProductionTrace\.",
        "pair",
        side=True,
    ),
    Step(
        "server",
        "SGLang's real scheduler at the headline's scale, virtual time (1,024 requests, DP 4, 8)",
        r"^server\.SimulatedVirtualHeadline\.",
        "pair",
        side=True,
    ),
    Step(
        "pass-timing",
        "one scheduler pass (real adder + delayer), timed alone",
        r"^twin\.SchedulerPass\.",
        "heavy",
        alone=True,
    ),
    Step(
        "twin-speed",
        "the twin's own speed (2,000 requests, both rank modes), timed alone",
        r"^twin\.TwinScale\.",
        "newest",
        alone=True,
    ),
)

# Seconds per release of each step on a fresh clone of the 2-core development VM (AMD EPYC,
# 24 GiB): `make bench` at 3c90df6 (2026-12-07, exit 0; results/mainjob-costs.json, the
# releases' phase, which runs as in a job without changes), on the faster of the VMs seen
# (compileall 131 s of CPU against 220-258 s on earlier ones; docs/performance.md). The twin
# steps ran beside the server steps, which in virtual time are CPU-bound too, so these are
# the job's own figures, not each step's cost alone. At adc1b33 on a slower VM the same
# steps took 1.4-6x as long (headline 1,291 s, server 1,141.5 s a release).
REFERENCE_AT = "fresh-clone make bench at 3c90df6, 2026-12-07, 2-core VM"
REFERENCE: dict[str, float] = {
    "placement": 27.8,
    "headline": 720.4,
    "twin": 138.8,
    "twin-trace": 31.9,
    "server-trace": 285.0,
    "server": 581.3,
    "pass-timing": 24.3,
    "twin-speed": 50.5,
}


def release_count(step: Step, selected: int) -> int:
    return selected if step.picks == "every" else min(PICK_COUNT[step.picks], selected)


def estimate_s(step: Step, releases: int) -> float | None:
    per = REFERENCE.get(step.key)
    return None if per is None else per * releases


def _minutes(s: float | None) -> str:
    return "not yet measured" if s is None else f"~{s / 60:.0f} min"


def _chain(i: int, step: Step) -> str:
    return "first" if i == 0 else "side" if step.side else "alone" if step.alone else "main"


def _expected_s(chains: dict[str, float]) -> float:
    """Placement, then the longer of the side run and the steps beside it, then the timings."""
    return chains["first"] + max(chains["side"], chains["main"]) + chains["alone"]


def plan_lines(selected: int) -> list[str]:
    """The plan as printed before the job starts: one line per step and the expected total."""
    lines = []
    chains = {"first": 0.0, "side": 0.0, "main": 0.0, "alone": 0.0}
    known = True
    for i, step in enumerate(PLAN):
        n = release_count(step, selected)
        est = estimate_s(step, n)
        known = known and est is not None
        chain = _chain(i, step)
        chains[chain] += est or 0.0
        how = {
            "side": "; beside the twin steps, its own asv run",
            "alone": "; alone, after the rest",
        }
        lines.append(
            f"{step.title}: {n} release(s), {PICKS[step.picks]}{how.get(chain, '')}; {_minutes(est)}"
        )
    head = (
        f"expected ~{_expected_s(chains) / 60:.0f} min" if known else "expected time not yet known"
    )
    lines.append(f"{head} on a 2-core runner with the environments to build ({REFERENCE_AT})")
    return lines


def change_share_s(keys: set[str] | None = None) -> float:
    """What one change adds to the job: its base's share of each step it runs (``keys``; all
    of them when None), its environment (built like its base's in the placement step) and its
    own benchmarks, side and main overlapping as for the releases, from ``REFERENCE``'s
    per-release figures. The changes run after every release's steps, in a phase of their
    own, so this is that phase's expected length."""
    chains = {"first": 0.0, "side": 0.0, "main": 0.0, "alone": 0.0}
    for i, step in enumerate(PLAN):
        if keys is None or step.key in keys:
            chains[_chain(i, step)] += REFERENCE.get(step.key) or 0.0
    return _expected_s(chains)


def change_lines(changes: list[tuple[str, str]]) -> list[str]:
    """A line per change ``(name, base)``: it runs the steps its base is picked for, after
    every release's steps, and adds its base's environment and benchmarks once (at most
    every step's share; which steps its base gets is known once placement has run)."""
    env = REFERENCE.get(PLAN[0].key) or 0.0
    return [
        f"change {name} on {base}: every step {base} is picked for, after the releases; "
        f"at most ~{change_share_s() / 60:.0f} min more (its environment ~{env / 60:.1f} min, "
        f"its benchmarks ~{(change_share_s() - env) / 60:.0f} min)"
        for name, base in changes
    ]


def phase_lines(phases: dict[str, float]) -> list[str]:
    """What the releases' phase took, and what the changes' phase added to the job, against
    its expected length (``changes_expected``: their bases' share of the steps they ran)."""
    lines = []
    expected_changes_s = phases.get("changes_expected")
    if "releases" in phases:
        lines.append(f"the releases: {phases['releases'] / 60:.1f} min")
    if "changes" in phases:
        lines.append(
            f"the changes: {phases['changes'] / 60:.1f} min more"
            + ("" if expected_changes_s is None else
               f" (their bases' share of the steps they ran: ~{expected_changes_s / 60:.1f})")
        )  # fmt: skip
    return lines


@dataclass
class StepCost:
    key: str
    releases: int  # commits run (releases, or changes when ``changes``)
    wall_s: float
    changes: bool = False  # the step's run over the selected changes, after its releases'


def _reference_s(cost: StepCost) -> float | None:
    """The plan's figure for a step; None for a step outside the plan (``dpbench bench -b``)."""
    step = next((s for s in PLAN if s.key == cost.key), None)
    return None if step is None else estimate_s(step, cost.releases)


def write_costs(
    path: Path, costs: list[StepCost], *, total_s: float, phases: dict[str, float] | None = None
) -> Path:
    """What each step took here (results/mainjob-costs.json, atomically); ``phases``: the
    wall time of the releases' steps and of the changes' (what the changes added)."""
    data: dict[str, Any] = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"node": platform.node(), "cpus": len(os.sched_getaffinity(0))},
        "total_s": round(total_s, 1),
        "phases": {k: round(v, 1) for k, v in (phases or {}).items()},
        "steps": [
            {
                "step": c.key,
                "of": "changes" if c.changes else "releases",
                "releases": c.releases,
                "wall_s": round(c.wall_s, 1),
                "per_release_s": round(c.wall_s / c.releases, 1) if c.releases else None,
                "reference_s": _reference_s(c),
            }
            for c in costs
        ],
    }
    write_json(path, data)
    return path
