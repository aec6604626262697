"""A whole server-tier run on CPU: real workload + KV plan + real 0.5.23 flags, the protocol double as server."""

from __future__ import annotations

import dataclasses
import sys

import pytest
from typer.testing import CliRunner

from dpbench.core import results
from dpbench.core.paths import cache_dir
from dpbench.envs.venv import env_path
from dpbench.server.cli import app
from dpbench.server.run import RunOptions, execute, prepare
from dpbench.sglang_compat.server import server_flags


@pytest.fixture(scope="module")
def python_0523():
    python = env_path("0.5.23") / "bin" / "python"
    if not (env_path("0.5.23") / "dpbench-env.json").is_file():
        pytest.skip("SGLang 0.5.23 environment not built (dpbench env create 0.5.23)")
    return str(python)


@pytest.mark.sglang
def test_prepare_builds_the_command_from_the_kv_plan(python_0523):
    prep = prepare(
        RunOptions(spec="long-prompt-burst", tp_size=8, dp_size=8, python=python_0523, port=30123)
    )
    cmd = prep.command
    assert cmd[:3] == [python_0523, "-m", "sglang.launch_server"]
    assert cmd[cmd.index("--max-total-tokens") + 1] == str(
        prep.kv_plan["max_total_tokens_per_rank"]
    )
    assert cmd[cmd.index("--load-format") + 1] == "dummy"
    assert cmd[cmd.index("--model-path") + 1].endswith("workloads/models/deepseek-v3")
    assert (
        "--enable-prefill-delayer" in cmd
        and "--skip-tokenizer-init" in cmd
        and "--enable-metrics" in cmd
    )
    assert len(prep.requests) == 1024 and prep.schedule.kind == "open-loop"
    # Same spec, same requests (the trace is deterministic).
    again = prepare(
        RunOptions(
            spec="long-prompt-burst",
            tp_size=8,
            dp_size=8,
            python=python_0523,
            port=30123,
            delayer=False,
        )
    )
    assert again.requests[5].input_ids == prep.requests[5].input_ids
    assert "--enable-prefill-delayer" not in again.command


def _against_the_double(python_0523, tmp_path, *double_args: str):
    """A run of 12 balanced-baseline requests with the protocol test double in SGLang's place."""
    # Flags from the real 0.5.23 install; `python` is this interpreter (it runs the double, not SGLang).
    opts = RunOptions(
        spec="balanced-baseline",
        tp_size=2,
        dp_size=2,
        python=sys.executable,
        max_requests=12,
        check_gpus=False,
        log_dir=str(tmp_path),
    )
    prep = prepare(opts, flags=server_flags(python_0523, cache_dir=cache_dir() / "sglang-help"))
    # Swap SGLang for the protocol test double: same port, same lifecycle, CPU only.
    port = prep.config.port
    return dataclasses.replace(
        prep,
        python=str(python_0523),  # provenance is read from the install whose flags were used
        command=[
            sys.executable,
            "-m",
            "dpbench.server.protocol_double",
            "--port",
            str(port),
            "--first-token-delay-s",
            "0.01",
            "--itl-s",
            "0.0005",
            *double_args,
        ],
    )


@pytest.mark.sglang
def test_execute_against_the_protocol_double_writes_a_valid_run_result(python_0523, tmp_path):
    prep = _against_the_double(python_0523, tmp_path)
    seen = []
    result = execute(prep, on_done=seen.append)
    path = results.save(tmp_path / "run.json", result)
    loaded = results.load(path)
    m = loaded["metrics"]
    assert len(seen) == 12 and m["requests_ok_total"]["value"] == 12
    assert (
        m["delayer_outcomes_total"]["value"] == 12
    )  # the warm-up request precedes the first scrape
    assert {
        "ttft_ms_p99",
        "itl_ms_p50",
        "output_tokens_per_s",
        "goodput_requests_per_s",
        "client_loop_lag_ms_p99",
        "server_startup_s",
    } <= set(m)
    assert loaded["tier"] == "server" and loaded["workload"]["name"] == "balanced-baseline"
    assert loaded["extra"]["command"][0] == sys.executable
    assert (
        loaded["sglang"]["version"] == "0.5.23"
    )  # from the flags' install (sglang is not in this venv)
    assert sum(loaded["extra"]["requests_per_dp_rank"].values()) == 12
    assert "failed_requests" not in loaded["extra"]


@pytest.mark.sglang
def test_a_run_keeps_what_the_client_said_of_each_failed_request(python_0523, tmp_path):
    """Not only a count by kind: a fidelity comparison that refuses the run names the first."""
    prep = _against_the_double(python_0523, tmp_path, "--http-error-every", "4")
    result = execute(prep)
    m = result["metrics"]
    failed = result["extra"]["failed_requests"]
    assert (
        m["errors_http_total"]["value"] == len(failed) == 12 - m["requests_ok_total"]["value"] > 0
    )
    assert all(f["kind"] == "http" and f["http_status"] >= 400 and f["error"] for f in failed)
    assert all(f["sent_s"] >= 0 for f in failed) and len({f["id"] for f in failed}) == len(failed)


@pytest.mark.sglang
def test_cli_dry_run_prints_the_checked_command(python_0523):
    res = CliRunner().invoke(
        app,
        [
            "run",
            "long-prompt-burst",
            "--tp",
            "8",
            "--dp",
            "8",
            "--python",
            python_0523,
            "--dry-run",
            "--port",
            "30999",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "--attn-dp-size 8" in res.output.replace("\n", " ") or "--attn-dp-size" in res.output


def test_cli_rejects_a_bad_flag_clearly():
    res = CliRunner().invoke(
        app,
        [
            "run",
            "long-prompt-burst",
            "--tp",
            "8",
            "--dp",
            "3",
            "--python",
            sys.executable,
            "--dry-run",
        ],
    )
    assert res.exit_code != 0
    assert "dp_size (3) must divide tp_size (8)" in str(res.exception)


@pytest.mark.sglang
def test_replays_that_differ_on_the_client_side_share_one_server(python_0523, tmp_path):
    """fidelity.run_on_one_server's path: a round-robin replay, then one the client routes
    (cache-aware), against one start-up with /flush_cache between; a replay needing another
    server (another command) is refused before anything starts."""
    from dpbench.server.run import RunOptionsError, execute_replays

    prep = _against_the_double(python_0523, tmp_path)
    routed = dataclasses.replace(
        prepare(
            dataclasses.replace(prep.options, dispatch="cache_aware", port=prep.config.port),
            flags=prep.flags,
        ),
        python=prep.python,
        command=prep.command,
    )
    assert routed.route_keys is not None and prep.route_keys is None
    first, second = execute_replays(prep, 2, clients=[prep, routed])
    assert [r["extra"]["dispatch"] for r in (first, second)] == ["round_robin", "cache_aware"]
    assert [r["extra"]["replay"]["flushed_before"] for r in (first, second)] == [False, True]
    assert second["metrics"]["server_startup_s"] == first["metrics"]["server_startup_s"]
    assert sorted(second["extra"]["routed_dp_ranks"]) == sorted(r.id for r in prep.requests)
    assert "routed_dp_ranks" not in first["extra"]
    assert any("cache-aware" in n for n in second["notes"])
    assert not any("cache-aware" in n for n in first["notes"])
    other = dataclasses.replace(routed, command=[*routed.command, "--itl-s", "0.001"])
    with pytest.raises(RunOptionsError, match="replay 1 needs another server"):
        execute_replays(prep, 2, clients=[prep, other])
