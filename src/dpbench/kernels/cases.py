"""Kernel cases on DeepSeek-V3 MLA shapes: what each launch computes, and its bytes and FLOPs.

SGLang's Triton backend runs DeepSeek attention in two forms (``handle_attention_triton``
in ``models/deepseek_common/attention_backend_handler.py``, 0.5.23):

- **MLA, absorbed** (decode, extend with a cached prefix, mixed batches): MQA with one
  latent KV head; ``q`` and ``k`` have ``kv_lora_rank + qk_rope_head_dim = 576`` dims,
  ``v`` is the latent ``c_kv`` (the first 512 dims of the same cache rows), and the output
  has 512 dims per head.
- **MHA** (extend when no request in the batch has a cached prefix): one KV head per
  query head, ``q``/``k`` of ``qk_nope_head_dim + qk_rope_head_dim = 192`` dims, ``v`` and
  output of ``v_head_dim = 128``.

A *mixed* case is one ``extend_attention_fwd`` launch holding one extend request and many
decode requests, each decode request extending by one token over its cached context, as
SGLang's mixed-chunk path (``--enable-mixed-chunk``, ForwardMode.MIXED) runs them. A
*DP-mixed pair* is what two DP ranks run in the same forward: one rank an extend, the
other a decode batch; the forward costs the slower of the two.

Bytes are the fewest a launch must move through device memory: every input read once
and the output written once (q, output, the latent KV rows of every cached token, their
int32 indices, and for extend launches the new tokens' k and v); index pointers and the
split-KV scratch are left out. FLOPs count the two matrix products (QKᵀ and PV), two per
multiply-add, over the causal (query, key) pairs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["decode", "extend", "mixed"]
KINDS: tuple[Kind, ...] = ("decode", "extend", "mixed")
PAGE_SIZES = (1, 64)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class MLAShape:
    """DeepSeek-V3's attention dimensions (config.json) and the per-rank head count."""

    num_heads: int = field(default=128, metadata={"help": "query heads of the whole model"})
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    max_context_len: int = field(
        default=163840,
        metadata={"help": "max_position_embeddings: sizes the backend's KV-split cap"},
    )
    rope_factor: float = 40.0
    mscale_all_dim: float = 1.0

    @property
    def mla_qk_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim  # 576

    @property
    def mla_v_dim(self) -> int:
        return self.kv_lora_rank  # 512

    @property
    def mha_qk_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim  # 192

    @property
    def sm_scale(self) -> float:
        """DeepseekV2AttentionMLA.scaling: qk_head_dim**-0.5 times YaRN's mscale squared."""
        mscale = 0.1 * self.mscale_all_dim * math.log(self.rope_factor) + 1.0
        return self.mha_qk_dim**-0.5 * mscale * mscale

    def heads_per_rank(self, attn_tp_size: int) -> int:
        """Query heads one rank's attention holds: num_heads / attn_tp_size (attn_tp = tp / dp)."""
        if attn_tp_size < 1 or self.num_heads % attn_tp_size:
            raise ValueError(f"attn_tp_size must divide {self.num_heads}; got {attn_tp_size}")
        return self.num_heads // attn_tp_size


DEEPSEEK_V3 = MLAShape()


@dataclass(frozen=True)
class Case:
    """One attention launch. Lengths are tokens; ``context`` counts the decode token itself."""

    kind: Kind
    heads: int = field(metadata={"help": "query heads on this rank"})
    page_size: int = 1
    batch: int = field(default=0, metadata={"help": "decode requests (decode, mixed)"})
    context: int = field(
        default=0, metadata={"help": "tokens per decode request, new one included"}
    )
    new_tokens: int = field(
        default=0, metadata={"help": "tokens of the extend request (extend, mixed)"}
    )
    prefix: int = field(default=0, metadata={"help": "cached prefix of the extend request"})
    dtype: str = "bfloat16"
    shape: MLAShape = DEEPSEEK_V3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be ≥1, got {self.page_size}")
        if self.heads < 1:
            raise ValueError(f"heads must be ≥1, got {self.heads}")
        need_decode = self.kind in ("decode", "mixed")
        need_extend = self.kind in ("extend", "mixed")
        if need_decode and (self.batch < 1 or self.context < 1):
            raise ValueError(
                f"a {self.kind} case needs batch ≥1 and context ≥1; got {self.batch}, {self.context}"
            )
        if need_extend and self.new_tokens < 1:
            raise ValueError(f"a {self.kind} case needs new_tokens ≥1; got {self.new_tokens}")
        if not need_decode and (self.batch or self.context):
            raise ValueError("an extend case takes new_tokens and prefix, not batch/context")
        if not need_extend and (self.new_tokens or self.prefix):
            raise ValueError("a decode case takes batch and context, not new_tokens/prefix")

    # --- what the launch holds -------------------------------------------------------
    @property
    def name(self) -> str:
        parts = [self.kind, f"h{self.heads}", f"p{self.page_size}"]
        if self.kind in ("decode", "mixed"):
            parts += [f"b{self.batch}", f"c{self.context}"]
        if self.kind in ("extend", "mixed"):
            parts += [f"n{self.new_tokens}", f"pre{self.prefix}"]
        if self.dtype != "bfloat16":
            parts.append(self.dtype)
        return "-".join(parts)

    @property
    def form(self) -> Literal["mla", "mha"]:
        """Absorbed MLA unless this is an extend with no cached prefix anywhere (then MHA)."""
        return "mha" if self.kind == "extend" and self.prefix == 0 else "mla"

    @property
    def kernel(self) -> Literal["decode_attention_fwd", "extend_attention_fwd"]:
        return "decode_attention_fwd" if self.kind == "decode" else "extend_attention_fwd"

    def sequences(self) -> list[tuple[int, int]]:
        """(cached tokens, new tokens) per request in launch order; decode: (context-1, 1)."""
        seqs: list[tuple[int, int]] = []
        if self.kind in ("extend", "mixed"):
            seqs.append((self.prefix, self.new_tokens))
        if self.kind in ("decode", "mixed"):
            seqs += [(self.context - 1, 1)] * self.batch
        return seqs

    @property
    def query_tokens(self) -> int:
        return sum(n for _, n in self.sequences())

    @property
    def cached_tokens(self) -> int:
        """Tokens read from the KV cache (a decode launch reads all ``context`` tokens from it)."""
        if self.kind == "decode":
            return self.batch * self.context
        return sum(p for p, _ in self.sequences())

    @property
    def attention_pairs(self) -> int:
        """Causal (query, key) pairs: a query at position i of n new tokens sees prefix + i + 1 keys."""
        return sum(n * p + n * (n + 1) // 2 for p, n in self.sequences())

    # --- cost ------------------------------------------------------------------------
    @property
    def flops(self) -> int:
        s = self.shape
        if self.form == "mha":
            return 2 * self.heads * self.attention_pairs * (s.mha_qk_dim + s.v_head_dim)
        return 2 * self.heads * self.attention_pairs * (s.mla_qk_dim + s.mla_v_dim)

    @property
    def bytes(self) -> int:
        e = DTYPE_BYTES[self.dtype]
        s = self.shape
        t = self.query_tokens
        if self.form == "mha":
            return t * self.heads * (2 * s.mha_qk_dim + 2 * s.v_head_dim) * e
        q_o = t * self.heads * (s.mla_qk_dim + s.mla_v_dim) * e
        cache = self.cached_tokens * (s.mla_qk_dim * e + 4)  # latent row + its int32 index
        new_kv = 0 if self.kind == "decode" else t * (s.mla_qk_dim + s.mla_v_dim) * e
        return q_o + cache + new_kv

    @property
    def kv_slots(self) -> int:
        """KV-cache rows the case needs (cached tokens, padded to whole pages per request, plus slot 0)."""
        ps = self.page_size
        if self.kind == "decode":
            per = [self.context] * self.batch
        else:
            per = [p for p, _ in self.sequences()]
        return ps + sum(-(-c // ps) * ps for c in per)

    def work_axes(self) -> dict[str, int]:
        """The calibration axes of this case: batch, context, new_tokens (see calibration.py)."""
        if self.kind == "decode":
            return {"batch": self.batch, "context": self.context, "new_tokens": 0}
        if self.kind == "extend":
            return {"batch": 1, "context": self.prefix, "new_tokens": self.new_tokens}
        return {"batch": self.batch, "context": self.context, "new_tokens": self.new_tokens}


@dataclass(frozen=True)
class DPPair:
    """What two DP ranks run in one DP-mixed forward: an extend on one, a decode batch on the other."""

    extend: Case
    decode: Case

    def __post_init__(self) -> None:
        if self.extend.kind != "extend" or self.decode.kind != "decode":
            raise ValueError("a DP pair is one extend case and one decode case")

    @property
    def name(self) -> str:
        return f"dp-pair[{self.extend.name}|{self.decode.name}]"


# --- sweeps ----------------------------------------------------------------------------
SWEEPS = ("full", "quick", "check", "tiny")


def _grid(
    kind: Kind, heads: int, pages: Iterable[int], dtype: str, **axes: Iterable[int]
) -> Iterator[Case]:
    names = list(axes)

    def rec(i: int, acc: dict[str, int]) -> Iterator[dict[str, int]]:
        if i == len(names):
            yield dict(acc)
            return
        for v in axes[names[i]]:
            acc[names[i]] = v
            yield from rec(i + 1, acc)

    for page in pages:
        for combo in rec(0, {}):
            yield Case(kind=kind, heads=heads, page_size=page, dtype=dtype, **combo)


def sweep(name: str, *, attn_tp_size: int = 1, dtype: str = "bfloat16") -> list[Case]:
    """The cases of a named sweep for one attention-TP layout (attn_tp 1: DP attention, 128 heads).

    full: decode batch 1–256 × context 1k–64k; extend 512–16k new tokens with no prefix and
    with 4k/16k cached; mixed 512–8k extend tokens with 8–128 decodes of 4k/16k. Page sizes
    1 and 64 throughout (an extend with no prefix reads no cache, so it runs at page 1 only).
    quick and check are subsets of full, kinds interleaved (they run under time budgets);
    tiny is for Triton's interpreter on a CPU.
    """
    if name not in SWEEPS:
        raise ValueError(f"sweep must be one of {SWEEPS}, got {name!r}")
    if name == "tiny":
        h = 16 // attn_tp_size if 16 % attn_tp_size == 0 else 1
        return [
            Case("decode", heads=h, page_size=1, batch=2, context=40, dtype=dtype),
            Case("decode", heads=h, page_size=64, batch=3, context=70, dtype=dtype),
            Case("extend", heads=h, page_size=1, new_tokens=24, prefix=0, dtype=dtype),
            Case("extend", heads=h, page_size=64, new_tokens=20, prefix=70, dtype=dtype),
            Case(
                "mixed",
                heads=h,
                page_size=1,
                batch=2,
                context=33,
                new_tokens=17,
                prefix=0,
                dtype=dtype,
            ),
            Case(
                "mixed",
                heads=h,
                page_size=64,
                batch=3,
                context=65,
                new_tokens=9,
                prefix=0,
                dtype=dtype,
            ),
        ]
    heads = DEEPSEEK_V3.heads_per_rank(attn_tp_size)
    k = 1024
    table = {
        "full": dict(
            dec_b=(1, 8, 32, 64, 128, 256),
            dec_c=(k, 4 * k, 16 * k, 64 * k),
            ext_n=(512, k, 2 * k, 4 * k, 8 * k, 16 * k),
            ext_p=(4 * k, 16 * k),
            mix_n=(512, 2 * k, 8 * k),
            mix_b=(8, 32, 128),
            mix_c=(4 * k, 16 * k),
            pages=PAGE_SIZES,
        ),
        "quick": dict(
            dec_b=(1, 32, 256),
            dec_c=(k, 16 * k, 64 * k),
            ext_n=(512, 4 * k, 16 * k),
            ext_p=(16 * k,),
            mix_n=(2 * k, 8 * k),
            mix_b=(32, 128),
            mix_c=(4 * k, 16 * k),
            pages=PAGE_SIZES,
        ),
        "check": dict(
            dec_b=(1, 32, 256),
            dec_c=(k, 16 * k, 64 * k),
            ext_n=(512, 4 * k, 16 * k),
            ext_p=(16 * k,),
            mix_n=(2 * k, 8 * k),
            mix_b=(32, 128),
            mix_c=(4 * k, 16 * k),
            pages=(64,),
        ),
    }[name]
    pages = table["pages"]
    cases = list(_grid("decode", heads, pages, dtype, batch=table["dec_b"], context=table["dec_c"]))
    cases += list(_grid("extend", heads, (1,), dtype, new_tokens=table["ext_n"], prefix=(0,)))
    cases += list(
        _grid("extend", heads, pages, dtype, new_tokens=table["ext_n"], prefix=table["ext_p"])
    )
    cases += list(
        _grid(
            "mixed",
            heads,
            pages,
            dtype,
            new_tokens=table["mix_n"],
            batch=table["mix_b"],
            context=table["mix_c"],
            prefix=(0,),
        )
    )
    if name == "full":
        return cases
    # Reduced sweeps run under a time budget: interleave the kinds so a cut keeps some of each.
    by_kind = [[c for c in cases if c.kind == k] for k in KINDS]
    return [c for group in itertools.zip_longest(*by_kind) for c in group if c is not None]


def dp_pairs(cases: Iterable[Case]) -> list[DPPair]:
    """Pairs a DP-mixed forward runs, from measured cases: each no-prefix extend with each decode of the same page size and heads."""
    cases = list(cases)
    extends = [c for c in cases if c.kind == "extend" and c.prefix == 0]
    decodes = [c for c in cases if c.kind == "decode"]
    return [DPPair(e, d) for e in extends for d in decodes if d.heads == e.heads]
