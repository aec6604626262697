"""The simulated-forward server's KV pool costs no memory: the forward never touches it (real wheels).

SGLang zero-fills its KV pool and ``req_to_token`` on the CPU, which kept every page of both
resident in each scheduler (7.4 GB per scheduler at ``long-prompt-burst``'s DP 2 plan). The
``lazypool`` hooks back them with pages the OS gives only once written. Here SGLang's own
pool classes are built in each release's environment, and one started server's schedulers
are read from ``/proc`` after a replay.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import TEST_RELEASES
from simserver import server_processes, sim_options

from dpbench.server.run import execute, prepare
from dpbench.server.simlaunch import SIM_SERVER_MODEL

# SGLang's own pool classes, hooked as in a server, then read: RSS growth, zeros, a write.
_POOLS = """
import json
import torch
from dpbench.sglang_compat.simforward import hooks
hooks.install()
from sglang.srt.mem_cache import memory_pool as mp

def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS"))

r0 = rss()
kv = mp.MLATokenToKVPool(100_000, page_size=1, dtype=torch.bfloat16, kv_lora_rank=512,
    qk_rope_head_dim=64, layer_num=4, device="cpu", enable_memory_saver=False)
rt = mp.ReqToTokenPool(size=512, max_context_len=163840, device="cpu", enable_memory_saver=False)
grown = rss() - r0
rt.write((7, slice(0, 9000)), torch.arange(1, 9001, dtype=torch.int32))
print(json.dumps({
    "bytes": sum(b.nbytes for b in kv.kv_buffer) + rt.req_to_token.nbytes,
    "grown": grown,
    "nonzero": int(kv.kv_buffer[3].count_nonzero()) + int(rt.req_to_token[:7].count_nonzero()),
    "written": int(rt.req_to_token[7].sum()),
    "shapes": [list(kv.kv_buffer[0].shape), list(rt.req_to_token.shape)],
    "module_torch_restored": mp.torch is torch,
}))
"""


@pytest.mark.sglang
@pytest.mark.parametrize("release", TEST_RELEASES)
def test_sglangs_own_pools_are_zeros_that_take_no_memory_until_written(release):
    from dpbench.envs.venv import ensure_server_env

    python = ensure_server_env(release).python
    proc = subprocess.run([str(python), "-c", _POOLS], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["shapes"] == [[100_001, 1, 576], [513, 163840]]
    assert got["bytes"] > 700e6  # 461 MB of KV pool, 336 MB of req_to_token
    assert got["grown"] < 0.02 * got["bytes"], got  # zero-filled, all of it is resident
    assert got["nonzero"] == 0  # they read as zeros, as torch.zeros promises
    assert got["written"] == 9000 * 9001 // 2
    assert got["module_torch_restored"]


# a pool far larger than what the rest of a scheduler holds (~0.6 GiB anonymous)
_POOL_TOKENS = 600_000


def _kv_pool_bytes(tokens: int) -> int:
    """The MLA pool SGLang allocates for ``tokens``: bf16 (kv_lora_rank + rope dim) per layer."""
    config = json.loads(
        (
            Path(__file__).parents[1] / "workloads/models" / SIM_SERVER_MODEL / "config.json"
        ).read_text()
    )
    per_token = config["kv_lora_rank"] + config["qk_rope_head_dim"]
    return tokens * per_token * 2 * config["num_hidden_layers"]


def _anonymous_bytes(pid: int) -> int:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return next(
        int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Anonymous:")
    )


def _scheduler_memory(marker: str) -> dict[str, int]:
    """Anonymous resident bytes of each scheduler of the server whose environment names ``marker``."""
    out = {}
    for pid in server_processes(marker):
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode().strip()
        if title.startswith("sglang::scheduler"):
            out[title] = _anonymous_bytes(pid)
    return out


@pytest.mark.sglang
@pytest.mark.slow
def test_a_served_schedulers_memory_stays_far_below_its_kv_pool(tmp_path):
    opts = sim_options(
        "0.5.23",
        tmp_path,
        use_kv_plan=False,
        extra_args=(f"--max-total-tokens={_POOL_TOKENS}",),
    )
    prep = prepare(opts)
    readings: dict[str, int] = {}
    done = []

    def on_done(outcome) -> None:  # the last request's answer: the replay has run
        done.append(outcome)
        if len(done) == len(prep.requests):
            readings.update(_scheduler_memory(str(tmp_path)))

    execute(prep, on_done=on_done)
    assert [o.ok for o in done] == [True] * len(prep.requests)
    pool = _kv_pool_bytes(_POOL_TOKENS)  # 2.76 GB, req_to_token's 1.34 GB on top
    print({title: f"{anonymous / 2**30:.2f} GiB" for title, anonymous in readings.items()})
    assert sorted(readings) == ["sglang::scheduler_DP0_TP0", "sglang::scheduler_DP1_TP1"]
    for title, anonymous in readings.items():
        assert anonymous < pool / 2, (
            f"{title}: {anonymous / 1e9:.2f} GB anonymous, pool {pool / 1e9:.2f} GB"
        )
