"""The one registry of what the simulated-forward server replaces in SGLang, installed on first import.

Each :class:`Hook` names a target module, the member replaced (``Class.method`` or a
module function), why, and what the original must look like (parameters it must
accept). :func:`install` puts a finder on ``sys.meta_path`` that applies a module's
hooks right after that module is first imported, in every process whose start-up
imports this (see ``_boot/sitecustomize.py``). A target that is missing or changed
shape raises :class:`HookTargetChanged` naming the member: the server then dies at
start-up with that line in its log instead of running half-hooked.

Replace as little as possible: SGLang's HTTP server, tokenizer manager, DP controller (its
loop too: only an empty receive waits), schedulers, radix cache, KV pool sizing,
PrefillDelayer and metrics stay real.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dpbench.sglang_compat.simforward import lazypool, standin, vhooks


class HookTargetChanged(RuntimeError):
    """A hooked SGLang member is missing or no longer has the shape the stand-in needs."""


@dataclass(frozen=True)
class Hook:
    module: str
    member: str  # "Class.method" or "function"
    why: str
    make: Callable[[Any, ModuleType], Any]  # (original, module) -> replacement
    requires: tuple[str, ...] = ()  # parameter names the original must accept
    # attributes of SGLang's objects the replacement reads, each through standin._need
    # (a missing one fails naming it, never a default); a test checks this list against the
    # stand-in's code, so what the stand-in depends on is declared here, in one place
    reads: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        return f"{self.module}.{self.member}"


_RUNNER = "sglang.srt.model_executor.model_runner"
_POOLS = "sglang.srt.mem_cache.memory_pool"

REGISTRY: tuple[Hook, ...] = (
    Hook(
        "sgl_kernel.load_utils",
        "_load_architecture_specific_ops",
        "sgl_kernel's native ops need libcuda.so.1; SGLang imports the package on every path",
        standin.no_native_ops,
    ),
    Hook(
        "sglang.srt.distributed.parallel_state",
        "GroupCoordinator.__init__",
        "PyNccl / custom all-reduce / symmetric-memory communicators need CUDA; gloo CPU groups stay",
        standin.cpu_only_group,
        requires=("use_pynccl", "use_custom_allreduce"),
    ),
    Hook(
        "sglang.srt.entrypoints.engine",
        "_set_envs_and_config",
        "SGLang spawns its processes for CUDA's sake, each importing SGLang anew (~11 s of CPU); "
        "with no CUDA they fork from the launcher, which already holds SGLang (start_method)",
        standin.start_method,
        requires=("server_args",),
    ),
    Hook(
        "sglang.srt.managers.data_parallel_controller",
        "DataParallelController.event_loop",
        "its non-blocking receive spins a core (a GPU host gives it one); here an empty "
        "receive waits for the next message, which wakes it at once",
        standin.controller_waits,
        reads=("recv_from_tokenizer",),
    ),
    Hook(
        _RUNNER,
        "ModelRunner.load_model",
        "no weights: a bare module, zero weight bytes; the KV pool is sized by --max-total-tokens",
        standin.load_model,
    ),
    Hook(
        _POOLS,
        "MLATokenToKVPool._create_buffers",
        "the forward never reads or writes the KV pool: its buffers are zeros the OS backs only "
        "once written, not a zero-fill that keeps every page resident",
        lazypool.lazy_buffers,
    ),
    Hook(
        _POOLS,
        "ReqToTokenPool.__init__",
        "req_to_token (request slots × context length) is lazily backed too: only the rows "
        "requests use get pages",
        lazypool.lazy_buffers,
        requires=("size", "max_context_len", "device"),
    ),
    Hook(
        _RUNNER,
        "ModelRunner.init_attention_backends",
        "attention kernels are never run",
        standin.no_attention_backends,
    ),
    Hook(
        _RUNNER,
        "ModelRunner.init_cuda_graphs",
        "no CUDA graphs on a CPU",
        standin.no_cuda_graphs,
    ),
    Hook(
        _RUNNER,
        "ModelRunner.forward",
        "the forward: queue the cost model's time for this rank's batch on a virtual device "
        "(or sleep it), record the step",
        standin.forward,
        requires=("forward_batch",),
        reads=(
            "forward_mode",
            "batch_size",
            "seq_lens_sum",
            "extend_num_tokens",
            "extend_prefix_lens_cpu",
            "extend_seq_lens_cpu",
            "global_num_tokens_cpu",
            "max_total_num_tokens",
            "token_to_kv_pool_allocator",
        ),
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.handle_generate_request",
        "record when each request reaches its DP rank's scheduler (delivery latency; twin replay)",
        standin.log_arrival,
        requires=("recv_req",),
        reads=("rid",),
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.get_next_batch_to_run",
        "record every pass with work (state seen, batch chosen, delayer input and verdict: the "
        "divergence finder's server side) and time the passes that run no batch anywhere while "
        "requests wait (the event loop's period)",
        standin.record_pass,
        requires=("running_batch",),
        reads=(
            "running_batch",
            "waiting_queue",
            "chunked_req",
            "reqs",
            "finished",
            "rid",
            "forward_mode",
            "batch_is_full",
            "max_total_num_tokens",
            "token_to_kv_pool_allocator",
            "tree_cache",
        ),
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.get_new_batch_prefill",
        "record the queues as the pass's prefill step sees them (running batch after the merge)",
        standin.record_prefill_view,
        requires=("running_batch",),
        reads=("reqs", "waiting_queue", "finished"),
    ),
    Hook(
        "sglang.srt.managers.prefill_delayer",
        "PrefillDelayerSinglePassExecutor.__init__",
        "record the pool usage each pass's delayer executor is built with",
        standin.record_token_usage,
        requires=("token_usage",),
    ),
    Hook(
        "sglang.srt.managers.prefill_delayer",
        "PrefillDelayerSinglePassExecutor.negotiate_should_allow_prefill",
        "record what the rank first told the delayer in a pass, and its verdict",
        standin.record_negotiation,
        requires=("local_prefillable",),
    ),
    Hook(
        "sglang.srt.managers.prefill_delayer",
        "_record_single_pass_result",
        "record the pass's delayer outcome (input estimation, reason)",
        standin.record_outcome,
        requires=("output", "actual_execution"),
        reads=("input_estimation", "output_reason", "num_prefillable"),
    ),
    Hook(
        "sglang.srt.managers.scheduler",
        "Scheduler.process_batch_result",
        "results are read only once the virtual device has finished the forward (a GPU's sync)",
        standin.wait_for_device,
        requires=("batch", "result"),
        reads=("logits_output",),
    ),
    Hook(
        _RUNNER,
        "ModelRunner.sample",
        "next tokens: one valid non-EOS id per row, so requests decode exactly max_new_tokens",
        standin.sample,
        requires=("logits_output", "forward_batch"),
    ),
    Hook(
        "sglang.srt.managers.data_parallel_controller",
        "sock_send",
        "virtual clock: count each request the DP controller dispatches to a rank (the clock "
        "never passes a request on its way to a scheduler)",
        vhooks.count_dispatch,
        requires=("obj",),
    ),
    Hook(
        "sglang.srt.managers.scheduler_components.request_receiver",
        "SchedulerRequestReceiver.recv_requests",
        "virtual clock: count what a scheduler takes in, and take in every request already "
        "dispatched to it",
        vhooks.drain_receive,
    ),
    Hook(
        "sglang.srt.managers.scheduler_components.request_receiver",
        "sock_recv",
        "virtual clock: requests read off a scheduler's socket while it waited on its device "
        "come first in its next receive",
        vhooks.held_first,
        requires=("socket",),
    ),
    Hook(
        "sglang.srt.managers.scheduler_components.output_sender",
        "SenderWrapper.send_output",
        "virtual clock: count the output tokens a scheduler sends towards the client (the "
        "clock never passes a token on its way)",
        vhooks.count_emitted,
        requires=("output",),
    ),
    Hook(
        _RUNNER,
        "ModelRunner.compute_logprobs_only",
        "no logits to compute log-probabilities from",
        standin.no_logprobs,
    ),
)


def hooks_for(module: str) -> list[Hook]:
    return [h for h in REGISTRY if h.module == module]


def _owner_and_name(module: ModuleType, hook: Hook) -> tuple[Any, str]:
    *path, name = hook.member.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise HookTargetChanged(
                f"{hook.module} has no {part} (needed to replace {hook.target}: {hook.why})"
            )
    return owner, name


def check(module: ModuleType, hook: Hook) -> Any:
    """The original member, after checking it exists and accepts what the stand-in relies on."""
    owner, name = _owner_and_name(module, hook)
    original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if original is None:
        raise HookTargetChanged(
            f"{hook.target} is missing in this SGLang (the stand-in replaces it: {hook.why})"
        )
    if hook.requires:
        params = set(inspect.signature(original).parameters)
        missing = [p for p in hook.requires if p not in params]
        if missing:
            raise HookTargetChanged(
                f"{hook.target} no longer takes {', '.join(missing)} "
                f"(has: {', '.join(sorted(params))}); the stand-in needs them: {hook.why}"
            )
    return original


def apply(module: ModuleType) -> list[str]:
    """Apply every hook of ``module``; return the targets replaced."""
    done = []
    for hook in hooks_for(module.__name__):
        original = check(module, hook)
        owner, name = _owner_and_name(module, hook)
        replacement = hook.make(original, module)
        replacement.__dpbench_hook__ = hook.target
        setattr(owner, name, replacement)
        done.append(hook.target)
    return done


class _PostImportLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        apply(module)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds hooked modules through the rest of ``sys.meta_path`` and wraps their loader."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.names or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.on = False
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PostImportLoader(spec.loader)
        return spec


_installed = False


def install() -> None:
    """Hook every registry target in this process: now if already imported, else on first import."""
    global _installed
    if _installed:
        return
    _installed = True
    names = frozenset(h.module for h in REGISTRY)
    sys.meta_path.insert(0, _PostImportFinder(names))
    for name in names:
        if name in sys.modules:
            apply(sys.modules[name])
