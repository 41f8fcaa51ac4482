"""Mixture-of-experts decoders: traits per model_type (transformers 5.24 modeling_<type>.py).

Total parameters hold every expert; active parameters count the router, the top-k routed experts
and the shared experts of each MoE layer (spec.moe_part). Which layers are sparse follows the
config's `mlp_layer_types` when written, else the family's rule (first_k_dense_replace,
decoder_sparse_step / mlp_only_layers, moe_layer_freq, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import (
    Block,
    Part,
    attention_part,
    linear,
    lm_head_part,
    mlp_part,
    moe_part,
    norm_part,
)
from . import hyper_connections
from .assembly import Builder, assemble, mla_part
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule, attention, build


def sparse_by_types(default: Callable[[Dims], list[bool]]) -> StackRule:
    """Per layer, whether it has experts: `mlp_layer_types` ("dense"/"sparse") when the config writes it, else the
    family's rule, which lists every layer (decoder.StackRule: the keys it reads are the same for every layer)."""
    def stack(d: Dims) -> list[bool]:
        types = d.r.cfg.get("mlp_layer_types")
        if types is not None:
            if not isinstance(types, list) or len(types) < d.layers or not all(isinstance(t, str) for t in types):
                raise ConfigError(d.r.model, "mlp_layer_types", types, f"must list {d.layers} layer kinds")
            return [t != "dense" for t in types[:d.layers]]
        return default(d)
    return StackRule(stack)


def from_layer(k: int) -> Callable[[Dims], list[bool]]:
    """Experts on every layer from index k (0-based) on."""
    return lambda d: [i >= k for i in range(d.layers)]


def first_k_dense(key: str = "first_k_dense_replace", freq: str | None = None, k0: int = 0) -> StackRule:
    # modeling_deepseek_v3.py: layer_idx >= first_k_dense_replace (and layer_idx % moe_layer_freq == 0 in v2);
    # k0 is the configuration file's default when the key is popped rather than stored.
    def stack(d: Dims) -> list[bool]:
        k = d.k(key, k0, minimum=0)
        f = d.k(freq, 1) if freq else 1
        return [i >= k and i % f == 0 for i in range(d.layers)]
    return sparse_by_types(stack)


def _qwen_sparse(d: Dims) -> list[bool]:
    # modeling_qwen2_moe.py: not in mlp_only_layers, num_experts > 0 and (layer_idx + 1) % decoder_sparse_step == 0
    only = d.r.list("mlp_only_layers", int) or []
    step = d.k("decoder_sparse_step", 1)
    return [i not in only and (i + 1) % step == 0 for i in range(d.layers)]


qwen_sparse = StackRule(_qwen_sparse)


def _n_shared(count_key: str, width_key: str = "moe_intermediate_size") -> Callable[[Dims], int]:
    return lambda d: d.k(count_key, 0, minimum=0) * d.k(width_key)


def _width(key: str) -> Callable[[Dims], int]:
    return lambda d: d.k(key, 0, minimum=0)


def _ernie_sparse(d: Dims, i: int) -> bool:
    # modeling_ernie4_5_moe.py: experts from moe_layer_start_index to moe_layer_end_index (-1: the last layer), every
    # moe_layer_interval-th layer.
    start = d.k("moe_layer_start_index", 0, minimum=0)
    end = d.k("moe_layer_end_index", -1, minimum=-1)
    end = d.layers - 1 if end < 0 else end
    return start <= i <= end and (i - start) % d.k("moe_layer_interval", 1) == 0


MIXTRAL = ExpertTraits(experts="num_local_experts", inter="intermediate_size")


MINICPM5_MOE_DEFAULTS: dict[str, Any] = {  # configuration_minicpm5_moe.MiniCPM5MoeConfig (transformers 5.25.0)
    "vocab_size": 130560, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 28,
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "hidden_act": "silu",
    "max_position_embeddings": 524288, "tie_word_embeddings": False, "attention_bias": False,
    "moe_intermediate_size": 512, "num_experts_per_tok": 16, "n_shared_experts": 1, "n_routed_experts": 160,
}
DEEPSEEK = ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"), sparse=first_k_dense())


def _mimo_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_mimo_v2_flash.py: sliding layers double the KV heads and add per-head sinks; V has v_head_dim.
    swa = window > 0
    return attention(t, d, n, window, kv=d.kv * (2 if swa else 1), v_dim=d.k("v_head_dim"), extra=d.heads if swa else 0)


def _laguna_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_laguna.py: heads per layer (num_attention_heads_per_layer); g_proj hidden -> heads gates.
    per = d.r.list("num_attention_heads_per_layer", int)
    heads = per[n - 1] if per and len(per) >= n else d.heads
    gate = d.hidden * heads if d.f("gating", True) else 0
    return attention(t, d, n, window, heads=heads, extra=gate)


def _minimax_m3_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_minimax_m3_vl.py: per-head q/k RMSNorm; a sparse indexer on "minimax_m3_sparse" layers.
    types = d.r.cfg.get("layer_types")
    extra = 0
    if isinstance(types, list) and len(types) >= n and types[n - 1] == "minimax_m3_sparse":
        ih, idim = d.k("index_n_heads"), d.k("index_head_dim")
        extra = d.hidden * ih * idim + d.hidden * idim + 2 * idim
    return attention(t, d, n, window, extra=extra)


def _mla_indexed(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_deepseek_v32.py / modeling_glm_moe_dsa.py: MLA + the sparse-attention indexer on every layer.
    return mla_part(f"Attention_{n}", d.r, d.hidden, d.heads, bias=d.f("attention_bias"), indexer=True, window=window)


def _hy_v4_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_hy_v4.HYV4Attention: MLA with a sigmoid output gate (gate_proj hidden -> heads x v_head_dim)
    # and per-head sinks; the DSA indexer only on indexer_types "full" layers (default: layer 0 and every
    # 4th from layer 1), the others reuse its top-k.
    types = d.r.list("indexer_types", length=d.layers)
    full = types[n - 1] == "full" if types else n == 1 or (n - 2) % 4 == 0
    gate = d.hidden * d.heads * d.k("v_head_dim")
    p = mla_part(f"Attention_{n}", d.r, d.hidden, d.heads, bias=d.f("attention_bias"), extra=gate + d.heads,
                 indexer=full, window=window)
    return p._replace(matmul=p.matmul + gate, linears=(*p.linears, (d.hidden, gate // d.hidden)))


def _jetmoe_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_jetmoe.py (mixture of attention heads): kv_proj hidden -> 2 x kv_heads x kv_channels shared,
    # per expert input_linear (q) and output_linear of kv_heads x kv_channels, a router, an output bias.
    r = d.r
    e, k, kvc = r.int("num_local_experts"), r.int("num_experts_per_tok"), r.int("kv_channels")
    inner = d.kv * kvc
    h = d.hidden
    params = h * 2 * inner + 2 * e * h * inner + e * h + h
    active = h * 2 * inner + 2 * k * h * inner + e * h + h
    return Part(f"Attention_{n}", f"Mixture of Attention ({e} experts, top-{k})", params, active=active,
                matmul=h * 2 * inner + 2 * e * h * inner + e * h, active_matmul=h * 2 * inner + 2 * k * h * inner + e * h,
                linears=((h, 2 * inner),), mats=((1, h, 2 * inner), (2 * e, h, inner)),
                act=k * 4 * inner + 2 * inner, act32=d.heads, transient=4 * inner, kv=2 * inner, window=window,
                attn_flops=4 * d.heads * kvc, heads=d.heads)


def _dbrx_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # DbrxAttention clamps the fused Wqkv output (clip_qkv): clamp's backward keeps its input (F100, a real CPU step)
    p = attention(t, d, n, window)
    qkv = (d.heads + 2 * d.kv) * d.hd if d.r.cfg.get("clip_qkv") is not None else 0
    return p._replace(act=p.act + qkv, act_frozen=p.frozen_act + qkv)


def _dbrx_experts(p: Part, d: Dims) -> Part:
    # DbrxExperts.forward keeps each routed token's expert output times its routing weight for index_add_ (F100)
    return p._replace(act=p.act + p.top_k * d.hidden, act_frozen=p.frozen_act + p.top_k * d.hidden)


def dbrx(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_dbrx.py: d_model / n_heads / n_layers / max_seq_len, attn_config.kv_n_heads, fused Wqkv and
    # out_proj without bias, LayerNorm without bias, ffn_config experts (w1, v1, w2) of ffn_hidden_size.
    attn, ffn = cfg.get("attn_config") or {}, cfg.get("ffn_config") or {}
    if not isinstance(attn, Mapping) or not isinstance(ffn, Mapping):
        raise ConfigError(model, "attn_config", attn, "must be a JSON object")
    flat = dict(cfg)
    flat["num_key_value_heads"] = attn.get("kv_n_heads", 1)  # the top-level key is not read
    for key, src, name in (("num_experts", ffn, "moe_num_experts"),
                           ("num_experts_per_tok", ffn, "moe_top_k"), ("moe_intermediate_size", ffn, "ffn_hidden_size")):
        if name in src:
            flat[key] = src[name]
    flat.setdefault("num_key_value_heads", 1)
    flat["clip_qkv"] = attn.get("clip_qkv")  # None: no clamp
    flat.setdefault("num_experts", 4)
    flat.setdefault("num_experts_per_tok", 1)
    flat.setdefault("moe_intermediate_size", 3584)
    t = DecoderTraits(norm="layernorm_nobias", fused_qkv=True, inter_key=None,
          aliases={"hidden_size": ("d_model",), "num_attention_heads": ("n_heads",), "num_hidden_layers": ("n_layers",),
                   "max_position_embeddings": ("max_seq_len",)}, moe=ExpertTraits(part=_dbrx_experts),
          attn=_dbrx_attention, attn_by_window=True)
    return build(flat, model, "dbrx", t)


def zaya(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_zaya.py: CCA attention (arXiv:2510.04476): q/k/v projections (v as current + delayed halves),
    two causal Conv1d over the q+k channels (depthwise of cca_time0, grouped by heads + kv heads of cca_time1,
    both with bias), a per-KV-head key temperature, o_proj; an MoE of num_experts SwiGLU experts with one
    skip class and an MLP router (down_proj hidden -> router_hidden_size with bias, a router_states_scale from
    the second layer on, RMSNorm, fc1/fc2 with bias, out_proj to experts + 1); two residual scalings of 4 x
    hidden per layer, an input scale and bias, RMSNorms; "hybrid_sliding" layers attend to sliding_window."""
    r = Reader(cfg, model, "zaya")
    h, n, heads, kv, hd = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                           r.int("num_key_value_heads"), r.int("head_dim"))
    vocab, inter, experts, top_k = (r.int("vocab_size"), r.int("moe_intermediate_size"), r.int("num_experts"),
                                    r.int("num_experts_per_tok"))
    rh, t0, t1, ab = r.int("router_hidden_size"), r.int("cca_time0"), r.int("cca_time1"), r.flag("attention_bias")
    types = r.list("layer_types", length=n) or ["hybrid"] * n
    window = r.opt_int("sliding_window") or 0
    windows = tuple(window if t == "hybrid_sliding" else 0 for t in types[:n])
    ch = (heads + kv) * hd  # conv channels: q and k
    conv = ch * t0 + ch + ch * hd * t1 + ch  # grouped by heads + kv heads: hd input channels per group
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "CCA Attn", h, heads, kv, hd, qkv_bias=ab, o_bias=ab, extra=conv + kv,
                              window=windows[i - 1])
        router = linear(h, rh, True) + (rh if i > 1 else 0) + rh + 2 * linear(rh, rh, True) + rh * (experts + 1)
        moe = moe_part(f"MoE_{i}", h, experts, top_k, inter, router_params=router)
        moe = moe._replace(type=f"MoE ({experts} experts, top-{top_k})")
        block = standard_block(i, [], attn, moe, "rmsnorm", h, kind="sliding" if windows[i - 1] else "attention")
        blocks.append(Block(i, block.kind, (*block.parts, Part(f"Residual_Scales_{i}", "Parameters", 8 * h))))
    tie = r.flag("tie_word_embeddings", True)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE"),
             Part("Input_Scale", "Parameters", 2 * h)]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie, r.flag("lm_head_bias")),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=kv, head_dim=hd, inter=inter, vocab=vocab,
                    ctx=r.int("max_position_embeddings"), tie=tie, embed=embed, blocks=blocks, head=head,
                    windows=windows, experts=experts, top_k=top_k)


def inkling_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_inkling.InklingForCausalLM: per layer q/k/v/o plus r_proj (hidden -> heads x d_rel) and a
    relative-logits bank (d_rel x rel_extent; the window on "hybrid_sliding" layers, which also take the swa_*
    head counts), per-head q/k RMSNorms, depthwise short convolutions without bias on K and V (kv width x
    conv_kernel_size) and after attention and the MLP (hidden x conv_kernel_size); a dense SwiGLU or an MoE whose
    router scores routed + shared experts (3-D shared experts), each with a global_scale; an RMS-normed embedding
    and an untied head. `dense_intermediate_size`, when written, is the dense width and `intermediate_size` the
    experts' (configuration_inkling.__post_init__)."""
    r = Reader(cfg, model, "inkling_text")
    h, n, vocab, kernel, d_rel = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size"),
                                  r.int("conv_kernel_size"), r.int("d_rel"))
    dense, inter = r.int("intermediate_size"), r.int("moe_intermediate_size")
    if r.opt_int("dense_intermediate_size") is not None:
        dense, inter = r.int("dense_intermediate_size"), r.int("intermediate_size")
    experts, top_k = r.int("n_routed_experts"), r.int("num_experts_per_tok")
    shared = r.int("n_shared_experts", minimum=0)
    window = r.int("sliding_window_size")
    local = r.list("local_layer_ids", int)
    types = r.list("layer_types", length=n) or [
        "hybrid_sliding" if (i in local if local is not None else (i + 1) % 6) else "hybrid" for i in range(n)]
    first_sparse = r.int("dense_mlp_idx", 0, minimum=0)
    mlps = r.list("mlp_layer_types", length=n) or ["dense" if i < first_sparse else "sparse" for i in range(n)]
    blocks = []
    for i in range(1, n + 1):
        sw = types[i - 1] == "hybrid_sliding"
        pre = "swa_" if sw else ""
        heads, kv, hd = r.int(pre + "num_attention_heads"), r.int(pre + "num_key_value_heads"), r.int(pre + "head_dim")
        extent = window if sw else r.int("rel_extent")
        attn = attention_part(f"Attention_{i}", "Relative Attn", h, heads, kv, hd, window=window if sw else 0,
                              extra=h * heads * d_rel + 2 * kv * hd * kernel + 2 * hd + d_rel * extent,
                              extra_linears=((h, heads * d_rel),))
        if mlps[i - 1] == "sparse":
            ffn = moe_part(f"MoE_{i}", h, experts, top_k, inter, shared=shared * inter,
                           router_params=(experts + shared) * h + 1, shared_lora=False)
            ffn = ffn._replace(type=f"MoE ({experts} experts, top-{top_k})")
        else:
            ffn = mlp_part(f"FFN_{i}", "SwiGLU", h, dense, True, extra=1)
        block = standard_block(i, [], attn, ffn, "rmsnorm", h, kind="sliding" if sw else "attention")
        convs = Part(f"Short_Convs_{i}", "Conv1d", 2 * h * kernel)  # attn_sconv and mlp_sconv
        blocks.append(dataclasses.replace(block, parts=(*block.parts, convs)))
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE"),
             norm_part("Embedding_RMSNorm", "rmsnorm", h)]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, False),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=r.int("num_attention_heads"),
                    kv=r.int("num_key_value_heads"), head_dim=r.int("head_dim"), inter=dense, vocab=vocab,
                    ctx=r.int("max_position_embeddings"), tie=False, embed=embed, blocks=blocks, head=head,
                    windows=tuple(window if t == "hybrid_sliding" else 0 for t in types[:n]), experts=experts,
                    top_k=top_k)


TRAITS: dict[str, DecoderTraits] = {
    "mixtral": DecoderTraits(moe=MIXTRAL),
    # modeling_unlimited_ocr.UnlimitedOcrTextModel: DeepSeek's MoE (mlp_layer_types) under plain q/k/v/o attention
    "unlimited_ocr_text": DecoderTraits(moe=DEEPSEEK),
    "minimax_m2": DecoderTraits(moe=MIXTRAL, qk_norm="flat"),
    "qwen2_moe": DecoderTraits(qkv_bias="qkv_bias", moe=ExpertTraits(shared=_width("shared_expert_intermediate_size"), shared_gate=True,
                                              sparse=qwen_sparse)),
    "qwen3_moe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head",
                   moe=ExpertTraits(experts="num_local_experts", sparse=qwen_sparse)),
    "olmoe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="flat", moe=ExpertTraits(inter="intermediate_size")),
    "flex_olmo": DecoderTraits(norms=("post_attn", "post_mlp"), qkv_bias="attention_bias", o_bias="attention_bias",
                   qk_norm="flat", moe=ExpertTraits(inter="intermediate_size")),
    "granitemoe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", moe=MIXTRAL),
    "granitemoeshared": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias",
                          moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size",
                                shared=_width("shared_intermediate_size"))),
    "granitemoe_swa": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", attn_extra=lambda d: d.heads,
                        moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size",
                              shared=_width("shared_intermediate_size"))),
    "phimoe": DecoderTraits(norm="layernorm", qkv_bias="attention_bias", o_bias="attention_bias", head_bias="lm_head_bias",
                moe=MIXTRAL),
    "deepseek_v2": DecoderTraits(mla=True, mlp_bias="mlp_bias",
                     moe=ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"), shared_bias="mlp_bias",
                           sparse=first_k_dense(freq="moe_layer_freq"))),
    "deepseek_v3": DecoderTraits(mla=True, moe=DEEPSEEK),
    # modeling_mistral4.Mistral4Model: DeepSeek-V3's MLA and MoE (router weight only, first_k_dense_replace 0)
    "mistral4": DecoderTraits(mla=True, moe=DEEPSEEK),
    "sarvam_mla": DecoderTraits(mla=True, moe=DEEPSEEK),
    "axk1": DecoderTraits(mla=True, moe=ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"),
                              sparse=first_k_dense(freq="moe_layer_freq", k0=1), extra=lambda d: d.hidden)),
    "glm4_moe": DecoderTraits(qkv_bias="attention_bias", qk_norm="head", qk_norm_key="use_qk_norm", moe=DEEPSEEK),
    "sarvam_moe": DecoderTraits(qkv_bias="attention_bias", qk_norm="head", qk_norm_key="use_qk_norm", moe=DEEPSEEK),
    "glm4_moe_lite": DecoderTraits(mla=True, moe=ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"),
                                       sparse=first_k_dense(k0=1))),
    "solar_open": DecoderTraits(qkv_bias="attention_bias", moe=DEEPSEEK),
    # modeling_minicpm5_moe.py (transformers 5.25; its config class is not in the 5.24 defaults table, so its
    # configuration_minicpm5_moe.MiniCPM5MoeConfig defaults are given here): Llama attention with q_gate_proj (query
    # and output gate, 2 x heads x head_dim), DeepSeek-V3's MoE, first_k_dense_replace popped with default 1.
    "minicpm5_moe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", q_mult=2,
                                  aliases={"n_routed_experts": ("num_local_experts",)}, defaults=MINICPM5_MOE_DEFAULTS,
                                  moe=ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"),
                                                   sparse=first_k_dense(k0=1))),
    "ernie4_5_moe": DecoderTraits(qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias", tie=True,
                      moe=ExpertTraits(experts="moe_num_experts", top_k="moe_k",
                            shared=_n_shared("moe_num_shared_experts"), score_bias=True,
                            sparse=_ernie_sparse)),
    "exaone_moe": DecoderTraits(qk_norm="head", moe=ExpertTraits(shared=_n_shared("num_shared_experts"), sparse=first_k_dense())),
    "hy_v3": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", mlp_bias="mlp_bias",
                moe=ExpertTraits(shared=_n_shared("num_shared_experts"), shared_bias="mlp_bias", sparse=first_k_dense(k0=1))),
    "mellum": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head",
                moe=ExpertTraits(experts="num_local_experts", sparse=sparse_by_types(from_layer(0)))),
    "aria_text": DecoderTraits(mlp_bias="mlp_bias", qkv_bias="attention_bias", o_bias="attention_bias",
                   moe=ExpertTraits(experts="moe_num_experts", top_k="moe_topk", inter="intermediate_size",
                         shared=_n_shared("moe_num_shared_experts", "intermediate_size"), shared_bias="mlp_bias")),
    "cohere2_moe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", norm="layernorm_nobias", norms=("pre_attn",),
                     parallel=True, tie=True,
                     moe=ExpertTraits(shared=_n_shared("num_shared_experts", "intermediate_size"), inter="intermediate_size",
                           sparse=first_k_dense(k0=0))),
    # HYV4ForCausalLM: _keep_in_fp32_modules_strict = ["lm_head"], nn.Linear(..., dtype=torch.float32)
    "hy_v4": DecoderTraits(mla=True, mha=True, attn=_hy_v4_attention, layer_extra=hyper_connections.hy_v4_layer,
               streams="hc_mult", fp32_head=True, extra_head=hyper_connections.hy_v4_head,
               moe=ExpertTraits(experts="n_routed_experts", shared=_n_shared("n_shared_experts"),
                     sparse=sparse_by_types(from_layer(1)))),
    "deepseek_v32": DecoderTraits(mla=True, attn=_mla_indexed, attn_by_window=True, moe=DEEPSEEK),
    "glm_moe_dsa": DecoderTraits(mla=True, attn=_mla_indexed, attn_by_window=True, moe=DEEPSEEK),
    "mimo_v2_flash": DecoderTraits(qkv_bias="attention_bias", attn=_mimo_attention, attn_by_window=True,
                       moe=ExpertTraits(experts="n_routed_experts", sparse=sparse_by_types(from_layer(1)))),
    "laguna": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", attn=_laguna_attention,
                moe=ExpertTraits(shared=_width("shared_expert_intermediate_size"), score_bias=True,
                      sparse=sparse_by_types(from_layer(1)))),
    "minimax_m3_vl_text": DecoderTraits(qk_norm="head", attn=_minimax_m3_attention,
                            moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size",
                                  shared=_width("shared_intermediate_size"), dense_inter="dense_intermediate_size",
                                  sparse=sparse_by_types(from_layer(0)))),
    # modeling_gpt_oss.py: biases everywhere, per-head sinks, router bias, experts' biases
    "gpt_oss": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", attn_extra=lambda d: d.heads,
                 moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size", router_bias=True, expert_bias=True)),
    "flint": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", attn_extra=lambda d: d.heads,
               moe=ExpertTraits(shared=_width("shared_expert_intermediate_size"), sparse=qwen_sparse)),
    "kolibri1": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qk_norm="head",
                  moe=ExpertTraits(experts="num_local_experts", shared=_width("shared_expert_intermediate_size"))),
    # modeling_afmoe.py: attention output gate (hidden -> heads x head_dim), expert_bias, dense first layers
    "afmoe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
               qk_norm="head",
               attn_linears=lambda d: ((d.hidden, d.heads * d.hd),),
               moe=ExpertTraits(shared=_n_shared("num_shared_experts"), score_bias=True,
                     sparse=first_k_dense("num_dense_layers"))),
    # modeling_beam.py: gate_proj (hidden -> heads x head_dim) and gate_bias (heads) on attention
    "beam": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
              qk_norm="head",
              attn_linears=lambda d: ((d.hidden, d.heads * d.hd),), attn_extra=lambda d: d.heads,
              moe=ExpertTraits(sparse=sparse_by_types(from_layer(3)))),
    # MLA without experts (modeling_minicpm3.py, modeling_youtu.py)
    "minicpm3": DecoderTraits(mla=True, tie=True, mlp_bias="mlp_bias"),
    "youtu": DecoderTraits(mla=True, tie=True),
    # modeling_hunyuan_v1_*.py: q/k RMSNorm of head_dim; MoE adds a shared MLP of intermediate_size
    "hunyuan_v1_dense": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head"),
    "hunyuan_v1_moe": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head",
                        moe=ExpertTraits(top_k="moe_topk", inter="intermediate_size", shared=_width("intermediate_size"))),
    # modeling_nemotron.py: LayerNorm1P (weight + bias), squared-ReLU up/down MLP
    "nemotron": DecoderTraits(norm="layernorm", mlp="plain", qkv_bias="attention_bias", o_bias="attention_bias",
                  mlp_bias="mlp_bias"),
    "dots1": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", moe=DEEPSEEK),
    "jetmoe": DecoderTraits(tie=True, attn=_jetmoe_attention,
                     moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size", extra=lambda d: d.hidden)),
}

BUILDERS: dict[str, Builder] = {
    "dbrx": dbrx,
    "zaya": zaya,
    "inkling_text": inkling_text,
}
