"""Shipped model configs: our reader's view, and SGLang's own ModelConfig agreeing with it."""

from __future__ import annotations

import json

import pytest
from conftest import release_run

from dpbench.core.paths import project_root
from dpbench.workload.models import known_models, load_model_config

SHIPPED = ["deepseek-v2-lite", "deepseek-v3", "deepseek-v3-tiny"]

# What SGLang must see for each config: architecture, MLA dims, layers, vocabulary.
EXPECTED = {
    "deepseek-v3-tiny": ("DeepseekV3ForCausalLM", 512, 64, 4, 129280),
    "deepseek-v3": ("DeepseekV3ForCausalLM", 512, 64, 61, 129280),
    "deepseek-v2-lite": ("DeepseekV2ForCausalLM", 512, 64, 27, 102400),
}


def test_shipped_models():
    assert known_models() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_reader_sees_the_expected_shape(name):
    cfg = load_model_config(name)
    arch, lora, rope, layers, vocab = EXPECTED[name]
    assert (
        cfg.architecture,
        cfg.kv_lora_rank,
        cfg.qk_rope_head_dim,
        cfg.num_hidden_layers,
        cfg.vocab_size,
    ) == (arch, lora, rope, layers, vocab)
    assert cfg.is_mla and cfg.is_moe and cfg.max_position_embeddings == 163840


def test_tiny_keeps_deepseek_v3_attention_and_routing_shapes():
    tiny, real = load_model_config("deepseek-v3-tiny"), load_model_config("deepseek-v3")
    for field in (
        "kv_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "n_routed_experts",
        "num_experts_per_tok",
        "n_shared_experts",
        "vocab_size",
    ):
        assert getattr(tiny, field) == getattr(real, field), field
    raw = json.loads((project_root() / "workloads/models/deepseek-v3-tiny/config.json").read_text())
    assert raw["model_type"] == "deepseek_v3" and "quantization_config" not in raw
    assert (raw["topk_method"], raw["scoring_func"], raw["n_group"], raw["topk_group"]) == (
        "noaux_tc",
        "sigmoid",
        8,
        4,
    )


@pytest.mark.sglang
def test_sglang_model_config_reads_our_configs(release_env):
    """SGLang 0.5.23's own ModelConfig (via transformers' AutoConfig) loads each config as MLA, and
    its model loader resolves the tiny config to SGLang's DeepseekV3ForCausalLM (the class that
    ``--load-format dummy`` instantiates; building it needs a GPU, see the server tier)."""
    python = release_env("0.5.23").python
    code = (
        "import json, sys\n"
        "from sglang.srt.configs.model_config import AttentionArch, ModelConfig\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    c = ModelConfig('workloads/models/' + name)\n"
        "    out[name] = [c.hf_config.architectures[0], c.kv_lora_rank, c.qk_rope_head_dim,\n"
        "                 c.num_hidden_layers, c.vocab_size, c.attention_arch == AttentionArch.MLA]\n"
        "from sglang.srt.model_loader.utils import get_model_architecture\n"
        "cls, _ = get_model_architecture(ModelConfig('workloads/models/deepseek-v3-tiny'))\n"
        "out['tiny_class'] = cls.__module__ + '.' + cls.__name__\n"
        "print(json.dumps(out))\n"
    )
    proc = release_run(
        [str(python), "-c", code, *SHIPPED],
        timeout=300,
        cwd=project_root(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in SHIPPED:
        assert seen[name] == [*EXPECTED[name], True], name
    assert seen["tiny_class"] == "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM"
