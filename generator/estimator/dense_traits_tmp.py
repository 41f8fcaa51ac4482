"""The first transformer decoders (transformers 5.24 modeling_<type>.py), as traits of the one decoder builder."""

from __future__ import annotations

from .decoders import D, T, build, partial_rotary
from .registry import register_table

GPT2_KEYS = {
    "hidden_size": ("n_embd",),
    "num_hidden_layers": ("n_layer",),
    "num_attention_heads": ("n_head",),
    "max_position_embeddings": ("n_positions", "n_ctx"),
    "intermediate_size": ("n_inner",),
}


def _gptj_rotary(d: D) -> int:  # modeling_gptj.py: rotary_dim of each head (None: all of it)
    return d.r.int("rotary_dim", d.hd) or d.hd


def _falcon_kv(d: D) -> int:
    # modeling_falcon.FalconAttention: new_decoder_architecture uses num_kv_heads; else multi_query (default
    # true) means one K/V head; else full multi-head.
    if d.f("new_decoder_architecture"):
        return d.r.int("num_kv_heads", d.heads)
    return 1 if d.f("multi_query", True) else d.heads


def _falcon_layout(d: D) -> tuple[tuple[str, ...], bool]:
    if d.f("new_decoder_architecture"):
        n = d.r.int("num_ln_in_parallel_attn", 2)
        return (("pre_attn", "pre_mlp") if n == 2 else ("pre_attn",)), True
    if d.f("parallel_attn", True):
        return ("pre_attn",), True
    return ("pre_attn", "pre_mlp"), False


def _neox_layout(d: D) -> tuple[tuple[str, ...], bool]:
    return ("pre_attn", "pre_mlp"), d.f("use_parallel_residual", True)


def _stablelm_layout(d: D) -> tuple[tuple[str, ...], bool]:
    return (("pre_attn",), True) if d.f("use_parallel_residual") else (("pre_attn", "pre_mlp"), False)


def _opt_norm(d: D) -> str:  # modeling_opt.py: layer_norm_elementwise_affine=False drops the norms' weights
    return "layernorm" if d.f("layer_norm_elementwise_affine", True) else "layernorm_noparams"


def _opt_final_norm(d: D) -> bool:  # OPT-350m: do_layer_norm_before=False has no final norm
    return d.f("do_layer_norm_before", True) and not d.r.cfg.get("_remove_final_layer_norm", False)


TRAITS: dict[str, T] = {
    "gpt2": T(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
              position="learned", tie=True, act_default="gelu_new", aliases=GPT2_KEYS, head_dim_key=False,
              inter_x4=True, mha=True, rotary=lambda d: d.hd,
              defaults={"max_position_embeddings": 1024, "vocab_size": 50257, "hidden_size": 768,
                        "num_hidden_layers": 12, "num_attention_heads": 12}),
    "gpt_neox": T(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias="attention_bias", o_bias="attention_bias",
                  mlp_bias=True, act_default="gelu", mha=True, layout=_neox_layout,
                  rotary=partial_rotary(0.25, neox_key=True), defaults={"attention_bias": True}),
    "gptj": T(norm="layernorm", norms=("pre_attn",), parallel=True, mlp="plain", mlp_bias=True, head_bias=True,
              act_default="gelu_new", aliases=GPT2_KEYS, head_dim_key=False, inter_x4=True, mha=True,
              rotary=_gptj_rotary, defaults={"max_position_embeddings": 2048}),
    "opt": T(norm="layernorm", mlp="plain", qkv_bias="enable_bias", o_bias="enable_bias", mlp_bias="enable_bias",
             position="learned", position_offset=2, tie=True, act_default="relu",
             aliases={"intermediate_size": ("ffn_dim",)}, head_dim_key=False, mha=True,
             embed_proj_key="word_embed_proj_dim", norm_rule=_opt_norm, final_norm_rule=_opt_final_norm,
             defaults={"enable_bias": True}),
    "bloom": T(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
               position="alibi", embed_norm=True, tie=True, act_default="gelu", head_dim_key=False,
               inter_x4_always=True, mha=True, default_context=2048,
               aliases={"hidden_size": ("n_embed",), "num_hidden_layers": ("n_layer",),
                        "num_attention_heads": ("n_head",), "max_position_embeddings": ("seq_length",)}),
    "falcon": T(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias="bias", o_bias="bias", mlp_bias="bias",
                tie=True, act_default="gelu", head_dim_key=False, inter_x4=True, kv_rule=_falcon_kv,
                layout=_falcon_layout, aliases={"num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",),
                                                "intermediate_size": ("ffn_hidden_size",)},
                defaults={"max_position_embeddings": 2048}),
    "phi": T(norm="layernorm", norms=("pre_attn",), parallel=True, mlp="plain", qkv_bias=True, o_bias=True,
             mlp_bias=True, qk_norm="head", qk_norm_kind="layernorm", qk_norm_key="qk_layernorm", head_bias=True,
             act_default="gelu_new", rotary=partial_rotary(0.5)),
    # llama and its first descendants
    "llama": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
    "mistral": T(),
    "qwen2": T(qkv_bias=True),
    "qwen3": T(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head"),
    "phi3": T(fused_qkv=True, fused_gate_up=True),
    "olmo": T(norm="layernorm_noparams", qkv_bias="attention_bias", o_bias="attention_bias"),
    "olmo2": T(norms=("post_attn", "post_mlp"), qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="flat"),
    "stablelm": T(norm="layernorm", qkv_bias="use_qkv_bias", qk_norm="head", qk_norm_kind="layernorm_nobias",
                  qk_norm_key="qk_layernorm", layout=_stablelm_layout, o_in_hidden=True, rotary=partial_rotary(0.25)),
    "starcoder2": T(norm="layernorm", mlp="plain", qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias",
                    tie=True, act_default="gelu_pytorch_tanh", defaults={"use_bias": True}),
    "cohere": T(norm="layernorm_nobias", norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
                o_bias="attention_bias", qk_norm="per_head", qk_norm_key="use_qk_norm", tie=True),
    "gemma": T(qkv_bias="attention_bias", o_bias="attention_bias", tie=True, act_default="gelu_pytorch_tanh"),
    "gemma2": T(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias",
                o_bias="attention_bias", tie=True, act_default="gelu_pytorch_tanh"),
    "gemma3_text": T(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias",
                     o_bias="attention_bias", qk_norm="head", tie=True, act_default="gelu_pytorch_tanh"),
}

register_table(TRAITS, build)
