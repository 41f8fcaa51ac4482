"""Dense llama-descended decoders: traits per model_type (transformers 5.24 modeling_<type>.py).

Each entry differs from llama (q/k/v/o + gated MLP + two RMSNorms, untied head) only where noted.
"""

from __future__ import annotations

from typing import Any, Mapping

from .arch import Arch
from .decoders import D, T, build
from .registry import register, register_table
from .spec import linear

LLAMA = T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias")


def _xielu(d: D) -> int:
    # modeling_apertus.py: the xIELU activation holds alpha_p and alpha_n (one scalar each).
    return 2 if (d.r.str("hidden_act", "xielu") or "") == "xielu" else 0


TRAITS: dict[str, T] = {
    # modeling_llama.py descendants with llama's keys
    "arcee": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", mlp="plain"),
    "cwm": T(mlp_bias="mlp_bias"), "exaone": LLAMA, "internlm3": LLAMA, "iquestcoder": LLAMA,
    "helium": T(qkv_bias="attention_bias", mlp_bias="mlp_bias"),
    "granite": LLAMA, "ministral": T(), "ministral3": T(), "smollm3": T(qkv_bias="attention_bias",
                                                                       o_bias="attention_bias", mlp_bias="mlp_bias",
                                                                       tie=True),
    "emu3": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", text_config=True),
    # modeling_apertus.py: up/down MLP with xIELU, q/k RMSNorm over head_dim
    "apertus": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain", qk_norm="head", mlp_extra=_xielu),
    "apertus1p5_text": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain", qk_norm="head",
                         mlp_extra=_xielu),
    "ernie4_5": T(qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias", tie=True),
    "exaone4": T(norms=("post_attn", "post_mlp"), qk_norm="head"),
    "glm": T(qkv_bias="attention_bias", fused_gate_up=True),
    "glm4": T(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias", fused_gate_up=True),
    # modeling_granite_swa.py: per-head attention sinks
    "granite_swa": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", tie=True,
                     attn_extra=lambda d: d.heads),
    "hyperclovax": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
    "jais2": T(norm="layernorm", qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain", mlp_bias="mlp_bias"),
    # modeling_nanochat.py: RMSNorm without weights, fc1/fc2 MLP, parameter-free q/k norm
    "nanochat": T(norm="layernorm_noparams", qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain"),
    "olmo3": T(norms=("post_attn", "post_mlp"), qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="flat"),
    "seed_oss": T(qkv_bias="attention_bias", o_bias="attention_out_bias", mlp_bias="mlp_bias"),
    "vaultgemma": T(norms=("pre_attn", "pre_mlp"), qkv_bias="attention_bias", o_bias="attention_bias", tie=True),
    # modeling_diffllama.py: lambda_q1, lambda_k1, lambda_q2, lambda_k2 of head_dim each
    "diffllama": T(qkv_bias="attention_bias", o_bias="attention_bias", attn_extra=lambda d: 4 * d.hd),
    # modeling_bitnet.py: sub-norms before o_proj (hidden) and down_proj (intermediate)
    "bitnet": T(qkv_bias="attention_bias", o_bias="attention_bias", attn_extra=lambda d: d.hidden,
                mlp_extra=lambda d: d.inter),
    "cohere2": T(norm="layernorm_nobias", norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
                 o_bias="attention_bias", tie=True),
    "persimmon": T(norm="layernorm", mha=True, qkv_bias=True, o_bias=True, mlp="plain", mlp_bias=True, qk_norm="head",
                   qk_norm_key="qk_layernorm", fused_qkv=True),
}


def _hyperclovax(d: D) -> int:
    # modeling_hyperclovax.py: post_norm1 / post_norm2 after attention and MLP when use_post_norm.
    return 2 * d.hidden if d.f("use_post_norm", True) else 0


TRAITS["hyperclovax"] = T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
                          layer_extra=_hyperclovax)


TRAITS.update({
    "cohere_compass_text": T(norm="layernorm_nobias", norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
                             o_bias="attention_bias", tie=True),
    # modeling_doge.py: q/k RMSNorm, dynamic-mask A (heads) and dt_proj (hidden -> heads); residual scales
    "doge": T(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", qk_norm="head",
              attn_extra=lambda d: d.heads + (d.heads if d.f("attention_bias") else 0),
              attn_linears=lambda d: ((d.hidden, d.heads),),
              layer_extra=lambda d: 2 * d.hidden),
})


def moshi(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_moshi.py (MoshiForCausalLM): gated fc1 (hidden -> ffn_dim = 2 x width) / fc2 (width -> hidden),
    # an embedding of vocab_size + 1 rows, an untied head of vocab_size.
    from .reader import Reader
    r = Reader(cfg, model, "moshi")
    t = T(fused_gate_up=True, inter_key="intermediate_size", top_extra=lambda d: d.hidden, never_tie=True)
    return build(dict(cfg, intermediate_size=r.int("ffn_dim") // 2), model, "moshi", t)


register("moshi")(moshi)


register_table(TRAITS, build)

__all__ = ["TRAITS", "LLAMA", "linear"]
