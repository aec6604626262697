"""What a zygote and its callers agree on: where it lives, what it imports, what it must match."""

from __future__ import annotations

from collections.abc import Mapping

ENV_DIR = "DPBENCH_ZYGOTE_DIR"
ENV_OWNER = "DPBENCH_ZYGOTE_OWNER"
ENV_PRELOAD = "DPBENCH_ZYGOTE_PRELOAD"  # comma-separated modules, instead of PRELOAD
PRELOAD = ("sglang.srt.managers.scheduler",)
# Read when torch, Triton or SGLang are imported: a run that changes one starts afresh.
IMPORT_TIME = ("SGLANG", "TRITON", "TORCH", "PYTORCH", "CUDA", "OMP_", "MKL", "HF_",
               "TRANSFORMERS", "LD_", "PYTHONHASHSEED", "PYTHONWARNINGS")  # fmt: skip
START_TIMEOUT_S = 300


def import_time(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that the preloaded modules may read when imported."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}
