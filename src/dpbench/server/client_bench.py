"""This client vs SGLang's own ``bench_serving``, side by side against the same protocol test double.

Both clients drive ``num_requests`` streams at ``concurrency`` against a fresh
:mod:`~dpbench.server.protocol_double` process whose first token comes
``first_token_delay_s`` after a request arrives and each later token ``itl_s`` after
the previous. Reported per client: the sustained request rate (completed requests /
the client's own run duration), against the ideal ``concurrency / (delay + (n-1)·itl)``,
and the TTFT error (client-measured TTFT minus the double's configured first-token
delay). The double's own lateness (its measured arrival→first-write time minus the
configured delay) is reported too: that part of the error is the double's, not the
client's, on a loaded machine.

SGLang's client runs from a release environment, offline: ``--dataset-name random-ids
--tokenize-prompt`` with a tiny word-level tokenizer written locally (no hub download).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpbench.core.procs import free_port
from dpbench.server.client import GenerateRequest
from dpbench.server.launcher import ServerProcess
from dpbench.server.loadgen import Schedule, drive, run_load
from dpbench.server.stats import summarize


@dataclass(frozen=True)
class ComparisonConfig:
    num_requests: int = 3000
    concurrency: int = 1000
    input_len: int = 32
    output_len: int = 16
    first_token_delay_s: float = 0.25
    itl_s: float = 0.05

    @property
    def ideal_request_rate_per_s(self) -> float:
        return self.concurrency / (self.first_token_delay_s + (self.output_len - 1) * self.itl_s)


_TOKENIZER_SNIPPET = r"""
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
vocab = {"[UNK]": 0, "[BOS]": 1, "[EOS]": 2, **{f"w{i}": i + 3 for i in range(1000)}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
    "unk_token": "[UNK]", "bos_token": "[BOS]", "eos_token": "[EOS]", "model_max_length": 1000000}))
"""


def _double(cfg: ComparisonConfig, python: str, log: Path) -> ServerProcess:
    port = free_port()
    cmd = [
        python,
        "-m",
        "dpbench.server.protocol_double",
        "--port",
        str(port),
        "--first-token-delay-s",
        str(cfg.first_token_delay_s),
        "--itl-s",
        str(cfg.itl_s),
        "--emit-text",
        "true",
    ]
    return ServerProcess(cmd, base_url=f"http://127.0.0.1:{port}", log_path=log, grace_s=5.0)


def _double_lateness(base_url: str, cfg: ComparisonConfig) -> dict[str, float]:
    with urllib.request.urlopen(f"{base_url}/double/stats", timeout=30) as resp:
        stats = json.load(resp)
    late = (np.asarray(stats["first_token_actual_s"]) - cfg.first_token_delay_s) * 1e3
    return {
        "double_first_token_lateness_ms_mean": float(late.mean()),
        "double_first_token_lateness_ms_p99": float(np.percentile(late, 99)),
    }


def _ttft_error(ttfts_s: list[float], cfg: ComparisonConfig) -> dict[str, float]:
    err = (np.asarray(ttfts_s, dtype=np.float64) - cfg.first_token_delay_s) * 1e3
    return {
        "ttft_error_ms_mean": float(err.mean()),
        "ttft_error_ms_p50": float(np.percentile(err, 50)),
        "ttft_error_ms_p99": float(np.percentile(err, 99)),
    }


def measure_dpbench(cfg: ComparisonConfig, *, double_python: str, workdir: Path) -> dict[str, Any]:
    """This client (closed loop at ``concurrency``), in this process."""
    reqs = [
        GenerateRequest(f"r{i}", [(i + j) % 1000 + 3 for j in range(cfg.input_len)], cfg.output_len)
        for i in range(cfg.num_requests)
    ]
    with _double(cfg, double_python, workdir / "double-dpbench.log") as d:
        d.wait_ready(deadline_s=60, poll_s=0.2)
        run_load(
            drive(reqs[:1], Schedule.closed_loop(1), base_url=d.base_url)
        )  # warm-up, like bench_serving
        res = run_load(drive(reqs, Schedule.closed_loop(cfg.concurrency), base_url=d.base_url))
        lateness = _double_lateness(d.base_url, cfg)
    m = summarize(res)
    ok = [o for o in res.outcomes if o.ok]
    return {
        "client": "dpbench",
        "completed": len(ok),
        "errors": len(res.outcomes) - len(ok),
        "duration_s": res.duration_s,
        "request_rate_per_s": m["request_throughput_per_s"].value,
        **_ttft_error([o.ttft_s for o in ok if o.ttft_s is not None], cfg),
        **lateness,
        "client_loop_lag_ms_p99": m["client_loop_lag_ms_p99"].value,
    }


def measure_bench_serving(
    cfg: ComparisonConfig,
    *,
    sglang_python: str,
    double_python: str,
    workdir: Path,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """SGLang's ``bench_serving`` (``--backend sglang``) from ``sglang_python``'s install."""
    from dpbench.sglang_compat.server import bench_serving_module

    tok = workdir / "tokenizer"
    subprocess.run(
        [sglang_python, "-c", _TOKENIZER_SNIPPET, str(tok)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    out = workdir / "bench_serving.jsonl"
    module = bench_serving_module(sglang_python)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(extra_env or {})}
    env.pop("VIRTUAL_ENV", None)
    with _double(cfg, double_python, workdir / "double-bench_serving.log") as d:
        d.wait_ready(deadline_s=60, poll_s=0.2)
        cmd = [
            sglang_python,
            "-m",
            module,
            "--backend",
            "sglang",
            "--base-url",
            d.base_url,
            "--dataset-name",
            "random-ids",
            "--tokenize-prompt",
            "--tokenizer",
            str(tok),
            "--model",
            str(tok),
            "--num-prompts",
            str(cfg.num_requests),
            "--random-input-len",
            str(cfg.input_len),
            "--random-output-len",
            str(cfg.output_len),
            "--random-range-ratio",
            "1.0",
            "--max-concurrency",
            str(cfg.concurrency),
            "--request-rate",
            "inf",
            "--warmup-requests",
            "1",
            "--ready-check-timeout-sec",
            "0",
            "--disable-tqdm",
            "--output-file",
            str(out),
            "--output-details",
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=workdir, timeout=1800
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"bench_serving failed ({proc.returncode}); a ModuleNotFoundError below names a package the "
                f"release environment lacks:\n{proc.stderr[-3000:]}"
            )
        lateness = _double_lateness(d.base_url, cfg)
    result = json.loads(out.read_text().strip().splitlines()[-1])
    ttfts = [t for t, e in zip(result["ttfts"], result["errors"], strict=True) if not e]
    return {
        "client": f"sglang {module}",
        "completed": int(result["completed"]),
        "errors": sum(1 for e in result["errors"] if e),
        "duration_s": float(result["duration"]),
        "request_rate_per_s": float(result["request_throughput"]),
        **_ttft_error(ttfts, cfg),
        **lateness,
    }


def compare(
    cfg: ComparisonConfig,
    *,
    sglang_python: str | None,
    double_python: str | None = None,
    extra_env: dict[str, str] | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    """Both clients, each against a fresh double, ``repeats`` rounds alternating which goes first."""
    # Absolute, not resolved: a venv's python is a symlink that must stay inside its venv.
    sglang_python = os.path.abspath(sglang_python) if sglang_python else None
    double_python = os.path.abspath(double_python or sglang_python or sys.executable)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dpbench-clientbench-") as tmp:
        work = Path(tmp)
        for r in range(repeats):
            order = ["dpbench", "sglang"] if r % 2 == 0 else ["sglang", "dpbench"]
            for who in order:
                if who == "dpbench":
                    row = measure_dpbench(cfg, double_python=double_python, workdir=work)
                elif sglang_python is not None:
                    row = measure_bench_serving(
                        cfg,
                        sglang_python=sglang_python,
                        double_python=double_python,
                        workdir=work,
                        extra_env=extra_env,
                    )
                else:
                    continue
                rows.append({**row, "round": r, "loadavg_1m": os.getloadavg()[0]})
    return {
        "config": asdict(cfg),
        "ideal_request_rate_per_s": cfg.ideal_request_rate_per_s,
        "cpus": os.cpu_count(),
        "clients": rows,
    }
