"""Workload spec: the YAML schema (pydantic), loading by name or path, and its hash.

A spec says what to send (length distributions, shared prefixes, multi-turn sessions),
when to send it (arrival process), which model it is sized for, and what KV-cache
utilization the planner should aim each DP rank at. ``load_spec`` raises one
``WorkloadSpecError`` naming the field, the value found and what is allowed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dpbench.core.paths import workloads_dir
from dpbench.workload.importers.base import TraceImportError
from dpbench.workload.importers.source import TraceSource, file_sha256, resolve_path
from dpbench.workload.models import ModelConfigError, resolve_model_path
from dpbench.workload.spec_errors import format_problems, validation_problems

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(gt=0, le=1)]

# Big enough for any benchmark, small enough that a typo (an extra 0) is caught early.
MAX_REQUESTS = 10_000_000
MAX_TOKENS = 10_000_000


class WorkloadSpecError(ValueError):
    """A workload spec that cannot be used; the message lists every problem found, each naming
    field, value found and what is allowed (``problems`` holds them one per item).

    Cross-field checks (``high ≥ low``, shares summing to 1, …) run once the fields they
    compare are valid, so they appear in the list after the field problems are fixed.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems is not None else [message]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# ---- length distributions (token counts, integers ≥ 1) -------------------------------------


class FixedLength(_Strict):
    """Every request gets exactly ``value`` tokens."""

    kind: Literal["fixed"]
    value: Annotated[int, Field(gt=0, le=MAX_TOKENS)]


class UniformLength(_Strict):
    """Integers drawn uniformly from ``low``..``high`` inclusive."""

    kind: Literal["uniform"]
    low: Annotated[int, Field(gt=0, le=MAX_TOKENS)]
    high: Annotated[int, Field(gt=0, le=MAX_TOKENS)]

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"`high` ({self.high}) must be ≥ `low` ({self.low})")
        return self


class LogNormalLength(_Strict):
    """``round(median × exp(sigma × N(0,1)))`` clipped to ``min``..``max``.

    Before clipping the mean is ``median × exp(sigma² / 2)``.
    """

    kind: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, le=MAX_TOKENS)]
    sigma: Annotated[float, Field(gt=0, le=4)]
    min: Annotated[int, Field(gt=0, le=MAX_TOKENS)] = 1
    max: Annotated[int, Field(gt=0, le=MAX_TOKENS)]

    @model_validator(mode="after")
    def _ordered(self) -> LogNormalLength:
        if self.max < self.min:
            raise ValueError(f"`max` ({self.max}) must be ≥ `min` ({self.min})")
        return self


class EmpiricalLength(_Strict):
    """A histogram: bin ``i`` (``edges[i]`` ≤ length < ``edges[i+1]``) drawn with ``weights[i]``,
    then a length uniform inside the bin."""

    kind: Literal["empirical"]
    edges: Annotated[list[Annotated[int, Field(gt=0, le=MAX_TOKENS)]], Field(min_length=2)]
    weights: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> EmpiricalLength:
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError(f"`edges` must be strictly increasing; found {self.edges}")
        if len(self.weights) != len(self.edges) - 1:
            raise ValueError(
                f"`weights` needs one entry per bin, len(edges) - 1 = {len(self.edges) - 1}; "
                f"found {len(self.weights)}"
            )
        if sum(self.weights) <= 0:
            raise ValueError(f"`weights` must have a positive sum; found {self.weights}")
        return self


LengthDist = Annotated[
    FixedLength | UniformLength | LogNormalLength | EmpiricalLength, Field(discriminator="kind")
]


# ---- durations (seconds, floats ≥ 0) --------------------------------------------------------


class FixedSeconds(_Strict):
    kind: Literal["fixed"]
    value: NonNegativeFloat


class UniformSeconds(_Strict):
    kind: Literal["uniform"]
    low: NonNegativeFloat
    high: NonNegativeFloat

    @model_validator(mode="after")
    def _ordered(self) -> UniformSeconds:
        if self.high < self.low:
            raise ValueError(f"`high` ({self.high}) must be ≥ `low` ({self.low})")
        return self


class ExponentialSeconds(_Strict):
    kind: Literal["exponential"]
    mean: PositiveFloat


SecondsDist = Annotated[
    FixedSeconds | UniformSeconds | ExponentialSeconds, Field(discriminator="kind")
]


# ---- arrival processes ----------------------------------------------------------------------


class PoissonArrivals(_Strict):
    """Exponential gaps with mean ``1 / rate_per_s``; the first request at 0 s."""

    process: Literal["poisson"]
    rate_per_s: PositiveFloat


class GammaArrivals(_Strict):
    """Gamma gaps, mean ``1 / rate_per_s``, shape ``burstiness`` (as in SGLang's and vLLM's
    bench_serving): 1 is Poisson, below 1 burstier (CV² = 1 / burstiness), above 1 smoother."""

    process: Literal["gamma"]
    rate_per_s: PositiveFloat
    burstiness: PositiveFloat


class Burst(_Strict):
    """``share`` of all requests (or sessions) arrive uniformly within ``at_s`` .. ``at_s + over_s``."""

    at_s: NonNegativeFloat
    share: Share
    over_s: NonNegativeFloat = 0.0


class BurstArrivals(_Strict):
    process: Literal["bursts"]
    bursts: Annotated[list[Burst], Field(min_length=1)]

    @model_validator(mode="after")
    def _shares_sum_to_one(self) -> BurstArrivals:
        total = sum(b.share for b in self.bursts)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the bursts' `share` values must sum to 1; found a sum of {total:g}")
        return self


class ClosedLoopArrivals(_Strict):
    """``concurrency`` requests in flight; a new one starts when one finishes (all ``arrival_s`` 0)."""

    process: Literal["closed_loop"]
    concurrency: PositiveInt


ArrivalProcess = Annotated[
    PoissonArrivals | GammaArrivals | BurstArrivals | ClosedLoopArrivals,
    Field(discriminator="process"),
]


# ---- prefix reuse ---------------------------------------------------------------------------


class SharedPrefix(_Strict):
    """``share`` of requests (of sessions, when sessions are on) start with one of ``groups``
    common prefixes of ``prefix_len`` tokens (a system prompt, tool definitions); the group is
    drawn uniformly."""

    groups: PositiveInt
    prefix_len: Annotated[int, Field(gt=0, le=MAX_TOKENS)]
    share: Share


class Sessions(_Strict):
    """Multi-turn conversations. Turn ``t`` sends the whole history (earlier prompts, a stand-in
    for earlier replies of ``max_new_tokens`` tokens, the new user message drawn from
    ``input_len``), so it begins with turn ``t-1``'s prompt: a prefix-cache hit. Turn ``t+1``
    arrives ``think_time_s`` after turn ``t``; session starts follow ``arrival``."""

    turns: LengthDist
    think_time_s: SecondsDist


# ---- planner assumptions --------------------------------------------------------------------

KV_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
DISPATCH_POLICIES = ("round_robin", "shortest_queue", "total_tokens")


class PlannerAssumptions(_Strict):
    """How the KV planner models service; printed with every plan.

    A request holds ``input_len + max_new_tokens`` KV tokens on its DP rank from its start
    until ``start + input_len / prefill_tokens_per_s + max_new_tokens / decode_tokens_per_s``
    (per-request rates: no queueing, no preemption).
    """

    dispatch: Literal["round_robin", "shortest_queue", "total_tokens"] = "round_robin"
    prefill_tokens_per_s: PositiveFloat = 10_000.0
    decode_tokens_per_s: PositiveFloat = 30.0
    kv_dtype: Literal["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"] = "bf16"
    page_size: PositiveInt = 1

    @property
    def kv_dtype_bytes(self) -> int:
        return KV_DTYPE_BYTES[self.kv_dtype]


# ---- the spec -------------------------------------------------------------------------------


SYNTHETIC_FIELDS = ("num_requests", "input_len", "output_len", "arrival")
TRACE_KEYS = tuple(f.name for f in dataclasses.fields(TraceSource))


class WorkloadSpec(_Strict):
    """A synthetic spec (``num_requests``, ``input_len``, ``output_len``, ``arrival``, optional
    ``shared_prefix`` / ``sessions``) or an imported production trace (``trace``; then
    ``seed`` picks the window and ``num_requests`` is unset: ``trace.max_requests`` caps)."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)]
    description: Annotated[str, Field(min_length=1)]
    model: Annotated[Path, Field(strict=False)]
    trace: TraceSource | None = None
    num_requests: Annotated[int, Field(gt=0, le=MAX_REQUESTS)] | None = None
    input_len: LengthDist | None = None
    output_len: LengthDist | None = None
    ignore_eos: bool = True
    shared_prefix: SharedPrefix | None = None
    sessions: Sessions | None = None
    arrival: ArrivalProcess | None = None
    target_kv_util: Annotated[float, Field(gt=0, le=1)]
    dp_size: Annotated[int, Field(gt=0, le=1024)]
    seed: Annotated[int, Field(ge=0, lt=2**63)]
    planner: PlannerAssumptions = PlannerAssumptions()

    @field_validator("model", mode="before")
    @classmethod
    def _resolve_model(cls, value: Any, info: ValidationInfo) -> Path:
        if not isinstance(value, str | Path) or not str(value):
            raise ValueError(
                f"`model` must be a config.json path or a shipped model name; found {value!r}"
            )
        base = (info.context or {}).get("base")
        try:
            return resolve_model_path(value, base=base)
        except ModelConfigError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("trace", mode="before")
    @classmethod
    def _trace_source(cls, value: Any) -> Any:
        if value is None or isinstance(value, TraceSource):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"`trace` is a mapping of {', '.join(TRACE_KEYS)}; found {value!r}")
        unknown = sorted(set(value) - set(TRACE_KEYS))
        missing = [k for k in ("format", "path") if k not in value]
        if unknown or missing:
            raise ValueError(
                f"`trace` has {'unknown key(s) ' + ', '.join(unknown) if unknown else ''}"
                f"{'; ' if unknown and missing else ''}"
                f"{'no ' + ', '.join(missing) if missing else ''}; allowed keys: "
                f"{', '.join(TRACE_KEYS)}"
            )
        try:
            return TraceSource(**value)
        except TraceImportError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("trace", mode="after")
    @classmethod
    def _trace_path_from_spec(cls, value: Any, info: ValidationInfo) -> Any:
        base = (info.context or {}).get("base")
        if value is None or base is None or Path(value.path).expanduser().is_absolute():
            return value
        return dataclasses.replace(value, path=str((Path(base) / value.path).resolve()))

    @model_validator(mode="after")
    def _synthetic_or_trace(self) -> WorkloadSpec:
        if self.trace is None:
            missing = [f for f in SYNTHETIC_FIELDS if getattr(self, f) is None]
            if missing:
                names = ", ".join(f"`{f}`" for f in missing)
                required = [n for n, f in type(self).model_fields.items() if f.is_required()]
                raise ValueError(
                    f"{names} {'is' if len(missing) == 1 else 'are'} required but missing; a "
                    f"synthetic spec needs {', '.join(SYNTHETIC_FIELDS)}, or a `trace:` block "
                    f"imports a production trace instead (required: {', '.join(required)})"
                )
        else:
            extra = [
                f
                for f in (*SYNTHETIC_FIELDS, "shared_prefix", "sessions")
                if getattr(self, f) is not None
            ]
            if extra:
                raise ValueError(
                    f"a `trace:` spec takes lengths, arrivals and sharing from the trace; remove "
                    f"{', '.join(f'`{f}`' for f in extra)} (cap requests with "
                    f"`trace.max_requests`)"
                )
        return self

    @model_validator(mode="after")
    def _sessions_need_open_loop(self) -> WorkloadSpec:
        if self.sessions is not None and isinstance(self.arrival, ClosedLoopArrivals):
            raise ValueError(
                "`sessions` need an open-loop `arrival.process` (poisson, gamma or bursts) to "
                "time their turns; found closed_loop"
            )
        return self

    def with_overrides(self, **changes: Any) -> WorkloadSpec:
        """A validated copy with some top-level fields replaced (``seed=…``, ``num_requests=…``)."""
        data = self.model_dump()
        if self.trace is not None and "num_requests" in changes:  # a trace's cap
            cap = changes.pop("num_requests")
            data["trace"] = dataclasses.replace(self.trace, max_requests=cap)
        data.update(changes)
        return _validate(data, source=f"{self.name} (overridden: {', '.join(sorted(changes))})")


def _validate(data: Any, *, source: str, base: Path | None = None) -> WorkloadSpec:
    if not isinstance(data, dict):
        raise WorkloadSpecError(
            f"{source}: a workload spec is a YAML mapping of fields; found {type(data).__name__}"
        )
    try:
        return WorkloadSpec.model_validate(data, context={"base": base})
    except ValidationError as exc:
        problems = validation_problems(exc, WorkloadSpec)
        raise WorkloadSpecError(format_problems(problems, source), problems) from None


# ---- loading --------------------------------------------------------------------------------


def spec_dir() -> Path:
    return workloads_dir()


def known_specs() -> list[str]:
    """Names of the shipped specs (``workloads/*.yaml``)."""
    return sorted(p.stem for p in spec_dir().glob("*.yaml"))


def spec_path(name_or_path: str | Path) -> Path:
    """The YAML file ``name_or_path`` means: an existing path, else ``workloads/<name>.yaml``."""
    raw = Path(name_or_path).expanduser()
    if raw.is_file():
        return raw.resolve()
    named = spec_dir() / f"{name_or_path}.yaml"
    if named.is_file():
        return named.resolve()
    raise WorkloadSpecError(
        f"workload {str(name_or_path)!r}: no such spec file or shipped name; "
        f"shipped specs: {', '.join(known_specs()) or '(none found)'}"
    )


def parse_spec(text: str, *, source: str = "<string>", base: Path | None = None) -> WorkloadSpec:
    """Validate YAML text as a spec; relative ``model`` paths resolve against ``base``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise WorkloadSpecError(f"{source}: not valid YAML{where}: {problem}") from None
    return _validate(data, source=source, base=base)


def load_spec(name_or_path: str | Path) -> WorkloadSpec:
    """Load and validate a spec by shipped name (``long-prompt-burst``) or path."""
    path = spec_path(name_or_path)
    return parse_spec(path.read_text(encoding="utf-8"), source=str(path), base=path.parent)


def spec_hash(spec: WorkloadSpec) -> str:
    """``sha256:<hex>`` of the spec's content and its model config's bytes (not its path)."""
    data = spec.model_dump(mode="json", exclude={"model"})
    data["model_config_sha256"] = hashlib.sha256(Path(spec.model).read_bytes()).hexdigest()
    if spec.trace is None:
        del data["trace"]  # synthetic specs hash as they did before traces existed
    else:  # the file's content, not where it lies on this machine
        del data["trace"]["path"]
        data["trace"]["file_sha256"] = file_sha256(resolve_path(spec.trace))
        for key in (*SYNTHETIC_FIELDS, "shared_prefix", "sessions"):
            data.pop(key, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()
