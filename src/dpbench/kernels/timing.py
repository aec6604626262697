"""The one GPU timing function of the kernel tier, modelled on ``triton.testing.do_bench``.

:func:`time_launches` does what ``do_bench`` does and states it: one compile call; a
runtime estimate from five calls; warm-up and repeat counts from millisecond budgets; a
CUDA event pair around every timed call with one synchronize at the end; the median and
the requested quantiles of those times (the *median* is returned as ``median_s``; the
mean is reported separately, never in its place).

Caches: with one input set, a buffer of ``max(256 MiB, 2 × L2)`` is zeroed before every
timed call, outside the event pair, so each call starts with a cold L2 (do_bench's
flush). With several input sets (``fns`` of length > 1, built by the caller to exceed the
L2 together), calls rotate through them and nothing is flushed.

Small launches: where the estimate is under ``graph_below_ms`` (default 0.1 ms), the
calls are captured in a CUDA graph of ``calls_per_graph`` launches (rotating through the
input sets) and the graph's replays are timed instead, so launch gaps do not count; each
replay gives one sample of the per-call time (replay time / launches). A single input set
cannot be flushed inside a graph: that timing is reported with ``cache="warm"``.

Without CUDA (Triton's interpreter on a CPU) the same budgets apply to
``time.perf_counter`` around each call (``method="cpu-wallclock"``), with the estimate
taken from one call instead of five.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_QUANTILES = (0.2, 0.5, 0.8)


@dataclass(frozen=True)
class Timing:
    """Per-call times of one launch, in seconds."""

    median_s: float
    quantiles_s: dict[str, float]  # "p20" → seconds, …
    mean_s: float
    min_s: float
    max_s: float
    samples: int
    calls_per_sample: int
    warmup_calls: int
    estimate_s: float
    method: str  # "cuda-events" | "cuda-graph" | "cpu-wallclock"
    cache: str  # "l2-flush" | "rotating-<n>-sets" | "warm"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _summary(per_call_s: Sequence[float], quantiles: Sequence[float]) -> dict[str, Any]:
    arr = np.asarray(per_call_s, dtype=np.float64)
    qs = {f"p{round(q * 100):d}": float(np.quantile(arr, q)) for q in quantiles}
    return dict(
        median_s=float(np.median(arr)),
        quantiles_s=qs,
        mean_s=float(arr.mean()),
        min_s=float(arr.min()),
        max_s=float(arr.max()),
        samples=int(arr.size),
    )


def _l2_bytes(torch: Any) -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 50 << 20)


def l2_cache_bytes() -> int:
    """The current CUDA device's L2 size (0 without CUDA)."""
    import torch

    return _l2_bytes(torch) if torch.cuda.is_available() else 0


def time_launches(
    fns: Callable[[], Any] | Sequence[Callable[[], Any]],
    *,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    flush_l2: bool = True,
    graph_below_ms: float = 0.1,
    graph_target_ms: float = 2.0,
    max_calls: int = 10_000,
    device: str = "cuda",
) -> Timing:
    """Median and quantiles of one launch's time (seconds), do_bench's way.

    ``fns``: a zero-argument callable, or several (one per input set), called in rotation.
    ``warmup_ms``/``rep_ms``: budgets from which warm-up and repeat counts follow the
    estimate (at least 1 and at most ``max_calls`` each). ``flush_l2``: zero a large
    buffer before every timed call when there is a single input set. ``graph_below_ms``:
    below this estimate, time CUDA-graph replays (0 disables graphs).
    ``device``: "cuda", or "cpu" for wall-clock timing of interpreter runs.
    """
    calls = [fns] if callable(fns) else list(fns)
    if not calls:
        raise ValueError("time_launches needs at least one callable")
    if warmup_ms < 0 or rep_ms <= 0:
        raise ValueError(f"warmup_ms must be ≥0 and rep_ms >0; got {warmup_ms}, {rep_ms}")
    if device == "cpu":
        return _time_cpu(calls, warmup_ms, rep_ms, quantiles, max_calls)
    if device != "cuda":
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(
            f"time_launches(device='cuda') needs torch with a CUDA GPU; torch is not importable ({exc})"
        ) from exc
    if not torch.cuda.is_available():
        raise RuntimeError("time_launches(device='cuda') needs a CUDA GPU; found none")
    rotating = len(calls) > 1
    flush_buf = None
    if flush_l2 and not rotating:
        flush_buf = torch.empty(
            max(256 << 20, 2 * _l2_bytes(torch)), dtype=torch.int8, device="cuda"
        )
    cache = (
        f"rotating-{len(calls)}-sets"
        if rotating
        else ("l2-flush" if flush_buf is not None else "warm")
    )

    # Compile call (Triton JIT, autotuning) on every input set, then the estimate.
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(5):
        if flush_buf is not None:
            flush_buf.zero_()
        calls[i % len(calls)]()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-4)

    n_warmup = min(max_calls, max(1, int(warmup_ms / estimate_ms)))
    method = "cuda-events"
    if graph_below_ms > 0 and estimate_ms < graph_below_ms:
        try:
            return _time_graph(
                torch,
                calls,
                estimate_ms,
                n_warmup,
                rep_ms,
                graph_target_ms,
                quantiles,
                max_calls,
                cache if rotating else "warm",
            )
        except RuntimeError as exc:  # a launch that cannot be captured is timed call by call
            torch.cuda.synchronize()
            method = f"cuda-events (graph capture failed: {str(exc).splitlines()[0][:120]})"

    n_repeat = min(max_calls, max(1, int(rep_ms / estimate_ms)))
    for i in range(n_warmup):
        calls[i % len(calls)]()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for i in range(n_repeat):
        if flush_buf is not None:
            flush_buf.zero_()
        starts[i].record()
        calls[i % len(calls)]()
        ends[i].record()
    torch.cuda.synchronize()
    per_call = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
    return Timing(
        **_summary(per_call, quantiles),
        calls_per_sample=1,
        warmup_calls=n_warmup,
        estimate_s=estimate_ms / 1e3,
        method=method,
        cache=cache,
    )


def _time_graph(
    torch: Any,
    calls: list[Callable[[], Any]],
    estimate_ms: float,
    n_warmup: int,
    rep_ms: float,
    graph_target_ms: float,
    quantiles: Sequence[float],
    max_calls: int,
    cache: str,
) -> Timing:
    per_graph = min(max_calls, max(len(calls), math.ceil(graph_target_ms / estimate_ms)))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up off the default stream, as capture requires
        for i in range(n_warmup):
            calls[i % len(calls)]()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            calls[i % len(calls)]()
    graph.replay()  # first replay uploads the graph
    torch.cuda.synchronize()
    replay_ms = max(per_graph * estimate_ms, 1e-3)
    n_replays = min(1000, max(5, int(rep_ms / replay_ms)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_replays)]
    for i in range(n_replays):
        starts[i].record()
        graph.replay()
        ends[i].record()
    torch.cuda.synchronize()
    per_call = [s.elapsed_time(e) / 1e3 / per_graph for s, e in zip(starts, ends, strict=True)]
    del graph
    return Timing(
        **_summary(per_call, quantiles),
        calls_per_sample=per_graph,
        warmup_calls=n_warmup,
        estimate_s=estimate_ms / 1e3,
        method="cuda-graph",
        cache=cache,
    )


def _time_cpu(
    calls: list[Callable[[], Any]],
    warmup_ms: float,
    rep_ms: float,
    quantiles: Sequence[float],
    max_calls: int,
) -> Timing:
    """Wall-clock timing of Triton interpreter launches, the only CPU path.

    The interpreter compiles nothing and a launch takes seconds, so nothing needs warming:
    the first call is the estimate and the first sample. Further warm-up calls and samples
    follow the budgets (none when one call outlasts them). Its numbers time Python, not a
    kernel, and the calibration file says so (``interpreter``)."""
    t0 = time.perf_counter()
    calls[0]()
    first_s = time.perf_counter() - t0
    estimate_ms = max(first_s * 1e3, 1e-4)
    n_warmup = min(max_calls, int(warmup_ms / estimate_ms))
    n_repeat = min(max_calls, max(1, int(rep_ms / estimate_ms)))
    for i in range(n_warmup):
        calls[(i + 1) % len(calls)]()
    per_call = [first_s]
    for i in range(1, n_repeat):
        t0 = time.perf_counter()
        calls[i % len(calls)]()
        per_call.append(time.perf_counter() - t0)
    cache = f"rotating-{len(calls)}-sets" if len(calls) > 1 else "warm"
    return Timing(
        **_summary(per_call, quantiles),
        calls_per_sample=1,
        warmup_calls=n_warmup,
        estimate_s=estimate_ms / 1e3,
        method="cpu-wallclock",
        cache=cache,
    )
