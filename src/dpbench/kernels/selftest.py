"""Self-checks of the tier's own parts that need torch: reference math, poisoning, input layout.

``python -m dpbench.kernels.selftest`` prints one JSON object per check
(``{"check": ..., "ok": ..., "detail": ...}``) and exits 1 if any failed. The tests run it
inside a release environment (which has torch); a GPU machine can run it before the check.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch

from dpbench.kernels import reference as ref_mod
from dpbench.kernels.cases import Case, sweep
from dpbench.kernels.inputs import CaseInputs, make_inputs
from dpbench.kernels.reference import reference_output, relative_error
from dpbench.kernels.verify import verify


def _dense_reference(inputs: CaseInputs) -> torch.Tensor:
    """An independent formulation: per request, torch's SDPA over the materialised K/V with a boolean mask."""
    case, t = inputs.case, inputs.tensors
    f = torch.float64
    outs = []
    if case.kind == "decode":
        ptr = t["kv_indptr"].tolist()
        for b in range(case.batch):
            idx = t["kv_indices"][ptr[b] : ptr[b + 1]].long()
            k = t["k_buffer"][idx, 0].to(f)  # [L, 576]
            v = t["v_buffer"][idx, 0].to(f)
            q = t["q"][b].to(f)  # [H, 576]
            o = torch.nn.functional.scaled_dot_product_attention(
                q[:, None, :],
                k[None].expand(q.shape[0], -1, -1),
                v[None].expand(q.shape[0], -1, -1),
                scale=t["sm_scale"],
            )
            outs.append(o[:, 0, :])
        return torch.stack(outs)
    qo, kv = t["qo_indptr"].tolist(), t["kv_indptr"].tolist()
    for b in range(len(qo) - 1):
        idx = t["kv_indices"][kv[b] : kv[b + 1]].long()
        k = torch.cat(
            [t["k_buffer"][idx].to(f), t["k_extend"][qo[b] : qo[b + 1]].to(f)]
        )  # [L, Hk, d]
        v = torch.cat([t["v_buffer"][idx].to(f), t["v_extend"][qo[b] : qo[b + 1]].to(f)])
        q = t["q_extend"][qo[b] : qo[b + 1]].to(f)  # [n, H, d]
        n, h, p = q.shape[0], q.shape[1], idx.shape[0]
        if k.shape[1] == 1:
            k, v = k.expand(-1, h, -1), v.expand(-1, h, -1)
        allowed = torch.arange(p + n)[None, :] <= (p + torch.arange(n))[:, None]  # [n, L]
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1),
            k.transpose(0, 1),
            v.transpose(0, 1),
            attn_mask=allowed,
            scale=t["sm_scale"],
        )
        outs.append(o.transpose(0, 1))
    return torch.cat(outs)


class _FakeKernels:
    """Stands in for SGLang's kernels to exercise the checker: writes ``fill(out, ref)`` into the output."""

    def __init__(
        self, fill: Callable[[torch.Tensor, torch.Tensor], None], ref: torch.Tensor
    ) -> None:
        self.fill, self.ref = fill, ref

    def decode(self, *, o: torch.Tensor, **_: Any) -> None:
        self.fill(o, self.ref)

    def extend(self, *, o_extend: torch.Tensor, **_: Any) -> None:
        self.fill(o_extend, self.ref)


def _checks() -> list[dict[str, Any]]:
    results = []

    def record(name: str, ok: bool, detail: Any) -> None:
        results.append({"check": name, "ok": bool(ok), "detail": detail})

    cases = sweep("tiny", dtype="float32")
    for i, case in enumerate(cases):
        inp = make_inputs(case, device="cpu", seed=100 + i, max_kv_splits=4)
        err = relative_error(reference_output(inp), _dense_reference(inp))
        record(f"reference-vs-sdpa:{case.name}", err < 1e-10, {"rel_error": err})

    # Chunking the query rows must not change the result.
    case = Case("extend", heads=4, page_size=64, new_tokens=50, prefix=30, dtype="float32")
    inp = make_inputs(case, device="cpu", seed=7, max_kv_splits=4)
    whole = reference_output(inp)
    saved = ref_mod._CHUNK_ELEMENTS
    try:
        ref_mod._CHUNK_ELEMENTS = 4 * 80  # a few query rows per chunk
        chunked = reference_output(inp)
    finally:
        ref_mod._CHUNK_ELEMENTS = saved
    # beyond float64 rounding: BLAS may sum a chunk's rows in another order (seen: 9e-15 in CI)
    diff = float((whole - chunked).abs().max())
    scale = float(whole.abs().max())
    record(
        "reference-chunking",
        diff <= 1e-12 * max(scale, 1.0),
        {"max_abs_diff": diff, "tolerance": 1e-12 * max(scale, 1.0)},
    )

    # The checker: unwritten outputs, half-written outputs, wrong values, right values.
    for case in (cases[0], cases[-1]):
        inp = make_inputs(case, device="cpu", seed=11, max_kv_splits=4)
        ref = reference_output(inp)
        none = verify(_FakeKernels(lambda o, r: None, ref), inp)
        record(
            f"poison-unwritten:{case.name}",
            not none.ok and none.unwritten_or_nan == none.elements,
            none.as_dict(),
        )

        def half(o: torch.Tensor, r: torch.Tensor) -> None:
            o.view(-1)[: o.numel() // 2] = r.reshape(-1)[: o.numel() // 2].to(o.dtype)

        part = verify(_FakeKernels(half, ref), inp)
        record(
            f"poison-half-written:{case.name}",
            not part.ok and part.unwritten_or_nan == part.elements - part.elements // 2,
            part.as_dict(),
        )
        noisy = verify(_FakeKernels(lambda o, r: o.copy_((r * 1.05).to(o.dtype)), ref), inp)
        record(
            f"wrong-values-fail:{case.name}",
            not noisy.ok and noisy.rel_error > noisy.tolerance,
            noisy.as_dict(),
        )
        exact = verify(_FakeKernels(lambda o, r: o.copy_(r.to(o.dtype)), ref), inp)
        record(f"right-values-pass:{case.name}", exact.ok, exact.as_dict())

    # KV-pool layout: unique non-zero slots; page 64 keeps tokens contiguous in whole pages; v views k.
    for page in (1, 64):
        case = Case("decode", heads=2, page_size=page, batch=3, context=150, dtype="float32")
        inp = make_inputs(case, device="cpu", seed=3, max_kv_splits=4)
        idx = inp.tensors["kv_indices"].long()
        ok = (
            idx.unique().numel() == idx.numel()
            and int(idx.min()) >= 1
            and int(idx.max()) < case.kv_slots
        )
        runs_ok = True
        if page == 64:
            for b in range(3):
                r = idx[b * 150 : (b + 1) * 150]
                runs_ok &= bool((r[::64] % 64 == 0).all()) and bool(
                    (r.view(-1)[:128].view(2, 64).diff(dim=1) == 1).all()
                )
        shares = inp.tensors["v_buffer"].data_ptr() == inp.tensors["k_buffer"].data_ptr()
        record(
            f"kv-layout:page{page}",
            ok and runs_ok and shares,
            {"unique_nonzero_in_range": ok, "page_runs": runs_ok, "v_views_k": shares},
        )
    return results


def main() -> int:
    torch.manual_seed(0)
    results = _checks()
    for r in results:
        print(json.dumps(r, default=float), flush=True)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
