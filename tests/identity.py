"""The before/after identity check's shared parts: what it runs, what it keeps, how it stores it.

Three kinds of reference, kept under ``tests/data/identity/`` and written by
``tests/data/identity/make_reference.py``:

- the twin on long-prompt-burst-small (0.5.16 and 0.5.17, DP 2 and 4, seeds 0 and 1, rank
  processes; one setting also with the gloo step exchange and one with rank threads): the
  whole run result but its wall-clock parts, and the progress events it sent;
- the placement probe on 0.5.16 and 0.5.17: the whole run result but its wall-clock parts;
- one simulated-forward server run (long-prompt-burst-small, DP 2, 0.5.17): what it measured
  (the client's outcomes, the two scrapes, the /proc probes, the run's context) with its step
  records and the run result built from them, so the result can be derived again offline.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "identity"
SPEC = "long-prompt-burst-small"
# wall-clock parts of a run result: real time, different on every run by design
VOLATILE_KEYS = ("created", "wall_time_s", "hardware")
TWIN_WALL_METRICS = ("scheduler_pass_us_p50", "passes_per_s", "pass_wall_over_rank_work")


def twin_cases() -> dict[str, dict[str, Any]]:
    """Each twin setting by name: release, DP size, seed and the config options it changes."""
    cases: dict[str, dict[str, Any]] = {}
    for version in ("0.5.16", "0.5.17"):
        for dp in (2, 4):
            for seed in (0, 1):
                cases[f"{version}/dp{dp}/seed{seed}"] = {
                    "version": version,
                    "seed": seed,
                    "options": {"dp_size": dp, "rank_mode": "processes"},
                }
    base = cases["0.5.17/dp2/seed0"]
    cases["0.5.17/dp2/seed0/gloo"] = {
        **base,
        "options": {**base["options"], "step_exchange": "gloo"},
    }
    cases["0.5.17/dp2/seed0/threads"] = {
        **base,
        "options": {**base["options"], "rank_mode": "threads"},
    }
    return cases


PLACEMENT_RELEASES = ("0.5.16", "0.5.17")


def stable(result: dict[str, Any], wall_metrics: tuple[str, ...] = ()) -> dict[str, Any]:
    """A run result without what real time sets (when it ran, how long, on what machine), with
    the checkout's own path written as ``<root>`` (a fresh clone lies elsewhere)."""
    out = {k: v for k, v in result.items() if k not in VOLATILE_KEYS}
    out["metrics"] = {k: v for k, v in result["metrics"].items() if k not in wall_metrics}
    return rooted(out)


ROOT = str(Path(__file__).resolve().parents[1])
# what a stored server run's result takes from the checkout it is derived in (the spec, its
# model config, the copied step records); its commands and processes are the run's own
SOURCE_FOLDERS = tuple(f"{ROOT}/{d}" for d in ("workloads", "tests", "src"))


def rooted(value: Any, prefixes: tuple[str, ...] = (ROOT,)) -> Any:
    """``value`` with each of ``prefixes`` (this checkout's path, or some of its folders)
    written from ``<root>``, in every string."""
    if isinstance(value, str):
        for p in prefixes:
            value = value.replace(p, "<root>" + p[len(ROOT) :])
        return value
    if isinstance(value, dict):
        return {k: rooted(v, prefixes) for k, v in value.items()}
    if isinstance(value, list):
        return [rooted(v, prefixes) for v in value]
    return value


def run_twins(cases: dict[str, dict[str, Any]], tmp: Path) -> dict[str, dict[str, Any]]:
    """The twin on each of ``cases`` in its release environment: each case's stable result and
    progress events. A release's cases run one after another in one process of its
    environment (``tests/twin_batch.py``), each through ``dpbench.twin.run``'s own ``main``."""
    from dpbench.envs import run_in_env
    from dpbench.twin.config import TwinInputs, make_config
    from dpbench.twin.job import write_job

    tests = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    out: dict[str, dict[str, Any]] = {}
    for version in sorted({c["version"] for c in cases.values()}):
        names = [n for n, c in cases.items() if c["version"] == version]
        where = tmp / f"twin-{version}"
        where.mkdir(parents=True)
        jobs = [
            str(
                write_job(
                    where / f"{i}.job.json",
                    SPEC,
                    make_config(**cases[n]["options"]),
                    TwinInputs(seed=cases[n]["seed"]),
                )
            )
            for i, n in enumerate(names)
        ]
        proc = run_in_env(
            version, "twin_batch", [str(where), *jobs], timeout=1800, env={"PYTHONPATH": path}
        )
        for i, name in enumerate(names):
            status = where / f"{i}.status"
            if not status.exists() or status.read_text().strip() != "0":
                raise RuntimeError(f"twin {name} failed: {proc.stderr[-3000:]}")
            lines = (where / f"{i}.events").read_text().splitlines()
            events = [json.loads(line) for line in lines if line.startswith("{")]
            out[name] = {
                "result": stable(json.loads((where / f"{i}.json").read_text()), TWIN_WALL_METRICS),
                "progress": [e for e in events if e["event"] == "progress"],
            }
    return out


def run_twin(case: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The twin on one ``case`` (:func:`run_twins`)."""
    return run_twins({"case": case}, tmp)["case"]


def run_placement(version: str) -> dict[str, Any]:
    """The placement probe's stable result on ``version``."""
    from dpbench.envs import run_in_env

    proc = run_in_env(version, "dpbench.placement.probe", ["--json"])
    if proc.returncode != 0:
        raise RuntimeError(f"placement probe {version} failed: {proc.stderr[-3000:]}")
    return stable(json.loads(proc.stdout))


# -- the server run's measurements, as JSON ----------------------------------------------------


def snapshot_to_json(snap: Any) -> dict[str, Any] | None:
    if snap is None:
        return None
    samples = [[name, [list(kv) for kv in labels], v] for (name, labels), v in snap.samples.items()]
    return {"samples": samples, "types": snap.types}


def snapshot_from_json(data: dict[str, Any] | None) -> Any:
    from dpbench.server.metrics import Snapshot

    if data is None:
        return None
    samples = {(n, tuple(tuple(kv) for kv in labels)): v for n, labels, v in data["samples"]}
    return Snapshot(samples=samples, types=data["types"])


def load_to_json(load: Any) -> dict[str, Any]:
    return {
        "outcomes": [asdict(o) for o in load.outcomes],
        "duration_s": load.duration_s,
        "schedule_kind": load.schedule_kind,
        "send_lateness_s": load.send_lateness_s,
        "loop_lag_ms": load.loop_lag.samples_ms,
        "t0": load.t0,
    }


def load_from_json(data: dict[str, Any]) -> Any:
    from dpbench.server.client import RequestOutcome
    from dpbench.server.loadgen import LoadResult, LoopLag

    return LoadResult(
        outcomes=[RequestOutcome(**o) for o in data["outcomes"]],
        duration_s=data["duration_s"],
        schedule_kind=data["schedule_kind"],
        send_lateness_s=data["send_lateness_s"],
        loop_lag=LoopLag(data["loop_lag_ms"]),
        t0=data["t0"],
    )


def write_json(path: Path, data: Any) -> None:
    """Sorted, one key a line; a ``.gz`` path (bulk measurements) compact and gzipped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Every place two JSON-like values differ (NaN equals NaN), as ``path: want != got``."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}/{k}: missing" for k in want if k not in got]
        out += [f"{where}/{k}: unexpected" for k in got if k not in want]
        for k in want.keys() & got.keys():
            out += differences(want[k], got[k], f"{where}/{k}")
        return out
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        if len(want) != len(got):
            return [f"{where}: {len(want)} items != {len(got)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(want, got, strict=True))
            for d in differences(a, b, f"{where}[{i}]")
        ]
    both_nan = (
        isinstance(want, float) and isinstance(got, float) and math.isnan(want) and math.isnan(got)
    )
    if want != got and not both_nan:
        return [f"{where}: {want!r} != {got!r}"]
    return []
