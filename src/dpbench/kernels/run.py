"""Run a sweep of kernel cases: check each against the reference, time it, write the calibration.

Order per case: build random inputs, launch once on a poisoned output and compare with
the reference (a failing case is recorded and never timed), then time it with
:func:`dpbench.kernels.timing.time_launches`. Launches whose inputs are smaller than
twice the L2 rotate through several input sets that differ in what differs between
layers (q, the layer's KV buffer, the output) and share what a forward shares across
layers (indices, split counts, split-KV scratch).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dpbench.kernels.cases import Case, dp_pairs, sweep
from dpbench.kernels.ceilings import Ceilings, measure_ceilings
from dpbench.kernels.timing import time_launches


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass
class SweepOutcome:
    points: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    ceilings: Ceilings | None = None
    wall_s: float = 0.0


def _rotated_sets(inputs: Any, n: int, seed: int) -> list[Any]:
    """``n`` input sets: the first is ``inputs``; the others get fresh q, KV buffer, new-token k/v and output."""
    import torch

    from dpbench.kernels.inputs import CaseInputs

    sets = [inputs]
    gen = torch.Generator(device=inputs.out.device)
    gen.manual_seed(seed)
    for _ in range(n - 1):
        t = dict(inputs.tensors)
        for name in ("q", "q_extend", "k_buffer", "k_extend"):
            if name in t:
                src = t[name]
                t[name] = torch.randn(
                    src.shape, generator=gen, device=src.device, dtype=torch.float32
                ).to(src.dtype)
        if inputs.case.form == "mla":
            if "k_buffer" in t:
                t["v_buffer"] = t["k_buffer"][..., : t["v_buffer"].shape[-1]]
            if "k_extend" in t:
                t["v_extend"] = t["k_extend"][..., : t["v_extend"].shape[-1]].contiguous()
        elif "v_extend" in t:
            src = t["v_extend"]
            t["v_extend"] = torch.randn(
                src.shape, generator=gen, device=src.device, dtype=torch.float32
            ).to(src.dtype)
        out = torch.empty_like(inputs.out)
        t["o" if "o" in t else "o_extend"] = out
        sets.append(CaseInputs(inputs.case, t, out))
    return sets


def run_cases(
    cases: list[Case],
    *,
    kernels: Any,
    device: str,
    seed: int = 0,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    deadline_s: float | None = None,
    on_case: Callable[[Case, dict[str, Any]], None] | None = None,
    ceilings: Ceilings | None = None,
) -> SweepOutcome:
    """Check and time every case on ``device`` ("cuda", or "cpu" under Triton's interpreter)."""
    import torch

    from dpbench.kernels.timing import l2_cache_bytes

    t_start = time.perf_counter()
    out = SweepOutcome(ceilings=ceilings or measure_ceilings(device, seed=seed))
    cores = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 0
    l2 = l2_cache_bytes() if device == "cuda" else 0
    for i, case in enumerate(cases):
        if deadline_s is not None and time.perf_counter() - t_start > deadline_s:
            rec = {"case": case.name, "reason": f"time budget of {deadline_s:.0f} s spent"}
            out.skipped.append(rec)
            if on_case:
                on_case(case, {"status": "skipped", **rec})
            continue
        try:
            rec = _one_case(
                case,
                i,
                kernels=kernels,
                device=device,
                seed=seed,
                cores=cores,
                l2=l2,
                warmup_ms=warmup_ms,
                rep_ms=rep_ms,
                ceilings=out.ceilings,
            )
        except torch.cuda.OutOfMemoryError as exc:
            rec = {
                "status": "skipped",
                "case": case.name,
                "reason": f"out of device memory: {str(exc).splitlines()[0]}",
            }
        except (
            Exception
        ) as exc:  # a kernel that does not compile or launch is a failed case, not a crash
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            rec = {
                "status": "failed",
                "failure": {
                    "case": case.name,
                    "ok": False,
                    "reason": f"{type(exc).__name__}: {first}",
                },
            }
        if rec["status"] == "ok":
            out.points.append(rec["point"])
        elif rec["status"] == "failed":
            out.failures.append(rec["failure"])
        else:
            out.skipped.append({"case": case.name, "reason": rec["reason"]})
        if on_case:
            on_case(case, rec)
        if device == "cuda":
            torch.cuda.empty_cache()
    out.wall_s = time.perf_counter() - t_start
    return out


@dataclass
class PreparedCase:
    """A case ready to time: checked inputs, the rotated input sets, the launch settings used."""

    case: Case
    inputs: Any
    sets: list[Any]
    verdict: Any
    launch_settings: dict[str, Any]


def prepare_case(
    case: Case,
    *,
    kernels: Any,
    device: str,
    seed: int = 0,
    index: int = 0,
    cores: int = 0,
    l2: int = 0,
) -> PreparedCase:
    """Build ``case``'s inputs, check them against the reference, and rotate input sets below 2×L2.

    ``seed`` and ``index`` (the case's place in a sweep) fix every random tensor: the
    sweep (:func:`run_cases`) and the asv benchmark (``benchmarks/kernels.py``) prepare
    a case the same way. ``cores`` / ``l2`` are the device's SM count and L2 bytes (0 on
    a CPU). If the check fails, ``sets`` is empty and ``verdict.ok`` is False: never time it.
    """
    import torch

    from dpbench.kernels.inputs import make_inputs
    from dpbench.kernels.verify import verify
    from dpbench.sglang_compat.kernels import mla_max_kv_splits, pdl_default

    max_splits = mla_max_kv_splits(cores, case.shape.max_context_len)
    splits = None
    if case.kind == "decode":
        seq_lens = torch.full((case.batch,), case.context, dtype=torch.int32, device=device)
        splits = kernels.num_kv_splits(
            seq_lens, num_heads=case.heads, max_kv_splits=max_splits, core_count=cores
        )
    inputs = make_inputs(
        case,
        device=device,
        seed=seed * 100_003 + index,
        max_kv_splits=max_splits,
        num_kv_splits=splits,
    )
    verdict = verify(kernels, inputs)
    if not verdict.ok:
        return PreparedCase(case, inputs, [], verdict, {})
    launch_settings: dict[str, Any] = {}
    if case.kind == "decode":
        launch_settings = {
            "max_kv_splits": max_splits,
            "num_kv_splits": sorted({int(x) for x in inputs.tensors["num_kv_splits"].tolist()}),
            "use_pdl": "use_pdl" in kernels.decode_params and pdl_default(inputs.out),
        }
    n_sets = 1
    if l2 and case.bytes < 2 * l2:
        n_sets = min(128, -(-2 * l2 // max(1, case.bytes)))
    sets = _rotated_sets(inputs, n_sets, seed + 7 * index + 1) if n_sets > 1 else [inputs]
    return PreparedCase(case, inputs, sets, verdict, launch_settings)


def _one_case(
    case: Case,
    index: int,
    *,
    kernels: Any,
    device: str,
    seed: int,
    cores: int,
    l2: int,
    warmup_ms: float,
    rep_ms: float,
    ceilings: Ceilings,
) -> dict[str, Any]:
    """Check one case, then time it; a case that fails its check is not timed."""
    from dpbench.kernels.inputs import launch

    prepared = prepare_case(
        case, kernels=kernels, device=device, seed=seed, index=index, cores=cores, l2=l2
    )
    verdict, sets, launch_settings = prepared.verdict, prepared.sets, prepared.launch_settings
    if not verdict.ok:
        return {"status": "failed", "failure": verdict.as_dict()}
    fns = [lambda s=s: launch(kernels, s) for s in sets]
    timing = time_launches(
        fns if len(fns) > 1 else fns[0], warmup_ms=warmup_ms, rep_ms=rep_ms, device=device
    )
    bw = case.bytes / timing.median_s
    rate = case.flops / timing.median_s
    point = {
        "case": case.name,
        "kind": case.kind,
        "form": case.form,
        "heads": case.heads,
        "page_size": case.page_size,
        "dtype": case.dtype,
        "batch": case.batch,
        "context": case.context,
        "new_tokens": case.new_tokens,
        "prefix": case.prefix,
        "median_s": timing.median_s,
        "quantiles_s": timing.quantiles_s,
        "bytes": case.bytes,
        "flops": case.flops,
        "bandwidth_bytes_per_s": bw,
        "flops_per_s": rate,
        "copy_bandwidth_fraction": bw / ceilings.copy_bytes_per_s,
        "matmul_rate_fraction": rate / ceilings.matmul_flops_per_s,
        "rel_error": verdict.rel_error,
        "timing": {**timing.as_dict(), **launch_settings},
    }
    del sets, fns, prepared
    return {"status": "ok", "case": case.name, "point": point}


def pair_records(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DP-mixed forwards from measured cases: the step costs the slower rank; the other waits."""
    by_name = {p["case"]: p for p in points}
    cases = []
    for p in points:
        kw = {
            k: p[k]
            for k in (
                "kind",
                "heads",
                "page_size",
                "dtype",
                "batch",
                "context",
                "new_tokens",
                "prefix",
            )
        }
        cases.append(Case(**kw))
    recs = []
    for pair in dp_pairs(cases):
        te = by_name[pair.extend.name]["median_s"]
        td = by_name[pair.decode.name]["median_s"]
        step = max(te, td)
        recs.append(
            {
                "pair": pair.name,
                "extend_case": pair.extend.name,
                "decode_case": pair.decode.name,
                "extend_s": te,
                "decode_s": td,
                "step_s": step,
                "decode_rank_idle_fraction": 1.0 - td / step,
                "extend_rank_idle_fraction": 1.0 - te / step,
            }
        )
    return recs


def calibration_dict(
    outcome: SweepOutcome,
    *,
    kernels: Any,
    device_name: str,
    sweep_name: str,
    attn_tp_size: int,
    heads: int,
    warmup_ms: float,
    rep_ms: float,
) -> dict[str, Any]:
    """The calibration file's content (schema in calibration.py)."""
    assert outcome.ceilings is not None
    pages = sorted({p["page_size"] for p in outcome.points})
    interp = interpreter_active()
    notes = []
    if interp:
        notes.append(
            "measured under Triton's interpreter on a CPU (TRITON_INTERPRET=1): not GPU kernel times; "
            "ceilings are the CPU's"
        )
    return {
        "schema": "dpbench.kernel-calibration/1",
        "device": device_name,
        "interpreter": interp,
        "sglang_version": kernels.sglang_version,
        "import_path": kernels.import_path,
        "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scope": "per-layer",
        "model": "deepseek-v3",
        "attn_tp_size": attn_tp_size,
        "heads": heads,
        "default_page_size": 64 if 64 in pages else (pages[0] if pages else 1),
        "sweep": sweep_name,
        "timing": {
            "function": "dpbench.kernels.timing.time_launches",
            "warmup_ms": warmup_ms,
            "rep_ms": rep_ms,
        },
        "ceilings": outcome.ceilings.as_dict(),
        "points": outcome.points,
        "pairs": pair_records(outcome.points),
        "failures": outcome.failures,
        "notes": notes + [f"skipped {s['case']}: {s['reason']}" for s in outcome.skipped],
    }


def run_sweep(
    sweep_name: str,
    *,
    device: str,
    attn_tp_size: int = 1,
    dtype: str = "bfloat16",
    seed: int = 0,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    deadline_s: float | None = None,
    kernels_mode: str = "auto",
    on_case: Callable[[Case, dict[str, Any]], None] | None = None,
    on_start: Callable[[list[Case]], None] | None = None,
) -> tuple[dict[str, Any], SweepOutcome]:
    """Load SGLang's kernels, run ``sweep_name``, return (calibration dict, outcome)."""
    import torch

    from dpbench.sglang_compat.kernels import load_attention_kernels

    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "device 'cuda' asked for, but torch sees no CUDA GPU; on a CPU use the interpreter (--interpreter)"
        )
    if device == "cpu" and not interpreter_active():
        raise RuntimeError(
            "running Triton kernels on a CPU needs TRITON_INTERPRET=1 set before triton is imported"
        )
    kernels = load_attention_kernels(kernels_mode)
    cases = sweep(sweep_name, attn_tp_size=attn_tp_size, dtype=dtype)
    if on_start:
        on_start(cases)
    outcome = run_cases(
        cases,
        kernels=kernels,
        device=device,
        seed=seed,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        deadline_s=deadline_s,
        on_case=on_case,
    )
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    heads = cases[0].heads
    calib = calibration_dict(
        outcome,
        kernels=kernels,
        device_name=name,
        sweep_name=sweep_name,
        attn_tp_size=attn_tp_size,
        heads=heads,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
    )
    return calib, outcome
