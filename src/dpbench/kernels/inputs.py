"""Random input tensors for one kernel case, laid out as SGLang's MLA KV pool and backend lay them out.

The KV cache is ``MLATokenToKVPool``'s: one buffer ``[slots, 1, 576]`` per layer with the
padded slot 0 unused, and the value buffer is a view of its first 512 dims. Each
request's tokens sit in the pool as a paging allocator would leave them: with page size
1, scattered over random slots; with page size 64, in whole pages taken in random order
(tokens contiguous inside a page). Inputs are random normals, never zeros; the output is
poisoned with NaN so any element the kernel leaves unwritten fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dpbench.kernels.cases import Case

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass
class CaseInputs:
    """Everything one launch takes; ``out`` is the tensor the kernel writes."""

    case: Case
    tensors: dict[str, Any]
    out: torch.Tensor

    @property
    def nbytes_allocated(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for t in self.tensors.values()
            if isinstance(t, torch.Tensor)
        )

    def poison(self) -> None:
        self.out.fill_(float("nan"))


def _slot_indices(
    lengths: list[int], page_size: int, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Token slots of every request, concatenated, as a pool of page_size pages would place them."""
    total = sum(lengths)
    if total == 0:
        return torch.empty(0, dtype=torch.int32, device=device)
    if page_size == 1:
        # Scattered over slots 1..total (slot 0 is the pool's padding slot).
        return (torch.randperm(total, generator=gen, device=device) + 1).to(torch.int32)
    pages_per = [-(-n // page_size) for n in lengths]
    order = torch.randperm(sum(pages_per), generator=gen, device=device) + 1  # page 0 holds slot 0
    out = []
    start = 0
    for n, npages in zip(lengths, pages_per, strict=True):
        pages = order[start : start + npages]
        start += npages
        slots = (
            pages[:, None] * page_size + torch.arange(page_size, device=device)[None, :]
        ).reshape(-1)
        out.append(slots[:n])
    return torch.cat(out).to(torch.int32)


def _indptr(lengths: list[int], device: torch.device) -> torch.Tensor:
    ptr = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    ptr[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0).to(torch.int32)
    return ptr.to(device)


def _randn(
    shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Standard normals in ``dtype``, drawn in float32 slices (a 19 GB KV pool needs no 39 GB float32 copy)."""
    out = torch.empty(shape, dtype=dtype, device=device)
    flat = out.view(-1)
    step = 1 << 27
    for start in range(0, flat.numel(), step):
        n = min(step, flat.numel() - start)
        flat[start : start + n] = torch.randn(
            n, generator=gen, device=device, dtype=torch.float32
        ).to(dtype)
    return out


def make_inputs(
    case: Case,
    *,
    device: str | torch.device,
    seed: int,
    max_kv_splits: int,
    num_kv_splits: torch.Tensor | None = None,
) -> CaseInputs:
    """Random inputs for ``case`` on ``device`` (deterministic for a seed).

    Decode launches also take the split-KV scratch (``attn_logits``/``attn_lse``, fp32, as
    the backend allocates them) and ``num_kv_splits``: pass the backend's per-request
    counts (``AttentionKernels.num_kv_splits``) or leave None to fill ``max_kv_splits``.
    """
    dev = torch.device(device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    dt = TORCH_DTYPES[case.dtype]
    s = case.shape
    h = case.heads
    if case.kind == "decode":
        lengths = [case.context] * case.batch
        kv_indices = _slot_indices(lengths, case.page_size, gen, dev)
        k_buffer = _randn((case.kv_slots, 1, s.mla_qk_dim), dt, gen, dev)
        q = _randn((case.batch, h, s.mla_qk_dim), dt, gen, dev)
        out = torch.empty((case.batch, h, s.mla_v_dim), dtype=dt, device=dev)
        if num_kv_splits is None:
            num_kv_splits = torch.full((case.batch,), max_kv_splits, dtype=torch.int32, device=dev)
        tensors = dict(
            q=q,
            k_buffer=k_buffer,
            v_buffer=k_buffer[..., : s.mla_v_dim],
            o=out,
            kv_indptr=_indptr(lengths, dev),
            kv_indices=kv_indices,
            attn_logits=torch.empty(
                (case.batch, h, max_kv_splits, s.mla_v_dim), dtype=torch.float32, device=dev
            ),
            attn_lse=torch.empty((case.batch, h, max_kv_splits), dtype=torch.float32, device=dev),
            num_kv_splits=num_kv_splits.to(dev),
            max_kv_splits=max_kv_splits,
            sm_scale=s.sm_scale,
            page_size=case.page_size,
        )
        return CaseInputs(case, tensors, out)

    seqs = case.sequences()
    prefixes = [p for p, _ in seqs]
    news = [n for _, n in seqs]
    t = sum(news)
    if case.form == "mha":
        q = _randn((t, h, s.mha_qk_dim), dt, gen, dev)
        k_extend = _randn((t, h, s.mha_qk_dim), dt, gen, dev)
        v_extend = _randn((t, h, s.v_head_dim), dt, gen, dev)
        out = torch.empty((t, h, s.v_head_dim), dtype=dt, device=dev)
        # No cached prefix: the pool's buffers are passed but never read.
        k_buffer = _randn((case.page_size + 1, h, s.mha_qk_dim), dt, gen, dev)
        v_buffer = _randn((case.page_size + 1, h, s.v_head_dim), dt, gen, dev)
        kv_indices = torch.empty(0, dtype=torch.int32, device=dev)
    else:
        q = _randn((t, h, s.mla_qk_dim), dt, gen, dev)
        k_extend = _randn((t, 1, s.mla_qk_dim), dt, gen, dev)
        # forward_extend passes v.contiguous(): a separate copy of the new tokens' c_kv.
        v_extend = k_extend[..., : s.mla_v_dim].contiguous()
        out = torch.empty((t, h, s.mla_v_dim), dtype=dt, device=dev)
        k_buffer = _randn((case.kv_slots, 1, s.mla_qk_dim), dt, gen, dev)
        v_buffer = k_buffer[..., : s.mla_v_dim]
        kv_indices = _slot_indices(prefixes, case.page_size, gen, dev)
    tensors = dict(
        q_extend=q,
        k_extend=k_extend,
        v_extend=v_extend,
        o_extend=out,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=_indptr(news, dev),
        kv_indptr=_indptr(prefixes, dev),
        kv_indices=kv_indices,
        max_len_extend=max(news),
        sm_scale=s.sm_scale,
        page_size=case.page_size,
    )
    return CaseInputs(case, tensors, out)


def launch(kernels: Any, inputs: CaseInputs) -> None:
    """Run the case's one kernel launch through the sglang_compat adapter."""
    if inputs.case.kind == "decode":
        kernels.decode(**inputs.tensors, has_mla=True)
    else:
        kernels.extend(**inputs.tensors)
