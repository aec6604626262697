"""Skips and refusals where the kernel tier cannot run: no CUDA, no SGLang."""

from __future__ import annotations

import importlib
import importlib.util

import pytest


def test_asv_setup_raises_not_implemented_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU is a skip; no torch at all is a broken environment (every tier's environment has
    it), so it fails the benchmark rather than reading as missing hardware."""
    from dpbench.core.paths import project_root

    monkeypatch.syspath_prepend(str(project_root()))
    k = importlib.import_module("benchmarks.kernels")
    if importlib.util.find_spec("torch") is None:  # this interpreter: the orchestrating .venv
        with pytest.raises(ModuleNotFoundError, match="torch"):
            k.DecodeAttention().setup_cache()
        return
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    cache = k.DecodeAttention().setup_cache()
    # one setup_cache for the three classes (asv keys it by source): ceilings measured once
    assert k.DecodeAttention.setup_cache is k.MixedAttention.setup_cache
    assert set(cache) == {"skip"} and "CUDA" in cache["skip"]
    for cls, args in [
        (k.DecodeAttention, (64, 1, 1024)),
        (k.ExtendAttention, (1, 512, 0)),
        (k.MixedAttention, (64, 2048, 32, 4096)),
    ]:
        with pytest.raises(NotImplementedError, match="CUDA"):
            cls().setup(cache, *args)


def test_loading_kernels_without_sglang_says_what_is_missing() -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is importable here")
    from dpbench.sglang_compat.kernels import load_attention_kernels

    with pytest.raises(ImportError, match="SGLang is not importable"):
        load_attention_kernels()
    with pytest.raises(ValueError, match="mode must be one of"):
        load_attention_kernels("pip")


def test_mla_split_cap_follows_the_backend_rule() -> None:
    from dpbench.sglang_compat.kernels import DEFAULT_NUM_KV_SPLITS, mla_max_kv_splits

    # H200: 132 SMs → next power of two 256; 64k context → 2048 blocks of 32: cap 256.
    assert mla_max_kv_splits(132, 65536) == 256
    # Short contexts bound it: 1024 / 32 = 32 blocks.
    assert mla_max_kv_splits(132, 1024) == 32
    # Never below the server's --triton-attention-num-kv-splits; no device keeps the default.
    assert mla_max_kv_splits(132, 64) == DEFAULT_NUM_KV_SPLITS
    assert mla_max_kv_splits(0, 65536) == DEFAULT_NUM_KV_SPLITS
