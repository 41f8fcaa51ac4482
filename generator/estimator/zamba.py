"""Zamba / Zamba2 (modeling_zamba.py, modeling_zamba2.py): Mamba layers plus shared transformer blocks.

Every layer is a Mamba (v1 multi-head for Zamba, Mamba-2 for Zamba2) mixer with its RMSNorm. A
"hybrid" layer also runs a transformer block over [hidden; original embeddings] (attention_hidden_size
= 2 x hidden) whose weights are shared: Zamba has one, Zamba2 cycles num_mem_blocks of them, each
with per-use LoRA-style adapters (adapter_rank) on gate_up (and q/k/v when
use_shared_attention_adapter); each hybrid layer adds its own Linear(hidden, hidden). Shared weights
are counted once; their compute and KV cache count at every use.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ConfigError
from .arch import Arch
from .assemble import assemble
from .spec import lm_head_part
from .reader import Reader
from .registry import register
from .spec import Block, Part, add_part, attention_part, linear, mlp_part, norm_part
from .ssm import mamba2_part, mamba_part

LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}


def _types(r: Reader, n: int, default: list[str]) -> list[str]:
    types = r.cfg.get("layers_block_type", r.cfg.get("layer_types"))
    if types is None:
        return default
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigError(r.model, "layers_block_type", types, "must be a list of layer kinds")
    return [LEGACY.get(t, t) for t in types]


def zamba_like(cfg: Mapping[str, Any], model: str, v2: bool) -> Arch:
    mt = "zamba2" if v2 else "zamba"
    r = Reader(cfg, model, mt)
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    kv = r.int("num_key_value_heads", heads)
    inter = r.int("intermediate_size", 4 * h)
    ah = 2 * h
    hd = r.derived("attention_head_dim", ah // heads, "2 x hidden_size // num_attention_heads")
    expand, state, conv = r.int("mamba_expand", 2), r.int("mamba_d_state"), r.int("mamba_d_conv", 4)
    inner = expand * h
    if v2:
        period = ["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4 + \
            ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2
        types = _types(r, n, period)
        mheads = r.int("n_mamba_heads", 8)

        def mixer(i: int) -> Part:
            return mamba2_part(f"Mamba2_{i}", h, inner, mheads, inner // mheads, r.int("mamba_ngroups", 1), state, conv,
                               bias=r.flag("add_bias_linear", False), conv_bias=r.flag("use_conv_bias", True))
    else:
        p, o = r.int("attn_layer_period", 6), r.int("attn_layer_offset", 4, minimum=0)
        types = _types(r, n, ["linear_attention", "linear_attention", "hybrid"] +
                       ["hybrid" if i % p == o else "linear_attention" for i in range(n - 3)])
        dt = r.cfg.get("mamba_dt_rank")
        rank = -(-h // 16) if dt in (None, "auto") else r.int("mamba_dt_rank")

        def mixer(i: int) -> Part:
            return mamba_part(f"Mamba_{i}", h, inner, state, conv, rank, bias=r.flag("mamba_proj_bias", False),
                              conv_bias=r.flag("mamba_conv_bias", True))
    hybrids = [i for i, t in enumerate(types) if t == "hybrid"]
    mem = r.int("num_mem_blocks", 1) if v2 else 1
    rank_a = r.int("adapter_rank", 128) if v2 else 0
    qkv_adapters = v2 and r.flag("use_shared_attention_adapter", False)
    bias = r.flag("add_bias_linear", False) if v2 else False
    # One shared transformer block: input norm over 2h, q/k/v from 2h, o_proj to h, pre-FF norm, MLP.
    shared_once = 2 * h if not v2 else 2 * h
    shared = shared_once + ah * heads * hd + 2 * ah * kv * hd + heads * hd * h + h + (3 * h * inter) + \
        (2 * inter if v2 and bias else 0) + (h if v2 and bias else 0)
    per_use_adapter = (rank_a * h + rank_a * 2 * inter) + (3 * (ah * rank_a + rank_a * ah) if qkv_adapters else 0)
    # tie_word_embeddings false disables every weight tie of the class, the shared blocks' too: each
    # hybrid layer then builds its own copy (transformers' _tied_weights_keys).
    tie = r.flag("tie_word_embeddings", True)
    blocks = []
    used = 0
    for i, t in enumerate(types, 1):
        parts: list[Part] = []
        if t == "hybrid":
            first = used < mem or not tie
            block_id = used % mem
            used += 1
            attn = attention_part(f"Attention_{i}", "Shared Attn", ah, heads, kv, hd,
                                  rope=v2 and r.flag("use_mem_rope", False), o_in=heads * hd)
            # attention_part assumed out == in (ah); the block projects back to h: fix params and matmul.
            attn = attn._replace(params=0, matmul=ah * heads * hd + 2 * ah * kv * hd + heads * hd * h)
            ffn = mlp_part(f"FFN_{i}", "SwiGLU", h, inter, True, bias, fused=v2)
            ffn = ffn._replace(params=0)
            # a block's adapters: one per hybrid use i with i % num_mem_blocks == block_id (modeling_zamba2.py)
            adapters = sum(1 for j in range(len(hybrids)) if j % mem == block_id) * per_use_adapter if v2 else 0
            block_params = ((shared + adapters) if first else 0) + h * h
            parts += [Part(f"Shared_Block_{i}", "Shared transformer (counted once)" if first else "Shared transformer",
                           block_params, matmul=h * h, linears=((h, h),)),
                      norm_part(f"RMSNorm_{i}_0", "layernorm_noparams", ah),
                      attn, add_part(f"Add_{i}_attn"), ffn]
        parts += [norm_part(f"RMSNorm_{i}_1", "rmsnorm", h), mixer(i), add_part(f"Add_{i}")]
        blocks.append(Block(i, "hybrid" if t == "hybrid" else ("mamba2" if v2 else "mamba"), tuple(parts)))
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=kv, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=r.int("max_position_embeddings", 4096), tie=tie, embed=embed, blocks=blocks,
                    head=head, position="none")


@register("zamba")
def zamba(cfg: Mapping[str, Any], model: str) -> Arch:
    return zamba_like(cfg, model, False)


@register("zamba2")
def zamba2(cfg: Mapping[str, Any], model: str) -> Arch:
    return zamba_like(cfg, model, True)


__all__ = ["linear"]
