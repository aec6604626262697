"""Fit the published-fit cost profile, and write or check its stored file.

The fit follows :data:`dpbench.twin.clock.FIT_PLAN`: each parameter in turn is solved by
bisection so that its figure's prediction equals the published value, the others held at
their latest values; the round repeats until no parameter moves (Gauss-Seidel on monotone
one-parameter equations; deterministic, no random start). Parameters not in the plan keep
the roofline's defaults.

The stored file (``dpbench/data/published-fit.json``) holds the parameters, which figures
were fitted and held out, and the predicted / published table under both profiles. The
same code regenerates it byte for byte (``dpbench twin clock --fit``); the tests refit and
compare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpbench.core.atomic import write_json
from dpbench.twin.clock import FIT_PLAN, WITHIN, clock_rows, held_out_ratios, within
from dpbench.twin.cost import hardware_device
from dpbench.twin.profiles import DEFAULT_PROFILE, fit_path
from dpbench.twin.published import load_figures, predict

BISECTIONS = 80
MAX_ROUNDS = 60
TOLERANCE = 1e-12  # relative change of every parameter in a round


class FitError(RuntimeError):
    """A planned figure cannot be matched inside its parameter's bounds."""


def _ratio(fid: str, params: dict[str, float]) -> float:
    fig = next(f for f in load_figures() if f.id == fid)
    return predict(fig, hardware_device(fig.hardware, params)) / fig.value


def solve(fid: str, name: str, bounds: tuple[float, float], params: dict[str, float]) -> float:
    """The value of ``name`` in ``bounds`` at which ``fid``'s prediction equals its figure."""
    lo, hi = bounds
    f_lo = _ratio(fid, {**params, name: lo}) - 1.0
    f_hi = _ratio(fid, {**params, name: hi}) - 1.0
    if f_lo * f_hi > 0:
        raise FitError(
            f"{fid}: no {name} in [{lo:g}, {hi:g}] matches it (predicted/published "
            f"{f_lo + 1:.3f} … {f_hi + 1:.3f}); widen the bounds or change the plan"
        )
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        f_mid = _ratio(fid, {**params, name: mid}) - 1.0
        if (f_mid < 0) == (f_lo < 0):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit() -> tuple[dict[str, float], int]:
    """(fitted parameters, rounds it took)."""
    params: dict[str, float] = {}
    for rounds in range(1, MAX_ROUNDS + 1):
        before = dict(params)
        for fid, name, bounds in FIT_PLAN:
            params[name] = solve(fid, name, bounds, params)
        if before and all(
            abs(params[k] - before[k]) <= TOLERANCE * max(abs(params[k]), 1e-30) for k in params
        ):
            return params, rounds
    raise FitError(f"the fit did not settle in {MAX_ROUNDS} rounds: {params}")


def fit_record() -> dict[str, Any]:
    """A fresh fit and the table under both profiles (the stored file's content)."""
    params, rounds = fit()
    rows = clock_rows({"roofline": {}, "published-fit": params})
    held = held_out_ratios(rows)
    return {
        "profile": "published-fit",
        "written_by": "dpbench twin clock --fit",
        "method": "each parameter solved by bisection so its figure's prediction equals the "
        f"published value, in turn, until none moves ({rounds} rounds); other fields: "
        "the roofline's defaults",
        "parameters": params,
        "fitted": [{"figure": fid, "parameter": name} for fid, name, _ in FIT_PLAN],
        "held_out": sorted(held),
        "held_out_within": WITHIN,
        "held_out_all_within": within(held),
        "default_profile": DEFAULT_PROFILE,
        "table": [r.as_dict() for r in rows],
    }


def write_fit(path: Path | None = None) -> Path:
    path = path or fit_path()
    write_json(path, fit_record())
    return path


def stored_record(path: Path | None = None) -> dict[str, Any]:
    return json.loads((path or fit_path()).read_text())
