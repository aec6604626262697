"""Twin vs simulated-forward server on the same inputs: the suite's first fidelity figure.

For one SGLang release, the same spec (and its seed), DP size and global chunk size go
through the twin (``python -m dpbench.twin.run`` in the release environment) and through
SGLang's real server with only the forward simulated by the same cost model
(:mod:`dpbench.server.run` with ``simulate_forward``). :func:`compare` lines up the
metrics both report, with the server's value minus the twin's.

Both sides are simulations of a GPU deployment; the server side adds what the twin
leaves out (SGLang's real scheduler loop, overlap schedule, retraction, radix cache,
HTTP/tokenizer path and its CPU overhead, measured per step), so a difference is the
twin's simplification plus the server's CPU overhead, never "error against a GPU".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpbench import results
from dpbench.paths import project_root, results_dir

# (row label, server metric, twin metric or a function of the twin result, unit)
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("DP-mixed step fraction", "dp_mixed_step_fraction", "dp_mixed_step_fraction", "fraction"),
    (
        "decode-rank time beside prefill",
        "decode_rank_s_beside_prefill",
        "decode_rank_s_beside_prefill",
        "rank·s",
    ),
    (
        "  … as a fraction of decode-rank time",
        "decode_rank_time_beside_prefill_fraction",
        "decode_rank_time_beside_prefill_fraction",
        "fraction",
    ),
    (
        "delay-verdict fraction, passes with a prefillable rank",
        "delayer_delay_fraction_prefillable",
        "delayer_delay_fraction_prefillable",
        "fraction",
    ),
    (
        "  … of every outcome (server counts idle passes)",
        "delayer_delay_fraction",
        "delayer_delay_fraction",
        "fraction",
    ),
    ("TTFT p50", "ttft_ms_p50", "ttft_ms_p50", "ms"),
    (
        "KV pool occupied p50 (evictable included)",
        "kv_pool_occupied_p50",
        "kv_pool_occupied_p50",
        "fraction",
    ),
    ("TTFT p99", "ttft_ms_p99", "ttft_ms_p99", "ms"),
    ("throughput", "request_throughput_per_s", "request_throughput_req_per_s", "req/s"),
    ("output tokens/s", "output_tokens_per_s", "output_tokens_per_s", "tok/s"),
)


class FidelityError(RuntimeError):
    """One side of the comparison failed; the message names which and why."""


@dataclass(frozen=True)
class Inputs:
    spec: str
    dp: int
    release: str
    chunked_prefill_size: int = 4096
    delayer: bool = True


def _value(result: dict[str, Any], name: str) -> float:
    m = result.get("metrics", {}).get(name)
    return float(m["value"]) if m is not None else math.nan


def run_twin(inp: Inputs, out: Path, python: str) -> dict[str, Any]:
    args = [
        python, "-m", "dpbench.twin.run", inp.spec,
        "--dp", str(inp.dp), "--tp", str(inp.dp),
        "--chunked-prefill-size", str(inp.chunked_prefill_size),
        "--no-timeline", "-o", str(out),
    ]  # fmt: skip
    if not inp.delayer:
        args.append("--no-delayer")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    proc = subprocess.run(
        args, capture_output=True, text=True, cwd=project_root(), env=env, timeout=1800
    )
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise FidelityError(
            f"the twin failed under SGLang {inp.release} (status {proc.returncode}): "
            f"{last[-1] if last else 'no output'}"
        )
    return results.load(out)


def run_server(inp: Inputs, out: Path, log_dir: Path) -> dict[str, Any]:
    from dpbench.server.run import RunOptions, execute, prepare

    opts = RunOptions(
        spec=inp.spec,
        dp_size=inp.dp,
        delayer=inp.delayer,
        simulate_forward=True,
        sglang=inp.release,
        chunked_prefill_size=inp.chunked_prefill_size,
        log_dir=str(log_dir),
    )
    result = execute(prepare(opts))
    results.save(out, result)
    return result


def compare(twin: dict[str, Any], server: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for label, s_name, t_name, unit in ROWS:
        t, s = _value(twin, t_name), _value(server, s_name)
        diff = s - t if not (math.isnan(s) or math.isnan(t)) else math.nan
        rel = diff / abs(t) if t and not math.isnan(diff) else math.nan
        rows.append(
            {"metric": label, "unit": unit, "twin": t, "server": s, "diff": diff, "rel": rel}
        )
    return rows


def run(inp: Inputs, *, out_dir: Path | None = None) -> dict[str, Any]:
    """Run both sides and return ``{"inputs", "rows", "twin_result", "server_result", …}`` (also written)."""
    from dpbench.server.run import release_python

    python = release_python(inp.release)
    stem = f"{Path(inp.spec).stem}-dp{inp.dp}-chunk{inp.chunked_prefill_size}-sglang{inp.release}"
    out_dir = out_dir or results_dir() / "fidelity"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    twin = run_twin(inp, out_dir / f"{stem}-twin.json", python)
    t_twin = time.monotonic() - t0
    server = run_server(inp, out_dir / f"{stem}-server.json", out_dir / "server-logs")
    report = {
        "inputs": inp.__dict__,
        "executor": "simulated",
        "cost_model": server.get("cost_model"),
        "rows": compare(twin, server),
        "twin_result": str(out_dir / f"{stem}-twin.json"),
        "server_result": str(out_dir / f"{stem}-server.json"),
        "twin_wall_s": t_twin,
        "server_wall_s": time.monotonic() - t0 - t_twin,
        "server_scheduler_overhead_ms_p50": _value(server, "scheduler_overhead_ms_p50"),
        "server_simulated_step_ms_p50": _value(server, "simulated_step_ms_p50"),
    }
    from dpbench.atomic import write_json

    write_json(out_dir / f"{stem}.json", json.loads(json.dumps(report, default=str)))
    return report
