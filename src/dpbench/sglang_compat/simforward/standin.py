"""The replacements the hook registry installs: a forward timed by a cost model, and no CUDA.

Every function here takes ``(original, module)`` and returns the replacement member
(see :mod:`.hooks`). Per scheduler process, :class:`RankState` holds the cost function,
the DP rank and the step-record file; it is created on the first forward.

Where the modelled time goes (``SimForwardConfig.virtual_device``):

- on (default): a **virtual device**, as a GPU stream behaves under SGLang's overlap
  scheduler. A forward is queued, not slept: it starts at ``max(launch, previous forward's
  end)`` and ends ``model_s`` later; the call returns at once with that end time on its
  output (:data:`READY_ATTR`), and ``Scheduler.process_batch_result`` sleeps until it
  before SGLang reads the results (:func:`wait_for_device`), as the real scheduler blocks
  on the copy-done event. So the scheduler's CPU work for batch k+1 runs while batch k is
  "on the device", and a step lasts max(modelled time, CPU work), as on a GPU. The ranks'
  devices are coupled (:class:`DeviceClock`): step k starts on a rank only after every
  rank's step k−1 ended, as the MoE and all-reduce collectives inside a forward force. With
  ``--disable-overlap-schedule`` SGLang processes each result right after its launch and
  the same two hooks give serial timing, again as on a GPU.
- off: the forward sleeps ``model_s`` on the scheduler's thread (every step costs the
  modelled time plus the scheduler's CPU work, the stand-in before 2026-12-01).

A step record (one JSON line per forward, per rank, in ``rank<N>.jsonl``)::

    {"step": i, "pid": the scheduler process, "t": monotonic start, "mode": "EXTEND"|"DECODE"|"IDLE"|…, "kind": "extend"|
     "decode"|"idle", "bs": requests, "extend_tokens": new tokens (extend), "ctx_tokens":
     KV tokens attention reads, "kv_used": pool tokens allocated (radix cache included),
     "kv_total": pool size, "global_tokens": tokens per rank this step (SGLang's MLP-sync
     gather), "model_s": modelled seconds, "sleep_s": device seconds (model_s × time
     scale), "start"/"end": monotonic device start and end (``t`` is the launch)}
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from dpbench.sglang_compat.simforward import vhooks
from dpbench.sglang_compat.simforward.config import SimForwardConfig
from dpbench.sglang_compat.simforward.dprank import StandInError, dp_rank_reader
from dpbench.sglang_compat.simforward.vhooks import now as _now

# How this process's attention-DP rank is read, newest API first (capability, not version).
_OFF_FLAGS = (
    "use_pynccl",
    "use_pymscclpp",
    "use_custom_allreduce",
    "use_torch_symm_mem_all_reduce",
)


# the attribute of a forward's LogitsProcessorOutput that holds when its device work ends
READY_ATTR = "_dpbench_ready_at"
STEP_ATTR = "_dpbench_step"  # and which of the rank's steps it was


# -- hooks that switch CUDA things off -------------------------------------------------
def no_native_ops(original: Any, module: ModuleType) -> Any:
    @functools.wraps(original)
    def _load_architecture_specific_ops(*args: Any, **kwargs: Any) -> None:
        return None

    return _load_architecture_specific_ops


def cpu_only_group(original: Any, module: ModuleType) -> Any:
    sig = inspect.signature(original)
    off = [p for p in _OFF_FLAGS if p in sig.parameters]

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = sig.bind(self, *args, **kwargs)
        for p in off:
            bound.arguments[p] = False
        original(*bound.args, **bound.kwargs)

    return __init__


def load_model(original: Any, module: ModuleType) -> Any:
    @functools.wraps(original)
    def load_model(self: Any) -> None:
        import torch

        self.model = torch.nn.Module()
        self.loader = SimpleNamespace(preloaded_weights_bytes=0)
        self.sliding_window_size = None
        self.prefill_aware_swa = False
        self.dtype = self.model_config.dtype
        self.weight_load_mem_usage = 0.0
        self.startup_weight_load = None

    return load_model


class _NullBackend:
    """An attention backend whose every method does nothing (the forward never attends)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def no_attention_backends(original: Any, module: ModuleType) -> Any:
    @functools.wraps(original)
    def init_attention_backends(self: Any, *args: Any, **kwargs: Any) -> None:
        self.attn_backend = _NullBackend()
        self.decode_attn_backend = self.attn_backend
        self.decode_attn_backend_group = []
        self.prefill_attention_backend_str = "simulated"
        self.decode_attention_backend_str = "simulated"

    return init_attention_backends


def no_cuda_graphs(original: Any, module: ModuleType) -> Any:
    @functools.wraps(original)
    def init_cuda_graphs(self: Any, *args: Any, **kwargs: Any) -> None:
        self.eager_runner = None
        self.prefill_cuda_graph_runner = None
        self.decode_cuda_graph_runner = None
        self.graph_mem_usage = 0.0

    return init_cuda_graphs


def no_logprobs(original: Any, module: ModuleType) -> Any:
    @functools.wraps(original)
    def compute_logprobs_only(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    return compute_logprobs_only


# -- the DP controller's wait ----------------------------------------------------------
# How long the DP controller's non-blocking receive from the tokenizer manager may wait
# for a message before it reports "nothing" as before: a message wakes it at once, so
# requests are dispatched as soon as they arrive; whatever else SGLang's loop does runs
# at least this often.
CONTROLLER_WAIT_MS = 20


class WaitingSocket:
    """A zmq socket whose non-blocking receives first wait up to :data:`CONTROLLER_WAIT_MS`
    for a message; everything else is the socket's own."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def _wait(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import zmq

        flags = kwargs.get("flags", args[0] if args else 0)
        if flags & zmq.NOBLOCK:
            self._sock.poll(timeout=CONTROLLER_WAIT_MS)

    def recv(self, *args: Any, **kwargs: Any) -> Any:
        self._wait(args, kwargs)
        return self._sock.recv(*args, **kwargs)

    def recv_pyobj(self, *args: Any, **kwargs: Any) -> Any:
        self._wait(args, kwargs)
        return self._sock.recv_pyobj(*args, **kwargs)

    def recv_multipart(self, *args: Any, **kwargs: Any) -> Any:
        self._wait(args, kwargs)
        return self._sock.recv_multipart(*args, **kwargs)


def controller_waits(original: Any, module: ModuleType) -> Any:
    """SGLang's DP controller loops on a non-blocking receive (``zmq.NOBLOCK``) with nothing
    in between: on a GPU host that spins a core of its own; on these two cores it took a
    whole core from the schedulers and the load client for every server's whole life (309 s
    of CPU in one test run). Its loop runs unchanged; only an empty receive now waits for
    the next message (:class:`WaitingSocket`) instead of returning at once."""

    @functools.wraps(original)
    def event_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        sock = _need(self, "recv_from_tokenizer", "nothing: the controller waits on it")
        if not isinstance(sock, WaitingSocket):
            self.recv_from_tokenizer = WaitingSocket(sock)
        vhooks.note_workers(self)
        return original(self, *args, **kwargs)

    return event_loop


# -- how SGLang starts its processes --------------------------------------------------
def start_method(original: Any, module: ModuleType) -> Any:
    """SGLang sets ``spawn`` for every process it starts (CUDA cannot be forked), so each of a
    server's DP controller, schedulers and detokenizer imports torch, transformers and SGLang
    anew: ~11 s of CPU each, most of a small server's start-up on two cores. Nothing here
    touches CUDA, so under ``start_method='fork'`` the launcher's children (and the DP
    controller's schedulers) are forked from a process that has already imported SGLang,
    hooks applied. Every process still runs SGLang's own code from its own entry point."""

    @functools.wraps(original)
    def _set_envs_and_config(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        method = SimForwardConfig.from_env().start_method
        if method != "spawn":
            import multiprocessing

            multiprocessing.set_start_method(method, force=True)
        return result

    return _set_envs_and_config


# -- the forward -----------------------------------------------------------------------
def _load_factory(ref: str) -> Any:
    mod, _, fn = ref.partition(":")
    return getattr(importlib.import_module(mod), fn)


class DeviceClock:
    """The DP ranks' virtual devices, coupled as a forward's collectives couple GPUs.

    A file of 2 × dp_size float64 (monotonic device end times) the ranks of this machine
    share, double-buffered by step parity: rank r writes ``end[k % 2][r]`` when it launches
    step k and reads ``max(end[(k − 1) % 2])`` to start it. Safe without locks because SGLang's
    MLP-sync all-gather before step k's launch orders every rank's launch of step k − 1
    before it, and no rank can launch step k + 1 (the other parity's writer) before this
    rank joins step k + 1's all-gather. Ranks on other machines (multi-node) are not in it.
    """

    def __init__(self, path: Path, dp_size: int, rank: int) -> None:
        import mmap

        self.n, self.rank = dp_size, rank
        size = 3 * dp_size * 8  # ends of two steps, then each rank's last published step + 1
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._ends = memoryview(self._map).cast("d")

    def start(self, step: int, launch: float) -> float:
        """When step ``step`` can start on this rank's device: after every rank's previous step."""
        if step == 0:
            return launch
        prev = (step - 1) % 2 * self.n
        return max(launch, max(self._ends[prev : prev + self.n]))

    def publish(self, step: int, end: float) -> None:
        self._ends[step % 2 * self.n + self.rank] = end
        self._ends[2 * self.n + self.rank] = step + 1

    def group_end(self, step: int, timeout_s: float = 60.0) -> float:
        """When step ``step`` ends on the last rank (waits, on the wall clock, until every rank
        launched it: they all do, as every rank runs every DP-attention step)."""
        deadline = time.monotonic() + timeout_s
        while min(self._ends[2 * self.n : 3 * self.n]) < step + 1:
            if time.monotonic() > deadline:
                raise StandInError(
                    f"step {step}: ranks launched up to {list(self._ends[2 * self.n :])} steps "
                    f"after {timeout_s:.0f} s; the ranks' steps are not in lockstep"
                )
            time.sleep(0.0002)
        base = step % 2 * self.n
        return max(self._ends[base : base + self.n])


class RankState:
    """One scheduler process's stand-in: cost function, DP rank, record file, step counter."""

    def __init__(self, runner: Any) -> None:
        self.config = SimForwardConfig.from_env()
        self.rank = int(dp_rank_reader()())
        self.cost = _load_factory(self.config.cost_factory)(**self.config.cost_args)
        self.step = 0
        self.busy_until = 0.0  # the virtual device's queue: when its last forward ends
        self.runner = runner
        self.vocab = int(runner.model_config.vocab_size)
        self._zeros: Any = None
        Path(self.config.record_dir).mkdir(parents=True, exist_ok=True)
        path = Path(self.config.record_dir) / f"rank{self.rank}.jsonl"
        # O_APPEND, one write per step: a SIGKILLed rank loses nothing already written
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.clock = (
            DeviceClock(
                Path(self.config.record_dir) / "device-clock.f64", self.config.dp_size, self.rank
            )
            if self.config.virtual_device and self.rank < self.config.dp_size
            else None
        )
        _PROCESS.write(_process_record())

    def logits(self, rows: int) -> Any:
        import torch

        if self._zeros is None or self._zeros.shape[0] < rows:
            self._zeros = torch.zeros((max(rows, 64), self.vocab), dtype=torch.bfloat16)
        return self._zeros[:rows]

    def kv(self) -> tuple[int, int]:
        total = int(_need(self.runner, "max_total_num_tokens", "the KV pool's size"))
        alloc = _need(self.runner, "token_to_kv_pool_allocator", "the KV pool's use")
        free = int(alloc.available_size())
        return total - free, total

    def run(self, fb: Any) -> tuple[int, float]:
        """Time and record one forward; return (rows, when its results are ready: the clock's
        seconds, monotonic or virtual)."""
        t0 = _now()
        mode = fb.forward_mode
        if mode.is_idle():
            kind = "idle"
        elif mode.is_decode():
            kind = "decode"
        elif mode.is_extend():
            kind = "extend"
        else:
            raise StandInError(
                f"forward mode {mode.name} is not simulated (extend/decode/idle only)"
            )
        bs = int(_need(fb, "batch_size", "the forward's batch size"))
        ctx = int(_need(fb, "seq_lens_sum", "the forward's context")) if kind != "idle" else 0
        extend_tokens = pairs = 0
        if kind == "extend":
            extend_tokens = int(_need(fb, "extend_num_tokens", "an extend's new tokens"))
            prefix = _need(fb, "extend_prefix_lens_cpu", "an extend's cached prefixes")
            new = _need(fb, "extend_seq_lens_cpu", "an extend's new tokens per request")
            if prefix is None or new is None or len(prefix) != bs or len(new) != bs:
                raise StandInError(
                    f"an extend forward of {bs} requests with extend_prefix_lens_cpu={prefix!r}, "
                    f"extend_seq_lens_cpu={new!r}: the stand-in needs one of each per request"
                )
            pairs = sum(
                int(n) * int(p) + int(n) * (int(n) + 1) // 2
                for p, n in zip(prefix, new, strict=True)
            )
        own = {
            "kind": kind,
            "num_reqs": bs,
            "new_tokens": extend_tokens if kind == "extend" else bs,
            "context_tokens": ctx,
            "attn_pairs": pairs,
        }
        gathered = _need(fb, "global_num_tokens_cpu", "every rank's tokens (the MLP sync)")
        if gathered is None or len(gathered) != self.config.dp_size:
            raise StandInError(
                f"global_num_tokens_cpu={gathered!r} on a forward of a DP-{self.config.dp_size} "
                "server: the simulated cost needs every rank's token count (SGLang's MLP sync)"
            )
        global_tokens = [int(x) for x in gathered]
        model_s = float(self.cost(own, global_tokens, self.rank))
        sleep_s = model_s * self.config.time_scale
        used, total = self.kv()
        if self.config.virtual_device:
            start = max(t0, self.busy_until)
            if self.clock is not None:
                start = self.clock.start(self.step, start)
        else:
            start = t0
            if sleep_s > 0:
                time.sleep(sleep_s)
        end = self.busy_until = start + sleep_s
        if self.clock is not None:
            self.clock.publish(self.step, end)
        record = {
            "step": self.step,
            "pid": os.getpid(),
            "t": t0,
            "mode": mode.name,
            "kind": kind,
            "bs": bs,
            "extend_tokens": extend_tokens,
            "ctx_tokens": ctx,
            "kv_used": used,
            "kv_total": total,
            "global_tokens": global_tokens,
            "model_s": model_s,
            "sleep_s": sleep_s,
            "start": start,
            "end": end,
        }
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        self.step += 1
        vhooks.proc().in_flight += 1
        return bs, end

    def ready_at(self, step: int, own_end: float) -> float:
        """When a forward's results may be read: its own end, or the step's group end."""
        if self.config.device_sync == "group" and self.clock is not None:
            return self.clock.group_end(step)
        return own_end


def _state(runner: Any) -> RankState:
    state = runner.__dict__.get("_dpbench_rank_state")
    if state is None:
        state = runner.__dict__["_dpbench_rank_state"] = RankState(runner)
        vhooks.proc().rank_state = state
    return state


def forward(original: Any, module: ModuleType) -> Any:
    missing = [n for n in ("ModelRunnerOutput", "LogitsProcessorOutput") if not hasattr(module, n)]
    if missing:
        raise StandInError(
            f"{module.__name__} has no {', '.join(missing)}: cannot build a forward's output"
        )
    output_cls = module.ModelRunnerOutput
    logits_cls = module.LogitsProcessorOutput

    @functools.wraps(original)
    def forward(self: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        state = _state(self)
        step = state.step
        rows, ready = state.run(forward_batch)
        logits = logits_cls(next_token_logits=state.logits(rows))
        setattr(logits, READY_ATTR, ready)
        setattr(logits, STEP_ATTR, step)
        return output_cls(logits_output=logits, can_run_graph=False)

    return forward


class _RankLog:
    """One append-only JSON-lines file of this scheduler process: ``<name>-rank<N>.jsonl``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fd: int | None = None

    def write(self, record: dict[str, Any]) -> None:
        if self.fd is None:
            config = SimForwardConfig.from_env()
            Path(config.record_dir).mkdir(parents=True, exist_ok=True)
            rank = int(dp_rank_reader()())
            path = Path(config.record_dir) / f"{self.name}-rank{rank}.jsonl"
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self.fd, (json.dumps(record) + "\n").encode())


_ARRIVALS = _RankLog("arrivals")  # {"rid", "t"}: a request taken in by this scheduler
_IDLE_PASSES = _RankLog("idle-passes")  # {"t", "s"}: a pass with no batch anywhere, work waiting
_PASSES = _RankLog("passes")  # PassRecorder: one line per scheduler pass with work
_PROCESS = _RankLog("process")  # one line per scheduler process: how it was started


def _process_record() -> dict[str, Any]:
    """How this scheduler process was started: ``fork`` or ``spawn`` (a spawned process's
    start method is its parent's, set before it imports anything), and its pid and parent."""
    import multiprocessing

    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "start_method": multiprocessing.get_start_method(allow_none=True),
    }


def log_arrival(original: Any, module: ModuleType) -> Any:
    """Record when each request reaches this DP rank's scheduler (the twin can replay these times)."""

    @functools.wraps(original)
    def handle_generate_request(self: Any, recv_req: Any, *args: Any, **kwargs: Any) -> Any:
        _ARRIVALS.write({"rid": str(_need(recv_req, "rid", "a request's arrival")), "t": _now()})
        return original(self, recv_req, *args, **kwargs)

    return handle_generate_request


# What this process's delayer heard and said in the pass now running, and the state its
# prefill step saw (filled by the hooks below, written out with the pass record, cleared at
# each pass's start).
_DELAYER_PASS: dict[str, Any] = {}


def _need(obj: Any, name: str, why: str) -> Any:
    """``obj.name``, or a :class:`StandInError` naming what this SGLang lacks (never a default)."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise StandInError(
            f"{type(obj).__name__} has no {name}: the stand-in reads it to record {why}"
        ) from None


def _batch_kind(batch: Any) -> str:
    if batch is None:
        return "none"
    mode = _need(batch, "forward_mode", "the pass's batch")
    if mode.is_idle():
        return "idle"
    return "decode" if mode.is_decode() else "extend" if mode.is_extend() else mode.name.lower()


def _reqs(batch: Any) -> list[Any]:
    return list(_need(batch, "reqs", "the requests of a batch")) if batch is not None else []


def _rid(req: Any) -> str | None:
    return None if req is None else str(_need(req, "rid", "which request is chunked"))


def _finishing(sched: Any, running: Any) -> dict[str, int]:
    """Running requests this pass's decode will not run: ``finished`` (done, their KV freed,
    still in the batch until the next decode filters them: 0.5.16/0.5.17 under the overlap
    lag) and ``finishing`` (their in-flight step emits their last token: 0.5.23's overlap
    loop, ``_reqs_finishing_inflight``; absent on a release without that rule, whose decode
    runs them once more)."""
    reqs = _reqs(running)
    out = {"finished": sum(bool(_need(r, "finished", "finished requests")()) for r in reqs)}
    fn = getattr(sched, "_reqs_finishing_inflight", None)
    if fn is not None and running is not None:
        out["finishing"] = len(fn(running))
    return out


def _kv_state(sched: Any) -> dict[str, int]:
    """The pool as SGLang's ``token_usage`` counts it: used = total − free − evictable."""
    total = int(_need(sched, "max_total_num_tokens", "the KV pool"))
    free = int(_need(sched, "token_to_kv_pool_allocator", "the KV pool").available_size())
    evictable = int(_need(sched, "tree_cache", "the KV pool").evictable_size())
    return {"kv_used": total - free - evictable, "kv_evictable": evictable, "kv_total": total}


class PassRecorder:
    """One JSON line per scheduler pass of this process that had work (``passes-rank<N>.jsonl``).

    Under DP attention every rank's pass holds the same collectives (the delayer's
    all-gather, the MLP-sync all-gather), so pass ``n`` of every rank is the same pass;
    a pass with nothing waiting, running or chunked on this rank is not written (pass
    numbers still count it), so the file holds the passes the twin also steps through.
    Per pass: the state the scheduler saw (waiting queue, running batch, chunked
    request, pool), what it chose (batch kind, size, the admitted request ids), and the
    delayer's input and verdict.
    """

    def __init__(self) -> None:
        self.n = 0

    def before(self, sched: Any, running: Any) -> dict[str, Any]:
        _DELAYER_PASS.clear()
        return {
            "pass": self.n,
            "waiting": len(_need(sched, "waiting_queue", "the waiting queue")),
            "running": len(_reqs(running)),
            "chunked": _rid(_need(sched, "chunked_req", "the chunked request in flight")),
            **_finishing(sched, running),
        }

    def after(self, sched: Any, rec: dict[str, Any], batch: Any, running: Any) -> dict[str, Any]:
        kind = _batch_kind(batch)
        rec.update(
            kind=kind,
            bs=len(_reqs(batch)) if kind in ("extend", "decode") else 0,
            admitted=[_rid(r) for r in _reqs(batch)] if kind == "extend" else [],
            waiting_after=len(_need(sched, "waiting_queue", "the waiting queue")),
            running_after=len(_reqs(running)),
            chunked_after=_rid(_need(sched, "chunked_req", "the chunked request in flight")),
            batch_is_full=bool(_need(running, "batch_is_full", "the running batch's full flag"))
            if running is not None
            else None,
            **_kv_state(sched),
            **_DELAYER_PASS,
        )
        self.n += 1
        return rec


def record_pass(original: Any, module: ModuleType) -> Any:
    """Record every scheduler pass with work (:class:`PassRecorder`), and time the passes that
    ran no batch on any rank while this rank had requests waiting (the delayer holding them
    back): how long SGLang's event loop takes to come round when no forward runs, the twin's
    ``--idle-pass-s``. On the virtual clock such a pass lasts the pass charge when the delayer
    held prefill back in it, and no time otherwise."""
    started: list[float] = []
    recorder = PassRecorder()
    sig = inspect.signature(original)

    @functools.wraps(original)
    def get_next_batch_to_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        now = _now()
        if started:
            _IDLE_PASSES.write({"t": started[0], "s": now - started.pop()})
        bound = sig.bind(self, *args, **kwargs).arguments
        # two shapes: 0.5.23 takes the running batch and returns a plan (batch_to_run,
        # running_batch); 0.5.16/0.5.17 read self.running_batch and return the batch itself
        if "running_batch" in bound:
            running_in = bound["running_batch"]
        else:
            running_in = _need(self, "running_batch", "the running batch a pass starts with")
        rec = recorder.before(self, running_in)
        plan = original(self, *args, **kwargs)
        if hasattr(plan, "batch_to_run"):
            batch = plan.batch_to_run
            running = _need(plan, "running_batch", "the running batch a pass leaves")
        else:
            batch = plan
            running = _need(self, "running_batch", "the running batch a pass leaves")
        rec["t"], rec["s"] = now, _now() - now
        rec = recorder.after(self, rec, batch, running)
        busy = rec["kind"] != "none" or rec["waiting_after"] or rec["running_after"]
        vhooks.mark_pass(bool(busy or rec["chunked_after"]), vhooks.proc().in_flight)
        # the scheduler's own work, on the virtual clock (``--pass-charge-ms``, ``--pass-charge
        # measured``): before a forward, and on a pass in which the delayer holds prefill back
        # and no rank runs one (both rank-identical: DP attention gives every rank a batch when
        # one has one, and the delayer's reason comes from its all-gather), so a wait of N
        # passes spans N charges
        if batch is not None or rec.get("reason") == "delay":
            charge = vhooks.charge_pass()
            if charge is not None:
                rec["charge_s"] = charge
        if rec["kind"] != "none" or rec["waiting"] or rec["running"] or rec["chunked"]:
            _PASSES.write(rec)
        if batch is None and len(self.waiting_queue) > 0:
            started.append(now)
        return plan

    return get_next_batch_to_run


def record_prefill_view(original: Any, module: ModuleType) -> Any:
    """The queues as the pass's prefill step (the adder) sees them: the running batch after the
    last prefill batch was merged into it, the waiting queue with this pass's arrivals."""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def get_new_batch_prefill(self: Any, *args: Any, **kwargs: Any) -> Any:
        running = sig.bind(self, *args, **kwargs).arguments["running_batch"]
        _DELAYER_PASS["running"] = len(_reqs(running))
        _DELAYER_PASS.update(_finishing(self, running))
        _DELAYER_PASS["waiting"] = len(_need(self, "waiting_queue", "the waiting queue"))
        return original(self, *args, **kwargs)

    return get_new_batch_prefill


def record_token_usage(original: Any, module: ModuleType) -> Any:
    """The pool usage the pass's delayer executor was built with (its watermark input)."""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _DELAYER_PASS["usage"] = float(sig.bind(self, *args, **kwargs).arguments["token_usage"])
        original(self, *args, **kwargs)

    return __init__


def record_negotiation(original: Any, module: ModuleType) -> Any:
    """What this rank told the delayer first in the pass (later calls reuse the verdict)."""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def negotiate_should_allow_prefill(self: Any, *args: Any, **kwargs: Any) -> Any:
        allow = original(self, *args, **kwargs)
        if "reported" not in _DELAYER_PASS:
            local = sig.bind(self, *args, **kwargs).arguments["local_prefillable"]
            _DELAYER_PASS["reported"] = bool(local)
            _DELAYER_PASS["allow"] = bool(allow)
        return allow

    return negotiate_should_allow_prefill


def record_outcome(original: Any, module: ModuleType) -> Any:
    """The pass's delayer outcome as SGLang records it (estimation, reason, ranks prefillable)."""
    sig = inspect.signature(original)

    @functools.wraps(original)
    def _record_single_pass_result(*args: Any, **kwargs: Any) -> Any:
        out = sig.bind(*args, **kwargs).arguments["output"]
        _DELAYER_PASS["estimation"] = str(_need(out, "input_estimation", "the delayer outcome"))
        _DELAYER_PASS["reason"] = str(_need(out, "output_reason", "the delayer outcome"))
        _DELAYER_PASS["num_prefillable"] = int(_need(out, "num_prefillable", "the delayer outcome"))
        return original(*args, **kwargs)

    return _record_single_pass_result


def wait_for_device(original: Any, module: ModuleType) -> Any:
    """Before SGLang reads a batch's results, wait until the virtual device has finished it."""

    @functools.wraps(original)
    def process_batch_result(self: Any, batch: Any, result: Any, *args: Any, **kwargs: Any) -> Any:
        logits = _need(result, "logits_output", "when the virtual device finished the batch")
        # SGLang's own placeholder results (no logits) ran no forward: nothing to wait for
        ready = getattr(logits, READY_ATTR, None) if logits is not None else None
        if logits is not None and ready is None:
            raise StandInError(
                "a batch result whose forward the stand-in did not run (its logits carry no "
                f"{READY_ATTR}): the virtual device cannot say when it finished"
            )
        if ready is not None:
            _wait_ready(self, logits, ready)
        return original(self, batch, result, *args, **kwargs)

    return process_batch_result


def _wait_ready(sched: Any, logits: Any, own_end: float) -> None:
    """Wait until the forward's results may be read: on the virtual clock (jumping it), or by
    sleeping on the wall clock; its own end, or the step's group end (``device_sync``)."""
    p = vhooks.proc()
    p.in_flight -= 1
    state = p.rank_state
    ready = own_end if state is None else state.ready_at(getattr(logits, STEP_ATTR), own_end)
    if p.clock is not None:
        vhooks.wait_device(ready)
        return
    delay = ready - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def sample(original: Any, module: ModuleType) -> Any:
    @functools.wraps(original)
    def sample(self: Any, logits_output: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        state = _state(self)
        return torch.full(
            (int(forward_batch.batch_size or 0),), state.config.token_id, dtype=torch.int64
        )

    return sample
