"""SGLang's own Triton attention kernels under Triton's interpreter on a CPU, against the reference.

Runs inside the SGLang 0.5.23 release environment (torch, triton, SGLang), in child
processes with TRITON_INTERPRET=1 set before triton is imported. The tiny cases use
float32: Triton 3.8's interpreter computes bf16 launches wrongly on a CPU (relative error
~1e9 seen on every case), so bf16 correctness is left to the GPU check.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dpbench.envs import ensure_env
from dpbench.kernels.calibration import InterpreterCalibrationError, load_calibration

pytestmark = pytest.mark.sglang
VERSION = "0.5.23"
INTERP = {"TRITON_INTERPRET": "1", "DPBENCH_QUIET": "1"}


@pytest.fixture(scope="module")
def env_python() -> Path:
    # a release environment that cannot be built is a failure, not a skip
    return ensure_env(VERSION).python


def _run(
    python: Path, args: list[str], *, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    import os

    full = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [str(python), *args], capture_output=True, text=True, timeout=timeout, env=full
    )


@pytest.fixture(scope="module")
def interpreter_calibration(
    env_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("kernels") / "calib-interpreter.json"
    proc = _run(
        env_python,
        ["-m", "dpbench.kernels.cli", "run", "--interpreter", "--sweep", "tiny", "-o", str(out)],
        env=INTERP,
    )
    return out, proc


def test_selfchecks_reference_poison_layout(env_python: Path) -> None:
    proc = _run(env_python, ["-m", "dpbench.kernels.selftest"], timeout=300)
    checks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert checks, proc.stderr[-2000:]
    failed = [c for c in checks if not c["ok"]]
    assert not failed, failed
    assert proc.returncode == 0
    names = {c["check"].split(":")[0] for c in checks}
    assert {
        "reference-vs-sdpa",
        "reference-chunking",
        "poison-unwritten",
        "poison-half-written",
        "wrong-values-fail",
        "right-values-pass",
        "kv-layout",
    } <= names


def test_interpreter_run_matches_reference_for_decode_extend_mixed(interpreter_calibration) -> None:
    path, proc = interpreter_calibration
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    cal = load_calibration(path, allow_interpreter=True)
    points = cal.data.points
    assert {p.kind for p in points} == {"decode", "extend", "mixed"}
    assert {p.page_size for p in points} == {1, 64}
    assert {p.form for p in points} == {"mla", "mha"}
    assert not cal.data.failures
    for p in points:
        assert p.rel_error < 1e-3, (p.case, p.rel_error)
        assert p.median_s > 0 and p.timing["method"] == "cpu-wallclock"
    assert cal.sglang_version == VERSION and cal.interpreter
    assert cal.data.pairs and all(
        r["step_s"] == max(r["extend_s"], r["decode_s"]) for r in cal.data.pairs
    )


def test_interpreter_calibration_is_refused_unless_allowed(interpreter_calibration) -> None:
    path, proc = interpreter_calibration
    assert proc.returncode == 0, proc.stderr[-3000:]
    with pytest.raises(InterpreterCalibrationError, match="Triton's interpreter"):
        load_calibration(path)
    cal = load_calibration(path, allow_interpreter=True)
    # The twin's questions get answers from the measured (CPU) points.
    for kind, kw in [
        ("decode", dict(batch=2, context=40, new_tokens=0)),
        ("extend", dict(batch=1, context=70, new_tokens=20)),
        ("extend", dict(batch=1, context=0, new_tokens=24)),
        ("mixed", dict(batch=3, context=65, new_tokens=9)),
    ]:
        assert cal.estimate_s(kind, **kw) > 0


def test_kernel_modules_only_import_runs_the_same_kernels(env_python: Path) -> None:
    code = (
        "import os; os.environ['TRITON_INTERPRET']='1'\n"
        "import sys\n"
        "from dpbench.sglang_compat.kernels import load_attention_kernels\n"
        "from dpbench.kernels.cases import Case\n"
        "from dpbench.kernels.inputs import make_inputs\n"
        "from dpbench.kernels.verify import verify\n"
        "k = load_attention_kernels('kernel-modules-only')\n"
        "assert 'sglang.lang' not in sys.modules, 'the package __init__ ran'\n"
        "c = Case('decode', heads=16, page_size=64, batch=2, context=70, dtype='float32')\n"
        "v = verify(k, make_inputs(c, device='cpu', seed=5, max_kv_splits=4))\n"
        "import torch\n"
        "s = k.num_kv_splits(torch.tensor([70, 70, 9000], dtype=torch.int32), num_heads=128, max_kv_splits=256, core_count=132)\n"
        "assert s.dtype == torch.int32 and 1 <= int(s.min()) and int(s.max()) <= 256 and int(s[2]) >= int(s[0]), s\n"
        "from dpbench.sglang_compat.provenance import provenance\n"
        "p = provenance(())  # the run result's block; it crashed on a bare 'sglang' module (GPU check)\n"
        "assert p['sglang']['version'] == k.sglang_version and p['placement']['label'], p\n"
        "print(k.import_path, k.sglang_version, v.ok, v.rel_error)\n"
    )
    proc = _run(env_python, ["-c", code], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    how, version, ok, err = proc.stdout.split()[-4:]
    assert (how, version, ok) == ("kernel-modules-only", VERSION, "True"), proc.stdout
    assert float(err) < 1e-3


def test_check_without_cuda_exits_with_a_reason(env_python: Path, tmp_path: Path) -> None:
    proc = _run(
        env_python, ["-m", "dpbench.kernels.cli", "check", "-o", str(tmp_path / "out")], timeout=300
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert "needs a CUDA GPU" in proc.stdout + proc.stderr


def test_asv_setup_skips_without_cuda_in_the_release_env(env_python: Path) -> None:
    code = (
        "import benchmarks.kernels as k\n"
        "cache = k.DecodeAttention().setup_cache()\n"
        "print('CACHE', sorted(cache))\n"
        "for cls, args in [(k.DecodeAttention, (64, 1, 1024)), (k.ExtendAttention, (1, 512, 0)),"
        " (k.MixedAttention, (64, 2048, 32, 4096))]:\n"
        "    try:\n"
        "        cls().setup(cache, *args)\n"
        "    except NotImplementedError as e:\n"
        "        print('SKIP', e)\n"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [str(env_python), "-c", code], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIP")]
    assert len(lines) == 3 and all("CUDA" in ln for ln in lines), proc.stdout
    assert "CACHE ['skip']" in proc.stdout  # no ceilings measured (or invented) without a GPU


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17"])
def test_older_releases_kernels_match_reference(version: str) -> None:
    """The before/after pair of PR #31835: same entry points, same results at tiny sizes."""
    python = ensure_env(version).python
    code = (
        "import os; os.environ['TRITON_INTERPRET']='1'\n"
        "from dpbench.sglang_compat.kernels import load_attention_kernels\n"
        "from dpbench.kernels.cases import sweep\n"
        "from dpbench.kernels.inputs import make_inputs\n"
        "from dpbench.kernels.verify import verify\n"
        "k = load_attention_kernels()\n"
        "print('VERSION', k.sglang_version)\n"
        "for i, c in enumerate(sweep('tiny', dtype='float32')):\n"
        "    v = verify(k, make_inputs(c, device='cpu', seed=i, max_kv_splits=4))\n"
        "    print('CASE', c.kind, c.name, v.ok, v.rel_error)\n"
    )
    proc = _run(python, ["-c", code], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert f"VERSION {version}" in lines
    cases = [ln.split() for ln in lines if ln.startswith("CASE")]
    assert {c[1] for c in cases} == {"decode", "extend", "mixed"}
    assert all(c[3] == "True" and float(c[4]) < 1e-3 for c in cases), cases
