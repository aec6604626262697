"""The simulated-forward hook registry: every hook installs on each release's real wheel; a changed target fails loudly."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
from conftest import TEST_RELEASES

from dpbench.sglang_compat.simforward import hooks
from dpbench.sglang_compat.simforward.config import SimForwardConfig, omp_bind, server_env

# After the hook check: SGLang's own DataParallelController.event_loop, hooked and not, on a real zmq socket fed
# with SGLang's own sock_send: the loop's body is SGLang's; only self is built by hand.
_IN_RELEASE = """
import json, os, sys, threading, time
os.environ["CUDA_VISIBLE_DEVICES"] = ""
from dpbench.sglang_compat.simforward.check import check
verdict = check()  # installs the hooks, imports every hooked module
import zmq
from dpbench.sglang_compat.simforward import standin
from sglang.srt.managers import data_parallel_controller as dpc
from sglang.srt.managers.io_struct import sock_send

ctx = zmq.Context()
def run(loop, messages, wait_ms=standin.CONTROLLER_WAIT_MS):
    standin.CONTROLLER_WAIT_MS = wait_ms
    feeds, got = [0], []
    def feed():
        feeds[0] += 1
    ctl = object.__new__(dpc.DataParallelController)
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    ctl.recv_from_tokenizer = pull
    ctl.soft_watchdog = type("W", (), {"feed": staticmethod(feed)})()
    ctl._request_dispatcher = lambda req: got.append((req, time.monotonic()))
    threading.Thread(target=loop, args=(ctl,), daemon=True).start()
    time.sleep(0.2)
    idle0 = feeds[0]
    time.sleep(1.0)  # nothing sent: how often does the loop come round?
    idle = feeds[0] - idle0
    sent = []
    for m in messages:
        sent.append(time.monotonic())
        sock_send(push, m)
        time.sleep(0.05)
    deadline = time.monotonic() + 5
    while len(got) < len(messages) and time.monotonic() < deadline:
        time.sleep(0.01)
    lags = [g[1] - s for g, s in zip(got, sent)]
    return {"idle_rounds_per_s": idle, "got": [g[0] for g in got], "lag_max_s": max(lags, default=None)}

hooked = dpc.DataParallelController.event_loop
print(json.dumps({
    "check": verdict,
    "hooked": getattr(hooked, "__dpbench_hook__", None),
    "with_hook": run(hooked, [{"n": i} for i in range(5)]),
    "with_a_2_s_wait": run(hooked, [{"n": i} for i in range(5)], wait_ms=2000),
    "sglang_own": run(hooked.__wrapped__, [{"n": i} for i in range(5)]),
}))
"""


@pytest.fixture(scope="module", params=TEST_RELEASES)
def in_release(request):
    """What one process of the release's server environment saw: the hook check
    (``simforward.check``: it installs the hooks and imports every hooked module), then
    SGLang's DP controller loop, hooked and not. One SGLang import serves both tests."""
    from dpbench.envs.venv import ensure_server_env

    python = ensure_server_env(request.param).python
    proc = subprocess.run(
        [str(python), "-c", _IN_RELEASE], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.sglang
def test_every_hook_installs_on_the_real_wheel(in_release):
    verdict = in_release["check"]
    assert verdict["ok"], verdict
    assert sorted(verdict["hooked"]) == sorted(h.target for h in hooks.REGISTRY)


@pytest.mark.sglang
def test_the_dp_controller_waits_for_requests_instead_of_spinning(in_release):
    """SGLang's DP controller loops on a non-blocking receive: idle, it comes round tens of
    thousands of times a second (a core of its own on a GPU host; here half the machine).
    Hooked, an empty receive waits up to 20 ms for the next message, and a message sent
    reaches the dispatcher, in order, without waiting out the 20 ms."""
    from dpbench.sglang_compat.simforward.standin import CONTROLLER_WAIT_MS

    out = in_release
    assert (
        out["hooked"]
        == "sglang.srt.managers.data_parallel_controller.DataParallelController.event_loop"
    )
    want = [{"n": i} for i in range(5)]
    for side in ("with_hook", "with_a_2_s_wait", "sglang_own"):
        assert out[side]["got"] == want, (side, out)
    # at most one round per wait (and the first), however loaded the machine
    assert out["with_hook"]["idle_rounds_per_s"] <= 1000 / CONTROLLER_WAIT_MS + 2, out
    assert out["sglang_own"]["idle_rounds_per_s"] > 1000, out  # the spin the hook removes
    # a message wakes the wait, not the wait's end: with a 2 s wait, five messages 50 ms
    # apart would otherwise all reach the dispatcher together, up to 2 s late (here 0.3 ms)
    assert out["with_a_2_s_wait"]["lag_max_s"] < 0.5, out


def _fake_runner_module(**methods) -> types.ModuleType:
    mod = types.ModuleType("sglang.srt.model_executor.model_runner")
    mod.ModelRunner = type("ModelRunner", (), methods)
    mod.ModelRunnerOutput = object
    mod.LogitsProcessorOutput = object
    return mod


def test_a_missing_member_fails_naming_it():
    mod = _fake_runner_module(load_model=lambda self: None)
    with pytest.raises(
        hooks.HookTargetChanged, match=r"ModelRunner\.init_attention_backends is missing"
    ):
        hooks.apply(mod)


def test_a_changed_signature_fails_naming_the_parameter():
    def forward(self, batch):  # renamed parameter: the stand-in reads forward_batch
        return None

    hook = next(h for h in hooks.REGISTRY if h.member == "ModelRunner.forward")
    mod = _fake_runner_module(forward=forward)
    with pytest.raises(hooks.HookTargetChanged, match=r"no longer takes forward_batch"):
        hooks.check(mod, hook)


def test_the_server_environment_hooks_every_process_and_binds_one_core_per_rank(tmp_path):
    conf = SimForwardConfig(record_dir=str(tmp_path), cost_factory="m:f")
    env = server_env(conf.write(tmp_path / "c.json"), dp_size=4)
    assert env["PYTHONPATH"].split(":")[0].endswith("simforward/_boot")
    assert env["SGLANG_ENABLE_METRICS_DP_ATTENTION"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert omp_bind(4, cores=2) == "0|1|0|1" and omp_bind(1, cores=2, first_rank=1) == "1"
    with pytest.raises(ValueError, match="time_scale"):
        SimForwardConfig(record_dir="x", cost_factory="m:f", time_scale=0)
    assert conf.start_method == "fork"  # SGLang's processes fork from the launcher
    with pytest.raises(ValueError, match="start_method must be fork or spawn, got 'forkserver'"):
        SimForwardConfig(record_dir="x", cost_factory="m:f", start_method="forkserver")


def test_the_rank_cost_charges_a_rank_its_own_attention_and_everyones_moe():
    from dpbench.server.simcost import rank_cost

    cost = rank_cost("deepseek-v3", 2)
    extend = {
        "kind": "extend",
        "num_reqs": 1,
        "new_tokens": 2048,
        "context_tokens": 2048,
        "attn_pairs": 2048 * 2049 // 2,
    }
    idle = {"kind": "idle", "num_reqs": 0, "new_tokens": 0, "context_tokens": 0, "attn_pairs": 0}
    prefilling = cost(extend, [2048, 0], 0)
    beside = cost(idle, [2048, 0], 1)  # an idle rank still runs the MoE over the other's tokens
    alone = cost(idle, [0, 0], 1)
    assert prefilling > beside > alone > 0
    assert cost(extend, [2048, 0], 0) == prefilling  # deterministic
    # a rank's tokens missing from SGLang's gather is an error, never 0 tokens
    with pytest.raises(ValueError, match="1 entries for 2 DP ranks"):
        cost(idle, [2048], 1)


def test_the_start_up_module_does_nothing_without_the_config_variable():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; import sitecustomize; print(any('PostImport' in type(f).__name__ for f in sys.meta_path))",
        ],
        capture_output=True,
        text=True,
        env={
            "PYTHONPATH": str(
                __import__("dpbench.sglang_compat.simforward", fromlist=["boot_dir"]).boot_dir()
            )
        },
    )
    assert proc.stdout.strip() == "False", proc.stderr


def test_every_attribute_the_stand_in_reads_is_declared_in_the_registry():
    """What the stand-in reads off SGLang's objects (each through ``_need``, which fails naming
    it) is exactly what the hook registry declares: no undeclared read, no stale declaration."""
    import ast
    import inspect

    from dpbench.sglang_compat.simforward import standin
    from dpbench.sglang_compat.simforward.hooks import REGISTRY

    tree = ast.parse(inspect.getsource(standin))
    read = {
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "_need"
        and isinstance(node.args[1], ast.Constant)
    }
    declared = {name for hook in REGISTRY for name in hook.reads}
    assert read and read == declared, (sorted(read - declared), sorted(declared - read))
