"""The kernel calibration file: measured attention times by kind and size, and estimates from them.

The twin's cost model reads it through :func:`load_calibration`. Times are **per layer**:
one attention kernel launch for one layer (a forward's attention costs
``num_hidden_layers`` of them). Every point was checked against the reference before it
was timed; points that failed the check are not in the file.

:meth:`Calibration.estimate_s` answers for a forward kind and size:

- ``"decode"``: ``batch`` requests of ``context`` tokens each (mean context).
- ``"extend"``: ``batch`` requests sharing ``new_tokens`` new tokens, each with a cached
  prefix of ``context`` tokens (0: none, SGLang then runs the MHA form). Measured with one
  request per launch; ``batch`` > 1 is estimated as ``batch`` launches of
  ``new_tokens / batch`` tokens, which overstates a batched launch's fixed costs.
- ``"mixed"``: one extend of ``new_tokens`` plus ``batch`` decodes of ``context`` tokens in
  one launch (SGLang's mixed chunk). ``batch == 0`` is an extend, ``new_tokens == 0`` a decode.

Inside the measured grid the estimate interpolates log(time) linearly in the logarithms
of the axes (multilinear); outside it, the nearest grid point's time is scaled by the
ratio of the two cases' roofline times (bytes over the measured copy bandwidth, FLOPs
over the measured matmul rate, whichever is larger). No work gives 0 s.

A file measured under Triton's interpreter on a CPU says ``"interpreter": true``; its
times are not GPU kernel times, and :func:`load_calibration` refuses it unless asked.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dpbench.core.atomic import write_json
from dpbench.kernels.cases import KINDS, Case, MLAShape

SCHEMA = "dpbench.kernel-calibration/1"


class CalibrationError(ValueError):
    """A calibration file is missing, malformed, or not usable as asked."""


class InterpreterCalibrationError(CalibrationError):
    """The file holds Triton-interpreter (CPU) times and the caller did not allow that."""


class CeilingsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    copy_bytes_per_s: float = Field(gt=0)
    copy_bytes: int = Field(gt=0)
    matmul_flops_per_s: float = Field(gt=0)
    matmul_shape: list[int]
    matmul_dtype: str
    device: str


class CalibrationPoint(BaseModel):
    """One measured case (a single launch), correct against the reference before timing."""

    model_config = ConfigDict(extra="forbid")
    case: str
    kind: Literal["decode", "extend", "mixed"]
    form: Literal["mla", "mha"]
    heads: int = Field(ge=1)
    page_size: int = Field(ge=1)
    dtype: str
    batch: int = Field(ge=0)
    context: int = Field(ge=0)
    new_tokens: int = Field(ge=0)
    prefix: int = Field(ge=0)
    median_s: float = Field(gt=0)
    quantiles_s: dict[str, float]
    bytes: int = Field(ge=0)
    flops: int = Field(ge=0)
    bandwidth_bytes_per_s: float = Field(ge=0)
    flops_per_s: float = Field(ge=0)
    copy_bandwidth_fraction: float = Field(ge=0)
    matmul_rate_fraction: float = Field(ge=0)
    rel_error: float = Field(ge=0)
    timing: dict[str, Any] = Field(default_factory=dict)


class CalibrationFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_id: Literal["dpbench.kernel-calibration/1"] = Field(alias="schema")
    device: str
    interpreter: bool
    sglang_version: str
    import_path: str
    created: str
    scope: Literal["per-layer"] = "per-layer"
    model: str = "deepseek-v3"
    attn_tp_size: int = Field(ge=1)
    heads: int = Field(ge=1)
    default_page_size: int = Field(ge=1)
    sweep: str
    timing: dict[str, Any] = Field(default_factory=dict)
    ceilings: CeilingsModel
    points: list[CalibrationPoint] = Field(min_length=1)
    pairs: list[dict[str, Any]] = Field(default_factory=list)
    failures: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def save_calibration(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Validate and write a calibration file atomically."""
    try:
        CalibrationFile.model_validate(data)
    except ValidationError as exc:
        raise CalibrationError(
            f"refusing to write an invalid calibration to {path}: {exc}"
        ) from exc
    write_json(path, data)
    return Path(path)


def load_calibration(
    path: str | os.PathLike[str], *, allow_interpreter: bool = False
) -> Calibration:
    """Read a calibration file; refuse interpreter-mode times unless ``allow_interpreter``."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise CalibrationError(
            f"{p}: no such calibration file; make one on a GPU with `dpbench kernels run -o {p}`"
        ) from None
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{p}: not valid JSON ({exc})") from exc
    if isinstance(raw, dict) and raw.get("schema") != SCHEMA:
        raise CalibrationError(
            f"{p}: field 'schema' must be {SCHEMA!r}, found {raw.get('schema')!r}"
        )
    try:
        data = CalibrationFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise CalibrationError(
            f"{p}: field {where!r}: {first['msg']} ({exc.error_count()} error(s) in all)"
        ) from exc
    if data.interpreter and not allow_interpreter:
        raise InterpreterCalibrationError(
            f'{p} was measured under Triton\'s interpreter on a CPU ("interpreter": true, device '
            f"{data.device!r}): its times are not GPU kernel times. Pass allow_interpreter=True to use "
            "it anyway (tests, plumbing), or measure on a GPU with `dpbench kernels run -o <file>`."
        )
    return Calibration(data, source=str(p))


class Calibration:
    """Measured per-layer attention times, and estimates between them (see the module docstring)."""

    def __init__(self, data: CalibrationFile, *, source: str = "<memory>") -> None:
        self.data = data
        self.source = source
        self._shape = MLAShape()

    @property
    def device(self) -> str:
        return self.data.device

    @property
    def interpreter(self) -> bool:
        return self.data.interpreter

    @property
    def sglang_version(self) -> str:
        return self.data.sglang_version

    @property
    def page_sizes(self) -> list[int]:
        return sorted({p.page_size for p in self.data.points})

    def estimate_s(
        self, kind: str, *, batch: int, context: int, new_tokens: int, page_size: int | None = None
    ) -> float:
        """Seconds one attention layer takes for this forward (see the module docstring)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if min(batch, context, new_tokens) < 0:
            raise ValueError(
                f"batch, context and new_tokens must be ≥0; got {batch}, {context}, {new_tokens}"
            )
        page = self.data.default_page_size if page_size is None else page_size
        if kind == "mixed" and batch == 0:
            kind, batch, context = "extend", 1, 0
        elif kind == "mixed" and new_tokens == 0:
            kind = "decode"
        if kind == "decode":
            if batch == 0 or context == 0:
                return 0.0
            return self._interpolate("decode", page, {"batch": batch, "context": context})
        if kind == "extend":
            if new_tokens == 0:
                return 0.0
            reqs = max(1, batch)
            per_req = max(1, round(new_tokens / reqs))
            return reqs * self._interpolate(
                "extend", page, {"new_tokens": per_req, "prefix": context}
            )
        if batch == 0 or context == 0:
            return 0.0
        return self._interpolate(
            "mixed", page, {"new_tokens": new_tokens, "batch": batch, "context": context}
        )

    # --- interpolation ----------------------------------------------------------------
    def _points(self, kind: str, page: int, extend_form: str | None) -> list[CalibrationPoint]:
        pts = [p for p in self.data.points if p.kind == kind and p.heads == self.data.heads]
        if extend_form is not None:
            pts = [p for p in pts if p.form == extend_form]
        if extend_form != "mha":  # an MHA extend reads no cache: its page size does not matter
            pts = [p for p in pts if p.page_size == page]
        if not pts:
            have = sorted({(p.kind, p.form, p.page_size) for p in self.data.points})
            form = f", form {extend_form}" if extend_form else ""
            raise CalibrationError(
                f"{self.source}: no {kind} points for page size {page}{form}; the file has (kind, form, page): {have}"
            )
        return pts

    def _case(self, kind: str, page: int, axes: dict[str, int], dtype: str) -> Case:
        return Case(
            kind=kind, heads=self.data.heads, page_size=page, dtype=dtype, shape=self._shape, **axes
        )  # type: ignore[arg-type]

    def _roofline_s(self, case: Case) -> float:
        c = self.data.ceilings
        return max(case.bytes / c.copy_bytes_per_s, case.flops / c.matmul_flops_per_s)

    def _interpolate(self, kind: str, page: int, query: dict[str, int]) -> float:
        form = None
        if kind == "extend":
            form = "mha" if query["prefix"] == 0 else "mla"
        pts = self._points(kind, page, form)
        names = [n for n in query if not (form == "mha" and n == "prefix")]
        table = {tuple(getattr(p, n) for n in names): p.median_s for p in pts}
        axes = [sorted({k[i] for k in table}) for i in range(len(names))]
        clamped = [min(max(query[n], ax[0]), ax[-1]) for n, ax in zip(names, axes, strict=True)]
        est = _multilinear_log(axes, table, clamped)
        if est is None:  # incomplete grid: nearest measured point in log distance
            key = min(
                table, key=lambda k: sum(math.log(k[i] / clamped[i]) ** 2 for i in range(len(k)))
            )
            est = table[key]
            clamped = list(key)
        if clamped != [query[n] for n in names]:
            at = dict(query)
            at.update(dict(zip(names, clamped, strict=True)))
            dt = pts[0].dtype
            est *= self._roofline_s(self._case(kind, page, query, dt)) / self._roofline_s(
                self._case(kind, page, at, dt)
            )
        return est


def _multilinear_log(
    axes: Sequence[Sequence[int]], table: dict[tuple[int, ...], float], x: Sequence[int]
) -> float | None:
    """Interpolate log(t) multilinearly in log(axis); None if a needed grid corner is missing."""
    brackets = []
    for ax, v in zip(axes, x, strict=True):
        j = bisect.bisect_left(ax, v)
        if j < len(ax) and ax[j] == v:
            brackets.append(((ax[j], 1.0),))
            continue
        lo, hi = ax[j - 1], ax[j]
        w = (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))
        brackets.append(((lo, 1.0 - w), (hi, w)))
    total = 0.0

    def rec(i: int, key: tuple[int, ...], weight: float) -> bool:
        nonlocal total
        if i == len(brackets):
            if key not in table:
                return False
            total += weight * math.log(table[key])
            return True
        return all(rec(i + 1, (*key, v), weight * w) for v, w in brackets[i] if w > 0)

    if not rec(0, (), 1.0):
        return None
    return math.exp(total)
