"""Kernel tier: SGLang's Triton MLA attention on DeepSeek-V3 shapes (one layer's launch), on a CUDA GPU.

Every case is checked against the float32 reference before it is timed (a wrong result
fails setup). ``track_median_us`` is dpbench's do_bench-style timing (CUDA events or
graph replay, cold L2); ``time_launch_and_sync`` is asv's own wall clock around one
launch plus a synchronize, so it includes launch overhead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from benchmarks.common import require_attention_kernels
from dpbench.kernels import bench
from dpbench.kernels.cases import Case

ATTN_TP_SIZE = 1  # DP attention, attn_tp = tp / dp = 1: all 128 heads on each rank
HEADS = 128 // ATTN_TP_SIZE


class _AttentionLaunch:
    """Shared by the three kernel benchmarks; asv keys ``setup_cache`` by its source, so it runs once per environment."""

    timeout = 300

    def setup_cache(self) -> dict[str, Any]:
        """The device's ceilings and the SGLang it runs (provenance), measured once per environment."""
        return bench.environment()

    setup_cache.timeout = 300

    def _setup_case(self, cache: dict[str, Any], case: Case) -> None:
        if "skip" in cache:
            raise NotImplementedError(cache["skip"])
        import torch

        from dpbench.kernels.inputs import launch
        from dpbench.kernels.run import prepare_case

        kernels = require_attention_kernels()
        prepared = prepare_case(
            case,
            kernels=kernels,
            device="cuda",
            seed=0,
            cores=cache["cores"],
            l2=cache["l2_bytes"],
        )
        if not prepared.verdict.ok:
            raise AssertionError(f"{case.name}: wrong result, {prepared.verdict.reason}")
        self.case = case
        self.state = {
            "kernels": kernels,
            "sets": prepared.sets,
            "launch": launch,
            "torch": torch,
            "copy_bytes_per_s": cache["ceilings"]["copy_bytes_per_s"],
        }
        self._timing = None

    def _timing_result(self):
        if self._timing is None:
            from dpbench.kernels.timing import time_launches

            s = self.state
            fns = [lambda x=x: s["launch"](s["kernels"], x) for x in s["sets"]]
            self._timing = time_launches(fns if len(fns) > 1 else fns[0])
        return self._timing

    def _launch_and_sync(self) -> None:
        s = self.state
        s["launch"](s["kernels"], s["sets"][0])
        s["torch"].cuda.synchronize()

    def _median_us(self) -> float:
        return self._timing_result().median_s * 1e6

    def _copy_bw_fraction(self) -> float:
        return self.case.bytes / self._timing_result().median_s / self.state["copy_bytes_per_s"]


class DecodeAttention(_AttentionLaunch):
    """decode_attention_fwd, absorbed MLA: batch requests × context tokens."""

    params = ([1, 64], [1, 32, 256], [1024, 16384, 65536])
    param_names: ClassVar[list[str]] = ["page_size", "batch", "context"]

    def setup(self, cache: dict[str, Any], page_size: int, batch: int, context: int) -> None:
        self._setup_case(
            cache, Case("decode", heads=HEADS, page_size=page_size, batch=batch, context=context)
        )

    def time_launch_and_sync(
        self, cache: dict[str, Any], page_size: int, batch: int, context: int
    ) -> None:
        self._launch_and_sync()

    def track_median_us(
        self, cache: dict[str, Any], page_size: int, batch: int, context: int
    ) -> float:
        return self._median_us()

    def track_copy_bw_fraction(
        self, cache: dict[str, Any], page_size: int, batch: int, context: int
    ) -> float:
        return self._copy_bw_fraction()

    track_median_us.unit = "us"
    track_copy_bw_fraction.unit = "fraction"


class ExtendAttention(_AttentionLaunch):
    """extend_attention_fwd for one request: MHA form with no cached prefix, absorbed MLA with one."""

    params = ([1, 64], [512, 4096, 16384], [0, 16384])
    param_names: ClassVar[list[str]] = ["page_size", "new_tokens", "prefix"]

    def setup(self, cache: dict[str, Any], page_size: int, new_tokens: int, prefix: int) -> None:
        self._setup_case(
            cache,
            Case("extend", heads=HEADS, page_size=page_size, new_tokens=new_tokens, prefix=prefix),
        )

    def time_launch_and_sync(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, prefix: int
    ) -> None:
        self._launch_and_sync()

    def track_median_us(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, prefix: int
    ) -> float:
        return self._median_us()

    def track_copy_bw_fraction(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, prefix: int
    ) -> float:
        return self._copy_bw_fraction()

    track_median_us.unit = "us"
    track_copy_bw_fraction.unit = "fraction"


class MixedAttention(_AttentionLaunch):
    """One extend_attention_fwd launch holding one extend and many decodes (SGLang's mixed chunk)."""

    params = ([1, 64], [2048, 8192], [32, 128], [4096, 16384])
    param_names: ClassVar[list[str]] = ["page_size", "new_tokens", "batch", "context"]

    def setup(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, batch: int, context: int
    ) -> None:
        self._setup_case(
            cache,
            Case(
                "mixed",
                heads=HEADS,
                page_size=page_size,
                new_tokens=new_tokens,
                batch=batch,
                context=context,
            ),
        )

    def time_launch_and_sync(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, batch: int, context: int
    ) -> None:
        self._launch_and_sync()

    def track_median_us(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, batch: int, context: int
    ) -> float:
        return self._median_us()

    def track_copy_bw_fraction(
        self, cache: dict[str, Any], page_size: int, new_tokens: int, batch: int, context: int
    ) -> float:
        return self._copy_bw_fraction()

    track_median_us.unit = "us"
    track_copy_bw_fraction.unit = "fraction"
