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

from dpbench.twin.config import BATCH_IS_FULL_RULES, FINISHED_FILTER_RULES
from dpbench.twin.stats import bimodality, multimodal, paired

WALL_METRICS = frozenset({"passes_per_s", "scheduler_pass_us_p50", "pass_wall_over_rank_work"})


def sweep_release(
    spec: str,
    *,
    seeds: list[int],
    dps: list[int],
    chunks: list[int],
    requests: int | None,
    hide_delayer_from_chunked_req: bool = False,
    radix_cache: bool = True,
    overlap_schedule: bool = True,
    schedule_conservativeness: float | None = None,
    cost_topology: str = "per-rank-gpu",
    batch_is_full_rule: str | None = None,
    chunk_merge_resets_batch_is_full: bool = True,
    finished_filter_rule: str | None = None,
    on_run: Any = None,
) -> dict[str, Any]:
    from dpbench.twin.config import build_config
    from dpbench.twin.run import run_twin

    runs = []
    info: dict[str, Any] | None = None
    for dp in dps:
        for chunk in chunks:
            config = build_config(
                dp=dp,
                chunked_prefill_size=chunk,
                hide_delayer_from_chunked_req=hide_delayer_from_chunked_req,
                radix_cache=radix_cache,
                overlap_schedule=overlap_schedule,
                schedule_conservativeness=schedule_conservativeness,
                cost_topology=cost_topology,
                batch_is_full_rule=batch_is_full_rule,
                chunk_merge_resets_batch_is_full=chunk_merge_resets_batch_is_full,
                finished_filter_rule=finished_filter_rule,
                rank_mode="threads",
                timeline=False,
                deadline=3600,
            )
            for seed in seeds:
                t0 = time.perf_counter()
                result = run_twin(spec, config, seed=seed, num_requests=requests)
                info = info or {
                    "sglang": result["sglang"],
                    "placement": result["placement"],
                    "scheduler_defaults": {},
                }
                info["scheduler_defaults"][f"dp{dp}-chunk{chunk}"] = result["extra"][
                    "scheduler_defaults"
                ]
                runs.append(
                    {
                        "dp": dp,
                        "chunked_prefill_size": chunk,
                        "seed": seed,
                        "metrics": {k: v["value"] for k, v in result["metrics"].items()},
                        "wall_s": time.perf_counter() - t0,
                    }
                )
                if on_run is not None:
                    on_run(len(runs), len(dps) * len(chunks) * len(seeds))
    return {
        **(info or {}),
        "grid": {
            "spec": spec,
            "seeds": seeds,
            "dp": dps,
            "chunked_prefill_size": chunks,
            "requests": requests,
            "hide_delayer_from_chunked_req": hide_delayer_from_chunked_req,
            "radix_cache": radix_cache,
            "overlap_schedule": overlap_schedule,
            "schedule_conservativeness": schedule_conservativeness,
            "cost_topology": cost_topology,
            "batch_is_full_rule": batch_is_full_rule,
            "chunk_merge_resets_batch_is_full": chunk_merge_resets_batch_is_full,
            "finished_filter_rule": finished_filter_rule,
        },
        "runs": runs,
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows per (DP, chunk, metric): B − A over the paired seeds, and each side's modality."""

    def index(side: dict[str, Any]) -> dict[tuple[int, int], dict[int, dict[str, float]]]:
        out: dict[tuple[int, int], dict[int, dict[str, float]]] = {}
        for r in side["runs"]:
            out.setdefault((r["dp"], r["chunked_prefill_size"]), {})[r["seed"]] = r["metrics"]
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
                    "metric": name,
                    **p.as_dict(),
                    "bimodality_a": bimodality(va),
                    "bimodality_b": bimodality(vb),
                    "multimodal_a": multimodal(va),
                    "multimodal_b": multimodal(vb),
                }
            )
    return rows


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def parser() -> argparse.ArgumentParser:
    """The arm process's flags: every sweep arm mode (``dpbench.twin.cli.ARM_*``) must parse here."""
    p = argparse.ArgumentParser(prog="python -m dpbench.twin.sweep")
    p.add_argument("spec")
    p.add_argument("--seeds", type=_ints, required=True)
    p.add_argument("--dp", type=_ints, required=True)
    p.add_argument("--chunked-prefill-size", type=_ints, required=True)
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--hide-delayer-from-chunked-req", action="store_true")
    p.add_argument("--no-chunk-merge-reset", action="store_true")
    p.add_argument("--finished-filter-rule", choices=FINISHED_FILTER_RULES, default=None)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument("--schedule-conservativeness", type=float, default=None)
    p.add_argument("--cost-topology", default="per-rank-gpu")
    p.add_argument("--batch-is-full-rule", choices=BATCH_IS_FULL_RULES, default=None)
    p.add_argument("-o", "--output", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    from dpbench.atomic import write_json

    args = parser().parse_args(argv)

    def emit(done: int, total: int) -> None:
        print(json.dumps({"event": "progress", "done": done, "total": total}), flush=True)

    out = sweep_release(
        args.spec,
        seeds=args.seeds,
        dps=args.dp,
        chunks=args.chunked_prefill_size,
        requests=args.requests,
        hide_delayer_from_chunked_req=args.hide_delayer_from_chunked_req,
        chunk_merge_resets_batch_is_full=not args.no_chunk_merge_reset,
        finished_filter_rule=args.finished_filter_rule,
        radix_cache=not args.disable_radix_cache,
        overlap_schedule=not args.disable_overlap_schedule,
        schedule_conservativeness=args.schedule_conservativeness,
        cost_topology=args.cost_topology,
        batch_is_full_rule=args.batch_is_full_rule,
        on_run=emit,
    )
    write_json(Path(args.output), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
