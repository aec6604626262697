"""A scenario failure fails the main job, after the other results are published, and names the benchmark.

The real thing, end to end: `dpbench bench` over SGLang 0.5.23 from the release history,
real asv (its own environment with the release wheel), with $DPBENCH_INJECT_FAILURE
asking the placement tier's scenario to fail (``dpbench.core.faults``). asv has to hand that
variable to its benchmark processes for the test to pass at all. All three CPU tiers
that drive SGLang (placement, twin, simulated-forward server) are asked to fail at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import asv_releases_config

from dpbench.core.faults import ENV
from dpbench.core.paths import project_root

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

ROOT = project_root()
RELEASE = "0.5.23"
REST = "workloads.KVPlanning.time_plan"  # a benchmark the injection does not touch
# tier (as $DPBENCH_INJECT_FAILURE names it) → the asv class whose scenario it fails
INJECTED = {
    "placement": "placement.Placement",
    "twin": "twin.TwinOnServerScenario",
    "server-sim": "server.SimulatedRooflineServe",
}


def _config(tmp: Path) -> Path:
    return asv_releases_config(
        tmp, tmp / "history", results_dir=str(tmp / "results"), html_dir=str(tmp / "html")
    )


def test_injected_failures_fail_the_main_job_after_publishing_the_rest(tmp_path):
    config = _config(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpbench",
            "bench",
            RELEASE,
            "--config",
            str(config),
            "--site",
            str(tmp_path / "site"),
            "--bench",
            "^(" + "|".join(rf"{c}\." for c in INJECTED.values()) + r"|workloads\.KVPlanning)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, ENV: ",".join(INJECTED)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    # the failure reached asv's benchmark process and was reported as a failure, not a skip
    assert "InjectedFailure" in out, out[-4000:]
    failed = " ".join(out.split()).split("failed benchmarks: ", 1)[-1]
    for cls in INJECTED.values():
        assert f"{cls}.track_" in failed, (cls, out[-3000:])
    # ... after everything else was published
    assert (tmp_path / "html" / "index.html").is_file()
    assert (tmp_path / "site" / "index.html").is_file()
    values: dict[str, object] = {}
    for path in (tmp_path / "results").rglob("*.json"):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "results" in data:
            for name, res in data["results"].items():
                values[name] = res[0] if isinstance(res, list) else res
    assert values.get(REST) not in (None, [None] * 3), values.get(REST)
    injected = {k: v for k, v in values.items() if k.startswith(tuple(INJECTED.values()))}
    assert injected, sorted(values)
    assert all(x is None for v in injected.values() for x in (v if isinstance(v, list) else [v])), (
        injected
    )
