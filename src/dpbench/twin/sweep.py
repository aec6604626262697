"""Seed sweeps of the twin: the same seeds through each SGLang release, paired differences with intervals.

Two halves:

- :func:`sweep_release` (``python -m dpbench.twin.sweep``, run inside one release's
  environment): every (DP size, chunk size, seed) of the grid through :func:`run_twin`
  in the in-process rank mode (threads; identical numbers to gloo processes, tested),
  SGLang imported once. Writes ``{"sglang", "grid", "runs": [{dp, chunked_prefill_size,
  seed, metrics}]}``.
- :func:`compare` (the orchestration side, ``dpbench twin sweep``): pairs the releases'
  runs by (DP, chunk, seed) and gives, for every metric, B − A with a 95 % t interval and
  each release's multi-modality flag across seeds (:mod:`dpbench.twin.stats`).

Wall-clock metrics (``passes_per_s``, ``scheduler_pass_us_p50``,
``pass_wall_over_rank_work``) are carried but not compared: they measure the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.core.schema import SchemaError, from_dict, replace, to_dict
from dpbench.twin.config import TwinConfig, TwinConfigError, make_config
from dpbench.twin.stats import bimodality, multimodal, paired

WALL_METRICS = frozenset({"passes_per_s", "scheduler_pass_us_p50", "pass_wall_over_rank_work"})


def arm_base_config(modes: dict[str, Any] | None = None) -> TwinConfig:
    """An arm's config before the grid sets DP and chunk size: in-process ranks, no timeline."""
    return make_config(
        rank_mode="threads", record_timeline=False, deadline_s=3600.0, **(modes or {})
    )


def sweep_release(
    spec: str,
    *,
    seeds: list[int],
    dps: list[int],
    chunks: list[int],
    requests: int | None,
    base: TwinConfig | None = None,
    on_run: Any = None,
    rates: list[float] | None = None,
) -> dict[str, Any]:
    from dpbench.twin.run import run_twin

    base = base or arm_base_config()
    rates = rates or [base.rate_scale]
    runs = []
    info: dict[str, Any] | None = None
    grid = [(dp, chunk, rate) for dp in dps for chunk in chunks for rate in rates]
    for dp, chunk, rate in grid:
        config = replace(base, dp_size=dp, chunked_prefill_size=chunk, rate_scale=rate)
        for seed in seeds:
            t0 = time.perf_counter()
            result = run_twin(spec, config, seed=seed, num_requests=requests)
            info = info or {
                "sglang": result["sglang"],
                "placement": result["placement"],
                "cost": result.get("cost"),
                "scheduler_defaults": {},
            }
            info["scheduler_defaults"][f"dp{dp}-chunk{chunk}"] = result["extra"][
                "scheduler_defaults"
            ]
            runs.append(
                {
                    "dp": dp,
                    "chunked_prefill_size": chunk,
                    "rate_scale": rate,
                    "seed": seed,
                    "metrics": {k: v["value"] for k, v in result["metrics"].items()},
                    "wall_s": time.perf_counter() - t0,
                }
            )
            if on_run is not None:
                on_run(len(runs), len(grid) * len(seeds))
    return {
        **(info or {}),
        "grid": {
            "spec": spec,
            "seeds": seeds,
            "dp": dps,
            "chunked_prefill_size": chunks,
            "rate_scale": rates,
            "requests": requests,
            "config": to_dict(base),  # the arm's TwinConfig; the grid sets dp_size and chunk size
        },
        "runs": runs,
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows per (DP, chunk, metric): B − A over the paired seeds, and each side's modality."""

    def index(side: dict[str, Any]) -> dict[tuple[int, int, float], dict[int, dict[str, float]]]:
        out: dict[tuple[int, int, float], dict[int, dict[str, float]]] = {}
        for r in side["runs"]:
            key = (r["dp"], r["chunked_prefill_size"], r.get("rate_scale", 1.0))
            out.setdefault(key, {})[r["seed"]] = r["metrics"]
        return out

    ia, ib = index(a), index(b)
    rows = []
    for key in sorted(set(ia) & set(ib)):
        seeds = sorted(set(ia[key]) & set(ib[key]))
        names = sorted(
            set.intersection(*(set(ia[key][s]) & set(ib[key][s]) for s in seeds)) - WALL_METRICS
        )
        for name in names:
            va = np.array([ia[key][s][name] for s in seeds], dtype=np.float64)
            vb = np.array([ib[key][s][name] for s in seeds], dtype=np.float64)
            p = paired(va, vb)
            rows.append(
                {
                    "dp": key[0],
                    "chunked_prefill_size": key[1],
                    "rate_scale": key[2],
                    "metric": name,
                    **p.as_dict(),
                    "bimodality_a": bimodality(va),
                    "bimodality_b": bimodality(vb),
                    "multimodal_a": multimodal(va),
                    "multimodal_b": multimodal(vb),
                }
            )
    return rows


SWEEP_JOB_KEYS = ("spec", "seeds", "dps", "chunks", "rates", "requests", "config")


def write_sweep_job(
    path: Path,
    *,
    spec: str,
    seeds: list[int],
    dps: list[int],
    chunks: list[int],
    requests: int | None,
    base: TwinConfig,
    rates: list[float] | None = None,
) -> Path:
    """The arm process's job file: the grid and the arm's config (the schema, as JSON)."""
    from dpbench.core.atomic import write_json

    values = (spec, seeds, dps, chunks, rates or [base.rate_scale], requests, to_dict(base))
    job = dict(zip(SWEEP_JOB_KEYS, values, strict=True))
    write_json(path, job)
    return path


def read_sweep_job(path: str | Path) -> dict[str, Any]:
    try:
        job = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TwinConfigError(f"sweep job {path}: cannot read it as JSON ({exc})") from exc
    if not isinstance(job, dict) or set(job) != set(SWEEP_JOB_KEYS):
        raise TwinConfigError(
            f"sweep job {path}: want exactly the keys {', '.join(SWEEP_JOB_KEYS)}"
        )
    try:
        job["config"] = from_dict(TwinConfig, job["config"], where=f"{path}: config")
    except (SchemaError, TypeError) as exc:
        raise TwinConfigError(str(exc)) from None
    return job


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dpbench.twin.sweep")
    p.add_argument("job", help="a sweep job file (write_sweep_job)")
    p.add_argument("-o", "--output", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    from dpbench.core.atomic import write_json

    args = parser().parse_args(argv)

    def emit(done: int, total: int) -> None:
        print(json.dumps({"event": "progress", "done": done, "total": total}), flush=True)

    job = read_sweep_job(args.job)
    out = sweep_release(
        job["spec"],
        seeds=job["seeds"],
        dps=job["dps"],
        chunks=job["chunks"],
        requests=job["requests"],
        base=job["config"],
        on_run=emit,
        rates=job["rates"],
    )
    write_json(Path(args.output), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
