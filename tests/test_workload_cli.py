"""`dpbench workload …`: list, show, gen and plan, as a user sees them."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dpbench.workload.cli import app
from dpbench.workload.trace import load_trace

runner = CliRunner()


def run(*args: str):
    result = runner.invoke(app, list(args))
    return result


def test_list_names_the_four_specs():
    result = run("list")
    assert result.exit_code == 0, result.output
    for name in (
        "long-prompt-burst",
        "long-context-chat",
        "agentic-multiturn",
        "balanced-baseline",
    ):
        assert name in result.output
    assert "98%" in result.output and "60%" in result.output


def test_show_summarises_lengths_rate_and_plan():
    result = run("show", "balanced-baseline")
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(r"input_len +mean [\d,]+ +p50 [\d,]+ +p90 [\d,]+ +p99 [\d,]+", out)
    assert re.search(r"mean rate [\d.]+ req/s", out)
    assert re.search(r"--max-total-tokens [\d,]+ per rank = [\d.]+ GiB per rank", out)


def test_gen_is_byte_identical_for_the_same_seed(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    for path, seed in ((a, "5"), (b, "5"), (c, "6")):
        result = run(
            "gen", "long-context-chat", "--seed", seed, "--num-requests", "200", "-o", str(path)
        )
        assert result.exit_code == 0, result.output
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert (
        hashlib.sha256(a.read_bytes()).hexdigest()
        in run(
            "gen", "long-context-chat", "--seed", "5", "--num-requests", "200", "-o", str(a)
        ).output
    )
    assert len(load_trace(a)) == 200


def _number(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not found in:\n{text}"
    return match.group(1)


def test_plan_prints_every_input_and_the_arithmetic_checks_out():
    result = run("plan", "long-prompt-burst", "--dp", "8")
    assert result.exit_code == 0, result.output
    out = result.output
    # redo the reader's check from the printed numbers alone
    rank, lora, layers, dtype = (
        int(_number(p, out))
        for p in (
            r"qk_rope_head_dim (\d+)\) ×",
            r"\(kv_lora_rank (\d+) \+",
            r"× layers (\d+) ×",
            r"× (\d) B =",
        )
    )
    bpt = int(_number(r"= ([\d,]+) B/token", out).replace(",", ""))
    assert bpt == (lora + rank) * layers * dtype == 70_272
    util = float(_number(r"target util +([\d.]+)", out))
    peak = int(_number(r"busiest rank +\d+: peak ([\d,]+) tokens", out).replace(",", ""))
    pool = int(_number(r"\) = ([\d,]+) tokens per rank", out).replace(",", ""))
    assert pool == math.ceil(round(peak / util, 6))
    total = int(_number(r"KV memory +[\d,]+ × [\d,]+ B = ([\d,]+) B", out).replace(",", ""))
    assert total == pool * bpt
    gib = float(_number(r"= ([\d.]+) GiB per rank", out))
    assert gib == pytest.approx(total / 2**30, abs=0.005)
    assert f"--max-total-tokens {pool}" in out
    peaks = [int(p.replace(",", "")) for p in re.findall(r"│ +\d+ │ +[\d,]+ │ +([\d,]+) │", out)]
    assert len(peaks) == 8 and max(peaks) == peak
    assert "service model" in out and "no queueing" in out


def test_plan_json_and_overrides(tmp_path):
    trace = tmp_path / "t.jsonl"
    assert run("gen", "balanced-baseline", "--num-requests", "300", "-o", str(trace)).exit_code == 0
    result = run(
        "plan",
        "balanced-baseline",
        "--dp",
        "4",
        "--trace",
        str(trace),
        "--model",
        "deepseek-v3-tiny",
        "--kv-dtype",
        "fp8_e4m3",
        "--dispatch",
        "shortest_queue",
        "--target-util",
        "0.5",
        "--json",
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["model_name"] == "deepseek-v3-tiny" and plan["bytes_per_token"] == 576 * 4 * 1
    assert (
        plan["dp_size"] == 4
        and plan["dispatch"] == "shortest_queue"
        and plan["num_requests"] == 300
    )
    assert plan["max_total_tokens_per_rank"] == math.ceil(plan["peak_tokens"] / 0.5)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("show", "no-such-spec"), "no such spec file or shipped name"),
        (
            ("plan", "long-prompt-burst", "--model", "nope"),
            "`model`: model 'nope': no such config.json",
        ),
        (
            ("plan", "long-prompt-burst", "--dispatch", "random"),
            "allowed: round_robin, shortest_queue",
        ),
        (("plan", "long-prompt-burst", "--target-util", "2"), "allowed: a number in (0, 1]"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, fragment):
    result = run(*args)
    assert result.exit_code == 2
    assert fragment in " ".join(result.output.replace("│", " ").split())


def test_bad_spec_file_is_reported_without_a_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n")
    result = run("show", str(path))
    assert result.exit_code == 2
    assert "`description` is required but missing" in result.output
    assert "Traceback" not in result.output


def test_workload_package_needs_only_its_light_dependencies():
    """The twin imports it inside SGLang release environments: no torch, aiohttp, plotly, …"""
    code = (
        "import sys\n"
        "import dpbench.workload.cli, dpbench.workload.planner, dpbench.workload.trace\n"
        "heavy = {'torch', 'sglang', 'aiohttp', 'plotly', 'prometheus_client', 'asv', 'pandas', 'scipy'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
