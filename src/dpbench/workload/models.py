"""Model shapes from a Hugging Face ``config.json``: what the KV planner and traces need.

Only dimensions are read (no weights). Names resolve to ``workloads/models/<name>/config.json``
(``deepseek-v3-tiny``, ``deepseek-v3``, ``deepseek-v2-lite``); anything else is a path to a
``config.json`` or to a folder holding one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dpbench.core.paths import workloads_dir


class ModelConfigError(ValueError):
    """A model config that cannot be found or lacks a dimension the planner needs."""


def models_dir() -> Path:
    return workloads_dir() / "models"


def known_models() -> list[str]:
    """Names of the shipped model configs (folders under ``workloads/models/``)."""
    root = models_dir()
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/config.json"))


def resolve_model_path(path_or_name: str | Path, *, base: Path | None = None) -> Path:
    """The ``config.json`` that ``path_or_name`` means; raise ModelConfigError if there is none.

    Tried in order: a path (relative to ``base`` when given, else the working directory),
    a folder holding ``config.json``, a shipped model name.
    """
    raw = Path(path_or_name).expanduser()
    candidates = []
    if base is not None and not raw.is_absolute():
        candidates.append(base / raw)
    candidates.append(raw)
    for cand in candidates:
        if cand.is_file():
            return cand.resolve()
        if cand.is_dir() and (cand / "config.json").is_file():
            return (cand / "config.json").resolve()
    named = models_dir() / str(path_or_name) / "config.json"
    if named.is_file():
        return named.resolve()
    raise ModelConfigError(
        f"model {str(path_or_name)!r}: no such config.json; use a path to a config.json "
        f"(or a folder holding one) or a shipped name: {', '.join(known_models()) or '(none found)'}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """The dimensions of one model; MLA models (DeepSeek-V2/V3) cache a compressed latent."""

    name: str
    path: Path
    architecture: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    is_mla: bool
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    q_lora_rank: int | None = None
    # MoE (None for dense models)
    n_routed_experts: int | None = None
    n_shared_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    first_k_dense_replace: int | None = None
    intermediate_size: int | None = None

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cache elements one token occupies in one layer.

        MLA: the latent plus the decoupled RoPE key, ``kv_lora_rank + qk_rope_head_dim``
        (SGLang's ``MLATokenToKVPool`` stores exactly this). Otherwise K and V for every
        KV head: ``2 × num_key_value_heads × head_dim``.
        """
        if self.is_mla:
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_key_value_heads * self.head_dim

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies across all layers at ``dtype_bytes`` per element."""
        if dtype_bytes <= 0:
            raise ValueError(f"dtype_bytes must be a positive integer, got {dtype_bytes!r}")
        return self.kv_elements_per_token_per_layer * self.num_hidden_layers * dtype_bytes

    @property
    def is_moe(self) -> bool:
        return bool(self.n_routed_experts)


def _require_int(cfg: dict, key: str, path: Path, *, minimum: int = 1) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelConfigError(f"{path}: `{key}` must be an integer ≥ {minimum}; found {value!r}")
    return value


def _optional_int(cfg: dict, key: str, path: Path) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelConfigError(
            f"{path}: `{key}` must be a non-negative integer or null; found {value!r}"
        )
    return value


def load_model_config(path_or_name: str | Path, *, base: Path | None = None) -> ModelConfig:
    """Read a ``config.json`` (path, folder or shipped name) into a ModelConfig."""
    path = resolve_model_path(path_or_name, base=base)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{path}: expected a JSON object, found {type(cfg).__name__}")

    layers = _require_int(cfg, "num_hidden_layers", path)
    hidden = _require_int(cfg, "hidden_size", path)
    heads = _require_int(cfg, "num_attention_heads", path)
    kv_heads = _optional_int(cfg, "num_key_value_heads", path) or heads
    head_dim = _optional_int(cfg, "head_dim", path) or hidden // heads
    kv_lora_rank = _optional_int(cfg, "kv_lora_rank", path)
    is_mla = bool(kv_lora_rank)
    qk_rope = _optional_int(cfg, "qk_rope_head_dim", path)
    if is_mla and not qk_rope:
        raise ModelConfigError(
            f"{path}: an MLA model (kv_lora_rank={kv_lora_rank}) needs `qk_rope_head_dim` ≥ 1; "
            f"found {qk_rope!r}"
        )
    architectures = cfg.get("architectures") or ["unknown"]
    name = path.parent.name if path.name == "config.json" else path.stem
    return ModelConfig(
        name=name,
        path=path,
        architecture=str(architectures[0]),
        vocab_size=_require_int(cfg, "vocab_size", path, minimum=2),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=_optional_int(cfg, "max_position_embeddings", path) or 0,
        is_mla=is_mla,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope,
        qk_nope_head_dim=_optional_int(cfg, "qk_nope_head_dim", path),
        v_head_dim=_optional_int(cfg, "v_head_dim", path),
        q_lora_rank=_optional_int(cfg, "q_lora_rank", path),
        n_routed_experts=_optional_int(cfg, "n_routed_experts", path),
        n_shared_experts=_optional_int(cfg, "n_shared_experts", path),
        num_experts_per_tok=_optional_int(cfg, "num_experts_per_tok", path),
        moe_intermediate_size=_optional_int(cfg, "moe_intermediate_size", path),
        first_k_dense_replace=_optional_int(cfg, "first_k_dense_replace", path),
        intermediate_size=_optional_int(cfg, "intermediate_size", path),
    )
