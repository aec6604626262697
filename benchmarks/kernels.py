"""Kernel tier: SGLang's Triton MLA attention on DeepSeek-V3 shapes (one layer's launch), on a CUDA GPU.

Every case is checked against the float32 reference before it is timed (a wrong result
fails setup). ``track_median_us`` is dpbench's do_bench-style timing (CUDA events or
graph replay, cold L2); ``time_launch_and_sync`` is asv's own wall clock around one
launch plus a synchronize, so it includes launch overhead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from benchmarks.common import require_cuda, save_run
from dpbench.kernels.cases import Case

ATTN_TP_SIZE = 1  # DP attention, attn_tp = tp / dp = 1: all 128 heads on each rank
HEADS = 128 // ATTN_TP_SIZE


def _kernels() -> Any:
    """SGLang's Triton attention kernels; skip (NotImplementedError) where their API shape is unsupported."""
    from dpbench.sglang_compat.detect import UnsupportedSGLang
    from dpbench.sglang_compat.kernels import load_attention_kernels

    try:
        return load_attention_kernels()
    except UnsupportedSGLang as exc:
        raise NotImplementedError(str(exc)) from exc


class _AttentionLaunch:
    """Shared by the three kernel benchmarks; asv keys ``setup_cache`` by its source, so it runs once per environment."""

    timeout = 300

    def setup_cache(self) -> dict[str, Any]:
        """The device's ceilings and the SGLang it runs (provenance), measured once per environment."""
        try:
            require_cuda(1)
        except NotImplementedError as exc:
            return {"skip": str(exc)}
        import torch

        from dpbench.kernels.ceilings import measure_ceilings
        from dpbench.kernels.timing import l2_cache_bytes
        from dpbench.sglang_compat.provenance import provenance

        ceilings = measure_ceilings("cuda", copy_mib=1024, matmul_n=4096)
        found = {
            "ceilings": ceilings.as_dict(),
            "cores": torch.cuda.get_device_properties(0).multi_processor_count,
            "l2_bytes": l2_cache_bytes(),
            "device": torch.cuda.get_device_name(),
            # the kernel tier drives no scheduler: no API generation compared, placement read statically
            **provenance(()),
        }
        save_run("kernels", "environment", _environment_result(found))
        return found

    setup_cache.timeout = 300

    def _setup_case(self, cache: dict[str, Any], case: Case) -> None:
        if "skip" in cache:
            raise NotImplementedError(cache["skip"])
        import torch

        from dpbench.kernels.inputs import launch
        from dpbench.kernels.run import prepare_case

        kernels = _kernels()
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


def _environment_result(found: dict[str, Any]) -> dict[str, Any]:
    from dpbench.core import results

    ceilings = found["ceilings"]
    return results.make_run_result(
        tier="kernels",
        sglang=found["sglang"],
        placement=found["placement"],
        metrics={
            "copy_bandwidth_bytes_per_s": results.Metric(
                ceilings["copy_bytes_per_s"], "B/s", "higher"
            ),
            "matmul_flops_per_s": results.Metric(
                ceilings["matmul_flops_per_s"], "FLOP/s", "higher"
            ),
        },
        wall_time_s=0.0,
        notes=[f"device ceilings on {found['device']}, measured once for this environment"],
        extra={"ceilings": ceilings},
    )


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
