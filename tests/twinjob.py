"""Run twin jobs in an SGLang release environment, as the CLI does: a job file, then
``python -m dpbench.twin.run JOB -o OUT`` with that environment's interpreter (several jobs:
one after another in one such process, ``tests/twin_batch.py``, SGLang imported once)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dpbench.envs import zygote


def twin_job(
    spec: str, out: Path, *, requests: int | None = None, seed: int | None = None, **options: Any
) -> dict[str, Any]:
    """One job for :func:`run_twin_jobs`: ``spec`` at DP 2 (rank threads) with ``options`` (the
    trace's ``seed``: the spec's unless given); its job file is written beside ``out``."""
    return {"spec": spec, "out": out, "requests": requests, "seed": seed, "options": options}


def run_twin_jobs(env: Any, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run results of ``jobs`` (:func:`twin_job`), run in one process of ``env``."""
    paths = [
        _write(job["spec"], job["out"], job["requests"], job["seed"], job["options"])
        for job in jobs
    ]
    where = jobs[0]["out"].parent / f"{jobs[0]['out'].stem}.batch"
    where.mkdir()
    tests = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    proc = zygote.run(
        [str(env.python), "-m", "twin_batch", str(where), *map(str, paths)],
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": path},
        timeout=900 * len(jobs),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((where / f"{i}.json").read_text()) for i in range(len(jobs))]


def run_twin_job(
    env: Any,
    spec: str,
    out: Path,
    *,
    requests: int | None = None,
    seed: int | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The run result of the twin on ``spec`` at DP 2 (rank threads) with ``options`` (the
    trace's ``seed``: the spec's unless given)."""
    proc = zygote.run(
        [str(env.python), "-m", "dpbench.twin.run", str(_write(spec, out, requests, seed, options)),
         "-o", str(out)],
        cwd=os.getcwd(), env=os.environ, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _write(spec: str, out: Path, requests: int | None, seed: int | None, options: Any) -> Path:
    from dpbench.twin.config import TwinInputs, make_config
    from dpbench.twin.job import write_job

    config = make_config(**{"dp_size": 2, "rank_mode": "threads", **options})
    return write_job(
        out.with_suffix(".job.json"), spec, config, TwinInputs(requests=requests, seed=seed)
    )
