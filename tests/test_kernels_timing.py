"""The timing function's budgets, statistics and refusals, on the CPU wall-clock path (no GPU here)."""

from __future__ import annotations

import time

import pytest

from dpbench.kernels.timing import time_launches


def test_cpu_timing_reports_median_and_quantiles_of_real_calls() -> None:
    calls = []

    def work() -> None:
        calls.append(1)
        time.sleep(0.002)

    t = time_launches(work, warmup_ms=10, rep_ms=40, device="cpu")
    assert t.method == "cpu-wallclock" and t.cache == "warm"
    assert set(t.quantiles_s) == {"p20", "p50", "p80"}
    assert t.quantiles_s["p20"] <= t.median_s <= t.quantiles_s["p80"]
    assert t.median_s == t.quantiles_s["p50"]
    assert 0.002 <= t.min_s <= t.median_s <= t.max_s
    # Counts follow the budgets: about rep_ms / estimate timed calls, warm-ups likewise.
    assert 5 <= t.samples <= 20 and 1 <= t.warmup_calls <= 5
    # the estimate call is the first sample; then warm-ups and the other samples
    assert len(calls) == t.warmup_calls + t.samples


def test_an_interpreter_launch_longer_than_the_budgets_runs_once() -> None:
    """Triton's interpreter takes seconds a launch: one call estimates, and is the sample."""
    calls = []

    def slow() -> None:
        calls.append(1)
        time.sleep(0.05)

    t = time_launches(slow, warmup_ms=25, rep_ms=40, device="cpu")
    assert len(calls) == 1 and t.samples == 1 and t.warmup_calls == 0
    assert t.median_s >= 0.05 and t.estimate_s == pytest.approx(t.median_s)


def test_rotation_cycles_through_every_input_set() -> None:
    seen: list[int] = []
    # calls of a few microseconds, so the 10 ms budget holds many of them even on a loaded
    # machine (a 0.5 ms sleep estimated at over 10 ms beside other work once gave 1 call)
    fns = [lambda i=i: seen.append(i) for i in range(3)]
    t = time_launches(fns, warmup_ms=2, rep_ms=10, device="cpu")
    assert t.cache == "rotating-3-sets"
    assert set(seen) == {0, 1, 2}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one callable"):
        time_launches([], device="cpu")
    with pytest.raises(ValueError, match="rep_ms"):
        time_launches(lambda: None, rep_ms=0, device="cpu")
    with pytest.raises(ValueError, match="device must be 'cuda' or 'cpu'"):
        time_launches(lambda: None, device="tpu")


def test_cuda_timing_without_a_gpu_says_so() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is present: the refusal path does not apply")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        time_launches(lambda: None, device="cuda")


class _FakeCuda:
    """A stand-in for torch.cuda whose clock advances only by what the 'kernels' cost (ms).

    It checks the timing function's bookkeeping on a machine without a GPU: event pairs,
    counts from the budgets, flushes outside the events, per-call division of graph replays.
    """

    def __init__(self, fail_capture: bool = False) -> None:
        self.now = 0.0
        self.capturing: list[float] | None = None
        self.fail_capture = fail_capture
        self.flushes = 0
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.t: float | None = None

            def record(self) -> None:
                self.t = fake.now

            def elapsed_time(self, end: Event) -> float:
                assert self.t is not None and end.t is not None, (
                    "elapsed_time on an unrecorded event"
                )
                return end.t - self.t

        class Graph:
            def __init__(self) -> None:
                self.cost = 0.0

            def replay(self) -> None:
                fake.now += self.cost

        class _Ctx:
            def __init__(self, enter=None, exit_=None) -> None:
                self._enter, self._exit = enter, exit_

            def __enter__(self):
                if self._enter:
                    self._enter()

            def __exit__(self, *exc):
                if self._exit:
                    self._exit()
                return False

        class Stream:
            def wait_stream(self, other) -> None:
                pass

        def graph(g: Graph):
            def enter() -> None:
                if fake.fail_capture:
                    raise RuntimeError("operation not permitted when stream is capturing")
                fake.capturing = []

            def exit_() -> None:
                g.cost = sum(fake.capturing or [])
                fake.capturing = None

            return _Ctx(enter, exit_)

        self.Event, self.CUDAGraph, self.Stream = Event, Graph, Stream
        self.graph = graph
        self.stream = lambda s: _Ctx()
        self.current_stream = lambda: Stream()
        self.is_available = lambda: True
        self.synchronize = lambda: None
        self.current_device = lambda: 0
        self.get_device_properties = lambda i: type("P", (), {"L2_cache_size": 60 << 20})()

    def launch(self, cost_ms: float) -> None:
        if self.capturing is not None:
            self.capturing.append(cost_ms)
        else:
            self.now += cost_ms


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch):
    import sys
    import types

    def install(fail_capture: bool = False) -> _FakeCuda:
        cuda = _FakeCuda(fail_capture)
        torch = types.ModuleType("torch")
        torch.cuda = cuda
        torch.int8 = "int8"

        class Buf:
            def zero_(self) -> None:
                cuda.flushes += 1
                cuda.launch(0.02)

        torch.empty = lambda *a, **k: Buf()
        monkeypatch.setitem(sys.modules, "torch", torch)
        return cuda

    return install


def test_cuda_events_path_flushes_outside_the_events(fake_cuda) -> None:
    cuda = fake_cuda()
    t = time_launches(lambda: cuda.launch(0.5), warmup_ms=25, rep_ms=100)
    assert t.method == "cuda-events" and t.cache == "l2-flush"
    assert t.median_s == pytest.approx(0.5e-3) and t.max_s == pytest.approx(0.5e-3)
    # The estimate (5 calls, flushes included, as do_bench) sets the counts: 0.52 ms per call.
    assert t.estimate_s == pytest.approx(0.52e-3)
    assert t.samples == int(100 / 0.52) and t.warmup_calls == int(25 / 0.52)
    assert cuda.flushes == 5 + t.samples


def test_small_launches_time_graph_replays_per_call(fake_cuda) -> None:
    cuda = fake_cuda()
    fns = [lambda: cuda.launch(0.01) for _ in range(3)]
    t = time_launches(fns, warmup_ms=25, rep_ms=100)
    assert t.method == "cuda-graph" and t.cache == "rotating-3-sets"
    assert t.calls_per_sample == 200  # ceil(2 ms graph target / 0.01 ms)
    assert t.median_s == pytest.approx(0.01e-3)
    assert t.samples == 50  # 100 ms budget / 2 ms replays
    assert cuda.flushes == 0


def test_graph_capture_failure_falls_back_to_events(fake_cuda) -> None:
    cuda = fake_cuda(fail_capture=True)
    t = time_launches([lambda: cuda.launch(0.01), lambda: cuda.launch(0.01)], rep_ms=1)
    assert t.method.startswith("cuda-events (graph capture failed")
    assert t.median_s == pytest.approx(0.01e-3)
