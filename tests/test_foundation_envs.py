"""Per-release environments: each imports its own SGLang scheduler on CPU with its own pins."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from dpbench.envs import ensure_env

PROBE = """
import importlib.machinery as machinery
compiled = []  # every module this process compiles from source (no valid .pyc on disk)
_to_code = machinery.SourceFileLoader.source_to_code
def _counted(self, data, path, *args, **kwargs):
    compiled.append(path)
    return _to_code(self, data, path, *args, **kwargs)
machinery.SourceFileLoader.source_to_code = _counted
import json, os, sys, importlib.metadata as md
import sglang, torch, sglang.srt.managers.schedule_policy, sglang.srt.managers.prefill_delayer
import sglang.srt.managers.scheduler
from_source = sorted(compiled)
print(json.dumps({"sglang": sglang.__version__, "transformers": md.version("transformers"),
                  "torch": torch.__version__, "cuda": torch.cuda.is_available(),
                  "flashinfer": any(d.metadata["Name"] == "flashinfer-python" for d in md.distributions()),
                  "imported": len(sys.modules), "from_source": from_source}))
"""


@pytest.mark.sglang
@pytest.mark.parametrize("version, transformers", [("0.5.16", "5.12.1"), ("0.5.23", "5.19.0")])
def test_release_env_imports_scheduler_with_its_pins(version, transformers, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = ensure_env(version)
    out = subprocess.run(
        [str(env.python), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["sglang"] == version
    # the environment's bytecode was written when it was built: no module SGLang's
    # scheduler imports is compiled from source (counted where the loader compiles)
    assert info["imported"] > 1000 and info["from_source"] == [], info["from_source"][:20]
    assert info["transformers"] == transformers
    assert info["torch"].startswith("2.14.1")
    assert info["flashinfer"] is False, "GPU-only dependencies must not be installed"


@pytest.mark.sglang
def test_run_in_env_captures_streams_and_reaps_on_timeout():
    from dpbench.core.procs import alive
    from dpbench.envs import run_in_env

    done = run_in_env("0.5.23", "platform", timeout=120)
    assert done.returncode == 0 and done.stdout.strip()
    lines: list[str] = []
    streamed = run_in_env("0.5.23", "calendar", ["2026", "12"], timeout=120, on_line=lines.append)
    assert streamed.returncode == 0 and streamed.stdout == ""
    assert any("December 2026" in line for line in lines)
    # a child that never ends: killed with its process group, then TimeoutExpired
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_env(
            "0.5.23",
            "http.server",
            ["0", "--bind", "127.0.0.1"],
            timeout=5,
            on_line=lines.append,
        )
    out = subprocess.run(
        ["pgrep", "-f", "-m", "http.server 0 --bind 127.0.0.1"], capture_output=True, text=True
    )
    assert not [int(p) for p in out.stdout.split() if alive(int(p))]


FA3_PROBE = """
import json, os
os.environ["CUDA_VISIBLE_DEVICES"] = ""
from dpbench.sglang_compat.simforward import hooks
hooks.install()  # as the simulated server does: sgl_kernel's native-op loader is a no-op
try:
    import sgl_kernel.flash_attn
except ImportError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"error": None}))
"""


@pytest.mark.sglang
def test_server_env_drops_the_cuda_only_fa3_binary_without_changing_its_import():
    """sglang-kernel's FA3 extension (>1 GB) cannot load without libcuda; it is removed, and
    ``import sgl_kernel.flash_attn`` fails with the very ImportError it raised before."""
    from dpbench.envs.venv import CPU_UNLOADABLE, _site_packages, ensure_server_env

    env = ensure_server_env("0.5.23")
    site = _site_packages(env.python)
    assert not [p for pattern in CPU_UNLOADABLE for p in site.glob(pattern)]
    assert (site / "sgl_kernel" / "flash_attn.py").exists()  # the Python side stays whole
    stamp = json.loads((env.path / "dpbench-env.json").read_text())
    assert stamp["server"]["dropped"] == ["sgl_kernel/flash_ops.abi3.so"]
    out = subprocess.run(
        [str(env.python), "-c", FA3_PROBE], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["error"] == (
        "Can not import FA3 in sgl_kernel. Please check your installation."
    )
