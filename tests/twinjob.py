"""Run one twin job in an SGLang release environment, as the CLI does: a job file, then
``python -m dpbench.twin.run JOB -o OUT`` with that environment's interpreter."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


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
    from dpbench.twin.config import TwinInputs, make_config
    from dpbench.twin.job import write_job

    config = make_config(**{"dp_size": 2, "rank_mode": "threads", **options})
    job = write_job(
        out.with_suffix(".job.json"), spec, config, TwinInputs(requests=requests, seed=seed)
    )
    proc = subprocess.run(
        [str(env.python), "-m", "dpbench.twin.run", str(job), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())
