"""Kernel tier: SGLang's Triton MLA attention on DeepSeek-V3 shapes (one layer's launch), on a CUDA GPU.

Every case is checked against the float32 reference before it is timed (a wrong result
fails setup). ``track_median_us`` is dpbench's do_bench-style timing (CUDA events or
graph replay, cold L2); ``time_launch_and_sync`` is asv's own wall clock around one
launch plus a synchronize, so it includes launch overhead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from benchmarks.common import require_cuda
from dpbench.kernels.cases import Case

ATTN_TP_SIZE = 1  # DP attention, attn_tp = tp / dp = 1: all 128 heads on each rank
HEADS = 128 // ATTN_TP_SIZE
_CEILINGS: dict[str, Any] = {}


def _prepare(case: Case) -> dict[str, Any]:
    """Kernels, checked inputs (rotating sets below 2×L2) and the device's ceilings; skips without CUDA/SGLang."""
    require_cuda(1)
    import torch

    from dpbench.kernels.ceilings import measure_ceilings
    from dpbench.kernels.inputs import launch, make_inputs
    from dpbench.kernels.run import _rotated_sets
    from dpbench.kernels.timing import l2_cache_bytes
    from dpbench.kernels.verify import verify
    from dpbench.sglang_compat.detect import UnsupportedSGLang
    from dpbench.sglang_compat.kernels import load_attention_kernels, mla_max_kv_splits

    try:
        kernels = load_attention_kernels()
    except ImportError as exc:
        raise NotImplementedError(f"needs SGLang's Triton attention kernels; {exc}") from exc
    except UnsupportedSGLang as exc:
        raise NotImplementedError(str(exc)) from exc
    cores = torch.cuda.get_device_properties(0).multi_processor_count
    max_splits = mla_max_kv_splits(cores, case.shape.max_context_len)
    splits = None
    if case.kind == "decode":
        seq_lens = torch.full((case.batch,), case.context, dtype=torch.int32, device="cuda")
        splits = kernels.num_kv_splits(
            seq_lens, num_heads=case.heads, max_kv_splits=max_splits, core_count=cores
        )
    inputs = make_inputs(
        case, device="cuda", seed=0, max_kv_splits=max_splits, num_kv_splits=splits
    )
    verdict = verify(kernels, inputs)
    if not verdict.ok:
        raise AssertionError(f"{case.name}: wrong result, {verdict.reason}")
    l2 = l2_cache_bytes()
    n_sets = min(128, -(-2 * l2 // case.bytes)) if case.bytes < 2 * l2 else 1
    sets = _rotated_sets(inputs, n_sets, seed=1)
    if "copy" not in _CEILINGS:
        _CEILINGS["copy"] = measure_ceilings("cuda", copy_mib=1024, matmul_n=4096)
    return {
        "kernels": kernels,
        "sets": sets,
        "launch": launch,
        "torch": torch,
        "ceilings": _CEILINGS["copy"],
    }


class _AttentionLaunch:
    timeout = 300

    def _setup_case(self, case: Case) -> None:
        self.case = case
        self.state = _prepare(case)
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
        return (
            self.case.bytes
            / self._timing_result().median_s
            / self.state["ceilings"].copy_bytes_per_s
        )


class DecodeAttention(_AttentionLaunch):
    """decode_attention_fwd, absorbed MLA: batch requests × context tokens."""

    params = ([1, 64], [1, 32, 256], [1024, 16384, 65536])
    param_names: ClassVar[list[str]] = ["page_size", "batch", "context"]

    def setup(self, page_size: int, batch: int, context: int) -> None:
        self._setup_case(
            Case("decode", heads=HEADS, page_size=page_size, batch=batch, context=context)
        )

    def time_launch_and_sync(self, page_size: int, batch: int, context: int) -> None:
        self._launch_and_sync()

    def track_median_us(self, page_size: int, batch: int, context: int) -> float:
        return self._median_us()

    def track_copy_bw_fraction(self, page_size: int, batch: int, context: int) -> float:
        return self._copy_bw_fraction()

    track_median_us.unit = "us"
    track_copy_bw_fraction.unit = "fraction"


class ExtendAttention(_AttentionLaunch):
    """extend_attention_fwd for one request: MHA form with no cached prefix, absorbed MLA with one."""

    params = ([1, 64], [512, 4096, 16384], [0, 16384])
    param_names: ClassVar[list[str]] = ["page_size", "new_tokens", "prefix"]

    def setup(self, page_size: int, new_tokens: int, prefix: int) -> None:
        self._setup_case(
            Case("extend", heads=HEADS, page_size=page_size, new_tokens=new_tokens, prefix=prefix)
        )

    def time_launch_and_sync(self, page_size: int, new_tokens: int, prefix: int) -> None:
        self._launch_and_sync()

    def track_median_us(self, page_size: int, new_tokens: int, prefix: int) -> float:
        return self._median_us()

    def track_copy_bw_fraction(self, page_size: int, new_tokens: int, prefix: int) -> float:
        return self._copy_bw_fraction()

    track_median_us.unit = "us"
    track_copy_bw_fraction.unit = "fraction"


class MixedAttention(_AttentionLaunch):
    """One extend_attention_fwd launch holding one extend and many decodes (SGLang's mixed chunk)."""

    params = ([1, 64], [2048, 8192], [32, 128], [4096, 16384])
    param_names: ClassVar[list[str]] = ["page_size", "new_tokens", "batch", "context"]

    def setup(self, page_size: int, new_tokens: int, batch: int, context: int) -> None:
        self._setup_case(
            Case(
                "mixed",
                heads=HEADS,
                page_size=page_size,
                new_tokens=new_tokens,
                batch=batch,
                context=context,
            )
        )

    def time_launch_and_sync(
        self, page_size: int, new_tokens: int, batch: int, context: int
    ) -> None:
        self._launch_and_sync()

    def track_median_us(self, page_size: int, new_tokens: int, batch: int, context: int) -> float:
        return self._median_us()

    def track_copy_bw_fraction(
        self, page_size: int, new_tokens: int, batch: int, context: int
    ) -> float:
        return self._copy_bw_fraction()

    track_median_us.unit = "us"
    track_copy_bw_fraction.unit = "fraction"
