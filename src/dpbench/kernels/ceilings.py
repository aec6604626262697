"""Ceilings measured on the device in the same run: a large device-to-device copy and a large matmul.

Copy bandwidth counts bytes read plus bytes written; the matmul rate counts 2·M·N·K
FLOPs. Both use random data (never zeros) and :func:`dpbench.kernels.timing.time_launches`.
On a CPU (interpreter runs) the same measurements run on host memory in float32, so an
interpreter calibration's fractions are fractions of the CPU's ceilings, and say so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dpbench.kernels.timing import time_launches


@dataclass(frozen=True)
class Ceilings:
    copy_bytes_per_s: float
    copy_bytes: int  # bytes moved per copy (read + write)
    matmul_flops_per_s: float
    matmul_shape: tuple[int, int, int]
    matmul_dtype: str
    device: str

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["matmul_shape"] = list(self.matmul_shape)
        return d


def measure_ceilings(
    device: str = "cuda", *, copy_mib: int | None = None, matmul_n: int | None = None, seed: int = 0
) -> Ceilings:
    """Measure copy bandwidth and matmul rate on ``device`` ("cuda" or "cpu")."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    if device == "cuda":
        copy_mib = copy_mib or 4096
        matmul_n = matmul_n or 8192
        mm_dtype = torch.bfloat16
        name = torch.cuda.get_device_name()
    else:
        copy_mib = copy_mib or 64
        matmul_n = matmul_n or 512
        mm_dtype = torch.float32
        name = "cpu"
    copy_s, moved = _copy_seconds(torch, gen, device, (copy_mib << 20) // 2)
    mm_s = _matmul_seconds(torch, gen, device, matmul_n, mm_dtype)
    if device == "cuda":
        torch.cuda.empty_cache()
    return Ceilings(
        copy_bytes_per_s=moved / copy_s,
        copy_bytes=moved,
        matmul_flops_per_s=2 * matmul_n**3 / mm_s,
        matmul_shape=(matmul_n, matmul_n, matmul_n),
        matmul_dtype=str(mm_dtype).removeprefix("torch."),
        device=name,
    )


def _copy_seconds(torch: Any, gen: Any, device: str, n_elems: int) -> tuple[float, int]:
    src = torch.randn(n_elems, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    dst = torch.empty_like(src)
    timing = time_launches(lambda: dst.copy_(src), flush_l2=False, graph_below_ms=0, device=device)
    return timing.median_s, 2 * src.numel() * src.element_size()


def _matmul_seconds(torch: Any, gen: Any, device: str, n: int, dtype: Any) -> float:
    a = torch.randn((n, n), generator=gen, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn((n, n), generator=gen, device=device, dtype=torch.float32).to(dtype)
    return time_launches(lambda: a @ b, flush_l2=False, graph_below_ms=0, device=device).median_s
