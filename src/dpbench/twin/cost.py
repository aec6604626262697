"""How long one DP-attention forward takes: the twin's model of time, kept apart from its scheduling.

``ExecutionTimeModel.step_time(ranks) -> seconds`` takes what every DP rank runs in
one lockstep forward (:class:`RankWork`) and returns the forward's duration. Two
implementations:

- :class:`RooflineModel` — documented H200 roofline defaults for the model config
  (below); used when no calibration file is given.
- :class:`CalibratedModel` — attention core time per rank from a kernel-tier
  calibration file (``dpbench.kernels.calibration``: measured per-layer times, times
  ``num_hidden_layers``), the rest (projections, MoE, collectives, LM head, overhead)
  from the roofline.

The forward of a DP-attention MoE model (DeepSeek-V2/V3 in SGLang with
``--enable-dp-attention``): each rank runs attention (and its projections) for its own
requests only; before every MoE layer the ranks' tokens are gathered and the experts,
spread over all ranks (expert parallel), run over *all* ranks' tokens; the result is
scattered back. Ranks synchronise at every layer, so per layer the step waits for the
slowest rank's attention::

    step = Σ_layers [ max_r attn_r + mlp(all tokens) + collective(all tokens) ]
           + max_r lm_head_r + overhead

Roofline of one kernel: ``max(flops / (peak_flops × eff), bytes / (hbm_bw × eff))``.

Per layer, with ``T_r`` = tokens of rank r this forward (extend: new tokens; decode:
batch size), ``C_r`` = KV tokens its attention reads, ``P_r`` = causal query×key pairs
of its extend:

- attention projections (MLA: q_a, q_b, kv_a, kv_b, o; else q, k, v, o):
  ``flops = 2 T_r W_attn``, ``bytes = W_attn × w_bytes`` (weights read once);
- attention core, extend (MHA form): ``flops = 2 P_r heads (qk_head_dim + v_head_dim)``,
  ``bytes = C_r × kv_bytes_per_token_per_layer``;
- attention core, decode (MLA absorbed into the latent): ``flops = 2 C_r heads
  (2 kv_lora_rank + qk_rope_head_dim)``, ``bytes = C_r × kv_bytes_per_token_per_layer``;
- MoE layer over ``T = Σ_r T_r`` tokens, experts spread over the ``N`` ranks:
  ``flops = 2·3·hidden·moe_inter·T·(top_k + n_shared)/N``, weight bytes of the experts a
  rank touches, ``E/N × (1 − (1 − 1/E)^(T·top_k))`` experts × ``3·hidden·moe_inter``;
  dense layers (``first_k_dense_replace``) run ``3·hidden·intermediate`` per rank on ``T_r``;
- collective: all-gather before and reduce-scatter after the MLP, each
  ``latency + T·hidden·act_bytes·(N−1)/N / link_bw``;
- LM head per rank: ``2·hidden·vocab`` flops per sampled token plus its weights.

Topology (``tp_size``; SGLang's ``--tp-size``, the GPUs of the deployment). With the
default ``tp_size=None`` every DP rank is one GPU and the experts spread over the N DP
GPUs (the twin's original model, still the default so results stay comparable). With a
``tp_size`` G (``--cost-topology physical`` in the twin: G = max(8, N), the smallest H200
count that holds DeepSeek-V3 FP8's ~671 GB of weights), each DP rank's attention runs on
``attn_tp = G / N`` GPUs: projection FLOPs and weights, attention-core FLOPs and the LM
head divide by ``attn_tp`` (heads split; MLA's latent KV is read whole by each GPU, so
KV bytes do not divide), and the experts, the MoE FLOPs and the all-gather/reduce-scatter
run over G GPUs. ``mixed_step_charge`` adds, to a DP-mixed step (some ranks extend, others
decode), the cost of the decoding ranks leaving their decode CUDA graph: SGLang runs a
step under one forward mode for all DP ranks, so in a mixed step the decode ranks launch
eagerly: ``eager_launch_s`` per step (``DeviceRoofline.eager_layer_launch_s`` ×
layers). The decode ranks' wait for the extending rank is already in ``max_r attn_r``.

Terms for other deployments (off by default; ``dpbench.twin.published`` uses them to run
the published wide-EP set-ups):

- ``layer_overhead_s`` (a :class:`DeviceRoofline` field, 0 in the roofline profile): a fixed
  time per layer per forward, for the kernels the roofline leaves out;
- ``moe_comm="all_to_all"``: DeepEP's dispatch (FP8) and combine (BF16) instead of the
  all-gather and reduce-scatter: ``T_r × copies × hidden × 3 B`` per layer over NVLink, or
  over the scale-out network (``scaleout_bytes_per_s``) when the GPUs span nodes. Copies:
  ``top_k`` per token in decode (low-latency kernels), one per remote node in prefill
  (normal kernels); dense layers send nothing;
- ``two_batch_overlap``: each layer takes the longer of its compute and its communication.

Profiles (``dpbench.twin.profiles``): ``profile="roofline"`` is :data:`H200` as documented
here; ``profile="published-fit"`` sets the efficiencies and ``layer_overhead_s`` fitted to
published DeepSeek serving figures (``dpbench twin clock``). A calibration file overrides the
attention core under either. :func:`cost_block` is what a run result records of its clock.

Public API (the server tier's simulated forward uses it; keep it stable)::

    model = make_cost_model(model_config, dp_size, calibration=None, *, tp_size=None,
                            mixed_step_charge=False, profile="roofline")
    seconds = model.step_time([RankWork("extend", num_reqs, new_tokens, context_tokens,
                                        attn_pairs), RankWork("decode", ...), ...])
    model.describe()
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from dpbench.twin.profiles import HARDWARE, profile_params
from dpbench.workload.models import ModelConfig

MoeComm = Literal["all_gather", "all_to_all"]
MOE_COMMS: tuple[str, ...] = get_args(MoeComm)


@dataclass(frozen=True, slots=True)
class RankWork:
    """What one DP rank runs in one forward."""

    kind: str  # "extend" | "decode" | "idle"
    num_reqs: int = 0
    new_tokens: int = 0  # extend: new tokens; decode: batch size
    context_tokens: int = 0  # KV tokens attention reads
    attn_pairs: int = 0  # causal query×key pairs (extend)


class ExecutionTimeModel(Protocol):
    """Duration of one lockstep forward over all DP ranks, in seconds."""

    name: str

    def step_time(self, ranks: Sequence[RankWork]) -> float: ...

    def describe(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class DeviceRoofline:
    """Per-GPU ceilings and efficiencies; defaults: NVIDIA H200 SXM (public datasheet)."""

    name: str = "NVIDIA H200 SXM (roofline defaults)"
    peak_flops: float = field(
        default=989e12, metadata={"help": "dense BF16 FLOP/s (H200 SXM datasheet)"}
    )
    hbm_bytes_per_s: float = field(
        default=4.8e12, metadata={"help": "HBM3e bandwidth, B/s (datasheet)"}
    )
    link_bytes_per_s: float = field(
        default=450e9, metadata={"help": "NVLink, one direction, B/s (900 GB/s bidirectional)"}
    )
    gemm_efficiency: float = field(
        default=0.6, metadata={"help": "achieved/peak FLOP rate of GEMMs"}
    )
    attn_efficiency: float = field(
        default=0.5, metadata={"help": "achieved/peak FLOP rate of attention"}
    )
    mem_efficiency: float = field(default=0.8, metadata={"help": "achieved/peak HBM bandwidth"})
    link_efficiency: float = field(default=0.7, metadata={"help": "achieved/peak link bandwidth"})
    collective_latency_s: float = field(
        default=10e-6, metadata={"help": "fixed cost of one collective"}
    )
    step_overhead_s: float = field(
        default=1.5e-3,
        metadata={"help": "per-forward launch/scheduling overhead (CUDA graphs assumed)"},
    )
    weight_bytes: float = field(
        default=1.0, metadata={"help": "bytes per weight (FP8 DeepSeek checkpoints)"}
    )
    act_bytes: float = field(default=2.0, metadata={"help": "bytes per activation element (BF16)"})
    kv_bytes: float = field(default=2.0, metadata={"help": "bytes per KV element (BF16)"})
    eager_layer_launch_s: float = field(
        default=15 * 4e-6,
        metadata={
            "help": "launch cost of one layer run without a CUDA graph: ~15 kernels per DeepSeek "
            "decoder layer × ~4 µs per launch (estimate: typical CUDA launch latency; not measured here)"
        },
    )
    layer_overhead_s: float = field(
        default=0.0,
        metadata={
            "help": "fixed time per decoder layer per forward: the kernels the roofline leaves out "
            "(norms, RoPE, routing, quantisation, launch gaps); 0 in the roofline profile"
        },
    )
    scaleout_bytes_per_s: float = field(
        default=50e9,
        metadata={"help": "RDMA between nodes per GPU, B/s (one 400 Gb/s NIC per GPU)"},
    )
    scaleout_efficiency: float = field(
        default=0.7, metadata={"help": "achieved/peak RDMA bandwidth of the MoE all-to-all"}
    )


H200 = DeviceRoofline()


def hardware_device(hardware: str, params: dict[str, float] | None = None) -> DeviceRoofline:
    """A GPU's datasheet ceilings (``profiles.HARDWARE``) with the given efficiency fields."""
    if hardware not in HARDWARE:
        raise ValueError(f"hardware must be one of {tuple(HARDWARE)}; got {hardware!r}")
    if hardware == "H200" and not params:
        return H200  # the roofline's own record, name and all
    return replace(H200, **{**HARDWARE[hardware], **(params or {})})


def profile_device(profile: str, hardware: str = "H200") -> DeviceRoofline:
    """``hardware``'s ceilings at a named cost profile's efficiencies (``dpbench.twin.profiles``)."""
    return hardware_device(hardware, profile_params(profile))


class RooflineModel:
    """Roofline step time for a model config on a device (module docstring has the formulas)."""

    name = "roofline"

    def __init__(
        self,
        model: ModelConfig,
        dp_size: int,
        device: DeviceRoofline = H200,
        *,
        tp_size: int | None = None,
        mixed_step_charge: bool = False,
        moe_comm: MoeComm = "all_gather",
        two_batch_overlap: bool = False,
        gpus_per_node: int = 8,
        profile: str = "roofline",
    ) -> None:
        self.model = model
        self.dp_size = dp_size
        self.device = device
        self.profile = profile
        if moe_comm not in MOE_COMMS:
            raise ValueError(f"moe_comm must be one of {MOE_COMMS}; got {moe_comm!r}")
        self.moe_comm = moe_comm
        self.two_batch_overlap = two_batch_overlap
        self.gpus_per_node = gpus_per_node
        self.gpus = tp_size if tp_size is not None else dp_size
        if self.gpus < dp_size or self.gpus % dp_size:
            raise ValueError(f"tp_size must be a multiple of dp_size ({dp_size}); got {self.gpus}")
        self.attn_tp = self.gpus // dp_size
        self.mixed_step_charge = mixed_step_charge
        m = model
        heads = m.num_attention_heads
        if m.is_mla:
            qk_head = (m.qk_nope_head_dim or 0) + (m.qk_rope_head_dim or 0)
            v_head = m.v_head_dim or (m.qk_nope_head_dim or 0)
            q_proj = (
                m.hidden_size * m.q_lora_rank + m.q_lora_rank * heads * qk_head
                if m.q_lora_rank
                else m.hidden_size * heads * qk_head
            )
            kv_lora = m.kv_lora_rank or 0
            rope = m.qk_rope_head_dim or 0
            self.attn_weights = (
                q_proj
                + m.hidden_size * (kv_lora + rope)
                + kv_lora * heads * ((m.qk_nope_head_dim or 0) + v_head)
                + heads * v_head * m.hidden_size
            )
            self.extend_flops_per_pair = 2 * heads * (qk_head + v_head)
            self.decode_flops_per_ctx = 2 * heads * (2 * kv_lora + rope)
        else:
            hd = m.head_dim
            self.attn_weights = (
                m.hidden_size * heads * hd * 2 + m.hidden_size * m.num_key_value_heads * hd * 2
            )
            self.extend_flops_per_pair = 2 * heads * 2 * hd
            self.decode_flops_per_ctx = 2 * heads * 2 * hd
        self.kv_bytes_per_token_layer = m.kv_elements_per_token_per_layer * device.kv_bytes
        dense_layers = m.first_k_dense_replace if m.is_moe else m.num_hidden_layers
        self.dense_layers = min(dense_layers or 0, m.num_hidden_layers)
        self.moe_layers = m.num_hidden_layers - self.dense_layers
        self.dense_mlp_weights = 3 * m.hidden_size * (m.intermediate_size or 0)
        self.expert_weights = 3 * m.hidden_size * (m.moe_intermediate_size or 0)

    # -- pieces -------------------------------------------------------------------------
    def _roof(self, flops: float, nbytes: float, flop_eff: float) -> float:
        d = self.device
        return max(
            flops / (d.peak_flops * flop_eff), nbytes / (d.hbm_bytes_per_s * d.mem_efficiency)
        )

    def attention_layer_s(self, w: RankWork) -> float:
        """One layer's attention (projections + core) on one rank."""
        if w.kind == "idle" or w.new_tokens == 0:
            return 0.0
        return self.projection_layer_s(w) + self.core_layer_s(w)

    def core_layer_s(self, w: RankWork) -> float:
        """One layer's attention core (no projections) on one GPU of the rank."""
        return self._roof(*self.core_work(w), self.device.attn_efficiency)

    def projection_layer_s(self, w: RankWork) -> float:
        """One layer's attention projections on one rank (weights read once)."""
        d, a = self.device, self.attn_tp
        return self._roof(
            2 * w.new_tokens * self.attn_weights / a,
            self.attn_weights * d.weight_bytes / a,
            d.gemm_efficiency,
        )

    def core_work(self, w: RankWork) -> tuple[float, float]:
        """(FLOPs, KV bytes) of one layer's attention core on one GPU of the rank."""
        a = self.attn_tp
        kv_bytes = w.context_tokens * self.kv_bytes_per_token_layer
        if not self.model.is_mla:
            kv_bytes /= a  # KV heads split over attention TP (MLA's latent is read whole)
        per = self.extend_flops_per_pair * w.attn_pairs
        if w.kind != "extend":
            per = self.decode_flops_per_ctx * w.context_tokens
        return per / a, kv_bytes

    def dense_mlp_layer_s(self, w: RankWork) -> float:
        if w.new_tokens == 0:
            return 0.0
        d, a = self.device, self.attn_tp
        return self._roof(
            2 * w.new_tokens * self.dense_mlp_weights / a,
            self.dense_mlp_weights * d.weight_bytes / a,
            d.gemm_efficiency,
        )

    def moe_layer_s(self, total_tokens: int) -> float:
        m, d, n = self.model, self.device, self.gpus
        if total_tokens == 0 or not m.is_moe:
            return 0.0
        experts = m.n_routed_experts or 0
        top_k = m.num_experts_per_tok or 0
        shared = m.n_shared_experts or 0
        flops = 2 * self.expert_weights * total_tokens * (top_k + shared) / n
        touched = (experts / n) * (1.0 - (1.0 - 1.0 / experts) ** (total_tokens * top_k))
        nbytes = (touched + shared) * self.expert_weights * d.weight_bytes
        return self._roof(flops, nbytes, d.gemm_efficiency)

    def collective_layer_s(self, total_tokens: int) -> float:
        d, n = self.device, self.gpus
        volume = total_tokens * self.model.hidden_size * d.act_bytes * (n - 1) / n
        one = d.collective_latency_s + volume / (d.link_bytes_per_s * d.link_efficiency)
        return 2 * one

    def all_to_all_layer_s(self, ranks: Sequence[RankWork]) -> float:
        """DeepEP-style dispatch (FP8) and combine (activations) of one MoE layer; the GPU
        with the most tokens sets the time. Each token goes to its ``top_k`` experts. Across
        nodes the off-node share crosses the scale-out network, else NVLink. A step with
        prefill uses the normal kernels, which send a token once per remote node; a decode
        step the low-latency kernels, which send it once per remote expert."""
        d, n = self.device, self.gpus
        tokens = max(w.new_tokens for w in ranks) / self.attn_tp
        if tokens == 0 or n == 1:
            return 0.0
        k = self.model.num_experts_per_tok or 0
        nodes = -(-n // self.gpus_per_node)
        if nodes == 1:
            copies, bw = k * (n - 1) / n, d.link_bytes_per_s * d.link_efficiency
        elif any(w.kind == "extend" for w in ranks):  # remote nodes hit by k experts
            copies = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** k)
            bw = d.scaleout_bytes_per_s * d.scaleout_efficiency
        else:
            copies = k * (nodes - 1) / nodes
            bw = d.scaleout_bytes_per_s * d.scaleout_efficiency
        volume = tokens * copies * self.model.hidden_size * (1.0 + d.act_bytes)  # FP8, BF16
        return 2 * d.collective_latency_s + volume / bw

    def comm_layer_s(self, ranks: Sequence[RankWork], total_tokens: int, moe: bool) -> float:
        """The MoE layer's communication: all-gather + reduce-scatter (SGLang's DP attention),
        or the all-to-all (``moe_comm="all_to_all"``: dense layers need none)."""
        if total_tokens == 0:
            return 0.0
        if self.moe_comm == "all_gather":
            return self.collective_layer_s(total_tokens)
        return self.all_to_all_layer_s(ranks) if moe else 0.0

    def lm_head_s(self, w: RankWork) -> float:
        if w.num_reqs == 0:
            return 0.0
        m, d, a = self.model, self.device, self.attn_tp
        weights = m.hidden_size * m.vocab_size / a
        return self._roof(2 * w.num_reqs * weights, weights * d.weight_bytes, d.gemm_efficiency)

    def attention_s(self, w: RankWork) -> float:
        """Attention of one rank over all layers (what a calibration replaces)."""
        return self.model.num_hidden_layers * self.attention_layer_s(w)

    # -- the protocol -------------------------------------------------------------------
    def step_time(self, ranks: Sequence[RankWork]) -> float:
        return self._step_time(ranks, [self.attention_s(w) for w in ranks])

    def _step_time(self, ranks: Sequence[RankWork], attention_s: Sequence[float]) -> float:
        total = sum(w.new_tokens for w in ranks)
        layers = self.model.num_hidden_layers
        attn_per_layer = [a / layers for a in attention_s]
        fixed = self.device.layer_overhead_s if total else 0.0
        dense = fixed + max(
            a + self.dense_mlp_layer_s(w) for a, w in zip(attn_per_layer, ranks, strict=True)
        )
        moe = fixed + max(attn_per_layer) + self.moe_layer_s(total)
        body = self.dense_layers * self._layer(dense, self.comm_layer_s(ranks, total, False))
        body += self.moe_layers * self._layer(moe, self.comm_layer_s(ranks, total, True))
        head = max(self.lm_head_s(w) for w in ranks)
        eager = 0.0
        if self.mixed_step_charge and self.is_mixed(ranks):
            eager = layers * self.device.eager_layer_launch_s
        return body + head + self.device.step_overhead_s + eager

    def _layer(self, compute: float, comm: float) -> float:
        """One layer: compute then communication, or (two-batch overlap) whichever is longer."""
        return max(compute, comm) if self.two_batch_overlap else compute + comm

    @staticmethod
    def is_mixed(ranks: Sequence[RankWork]) -> bool:
        kinds = {w.kind for w in ranks}
        return "extend" in kinds and "decode" in kinds

    def describe(self) -> str:
        return (
            f"{self._profile_text()}: {self.device.name}, model {self.model.name}, dp_size {self.dp_size}, "
            f"{self._topology()} (no calibration file)"
        )

    def _profile_text(self) -> str:
        if self.profile == "roofline":
            return "roofline defaults"
        return f"cost profile {self.profile}"

    def _topology(self) -> str:
        if self.gpus == self.dp_size and not self.mixed_step_charge:
            return "one GPU per DP rank, experts over the DP GPUs"
        return (
            f"tp_size {self.gpus} (attention TP {self.attn_tp} per DP rank, experts over {self.gpus} GPUs)"
            + (", mixed steps charged eager decode launches" if self.mixed_step_charge else "")
        )


class CalibratedModel(RooflineModel):
    """Attention from a kernel calibration file; everything else from the roofline."""

    name = "calibrated"

    def __init__(
        self,
        model: ModelConfig,
        dp_size: int,
        calibration_path: str | Path,
        *,
        allow_interpreter: bool = False,
        device: DeviceRoofline = H200,
        **options: Any,
    ) -> None:
        super().__init__(model, dp_size, device, **options)
        from dpbench.kernels.calibration import load_calibration  # written by the kernels tier

        self.path = Path(calibration_path)
        self.calibration: Any = load_calibration(self.path, allow_interpreter=allow_interpreter)
        # The kernels tier's files hold per-layer times ("scope": "per-layer").
        data = getattr(self.calibration, "data", None)
        self.scope = str(getattr(data, "scope", "per-layer"))
        if self.scope != "per-layer":
            raise ValueError(
                f"{self.path}: calibration scope must be 'per-layer', found {self.scope!r}"
            )

    def attention_s(self, w: RankWork) -> float:
        if w.kind == "idle" or w.new_tokens == 0:
            return 0.0
        reqs = max(w.num_reqs, 1)
        if w.kind == "extend":
            # the calibration's extend context is the cached prefix per request
            prefix = max(0, w.context_tokens - w.new_tokens) // reqs
            est = self.calibration.estimate_s(
                "extend", batch=reqs, context=prefix, new_tokens=w.new_tokens
            )
        else:
            mean_ctx = max(1, math.ceil(w.context_tokens / reqs))
            est = self.calibration.estimate_s(
                "decode", batch=reqs, context=mean_ctx, new_tokens=reqs
            )
        layers = self.model.num_hidden_layers
        # the calibration measured one GPU holding all heads: attention TP splits the heads
        return float(est) * layers / self.attn_tp + layers * self.projection_layer_s(w)

    def describe(self) -> str:
        cal = self.calibration
        return (
            f"calibrated attention from {self.path} (device {getattr(cal, 'device', '?')}, "
            f"SGLang {getattr(cal, 'sglang_version', '?')}); MoE, projections, collectives, LM head: "
            f"{self._profile_text()} ({self.device.name}); {self._topology()}"
        )


def make_cost_model(
    model: ModelConfig,
    dp_size: int,
    calibration: str | Path | None = None,
    *,
    allow_interpreter: bool = False,
    tp_size: int | None = None,
    mixed_step_charge: bool = False,
    profile: str = "roofline",
) -> ExecutionTimeModel:
    """The step-time model: roofline, or attention from a kernel calibration file (see the module
    docstring), with a named profile's efficiencies on an H200 (``dpbench.twin.profiles``)."""
    options: dict[str, Any] = {
        "device": profile_device(profile, "H200"),
        "tp_size": tp_size,
        "mixed_step_charge": mixed_step_charge,
        "profile": profile,
    }
    if calibration is None:
        return RooflineModel(model, dp_size, **options)
    return CalibratedModel(
        model, dp_size, calibration, allow_interpreter=allow_interpreter, **options
    )


def cost_block(cost: ExecutionTimeModel) -> dict[str, Any]:
    """What a run result records of its clock (``result["cost"]``): the profile, the rung
    (roofline < published-fit < kernel-calibrated), the model and its description."""
    profile = str(getattr(cost, "profile", "roofline"))
    path = getattr(cost, "path", None)
    return {
        "profile": profile,
        "rung": "kernel-calibrated" if path is not None else profile,
        "model": cost.name,
        "calibration": str(path) if path is not None else None,
        "description": cost.describe(),
    }
