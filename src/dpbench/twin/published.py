"""Published DeepSeek serving figures and the cost model's prediction of each.

The figures and their set-ups live in ``dpbench/data/published-serving.yaml`` (sources,
hardware, parallelism, lengths, metric, value, unit). :func:`predict` runs the cost model on
one figure's set-up, without SGLang:

- ``closed_loop`` (T1): a closed loop of fixed lengths, evaluated in waves. Each DP rank holds
  ``concurrency / dp_size`` requests; a wave is one prefill step per request (all ranks
  together, SGLang-style, not mixed into decode) and ``output_len − 1`` decode steps with the
  context growing by one token a step. Rates are the wave's requests and tokens over its time.
  The twin replaying T1's workload (``dpbench/data/t1-closed-loop.yaml``, SGLang 0.5.23's
  scheduler, 2,048 requests) ran these same steps: 9.066 req/s under the roofline and 5.155
  under published-fit, as here (2026-12-04).
- ``prefill`` (L1, D1): one step of ``tokens_per_gpu`` new tokens on every GPU, whole prompts
  (a ``cached_share`` of each prompt already in the KV cache counts as input, not new work).
- ``decode`` (L2, L3, D1): one decode step of ``batch_per_gpu`` requests at ``kv_len`` each.
- ``attention_kernel`` (F1): the attention core of one decode layer alone; its achieved
  bytes or FLOPs per second.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from dpbench.twin.cost import DeviceRoofline, RankWork, RooflineModel
from dpbench.workload.models import ModelConfig, load_model_config

GPUS_PER_NODE = 8
MODEL = "deepseek-v3"  # R1 has V3's shapes


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Deployment(_Strict):
    """GPUs, DP-attention ranks and how the MoE layers communicate."""

    dp_size: int
    gpus: int
    moe_comm: Literal["all_gather", "all_to_all"] = "all_gather"
    two_batch_overlap: bool = False


class ClosedLoop(_Deployment):
    kind: Literal["closed_loop"]
    concurrency: int
    input_len: int
    output_len: int


class Prefill(_Deployment):
    kind: Literal["prefill"]
    tokens_per_gpu: int
    prompt_len: int
    cached_share: float = 0.0


class Decode(_Deployment):
    kind: Literal["decode"]
    batch_per_gpu: int
    kv_len: int


class AttentionKernel(_Strict):
    kind: Literal["attention_kernel"]
    heads_per_gpu: int
    batch: int
    context: int


Quantity = Literal[
    "requests_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "input_tokens_per_s",
    "attention_bytes_per_s",
    "attention_flops_per_s",
]


class Figure(_Strict):
    """One published number and the set-up it was measured under."""

    id: str
    group: str
    source: str
    url: str
    hardware: Literal["H200", "H100", "H800"]
    gpus: int
    parallelism: str
    setup: str
    quantity: Quantity
    per: Literal["deployment", "node", "user", "kernel"]
    value: float
    unit: str
    evaluate: Annotated[
        ClosedLoop | Prefill | Decode | AttentionKernel, Field(discriminator="kind")
    ]
    assumed: str | None = None
    absorbs: str

    @property
    def label(self) -> str:
        per = {"deployment": "", "node": " per node", "user": " per user", "kernel": ""}[self.per]
        return f"{self.quantity.removesuffix('_per_s').replace('_', ' ')}/s{per}"


class FigureTable(_Strict):
    figures: list[Figure]


@cache
def load_figures() -> tuple[Figure, ...]:
    """The shipped table, validated (an unknown field or kind fails here, naming it)."""
    text = (resources.files("dpbench") / "data" / "published-serving.yaml").read_text()
    return tuple(FigureTable.model_validate(yaml.safe_load(text)).figures)


@cache
def _model() -> ModelConfig:
    return load_model_config(MODEL)


def _cost(ev: _Deployment, device: DeviceRoofline) -> RooflineModel:
    return RooflineModel(
        _model(),
        ev.dp_size,
        device,
        tp_size=ev.gpus,
        moe_comm=ev.moe_comm,
        two_batch_overlap=ev.two_batch_overlap,
        gpus_per_node=GPUS_PER_NODE,
    )


def _closed_loop(ev: ClosedLoop, device: DeviceRoofline) -> dict[str, float]:
    """Rates of one wave (module docstring): requests, output and total tokens per second."""
    cm = _cost(ev, device)
    per_rank = ev.concurrency // ev.dp_size
    i, o = ev.input_len, ev.output_len
    extend = RankWork("extend", 1, i, i, i * (i + 1) // 2)
    wave = per_rank * cm.step_time([extend] * ev.dp_size)
    for k in range(1, o):
        w = RankWork("decode", per_rank, per_rank, per_rank * (i + k))
        wave += cm.step_time([w] * ev.dp_size)
    return {
        "requests_per_s": ev.concurrency / wave,
        "output_tokens_per_s": ev.concurrency * o / wave,
        "total_tokens_per_s": ev.concurrency * (i + o) / wave,
        "user": o / wave,
    }


def _prefill(ev: Prefill, device: DeviceRoofline) -> float:
    """Input tokens per second per GPU (cached prompt tokens count as input, as published)."""
    cm = _cost(ev, device)
    cached = round(ev.prompt_len * ev.cached_share)
    new = ev.prompt_len - cached
    prompts = max(1, ev.tokens_per_gpu // new)
    pairs = prompts * (new * (new + 1) // 2 + new * cached)
    work = RankWork("extend", prompts, prompts * new, prompts * ev.prompt_len, pairs)
    ranks_per_gpu = ev.dp_size / ev.gpus
    step = cm.step_time([work] * ev.dp_size)
    return prompts * ev.prompt_len * ranks_per_gpu / step


def _decode(ev: Decode, device: DeviceRoofline) -> float:
    """Output tokens per second per GPU."""
    cm = _cost(ev, device)
    b = ev.batch_per_gpu * ev.gpus // ev.dp_size
    step = cm.step_time([RankWork("decode", b, b, b * ev.kv_len)] * ev.dp_size)
    return b * ev.dp_size / ev.gpus / step


def _kernel(ev: AttentionKernel, quantity: str, device: DeviceRoofline) -> float:
    """Achieved bytes or FLOPs per second of one layer's attention core."""
    m = _model()
    heads = m.num_attention_heads
    if heads % ev.heads_per_gpu:
        raise ValueError(f"heads_per_gpu must divide {heads}; got {ev.heads_per_gpu}")
    cm = RooflineModel(m, 1, device, tp_size=heads // ev.heads_per_gpu)
    work = RankWork("decode", ev.batch, ev.batch, ev.batch * ev.context)
    flops, nbytes = cm.core_work(work)
    return (nbytes if quantity == "attention_bytes_per_s" else flops) / cm.core_layer_s(work)


def predict(fig: Figure, device: DeviceRoofline) -> float:
    """The cost model's value for ``fig``, in its unit and scope, on ``device``."""
    ev = fig.evaluate
    if isinstance(ev, AttentionKernel):
        return _kernel(ev, fig.quantity, device)
    if isinstance(ev, ClosedLoop):
        rates = _closed_loop(ev, device)
        return rates["user"] if fig.per == "user" else rates[fig.quantity]
    per_gpu = _prefill(ev, device) if isinstance(ev, Prefill) else _decode(ev, device)
    return per_gpu * (GPUS_PER_NODE if fig.per == "node" else ev.gpus)
