"""Correct before timed: run a case once on poisoned output and compare it with the reference."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from dpbench.kernels.inputs import CaseInputs, launch
from dpbench.kernels.reference import reference_output, relative_error

# ‖out − ref‖ / ‖ref‖ allowed per input dtype: bf16 operands (and bf16 softmax weights in
# the PV product) land between 1e-3 and 1e-2; fp32 operands far under 1e-3.
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}


@dataclass(frozen=True)
class Verdict:
    case: str
    ok: bool
    rel_error: float
    tolerance: float
    unwritten_or_nan: int
    elements: int
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify(kernels: Any, inputs: CaseInputs, *, ref_dtype: torch.dtype | None = None) -> Verdict:
    """Poison the output, launch once, and compare with :func:`reference_output`.

    ``ref_dtype`` defaults to float64 on a CPU and float32 (TF32 off) on a GPU.
    """
    case = inputs.case
    inputs.poison()
    launch(kernels, inputs)
    if inputs.out.is_cuda:
        torch.cuda.synchronize()
    out = inputs.out.detach().clone()
    bad = int((~torch.isfinite(out.float())).sum())
    if ref_dtype is None:
        ref_dtype = torch.float64 if out.device.type == "cpu" else torch.float32
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = reference_output(inputs, dtype=ref_dtype)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    tol = TOLERANCE[case.dtype]
    if bad:
        return Verdict(
            case.name,
            False,
            float("nan"),
            tol,
            bad,
            out.numel(),
            f"{bad} of {out.numel()} output elements are NaN/inf (unwritten or overflowed)",
        )
    err = relative_error(out, ref)
    ok = err <= tol
    reason = "" if ok else f"relative error {err:.3g} exceeds {tol:g} for {case.dtype}"
    return Verdict(case.name, ok, err, tol, 0, out.numel(), reason)
