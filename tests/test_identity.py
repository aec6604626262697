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
    differences,
    load_from_json,
    read_json,
    run_placement,
    run_twin,
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


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(twin_cases()))
def test_the_twin_gives_the_reference_numbers(name, twin_reference, tmp_path):
    got = run_twin(twin_cases()[name], tmp_path)
    _assert_same(twin_reference[name], got, f"twin {name}")


@pytest.mark.sglang
@pytest.mark.parametrize("version", PLACEMENT_RELEASES)
def test_the_placement_probe_gives_the_reference_result(version):
    want = read_json(DATA / "placement.json")[version]
    _assert_same(want, run_placement(version), f"placement probe {version}")


def _derive_server_result(measured: dict[str, Any]) -> dict[str, Any]:
    """The run result from what the stored run measured, built by this code."""
    from dpbench.core.schema import from_dict
    from dpbench.server import run
    from dpbench.server.client import GenerateRequest
    from dpbench.server.config import DelayerConfig, ServerConfig
    from dpbench.server.loadgen import Schedule
    from dpbench.sglang_compat.server import ServerFlags
    from dpbench.workload.models import load_model_config
    from dpbench.workload.spec import load_spec
    from dpbench.workload.trace import generate_trace

    opts = from_dict(run.RunOptions, measured["options"])
    p, rep, ctx = measured["prepared"], measured["replay"], measured["run"]
    spec = load_spec(opts.spec)
    vocab = load_model_config(spec.model).vocab_size
    trace = generate_trace(spec)
    requests = [
        GenerateRequest(r.id, r.token_ids(vocab), r.max_new_tokens, r.ignore_eos) for r in trace
    ]
    assert [r.id for r in requests] == rep["request_ids"], "the spec's trace changed"
    config = ServerConfig(**{**p["config"], "delayer": DelayerConfig(**p["config"]["delayer"])})
    offsets = p["offsets_s"]
    prep = run.Prepared(
        options=opts,
        spec=spec,
        spec_hash=p["spec_hash"],
        requests=requests,
        schedule=Schedule(
            offsets_s=None if offsets is None else np.asarray(offsets),
            concurrency=p["concurrency"],
        ),
        config=config,
        flags=ServerFlags(**p["flags"]),
        command=p["command"],
        kv_plan=p["kv_plan"],
        notes=p["notes"],
        python=p["python"],
    )
    replay = run._Replay(
        index=rep["index"],
        suffix=rep["suffix"],
        requests=requests,
        request_func=run.routed_requests(None, config.dp_size),
        load=load_from_json(rep["load"]),
        t_load=rep["t_load"],
        t_end=rep["t_end"],
        before=snapshot_from_json(rep["before"]),
        after=snapshot_from_json(rep["after"]),
        pressure=rep["pressure"],
        waited=rep["waited"],
        waited_main=rep["waited_main"],
        waits=rep["waits"],
        died=rep["died"],
    )
    return run._replay_result(
        prep, replay, ctx["replays"], ctx["until"], ctx["ready_s"], Path(ctx["log"]),
        SERVER, ctx["executor"], ctx["provenance"], ctx["notes"], wall_s=ctx["wall_s"],
    )  # fmt: skip


def test_a_stored_server_run_derives_the_same_result():
    """Client metrics, server counters, step metrics, balance and instrument health, derived
    again from one real simulated-forward run's measurements and step records."""
    want = read_json(SERVER / "result.json")
    got = _json(_derive_server_result(read_json(SERVER / "measured.json.gz")))
    assert got["extra"]["step_records_dir"] == str(SERVER / "steps")
    for r in (want, got):  # the records were copied here from the run's own directory
        r["extra"]["step_records_dir"] = "<steps>"
        for key in ("created", "hardware"):
            r.pop(key)
    assert len(want["metrics"]) > 80  # client, server, step and balance metrics all there
    _assert_same(want, got, "server run result")
