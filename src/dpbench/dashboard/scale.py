"""A scale input for the dashboard's speed benchmarks: real results replicated over synthetic commits.

SYNTHETIC, and labelled so: it takes asv results the suite really produced (e.g. the
placement tier over two releases) and replicates them across ``commits`` made-up
commit hashes and ``benchmarks`` renamed copies of the real benchmarks, on a machine
named ``synthetic-scale-input``. No number is invented: every value is a value some
real run produced. It exists only to time the site build and page load at the size
of a long history (50 commits × 40 benchmarks), never to be shown as results.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from dpbench.core.atomic import write_json

MACHINE = "synthetic-scale-input"
DAY_MS = 86_400_000


class ScaleInputError(RuntimeError):
    pass


def _real_asv_files(source: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    bench_path = source / "benchmarks.json"
    if not bench_path.exists():
        raise ScaleInputError(
            f"no asv results in {source} (no benchmarks.json); run `make bench` first"
        )
    benchmarks = json.loads(bench_path.read_text())
    files = []
    for machine_json in sorted(source.glob("*/machine.json")):
        if machine_json.parent.name in ("runs", MACHINE):
            continue
        for f in sorted(machine_json.parent.glob("*.json")):
            if f.name == "machine.json":
                continue
            data = json.loads(f.read_text())
            if data.get("version") != 2:
                continue
            # The dashboard's own timings are not an input to themselves.
            data["results"] = {
                k: v for k, v in data.get("results", {}).items() if not k.startswith("dashboard.")
            }
            if data["results"]:
                files.append(data)
    if not files:
        raise ScaleInputError(
            f"no asv results files with values under {source}; run `make bench` first"
        )
    files.sort(key=lambda d: d.get("date") or 0)
    return benchmarks, files


# The twin's scenario grid (spec × DP × chunk size × delayer): the size one benchmark's
# parameters reach in the suite, used to size the scale input when asked.
TWIN_GRID = (
    ["'long-prompt-burst'", "'agentic-multiturn'", "'long-context-chat'"],
    ["2", "4", "8"],
    ["'default'", "'2x'"],
    ["'on'", "'off'"],
)
TWIN_GRID_NAMES = ["spec", "dp_size", "chunked_prefill", "delayer"]
_PER_COMBO = ("result", "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75")


def _spread(row: list[Any], columns: list[str], n: int) -> list[Any]:
    """A result row re-laid over ``n`` parameter combinations: combination j takes the real
    value (and statistics) of real combination j mod (real count)."""
    out = list(row) + [None] * (len(columns) - len(row))
    for name in _PER_COMBO:
        j = columns.index(name)
        values = out[j]
        if isinstance(values, list) and values:
            out[j] = [values[k % len(values)] for k in range(n)]
    out[columns.index("params")] = [list(g) for g in TWIN_GRID]
    for name in ("stats_number", "stats_repeat", "samples"):
        j = columns.index(name)
        if isinstance(out[j], list) and out[j]:
            out[j] = [out[j][k % len(out[j])] for k in range(n)]
    while out and out[-1] is None:
        out.pop()
    return out


def synthesise(
    source: Path,
    dest: Path,
    *,
    commits: int = 50,
    benchmarks: int = 40,
    twin_grid: bool = False,
) -> dict[str, int]:
    """Write a results tree at ``dest`` (replacing it) replicating ``source``'s real results.

    ``twin_grid``: give every benchmark the twin's 36-scenario parameter grid, each
    combination holding one of the source benchmark's real values (so the input has the
    size of 40 twin-like benchmarks × their params, whatever tiers the source ran).
    """
    source, dest = Path(source), Path(dest)
    meta, real = _real_asv_files(source)
    names = sorted({name for d in real for name in d["results"]})
    if dest.exists():
        shutil.rmtree(dest)
    (dest / MACHINE).mkdir(parents=True)
    machine = {
        "machine": MACHINE,
        "version": 1,
        "os": "synthetic",
        "arch": "",
        "cpu": "",
        "num_cpu": "",
        "ram": "",
        "comment": "SYNTHETIC scale input: real results replicated over made-up commits",
    }
    write_json(dest / MACHINE / "machine.json", machine)
    renamed = {
        f"{name}_scale{k:02d}": name
        for k, name in ((k, names[k % len(names)]) for k in range(benchmarks))
    }
    out_meta = {"version": meta.get("version", 2)}
    n_combos = 1
    for g in TWIN_GRID:
        n_combos *= len(g)
    for new, old in renamed.items():
        if old in meta:
            out_meta[new] = {**meta[old], "name": new}
            if twin_grid:
                out_meta[new].update(
                    params=[list(g) for g in TWIN_GRID], param_names=list(TWIN_GRID_NAMES)
                )
    write_json(dest / "benchmarks.json", out_meta)
    base_date = real[0].get("date") or 0
    real_runs = sorted((source / "runs").glob("*/*/*.json")) if (source / "runs").is_dir() else []
    for i in range(commits):
        src = real[i * len(real) // commits]  # first part from the oldest real commit, and so on
        sha = hashlib.sha1(f"dpbench synthetic scale commit {i}".encode()).hexdigest()
        results = {
            new: src["results"][old] for new, old in renamed.items() if old in src["results"]
        }
        if twin_grid:
            cols = src["result_columns"]
            results = {k: _spread(v, cols, n_combos) for k, v in results.items()}
        data = {
            **src,
            "commit_hash": sha,
            "date": base_date + i * DAY_MS,
            "results": results,
            "params": {**src["params"], "machine": MACHINE},
            "durations": {},
        }
        write_json(dest / MACHINE / f"{sha[:8]}-{src['env_name']}.json", data)
        for run in real_runs:  # the same commit's run files (placement labels), refiled
            if run.parent.parent.name != src["commit_hash"]:
                continue
            rec = json.loads(run.read_text())
            rec.setdefault("sglang", {})["commit"] = sha
            write_json(dest / "runs" / sha / run.parent.name / run.name, rec)
    return {
        "commits": commits,
        "benchmarks": len(out_meta) - 1,
        "params_each": n_combos if twin_grid else None,
        "real_files": len(real),
    }


def inject_step(results: Path, benchmark: str, from_commit: int, factor: float) -> list[str]:
    """SYNTHETIC: multiply ``benchmark``'s values (and bands) by ``factor`` on the commits of a
    :func:`synthesise`d tree from the ``from_commit``-th (0-based, date order) on.

    Only for testing that a step shows up on the regressions page with its commit range;
    returns the shas in date order.
    """
    paths = [f for f in (Path(results) / MACHINE).glob("*.json") if f.name != "machine.json"]
    loaded = sorted(((json.loads(p.read_text()), p) for p in paths), key=lambda d: d[0]["date"])
    shas = []
    for i, (data, path) in enumerate(loaded):
        shas.append(data["commit_hash"])
        if i < from_commit:
            continue
        row = data["results"].get(benchmark)
        if row is None:
            raise ScaleInputError(f"{benchmark} has no result on synthetic commit {i}")
        cols = data["result_columns"]
        for name in ("result", "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75"):
            j = cols.index(name)
            if j < len(row) and isinstance(row[j], list):
                row[j] = [v * factor if isinstance(v, int | float) else v for v in row[j]]
        write_json(path, data)
    return shas
