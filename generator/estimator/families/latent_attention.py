"""Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434) and the MoE families that lay it out their own way: DOTS3, LongCat-Flash, AXK2, DeepSeek-V4."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import (
    Block,
    Part,
    add_part,
    lm_head_part,
    mlp_part,
    moe_part,
    norm_part,
)
from . import hyper_connections
from .assembly import Builder, assemble, mla_part
from .decoder import DecoderTraits, Dims, ExpertTraits
from .mixture_of_experts import _n_shared, first_k_dense


def reader_at(d: Dims, i: int):
    """A reader of layer i's config: `per_layer_config` overrides (keys "02" or 2) over the config."""
    per = d.r.cfg.get("per_layer_config")
    if not isinstance(per, Mapping):
        return d.r
    over = per.get(f"{i:02d}", per.get(str(i), per.get(i)))
    if not isinstance(over, Mapping):
        return d.r
    sub = Reader({**d.r.cfg, **over}, d.r.model, d.r.model_type, d.r.aliases)
    sub.uses = d.r.uses
    return sub


def _dots3_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_dots3_note.py: MLA with per-layer shapes (per_layer_config), a RMSNorm on the rotary key
    # (qk_rope_head_dim), a per-head output gate g_proj (hidden -> heads), and the DSA indexer on
    # "indexed_attention" layers.
    r = reader_at(d, n - 1)
    heads = r.int("num_attention_heads")
    types = d.r.cfg.get("layer_types")
    indexed = isinstance(types, list) and len(types) >= n and types[n - 1] == "indexed_attention"
    return mla_part(f"Attention_{n}", r, d.hidden, heads, bias=d.f("attention_bias"), indexer=indexed, window=window,
                    extra=r.int("qk_rope_head_dim") + d.hidden * heads)


def longcat_flash(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_longcat_flash.py: each layer runs two MLA + dense-MLP sublayers (two norms each) and one
    shortcut MoE whose router scores n_routed_experts + zero_expert_num experts (zero experts are
    identities, yet gate_up_proj is allocated for all of them); e_score_correction_bias is a buffer."""
    r = Reader(cfg, model, "longcat_flash", {"num_layers": ("num_hidden_layers",)})
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    ffn, e_inter = r.int("ffn_hidden_size"), r.int("expert_ffn_hidden_size")
    routed, zero, k = r.int("n_routed_experts"), r.int("zero_expert_num", 0, minimum=0), r.int("moe_topk")
    total = routed + zero
    blocks = []
    for i in range(1, n + 1):
        parts: list[Part] = []
        for j in (1, 2):
            parts += [norm_part(f"RMSNorm_{i}_{2 * j - 1}", "rmsnorm", h),
                      mla_part(f"Attention_{i}_{j}", r, h, heads, bias=r.flag("attention_bias", False)),
                      add_part(f"Add_{i}_{j}_attn"), norm_part(f"RMSNorm_{i}_{2 * j}", "rmsnorm", h),
                      mlp_part(f"FFN_{i}_{j}", "SwiGLU", h, ffn, True), add_part(f"Add_{i}_{j}_ffn")]
        router = h * total + (total if r.flag("router_bias", False) else 0)
        moe = moe_part(f"MoE_{i}", h, routed, k, e_inter, router_params=router,
                       extra=zero * 2 * e_inter * h)
        idle = zero * 2 * e_inter * h  # allocated for the zero experts, never multiplied
        # LongcatFlashExperts' loop keeps each pick's output times its routing weight for index_add_ (as DBRX's,
        # F100), and the weighting mul a zero expert's input, its identity output: a hidden width each per pick
        # beyond moe_part's, which counts at most n_routed_experts picks (F101)
        kept = (k - moe.top_k) * h + k * h
        parts.append(moe._replace(type=f"MoE ({routed} experts + {zero} zero, top-{k})",
                                  active=moe.active_params - idle, mats=((2 * total, h, e_inter),) + moe.mats[1:],
                                  act=moe.act + kept, act_frozen=moe.frozen_act + kept))
        blocks.append(Block(i, "mla", tuple(parts)))
    tie = r.flag("tie_word_embeddings", False)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE")]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=r.int("qk_nope_head_dim"),
                    inter=ffn, vocab=vocab, ctx=r.int("max_position_embeddings", 131072), tie=tie, embed=embed,
                    blocks=blocks, head=head, experts=routed, top_k=k)


def _axk2_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_axk2.py: MLA without q_b_proj; q_gate_proj (2 x q_lora_rank -> heads x (qk + v)) fuses the
    # query and an output gate; the DSA indexer on every layer; the input norm is a gated RMSNorm
    # (+ fc1 hidden -> gated_norm_rank, fc2 back), counted here with the attention it feeds.
    r = d.r
    h, heads = d.hidden, d.heads
    qr, kvr, rope = r.int("q_lora_rank"), r.int("kv_lora_rank"), r.int("qk_rope_head_dim")
    nope, v = r.int("qk_nope_head_dim", minimum=0), r.int("v_head_dim")
    ih, idim = r.int("index_n_heads"), r.int("index_head_dim")
    b = d.f("attention_bias")
    lin = ((h, qr), (2 * qr, heads * (nope + rope + v)), (h, kvr + rope), (kvr, heads * (nope + v)), (heads * v, h))
    params = sum(i * o for i, o in lin) + (qr + kvr + rope + h if b else 0) + qr + kvr
    params += qr * ih * idim + h * idim + 2 * idim + h * ih + 2 * h * d.k("gated_norm_rank", 16)
    return Part(f"Attention_{n}", "Multi-head Latent Attn (gated)", params, matmul=sum(i * o for i, o in lin),
                linears=lin, act=qr + kvr + rope + 4 * heads * (nope + rope + v), act32=heads,
                transient=3 * heads * (nope + rope + v), kv=kvr + rope, window=window,
                attn_flops=2 * heads * (nope + rope + v), heads=heads)


_V4_RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def _v4_type(d: Dims, n: int) -> str:
    """configuration_deepseek_v4.__post_init__: layer_types, else the legacy compress_ratios (0/4/128), else
    two heavily compressed layers then CSA and HCA alternating."""
    types = d.r.list("layer_types", length=d.layers)
    if types:
        return str(types[n - 1])
    ratios = d.r.list("compress_ratios", int, d.layers)
    if ratios:
        if ratios[n - 1] not in _V4_RATIO_TYPES:
            raise ConfigError(d.r.model, "compress_ratios", ratios, "entries must be 0, 4 or 128")
        return _V4_RATIO_TYPES[ratios[n - 1]]
    i = n - 1
    return "heavily_compressed_attention" if i < 2 or (i - 2) % 2 == 0 else "compressed_sparse_attention"


def _v4_rate(d: Dims, kind: str) -> int:
    rates = d.r.cfg.get("compress_rates")
    legacy = {"compressed_sparse_attention": "compress_rate_csa", "heavily_compressed_attention": "compress_rate_hca"}
    if isinstance(rates, Mapping) and isinstance(rates.get(kind), int):
        return int(rates[kind])
    return d.k(legacy[kind], 4 if kind == "compressed_sparse_attention" else 128)


def _v4_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_deepseek_v4.DeepseekV4Attention: q_a_proj (+ norm) -> q_b_proj to heads x head_dim, one shared K=V
    # head (kv_proj + norm), grouped o_a_proj (o_groups blocks of heads x head_dim / o_groups -> o_lora_rank),
    # o_b_proj, per-head sinks. CSA layers add a compressor (kv/gate hidden -> 2 x head_dim, position_bias of
    # rate x 2 x head_dim, norm) with its indexer (the same at index_head_dim, q_b_proj from q_lora_rank,
    # weights_proj hidden -> index_n_heads); HCA layers a compressor at head_dim. The part depends on the layer
    # only through its type and window: made once per (type, window) and config, named per layer.
    hd, rq, groups, rank = d.k("head_dim"), d.k("q_lora_rank"), d.k("o_groups"), d.k("o_lora_rank")
    kind = _v4_type(d, n)
    part = d.r.once(("deepseek_v4 attention", kind, window), lambda: _v4_part(d, kind, window, hd, rq, groups, rank))
    return part._replace(name=f"Attention_{n}")


def _v4_part(d: Dims, kind: str, window: int, hd: int, rq: int, groups: int, rank: int) -> Part:
    """The attention part of a layer type (_v4_attention), named by the caller."""
    h, heads = d.hidden, d.heads
    # o_a_proj: one weight [groups x rank, heads x head_dim / groups], applied to each group of heads
    lin = [(h, rq), (rq, heads * hd), (h, hd), (heads * hd // groups, groups * rank), (groups * rank, h)]
    params = sum(i * o for i, o in lin) + rq + hd + heads
    if kind == "compressed_sparse_attention":
        ih, ihd, rate = d.k("index_n_heads"), d.k("index_head_dim"), _v4_rate(d, kind)
        params += 2 * h * 2 * hd + rate * 2 * hd + hd + 2 * h * 2 * ihd + rate * 2 * ihd + ihd + rq * ih * ihd + h * ih
    elif kind == "heavily_compressed_attention":
        params += 2 * h * hd + _v4_rate(d, kind) * hd + hd
    return Part("Attention", "Compressed MQA" if kind != "sliding_attention" else "Sliding MQA", params,
                matmul=sum(i * o for i, o in lin), linears=tuple(lin[:3]) + ((groups * rank, h),),
                act=rq + 4 * heads * hd + 2 * hd, act32=heads, transient=2 * heads * hd + hd, kv=hd, window=window,
                attn_flops=4 * heads * hd, heads=heads)


TRAITS: dict[str, DecoderTraits] = {
    "dots3_note_text": DecoderTraits(mla=True, attn=_dots3_attention,
                              moe=ExpertTraits(experts="n_routed_experts", shared=lambda d: d.k("shared_experts_intermediate_size")
                                    * d.k("n_shared_experts", 1), sparse=first_k_dense())),
    "axk2": DecoderTraits(mla=True, attn=_axk2_attention,
                   moe=ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"),
                         sparse=first_k_dense(freq="moe_layer_freq", k0=1),
                         extra=lambda d: 2 * d.hidden * d.k("gated_norm_rank", 16))),
"deepseek_v4": DecoderTraits(attn=_v4_attention, inter_key=None, layer_extra=hyper_connections.deepseek_v4_layer,
                          mha=False, streams="hc_mult", extra_head=hyper_connections.deepseek_v4_head,
                          moe=ExpertTraits(experts="n_routed_experts", shared=lambda d: d.k("moe_intermediate_size"),
                                shared_bias="mlp_bias")),
}

BUILDERS: dict[str, Builder] = {
    "longcat_flash": longcat_flash,
}
