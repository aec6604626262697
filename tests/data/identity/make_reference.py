"""Write the before/after identity check's reference numbers (``tests/test_identity.py`` reads them).

Run it only to move the reference on purpose (a change that is meant to change numbers), from
the repository root with this checkout's sources first on the path:

    PYTHONPATH=$PWD/src .venv/bin/python tests/data/identity/make_reference.py twin placement
    PYTHONPATH=$PWD/src .venv/bin/python tests/data/identity/make_reference.py server
    PYTHONPATH=$PWD/src .venv/bin/python tests/data/identity/make_reference.py rederive

``twin`` and ``placement`` are deterministic: run again on the same code they write the same
files. ``server`` starts a real simulated-forward SGLang server (minutes of CPU, run nothing
else heavy beside it) and keeps what that one run measured: a new run measures anew.
``rederive`` keeps the stored run's measurements and writes the result this code derives
from them (a deliberate change to what a run reports, with nothing re-measured).
The first reference was written by the code at commit 3c9d8de.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared helper

import identity as ident


def write_twin() -> None:
    out: dict[str, Any] = {}
    for name, case in ident.twin_cases().items():
        with tempfile.TemporaryDirectory() as tmp:
            out[name] = ident.run_twin(case, Path(tmp))
        print(f"twin {name}: {len(out[name]['result']['metrics'])} metrics", flush=True)
    ident.write_json(ident.DATA / "twin.json.gz", out)


def write_placement() -> None:
    out = {v: ident.run_placement(v) for v in ident.PLACEMENT_RELEASES}
    ident.write_json(ident.DATA / "placement.json", out)
    print(f"placement: {sorted(out)}")


def server_options(log_dir: str) -> Any:
    from dpbench.server.run import RunOptions

    return RunOptions(
        spec=ident.SPEC, dp_size=2, simulate_forward=True, sglang="0.5.17", log_dir=log_dir
    )


def _capture(prep: Any, rep: Any, run: Any, until: float | None, wall_s: float) -> dict[str, Any]:
    """What the run measured and knew when it built the result
    (:func:`dpbench.server.replay_result.replay_result`'s arguments), as JSON."""
    from dataclasses import asdict

    from dpbench.core.schema import to_dict

    offsets, m = prep.schedule.offsets_s, rep.measured
    return {
        "options": to_dict(prep.options),
        "prepared": {
            "spec_hash": prep.spec_hash,
            "command": prep.command,
            "config": asdict(prep.config),
            "kv_plan": prep.kv_plan,
            "notes": prep.notes,
            "offsets_s": None if offsets is None else offsets.tolist(),
            "concurrency": prep.schedule.concurrency,
            "python": prep.python,
            "flags": {"version": prep.flags.version, "source": prep.flags.source},
        },
        "replay": {
            "index": rep.index,
            "suffix": rep.suffix,
            "request_ids": [r.id for r in rep.requests],
            "load": ident.load_to_json(m.load),
            "t_load": m.t_load,
            "t_end": m.t_end,
            "before": ident.snapshot_to_json(m.before),
            "after": ident.snapshot_to_json(m.after),
            "pressure": m.proc.pressure,
            "waited": m.proc.waited,
            "waited_main": m.proc.waited_main,
            "waits": m.proc.waits,
            "died": m.died,
            "routed": rep.routed,
        },
        "run": {
            "replays": run.replays,
            "until": until,
            "ready_s": run.ready_s,
            "log": str(run.log),
            "run_dir": str(run.run_dir),
            "executor": run.executor,
            "provenance": run.provenance,
            "notes": [*prep.notes, run.launch_note],
            "wall_s": wall_s,
        },
    }


def write_server() -> None:
    from dpbench.server import run

    captured: list[dict[str, Any]] = []
    build = run.replay_result

    def keep(prep: Any, rep: Any, ctx: Any, *, until: float | None, wall_s: float) -> Any:
        result = build(prep, rep, ctx, until=until, wall_s=wall_s)
        captured.append({**_capture(prep, rep, ctx, until, wall_s), "result": result})
        return result

    run.replay_result = keep
    with tempfile.TemporaryDirectory() as tmp:
        run.execute(run.prepare(server_options(tmp)))
        (got,) = captured
        steps = Path(got["run"]["run_dir"]) / "steps"
        dest = ident.DATA / "server"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(steps, dest / "steps")
    ident.write_json(dest / "result.json", got.pop("result"))
    ident.write_json(dest / "measured.json.gz", got)
    print(f"server: {len(got['replay']['request_ids'])} requests kept in {dest}")


def rederive_server() -> None:
    import test_identity

    measured = ident.read_json(ident.DATA / "server" / "measured.json.gz")
    derived = test_identity._json(test_identity._derive_server_result(measured))
    result = ident.rooted(derived, ident.SOURCE_FOLDERS)
    ident.write_json(ident.DATA / "server" / "result.json", result)
    print(
        f"server: result.json derived again from {len(measured['replay']['request_ids'])} requests"
    )


if __name__ == "__main__":
    parts = {
        "twin": write_twin,
        "placement": write_placement,
        "server": write_server,
        "rederive": rederive_server,
    }
    chosen = sys.argv[1:] or ["twin", "placement"]
    bad = sorted(set(chosen) - set(parts))
    if bad:
        sys.exit(f"unknown part(s) {bad}; choose from {sorted(parts)}")
    for part in chosen:
        parts[part]()
