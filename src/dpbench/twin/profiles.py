"""Named cost profiles: the efficiencies and overheads a roofline runs at (no hardware).

- ``roofline``: :class:`~dpbench.twin.cost.DeviceRoofline`'s documented defaults (assumed
  efficiencies, no per-layer overhead). The suite's default (:data:`DEFAULT_PROFILE`).
- ``published-fit``: the same roofline with efficiencies and a per-layer overhead fitted to
  some published DeepSeek serving figures (:mod:`dpbench.twin.clockfit`; the fitted values
  live in ``dpbench/data/published-fit.json``, which ``dpbench twin clock --fit`` writes).

:data:`HARDWARE` gives each GPU's datasheet ceilings; :func:`dpbench.twin.cost.profile_device`
puts a profile and a GPU together.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

CostProfile = Literal["roofline", "published-fit"]
COST_PROFILES: tuple[str, ...] = get_args(CostProfile)
# published-fit becomes the default only when it brings every held-out figure within ±25 %
# (dpbench twin clock; tests/test_twin_clock.py checks this against a fresh fit)
DEFAULT_PROFILE: CostProfile = "roofline"
FIT_FILE = "published-fit.json"

# Datasheet ceilings (dense BF16, HBM, NVLink one direction) beside the roofline's H200 ones.
# H800: an H100 with 400 GB/s NVLink (200 GB/s a direction).
HARDWARE: dict[str, dict[str, Any]] = {
    "H200": {"name": "NVIDIA H200 SXM"},
    "H100": {"name": "NVIDIA H100 SXM", "hbm_bytes_per_s": 3.35e12},
    "H800": {"name": "NVIDIA H800 SXM", "hbm_bytes_per_s": 3.35e12, "link_bytes_per_s": 200e9},
}


def fit_path() -> Path:
    """Where the published-fit profile's parameters are stored (in the package's data)."""
    return Path(str(resources.files("dpbench") / "data" / FIT_FILE))


@cache
def _stored_fit() -> tuple[tuple[str, float], ...]:
    path = fit_path()
    try:
        data = json.loads(path.read_text())
        return tuple((str(k), float(v)) for k, v in data["parameters"].items())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"cost profile published-fit: cannot read its parameters from {path} ({exc}); "
            "run `dpbench twin clock --fit` to write them"
        ) from exc


def check_profile(profile: str) -> str:
    if profile not in COST_PROFILES:
        raise ValueError(f"cost profile must be one of {COST_PROFILES}; got {profile!r}")
    return profile


def profile_params(profile: str) -> dict[str, float]:
    """The DeviceRoofline fields a profile sets (none for the roofline)."""
    return {} if check_profile(profile) == "roofline" else dict(_stored_fit())
