"""Per-release environments: each imports its own SGLang scheduler on CPU with its own pins."""

from __future__ import annotations

import json
import subprocess

import pytest

from dpbench.envs import ensure_env

PROBE = """
import json, importlib.metadata as md
import sglang, torch, sglang.srt.managers.schedule_policy, sglang.srt.managers.prefill_delayer
print(json.dumps({"sglang": sglang.__version__, "transformers": md.version("transformers"),
                  "torch": torch.__version__, "cuda": torch.cuda.is_available(),
                  "flashinfer": any(d.metadata["Name"] == "flashinfer-python" for d in md.distributions())}))
"""


@pytest.mark.sglang
@pytest.mark.parametrize("version, transformers", [("0.5.16", "5.12.1"), ("0.5.23", "5.19.0")])
def test_release_env_imports_scheduler_with_its_pins(version, transformers, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = ensure_env(version)
    out = subprocess.run(
        [str(env.python), str(script)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["sglang"] == version
    assert info["transformers"] == transformers
    assert info["torch"].startswith("2.14.1")
    assert info["flashinfer"] is False, "GPU-only dependencies must not be installed"
