"""Custom-code model_types (`auto_map`) read as their declared or nearest transformers family.

Each entry renames the repo's config keys to the family's (the repo's modeling code is not run; the
page says so: custom_code finding, model.approximate). Sources: the repos' configuration_*.py and
the transformers port that replaced them where one exists (phi-msft -> phi, stablelm_epoch ->
stablelm, kimi_k2 -> deepseek_v3 per its `architectures`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Translate = Callable[[Mapping[str, Any]], dict[str, Any]]


def _rename(pairs: Mapping[str, str], **fixed: Any) -> Translate:
    def tr(cfg: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(cfg)
        for old, new in pairs.items():
            if old in cfg and new not in cfg:
                out[new] = cfg[old]
        out.update(fixed)
        return out
    return tr


def _phi_msft(cfg: Mapping[str, Any]) -> dict[str, Any]:
    # modeling_phi.py port of phi-msft: n_embd/n_head/n_layer/n_positions, rotary_dim of head_dim.
    out = _rename({"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
                   "n_positions": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps"})(cfg)
    h, heads = out.get("hidden_size"), out.get("num_attention_heads")
    if cfg.get("n_inner") is None and isinstance(h, int):
        out["intermediate_size"] = 4 * h
    elif cfg.get("n_inner") is not None:
        out["intermediate_size"] = cfg["n_inner"]
    rot = cfg.get("rotary_dim")
    if isinstance(rot, int) and isinstance(h, int) and isinstance(heads, int) and heads and h // heads:
        out["partial_rotary_factor"] = rot / (h // heads)
    return out


def _chatglm(cfg: Mapping[str, Any]) -> dict[str, Any]:
    # ChatGLM2/3 (configuration_chatglm.py): fused query_key_value with bias (add_qkv_bias), grouped
    # K/V (multi_query_group_num x kv_channels), SwiGLU of ffn_hidden_size, RMSNorm: transformers' glm.
    out = _rename({"num_layers": "num_hidden_layers", "padded_vocab_size": "vocab_size",
                   "ffn_hidden_size": "intermediate_size", "kv_channels": "head_dim",
                   "seq_length": "max_position_embeddings", "add_qkv_bias": "attention_bias"})(cfg)
    if cfg.get("multi_query_attention"):
        out["num_key_value_heads"] = cfg.get("multi_query_group_num", 1)
    return out


def _qwen1(cfg: Mapping[str, Any]) -> dict[str, Any]:
    # Qwen-1 (modeling_qwen.py): c_attn fused q/k/v with bias, c_proj without; w1/w2 of
    # intermediate_size / 2 each; RMSNorm; an untied lm_head. Read as qwen2 (q/k/v bias, no o bias).
    out = _rename({"seq_length": "max_position_embeddings"})(cfg)
    if isinstance(cfg.get("intermediate_size"), int):
        out["intermediate_size"] = cfg["intermediate_size"] // 2
    # Multi-head: QWenAttention projects K and V to num_attention_heads heads (Qwen2Config's default of 32
    # K/V heads would be read otherwise).
    if "num_key_value_heads" not in cfg and isinstance(cfg.get("num_attention_heads"), int):
        out["num_key_value_heads"] = cfg["num_attention_heads"]
    return out


def _stablelm_epoch(cfg: Mapping[str, Any]) -> dict[str, Any]:
    out = _rename({"norm_eps": "layer_norm_eps"})(cfg)
    if isinstance(cfg.get("rope_pct"), (int, float)):
        out["partial_rotary_factor"] = cfg["rope_pct"]
    return out


def _bailing_moe(cfg: Mapping[str, Any]) -> dict[str, Any]:
    # Ling 2.0 (BailingMoeV2, modeling_bailing_moe_v2.py): fused query_key_value (use_qkv_bias), dense with
    # use_bias, q/k RMSNorm, sigmoid router over num_experts + shared experts of
    # moe_shared_expert_intermediate_size, dense first_k_dense_replace layers. Read as glm4_moe's layout.
    out = _rename({"use_qkv_bias": "attention_bias", "num_experts": "n_routed_experts",
                   "num_shared_experts": "n_shared_experts"})(cfg)
    return out


# model_type -> (family read, key translation)
CUSTOM: dict[str, tuple[str, Translate]] = {
    "phi-msft": ("phi", _phi_msft),
    "stablelm_epoch": ("stablelm", _stablelm_epoch),
    "kimi_k2": ("deepseek_v3", _rename({})),
    "chatglm": ("glm", _chatglm),
    "qwen": ("qwen2", _qwen1),
    "internlm2": ("llama", _rename({"bias": "attention_bias"})),
    "orion": ("llama", _rename({})),
    "phi3_v": ("phi3", _rename({})),
    "bailing_moe": ("glm4_moe", _bailing_moe),
}


# Where the nearest family is an approximation of the repo's code, why.
NOTES: dict[str, str] = {
    "orion": "Orion's LayerNorm (weight and bias) is read as llama's RMSNorm",
    "phi3_v": "the CLIP vision tower and its projection are not counted",
    "bailing_moe": "Ling 2.0's fused query_key_value, partial rotary and MTP layers are read as glm4_moe's layout",
    "chatglm": "ChatGLM's layout read as transformers' glm",
    "qwen": "Qwen-1's layout read as qwen2",
}
