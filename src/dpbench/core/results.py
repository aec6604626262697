"""The run-result record every tier writes (DESIGN.md, "Run result") and its atomic save/load.

A run result is plain JSON::

    {
      "schema": "dpbench.run-result/1",
      "tier": "placement" | "twin" | "kernels" | "server",
      "sglang": {"version": "0.5.23", "commit": "<sha or null>", "generation": "g0.5.22-0.5.23",
                 "generation_compared": ["adder", "delayer"], "variants": {...}},
      "placement": {"label": "post-kv", "source": "static", ...} | null,
      "workload": {"name": "...", "hash": "sha256:...", "spec": name or path given, "seed" (server)} | null,
      "metrics": {"<name_with_unit>": {"value": 1.0, "unit": "ms", "better": "lower"}, ...},
      "hardware": {"cpu": "...", "gpus": [...], "host": "..."},
      "wall_time_s": 12.3,
      "created": "2026-11-29T18:00:00Z",
      "notes": ["cost model: H200 roofline defaults (no calibration file)", ...],
      "cost": {"profile": "roofline", "rung": ..., "model": ..., ...}   # a simulated clock's
      # "sglang" and "placement" come from dpbench.sglang_compat.provenance.provenance()
      "extra": {...}          # tier-specific detail (per-case records, timelines, …)
    }
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dpbench.core.atomic import write_json

SCHEMA = "dpbench.run-result/1"
TIERS = ("placement", "twin", "kernels", "server")
Better = Literal["higher", "lower", "none"]


@dataclass(frozen=True)
class Metric:
    value: float
    unit: str
    better: Better = "none"

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "better": self.better}


def hardware() -> dict[str, Any]:
    """What ran this: host, CPU, core count, and CUDA devices if torch is importable and sees any."""
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "machine": platform.machine(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "gpus": [],
    }
    try:  # torch is present in release environments, not in the orchestrating venv
        import torch
    except ImportError:
        return info
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def make_run_result(
    *,
    tier: str,
    sglang: dict[str, Any],
    metrics: dict[str, Metric],
    wall_time_s: float,
    placement: dict[str, Any] | None = None,
    workload: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    return {
        "schema": SCHEMA,
        "tier": tier,
        "sglang": sglang,
        "placement": placement,
        "workload": workload,
        "metrics": {k: m.as_dict() for k, m in sorted(metrics.items())},
        "hardware": hardware(),
        "wall_time_s": wall_time_s,
        "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "notes": notes or [],
        **({"cost": cost} if cost is not None else {}),
        "extra": extra or {},
    }


def save(path: str | os.PathLike[str], result: dict[str, Any]) -> Path:
    validate(result, source=str(path))
    write_json(path, result)
    return Path(path)


class RunResultError(ValueError):
    pass


def validate(result: Any, *, source: str = "<memory>") -> dict[str, Any]:
    """Check the shape of a run result; raise RunResultError naming the file and field."""
    if not isinstance(result, dict):
        raise RunResultError(
            f"{source}: a run result is a JSON object, found {type(result).__name__}"
        )
    if result.get("schema") != SCHEMA:
        raise RunResultError(
            f"{source}: field 'schema' must be {SCHEMA!r}, found {result.get('schema')!r}"
        )
    if result.get("tier") not in TIERS:
        raise RunResultError(
            f"{source}: field 'tier' must be one of {TIERS}, found {result.get('tier')!r}"
        )
    metrics = result.get("metrics")
    if not isinstance(metrics, dict):
        raise RunResultError(f"{source}: field 'metrics' must be an object")
    for name, m in metrics.items():
        if not isinstance(m, dict) or not {"value", "unit", "better"} <= m.keys():
            raise RunResultError(
                f"{source}: metric {name!r} needs value, unit and better; found {m!r}"
            )
    return result


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise RunResultError(f"{p}: not valid JSON ({exc})") from exc
    return validate(data, source=str(p))


def cost_profile_of(result: dict[str, Any]) -> str | None:
    """The cost profile a run result's simulated times came from: its ``cost`` block's, else
    ``roofline`` for a twin or simulated-forward result from before profiles existed (the only
    clock there was), else None (a tier without a cost model: placement, kernels, GPU server)."""
    cost = result.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("profile"), str):
        return cost["profile"]
    if result.get("tier") == "twin" or result.get("executor") == "simulated":
        return "roofline"
    return None
