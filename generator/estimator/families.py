"""Per-model_type traits: how each transformers family lays out norms, biases, MLPs and heads.

Every trait below was read from the transformers 5.x modeling and configuration file of that family
(`transformers/models/<model_type>/{modeling,configuration}_<model_type>.py`); the oracle test
(`tests/test_oracle.py`) builds each family on the meta device and checks the count we derive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# Norm kinds and their parameter count for a width w.
#   rmsnorm: weight (w)            llama-style RMSNorm
#   layernorm: weight + bias (2w)  torch.nn.LayerNorm
#   layernorm_nobias: weight (w)   CohereLayerNorm, StableLm per-head norms
#   layernorm_noparams: 0          OlmoLayerNorm (no affine parameters)
NORM_PARAMS_PER_WIDTH = {"rmsnorm": 1, "layernorm": 2, "layernorm_nobias": 1, "layernorm_noparams": 0}


@dataclass(frozen=True)
class Family:
    """Structural traits of one model_type. Values that depend on config keys name those keys."""

    model_type: str
    norm: str  # a key of NORM_PARAMS_PER_WIDTH
    # Norms inside one decoder layer, in forward order: "pre_attn", "post_attn" (after attention,
    # before the MLP in sequential blocks), "pre_mlp", "post_mlp".
    layer_norms: tuple[str, ...] = ("pre_attn", "pre_mlp")
    parallel: bool = False  # attention and MLP read the same normed input (GPT-J, phi, cohere)
    mlp: str = "gated"  # "gated" (SwiGLU/GeGLU: gate, up, down) or "plain" (fc1, act, fc2)
    qkv_bias: bool | str = False  # a bool, or the config key that decides it
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    qk_norm: str | None = None  # None, "head" (norm of head_dim), "flat" (norm of heads*head_dim)
    qk_norm_kind: str | None = None  # norm kind of the q/k norms when it differs from `norm`
    qk_norm_key: str | None = None  # config key that switches the q/k norm on
    position: str = "rope"  # "rope", "learned", "alibi"
    learned_position_offset: int = 0  # OPT stores 2 extra position rows
    embed_norm: bool = False  # BLOOM's word_embeddings_layernorm
    lm_head_bias: bool = False
    tie_default: bool = False
    act_default: str = "silu"
    fused_qkv: bool = False  # one Linear for q, k, v (matters for LoRA: r x (in + out) per Linear)
    fused_gate_up: bool = False  # one Linear for gate and up (phi3)
    head_dim_from_config: bool = True  # False where the modeling file always uses hidden // heads
    intermediate_default_x4: bool = False  # MLP width defaults to 4 x hidden when the key is absent/null
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


_GPT2_ALIASES = {
    "hidden_size": ("n_embd",),
    "num_hidden_layers": ("n_layer",),
    "num_attention_heads": ("n_head",),
    "max_position_embeddings": ("n_positions", "n_ctx"),
    "intermediate_size": ("n_inner",),
}

FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family("llama", "rmsnorm", qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
               defaults={"max_position_embeddings": 2048}),
        Family("mistral", "rmsnorm", defaults={"max_position_embeddings": 131072, "num_key_value_heads": 8}),
        Family("qwen2", "rmsnorm", qkv_bias=True, defaults={"max_position_embeddings": 32768}),
        Family("qwen3", "rmsnorm", qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head",
               defaults={"max_position_embeddings": 32768, "head_dim": 128}),
        Family("gemma", "rmsnorm", qkv_bias="attention_bias", o_bias="attention_bias", tie_default=True,
               act_default="gelu_pytorch_tanh", defaults={"max_position_embeddings": 8192, "head_dim": 256}),
        Family("gemma2", "rmsnorm", layer_norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
               qkv_bias="attention_bias", o_bias="attention_bias", tie_default=True,
               act_default="gelu_pytorch_tanh", defaults={"max_position_embeddings": 8192, "head_dim": 256}),
        Family("gemma3_text", "rmsnorm", layer_norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
               qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", tie_default=True,
               act_default="gelu_pytorch_tanh", defaults={"max_position_embeddings": 131072, "head_dim": 256}),
        Family("phi", "layernorm", layer_norms=("pre_attn",), parallel=True, mlp="plain", qkv_bias=True,
               o_bias=True, mlp_bias=True, qk_norm="head", qk_norm_kind="layernorm", qk_norm_key="qk_layernorm",
               lm_head_bias=True, act_default="gelu_new", defaults={"max_position_embeddings": 2048}),
        Family("phi3", "rmsnorm", fused_qkv=True, fused_gate_up=True, defaults={"max_position_embeddings": 4096}),
        Family("olmo", "layernorm_noparams", qkv_bias="attention_bias", o_bias="attention_bias",
               defaults={"max_position_embeddings": 2048}),
        Family("olmo2", "rmsnorm", layer_norms=("post_attn", "post_mlp"), qkv_bias="attention_bias",
               o_bias="attention_bias", qk_norm="flat", defaults={"max_position_embeddings": 2048}),
        Family("granite", "rmsnorm", qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
               defaults={"max_position_embeddings": 2048}),
        Family("stablelm", "layernorm", qkv_bias="use_qkv_bias", qk_norm="head", qk_norm_kind="layernorm_nobias",
               qk_norm_key="qk_layernorm", defaults={"max_position_embeddings": 4096}),
        Family("starcoder2", "layernorm", mlp="plain", qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias",
               tie_default=True, act_default="gelu_pytorch_tanh",
               defaults={"max_position_embeddings": 4096, "use_bias": True}),
        Family("cohere", "layernorm_nobias", layer_norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
               o_bias="attention_bias", qk_norm="head_per_head", qk_norm_key="use_qk_norm", tie_default=True,
               defaults={"max_position_embeddings": 8192}),
        Family("gpt2", "layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True, position="learned",
               tie_default=True, act_default="gelu_new", aliases=_GPT2_ALIASES, head_dim_from_config=False,
               intermediate_default_x4=True,
               defaults={"max_position_embeddings": 1024, "vocab_size": 50257, "hidden_size": 768,
                         "num_hidden_layers": 12, "num_attention_heads": 12}),
        Family("gpt_neox", "layernorm", fused_qkv=True, mlp="plain", qkv_bias="attention_bias", o_bias="attention_bias",
               mlp_bias=True, act_default="gelu", defaults={"max_position_embeddings": 2048, "attention_bias": True}),
        Family("gptj", "layernorm", layer_norms=("pre_attn",), parallel=True, mlp="plain", mlp_bias=True,
               lm_head_bias=True, act_default="gelu_new", aliases=_GPT2_ALIASES, head_dim_from_config=False,
               intermediate_default_x4=True,
               defaults={"max_position_embeddings": 2048}),
        Family("opt", "layernorm", mlp="plain", qkv_bias="enable_bias", o_bias="enable_bias",
               mlp_bias="enable_bias", position="learned", learned_position_offset=2, tie_default=True,
               act_default="relu", aliases={"intermediate_size": ("ffn_dim",)}, head_dim_from_config=False,
               defaults={"max_position_embeddings": 2048, "enable_bias": True}),
        Family("bloom", "layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True, position="alibi",
               embed_norm=True, tie_default=True, act_default="gelu", head_dim_from_config=False,
               intermediate_default_x4=True,
               aliases={"hidden_size": ("n_embed",), "num_hidden_layers": ("n_layer",),
                        "num_attention_heads": ("n_head",), "max_position_embeddings": ("seq_length",)}),
        Family("falcon", "layernorm", fused_qkv=True, mlp="plain", qkv_bias="bias", o_bias="bias", mlp_bias="bias",
               tie_default=True, act_default="gelu", head_dim_from_config=False, intermediate_default_x4=True,
               aliases={"num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",),
                        "intermediate_size": ("ffn_hidden_size",)},
               defaults={"max_position_embeddings": 2048}),
    )
}

# Block type names shown in the structure table.
ATTENTION_TYPE = {"mha": "Multi-Head Attn", "gqa": "Grouped Query Attn", "mqa": "Multi-Query Attn"}
