"""Plain PyTorch MLA attention in float32/float64: what every kernel case must reproduce.

It reads the same tensors the kernel reads (the KV pool through ``kv_indices``, the new
tokens' ``k_extend``/``v_extend``) and computes softmax(q kᵀ · sm_scale) v per request
and head, causal over the new tokens, with explicit gathers and no fused kernels. Query
rows are processed in chunks so the score matrix stays under a memory budget.
"""

from __future__ import annotations

import torch

from dpbench.kernels.inputs import CaseInputs

# Score-matrix elements per chunk on a CPU (float64: 512 MiB); four times as many on a GPU,
# where the reference runs in float32 beside the kernel's inputs.
_CHUNK_ELEMENTS = 1 << 26


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float, first_query_pos: int
) -> torch.Tensor:
    """q [n, H, d], k [L, Hk, d], v [L, Hk, dv] → [n, H, dv]; query i (position first_query_pos + i) sees keys 0..pos."""
    n, h, _ = q.shape
    length, hk, _ = k.shape
    group = h // hk
    out = torch.empty((n, h, v.shape[-1]), dtype=q.dtype, device=q.device)
    budget = _CHUNK_ELEMENTS * (4 if q.is_cuda else 1)
    rows = max(1, budget // max(1, h * length))
    key_pos = torch.arange(length, device=q.device)
    for start in range(0, n, rows):
        qc = q[start : start + rows]  # [c, H, d]
        qg = qc.view(qc.shape[0], hk, group, qc.shape[-1])
        scores = torch.einsum("cgsd,lgd->cgsl", qg, k) * sm_scale  # [c, Hk, group, L]
        q_pos = first_query_pos + start + torch.arange(qc.shape[0], device=q.device)
        mask = key_pos[None, :] > q_pos[:, None]  # [c, L]: future keys
        scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[start : start + rows] = torch.einsum("cgsl,lgd->cgsd", probs, v).reshape(
            qc.shape[0], h, -1
        )
    return out


def reference_output(inputs: CaseInputs, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The exact attention output for ``inputs``, computed in ``dtype`` on the inputs' device."""
    case = inputs.case
    t = inputs.tensors
    if case.kind == "decode":
        q = t["q"].to(dtype)
        out = torch.empty(
            (q.shape[0], q.shape[1], t["v_buffer"].shape[-1]), dtype=dtype, device=q.device
        )
        ptr = t["kv_indptr"].tolist()
        for b in range(q.shape[0]):
            idx = t["kv_indices"][ptr[b] : ptr[b + 1]].long()
            k = t["k_buffer"][idx].to(dtype)
            v = t["v_buffer"][idx].to(dtype)
            # The decode query is the request's last token: it sees the whole context.
            out[b] = _attend(q[b : b + 1], k, v, t["sm_scale"], k.shape[0] - 1)[0]
        return out
    q = t["q_extend"].to(dtype)
    out = torch.empty(
        (q.shape[0], q.shape[1], t["v_extend"].shape[-1]), dtype=dtype, device=q.device
    )
    qo = t["qo_indptr"].tolist()
    kv = t["kv_indptr"].tolist()
    for b in range(len(qo) - 1):
        idx = t["kv_indices"][kv[b] : kv[b + 1]].long()
        k = torch.cat([t["k_buffer"][idx].to(dtype), t["k_extend"][qo[b] : qo[b + 1]].to(dtype)])
        v = torch.cat([t["v_buffer"][idx].to(dtype), t["v_extend"][qo[b] : qo[b + 1]].to(dtype)])
        out[qo[b] : qo[b + 1]] = _attend(q[qo[b] : qo[b + 1]], k, v, t["sm_scale"], idx.shape[0])
    return out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in ref's precision; NaN anywhere in ``out`` gives NaN."""
    diff = out.to(ref.dtype) - ref
    return float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))
