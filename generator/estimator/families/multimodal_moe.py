"""Text towers of multimodal mixture-of-experts models (Step-3.7, ...): traits per model_type (transformers 5.24)."""

from __future__ import annotations

from ..graph.parts import Part
from .decoder import DecoderTraits, Dims, ExpertTraits, attention
from .mixture_of_experts import sparse_by_types


def _step3p5_sparse(d: Dims, i: int) -> bool:
    # configuration_step3p7.Step3p7TextConfig.__post_init__: the legacy moe_layers_enum (indices, a list or a
    # comma-separated string) names the MoE layers, else every layer from index 3 on.
    legacy = d.r.cfg.get("moe_layers_enum")
    if legacy is not None:
        items = legacy.split(",") if isinstance(legacy, str) else legacy if isinstance(legacy, list) else []
        return i in {int(x) for x in items if str(x).strip()}
    return i >= 3


def _step3p5_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_step3p7.Step3p7Attention: "sliding_attention" layers take num_sliding_attention_heads (the
    # per_layer_config override); g_proj hidden -> heads (per-head gating); q/k RMSNorm of head_dim.
    types = d.r.list("layer_types", str)
    sliding = bool(types) and len(types) >= n and types[n - 1] == "sliding_attention"
    heads = d.k("num_sliding_attention_heads", d.heads) if sliding else d.heads
    return attention(t, d, n, window, heads=heads, extra=d.hidden * heads)


TRAITS: dict[str, DecoderTraits] = {
    # modeling_step3p7.Step3p7TextModel: gated GQA, MoE layers (router weight, 3-D experts, a shared SwiGLU of
    # share_expert_dim), dense SwiGLU layers of intermediate_size, untied head.
    "step3p5": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", mlp_bias="mlp_bias",
                             attn=_step3p5_attention,
                             moe=ExpertTraits(experts="n_routed_experts", shared=lambda d: d.k("share_expert_dim"),
                                              shared_bias="mlp_bias", sparse=sparse_by_types(_step3p5_sparse))),
}
