"""The main job's simulated-server steps, run beside its twin steps.

A simulated-forward server spends most of a replay waiting on its simulated clock (on the
2-core runner its processes use about half a core), while the twin's steps are pure CPU. So
the main job runs the server steps in an asv run of their own, at the same time, with the
twin's asv runs niced to the lowest priority: a server process that wakes takes the CPU at
once, and what is left goes to the twin. Every server run still records its instrument's
health (run-queue wait, device idle, CPU pressure), and a run the machine delayed is flagged
and left out of verdicts as always.

asv reinstalls the release under test into its environment for every commit, so the side
run has an environment and a results folder of its own (``.asv/env-side``,
``.asv/results-side``): its config is the main one with those two paths. Its result files
start as copies of the main ones (asv then skips what already succeeded) and are merged
back benchmark by benchmark when both runs are done.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from dpbench.core.atomic import write_json

SIDE_ENV_DIR = ".asv/env-side"
SIDE_RESULTS_DIR = ".asv/results-side"


def side_config(conf_data: dict[str, Any], config: Path) -> Path:
    """The side run's asv config beside ``config`` (so its relative paths and ASV_CONF_DIR,
    where the benchmarks file their run files, stay the main run's)."""
    data = {**conf_data, "env_dir": SIDE_ENV_DIR, "results_dir": SIDE_RESULTS_DIR}
    path = config.parent / f".{config.stem}.side.json"
    write_json(path, data)
    return path


def seed_side(main_root: Path, side_root: Path, machine: str, commits: list[str]) -> None:
    """Copy the main result files of ``commits`` into the side run's folder, so asv's
    --skip-existing-successful sees what already ran."""
    for sha in commits:
        for src in (main_root / machine).glob(f"{sha[:8]}-*.json"):
            dst = side_root / machine / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


def merge_side(side_root: Path, main_root: Path, machine: str, owned: list[str]) -> list[Path]:
    """Fold every side result file into the main one of the same commit and environment:
    the side run's benchmarks, those whose names match one of the ``owned`` regexes (results
    and durations: asv names a setup_cache's duration after its benchmark's module), replace
    the main file's entries of the same name; everything else in the main file stays (the
    side copies of other benchmarks are older than the main run's). Written atomically."""
    patterns = [re.compile(r) for r in owned]
    modules = {r.lstrip("^").split("\\.")[0] for r in owned}

    def mine(name: str) -> bool:
        return any(p.search(name) for p in patterns)

    def mine_duration(name: str) -> bool:  # "<setup_cache server:371>" or a benchmark's name
        if name.startswith("<setup_cache "):
            return name[len("<setup_cache ") :].split(":")[0] in modules
        return mine(name)

    merged = []
    for src in sorted((side_root / machine).glob("*-*.json")):
        if src.name == "machine.json":
            continue
        side = json.loads(src.read_text())
        dst = main_root / machine / src.name
        main = json.loads(dst.read_text()) if dst.is_file() else None
        if main is None:
            out = side
        else:
            if main.get("version") != side.get("version") or main.get("result_columns") != side.get(
                "result_columns"
            ):
                raise ValueError(
                    f"{src} and {dst} are asv result files of different formats "
                    f"(version {side.get('version')} vs {main.get('version')}); not merged"
                )
            results = {k: v for k, v in side.get("results", {}).items() if mine(k)}
            durations = {k: v for k, v in side.get("durations", {}).items() if mine_duration(k)}
            out = {
                **main,
                "results": {**main.get("results", {}), **results},
                "durations": {**main.get("durations", {}), **durations},
            }
        write_json(dst, out)
        merged.append(dst)
    return merged
