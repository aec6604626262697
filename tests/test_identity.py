"""Same SGLang, spec and seed, same numbers: the twin, the placement probe and a stored server run,
against the reference the code wrote at commit 3c9d8de (``tests/data/identity/``).

A refactor must leave every number where it was. A change meant to move numbers regenerates the
reference on purpose with ``tests/data/identity/make_reference.py`` and says so in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from identity import (
    DATA,
    PLACEMENT_RELEASES,
    SOURCE_FOLDERS,
    differences,
    load_from_json,
    read_json,
    rooted,
    run_placement,
    run_twins,
    snapshot_from_json,
    twin_cases,
)

SERVER = DATA / "server"


def _json(value: Any) -> Any:
    """As the reference holds it: through JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def _assert_same(want: Any, got: Any, what: str) -> None:
    diff = differences(_json(want), _json(got))
    assert not diff, f"{what}: {len(diff)} value(s) moved:\n" + "\n".join(diff[:40])


@pytest.fixture(scope="module")
def twin_reference() -> dict[str, Any]:
    return read_json(DATA / "twin.json.gz")


@pytest.fixture(scope="module")
def twin_runs(tmp_path_factory) -> Any:
    """``twin_runs(name)``: that twin case's stable result and progress events. On first asking,
    every case of its release runs, in one process of the release's environment."""
    done: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in done:
            version = twin_cases()[name]["version"]
            cases = {n: c for n, c in twin_cases().items() if c["version"] == version}
            try:
                done.update(run_twins(cases, tmp_path_factory.mktemp("twin")))
            except RuntimeError as exc:  # each of the release's cases fails, without a rerun
                done.update(dict.fromkeys(cases, exc))
        if isinstance(done[name], RuntimeError):
            raise done[name]
        return done[name]

    return get


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(twin_cases()))
def test_the_twin_gives_the_reference_numbers(name, twin_reference, twin_runs):
    _assert_same(twin_reference[name], twin_runs(name), f"twin {name}")


@pytest.mark.sglang
@pytest.mark.parametrize("version", PLACEMENT_RELEASES)
def test_the_placement_probe_gives_the_reference_result(version):
    want = read_json(DATA / "placement.json")[version]
    _assert_same(want, run_placement(version), f"placement probe {version}")


def _prepared(measured: dict[str, Any]) -> Any:
    """The stored run's preparation: its options and launch as stored, its trace regenerated."""
    from dpbench.core.schema import from_dict
    from dpbench.server.config import DelayerConfig, ServerConfig
    from dpbench.server.loadgen import Schedule
    from dpbench.server.prepare import Prepared, requests_of, trace_of
    from dpbench.server.run import RunOptions
    from dpbench.sglang_compat.server import ServerFlags
    from dpbench.workload.models import load_model_config
    from dpbench.workload.spec import load_spec

    opts = from_dict(RunOptions, measured["options"])
    p = measured["prepared"]
    spec = load_spec(opts.spec)
    trace, trace_import = trace_of(spec)
    offsets = p["offsets_s"]
    return Prepared(
        options=opts,
        spec=spec,
        spec_hash=p["spec_hash"],
        requests=requests_of(trace, load_model_config(spec.model).vocab_size),
        schedule=Schedule(
            offsets_s=None if offsets is None else np.asarray(offsets),
            concurrency=p["concurrency"],
        ),
        config=ServerConfig(**{**p["config"], "delayer": DelayerConfig(**p["config"]["delayer"])}),
        flags=ServerFlags(**p["flags"]),
        command=p["command"],
        kv_plan=p["kv_plan"],
        notes=p["notes"],
        python=p["python"],
        trace_import=trace_import,
    )


def _derive_server_result(measured: dict[str, Any]) -> dict[str, Any]:
    """The run result from what the stored run measured, built by this code."""
    from dpbench.server.lifetime import Measured, ProcReadings
    from dpbench.server.replay_result import Replay, RunContext, replay_result

    prep = _prepared(measured)
    rep, ctx = measured["replay"], measured["run"]
    assert [r.id for r in prep.requests] == rep["request_ids"], "the spec's trace changed"
    assert ctx["notes"][:-1] == prep.notes  # the run's notes: the preparation's, then the launch's
    replay = Replay(
        index=rep["index"],
        suffix=rep["suffix"],
        requests=prep.requests,
        routed=rep["routed"],
        measured=Measured(
            load=load_from_json(rep["load"]),
            t_load=rep["t_load"],
            t_end=rep["t_end"],
            before=snapshot_from_json(rep["before"]),
            after=snapshot_from_json(rep["after"]),
            proc=ProcReadings(rep["pressure"], rep["waited"], rep["waited_main"], rep["waits"]),
            died=rep["died"],
        ),
    )
    run = RunContext(
        replays=ctx["replays"],
        ready_s=ctx["ready_s"],
        log=Path(ctx["log"]),
        run_dir=SERVER,  # its steps/ are the run's step records, copied here
        executor=ctx["executor"],
        provenance=ctx["provenance"],
        launch_note=ctx["notes"][-1],
    )
    return replay_result(prep, replay, run, until=ctx["until"], wall_s=ctx["wall_s"])


def test_a_stored_server_run_derives_the_same_result():
    """Client metrics, server counters, step metrics, balance and instrument health, derived
    again from one real simulated-forward run's measurements and step records."""
    want = read_json(SERVER / "result.json")
    got = _json(_derive_server_result(read_json(SERVER / "measured.json.gz")))
    assert got["extra"]["step_records_dir"] == str(SERVER / "steps")
    got = rooted(got, SOURCE_FOLDERS)  # the checkout's folders as <root>, as the reference holds
    for r in (want, got):  # the records were copied here from the run's own directory
        r["extra"]["step_records_dir"] = "<steps>"
        for key in ("created", "hardware"):
            r.pop(key)
    assert len(want["metrics"]) > 80  # client, server, step and balance metrics all there
    _assert_same(want, got, "server run result")
