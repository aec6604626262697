"""The run behind the kernel tier's asv benchmarks (``benchmarks/kernels.py``): the device's
ceilings and the SGLang it runs, measured once per environment."""

from __future__ import annotations

from typing import Any

from dpbench.core.asvcache import missing_cuda, save_run, skipped


def environment() -> dict[str, Any]:
    """Copy bandwidth and matmul rate (:mod:`dpbench.kernels.ceilings`), the device's cores and
    L2, and the installed SGLang's provenance, filed as the ``environment`` run; a skip
    without a CUDA GPU."""
    why = missing_cuda(1)
    if why is not None:
        return skipped(why)
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
