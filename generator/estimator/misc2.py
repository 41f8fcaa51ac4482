"""More single families: CPM-Ant, HRM-Text, XLNet, ProphetNet (decoder), Dory, ZAYA, Reformer, from their modeling files."""

from __future__ import annotations

from typing import Any, Mapping

from .arch import Arch
from .assemble import assemble, standard_block
from .spec import attention_type, lm_head_part
from .reader import Reader
from .registry import register
from .spec import Block, Part, attention_part, linear, mlp_part, moe_part, norm_part


def _attn(n: int, h: int, heads: int, hd: int, *, bias: bool = False, extra: int = 0, rope: bool = False,
          name: str = "Attention", typ: str = "") -> Part:
    return attention_part(f"{name}_{n}", typ or attention_type(heads, heads), h, heads, heads, hd, qkv_bias=bias,
                          o_bias=bias, extra=extra, rope=rope)


@register("cpmant")
def cpmant(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_cpmant.py: input embedding of vocab + prompt_types x prompt_length rows, segment embedding,
    one relative-position bias table (segments^2 + buckets) x heads, pre-norm layers (LayerNorm of weight
    only) with q/k/v/out of heads x dim_head and a gated w_0/w_1/w_out FFN; an untied head of vocab."""
    r = Reader(cfg, model, "cpmant")
    h, n, heads, hd = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("dim_head")
    ff, vocab = r.int("dim_ff"), r.int("vocab_size")
    prompts = r.int("prompt_types", 32) * r.int("prompt_length", 32)
    seg = r.int("segment_types", 32)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", (vocab + prompts) * h),
             Part("Segment_Embedding", "Embedding", seg * h),
             Part("Relative_Position_Bias", "Parameters", (seg * seg + r.int("position_bias_num_buckets", 512)) * heads)]
    blocks = [standard_block(i, [], _attn(i, h, heads, hd), mlp_part(f"FFN_{i}", "GLU", h, ff, True), "layernorm_nobias",
                             h) for i in range(1, n + 1)]
    head = [norm_part("Final_LayerNorm", "layernorm_nobias", h), lm_head_part(vocab, h, False),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=hd, inter=ff, vocab=vocab,
                    ctx=r.int("position_bias_max_distance", 2048), tie=False, embed=embed, blocks=blocks, head=head,
                    position="relative")


@register("hrm_text")
def hrm_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_hrm_text.py: two stacks (L and H modules) of num_layers_per_stack layers with gated
    attention (gate_proj hidden -> hidden) and SwiGLU, parameter-free norms, a learned z_L_init. Parameters
    are counted once; the recurrence (H_cycles x L_cycles passes) is not multiplied into compute."""
    r = Reader(cfg, model, "hrm_text")
    h, heads, hd, inter, vocab = (r.int("hidden_size"), r.int("num_attention_heads"), r.int("head_dim"),
                                  r.int("intermediate_size"), r.int("vocab_size"))
    per = r.int("num_layers_per_stack")
    kv = r.int("num_key_value_heads", heads)
    ab, mb = r.flag("attention_bias", False), r.flag("mlp_bias", False)
    blocks = []
    for i in range(1, 2 * per + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads, kv), h, heads, kv, hd, qkv_bias=ab, o_bias=ab,
                              extra=linear(h, heads * hd, ab), extra_linears=((h, heads * hd),))
        blocks.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "SwiGLU", h, inter, True, mb),
                                     "layernorm_noparams", h, norms=("post_attn", "post_mlp")))
    tie = r.flag("tie_word_embeddings", False)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("Z_L_Init", "Parameters", h)]
    head = [lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=2 * per, heads=heads, kv=kv, head_dim=hd, inter=inter, vocab=vocab,
                    ctx=r.int("max_position_embeddings", 2048), tie=tie, embed=embed, blocks=blocks, head=head)


@register("xlnet")
def xlnet(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_xlnet.py: relative attention with q/k/v/o/r (d_model x heads x d_head), three bias vectors and
    a segment embedding per layer, post-norm; FFN layer_1/layer_2 with biases; mask_emb; tied LM head + bias."""
    r = Reader(cfg, model, "xlnet", {"hidden_size": ("d_model",), "num_hidden_layers": ("n_layer",),
                                     "num_attention_heads": ("n_head",), "intermediate_size": ("d_inner",)})
    h, n, heads, inter, vocab = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                                 r.int("intermediate_size"), r.int("vocab_size"))
    hd = r.int("d_head", h // heads)
    blocks = []
    for i in range(1, n + 1):
        q = heads * hd
        attn = attention_part(f"Attention_{i}", "Relative Attn", h, heads, heads, hd, extra=h * q + 3 * q + 2 * q,
                              rope=False, extra_linears=((h, q),))
        blocks.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True), "layernorm", h,
                                     norms=("post_attn", "post_mlp")))
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Mask_Embedding", "Parameters", h)]
    tie = r.flag("tie_word_embeddings", True)
    head = [lm_head_part(vocab, h, tie, True), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=hd, inter=inter, vocab=vocab,
                    ctx=r.int("mem_len", 512) or 512, tie=tie, embed=embed, blocks=blocks, head=head,
                    position="relative")


@register("prophetnet")
def prophetnet(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_prophetnet.py: post-norm layers with biased projections; the decoder's n-gram self-attention
    adds relative_pos_embeddings (hidden -> buckets x heads); ngram embeddings; shared word embeddings and
    a tied head. ForCausalLM is the decoder alone; otherwise encoder + decoder."""
    from .encdec import is_causal_lm
    r = Reader(cfg, model, "prophetnet")
    h, vocab = r.int("hidden_size"), r.int("vocab_size")
    ctx = r.int("max_position_embeddings", 512)
    buckets = r.int("num_buckets", 32)
    causal = is_causal_lm(cfg)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    blocks = []
    if not causal:
        en, eh, ef = r.int("num_encoder_layers"), r.int("num_encoder_attention_heads"), r.int("encoder_ffn_dim")
        embed += [Part("Encoder_Positions", "Embedding", ctx * h),
                  Part("Encoder_LayerNorm", "LayerNorm", 2 * h, norm_width=h)]
        for i in range(1, en + 1):
            a = attention_part(f"Attention_{i}", "Multi-Head Attn", h, eh, eh, h // eh, qkv_bias=True, o_bias=True,
                               rope=False, cached=False)
            blocks.append(standard_block(i, [], a, mlp_part(f"FFN_{i}", "MLP", h, ef, False, True), "layernorm", h,
                                         norms=("post_attn", "post_mlp"), kind="encoder", stack="encoder"))
    dn, dh, df = r.int("num_decoder_layers"), r.int("num_decoder_attention_heads"), r.int("decoder_ffn_dim")
    embed += [Part("Position_Embedding", "Embedding", ctx * h), Part("Ngram_Embedding", "Embedding", r.int("ngram", 2) * h),
              norm_part("Embedding_LayerNorm", "layernorm", h)]
    for j in range(1, dn + 1):
        i = len(blocks) + 1
        a = attention_part(f"Attention_{i}", "N-gram Attn", h, dh, dh, h // dh, qkv_bias=True, o_bias=True, rope=False,
                           extra=linear(h, buckets * dh, True))
        c = attention_part(f"Cross_Attention_{i}", "Cross Attn", h, dh, dh, h // dh, qkv_bias=True, o_bias=True,
                           rope=False, window=-1)
        blocks.append(standard_block(i, [], a, mlp_part(f"FFN_{i}", "MLP", h, df, False, True), "layernorm", h,
                                     norms=("post_attn", "post_mlp"), cross=c))
    tie = r.flag("tie_word_embeddings", True)
    if causal and not tie:  # the decoder wrapper's own word embeddings are then a third copy
        embed.append(Part("Decoder_Embedding", "Embedding", vocab * h))
    head = [lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=dh, kv=dh, head_dim=h // dh, inter=df,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="decoder" if causal else "encoder-decoder", position="learned")


@register("dory")
def dory(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_dory.py: nGPT-style layers on the unit sphere. Parameter-free L2 norms (four per layer, q/k,
    sub-norms, final); attention q/k/v/o (attention_bias) plus a gate_proj (hidden -> heads x head_dim) and
    sqk/s_gate scales (heads x head_dim each); a SwiGLU MLP with suv_gate/suv_up scales (intermediate each);
    per-layer lambda_1/lambda_2 (hidden each); an lm_head with a logit_scale (vocab). Released configs list
    each layer as ("<attention>", "mlp") blocks: configuration_dory.__post_init__ halves layer_types and the
    layer counts, as here. Sliding layers: layer_types, or every 4th layer global. The recurrent section
    (n_recurrent_layers) runs n_recurrent_loops times; compute and activations count one pass."""
    from .decoders import T, build
    r = Reader(cfg, model, "dory")
    types = cfg.get("layer_types")
    src = dict(cfg)
    if isinstance(types, list) and "mlp" in types:
        src["layer_types"] = types[::2]
        src["num_hidden_layers"] = r.int("num_hidden_layers") // 2
    t = T(norm="layernorm_noparams", norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
          qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
          attn_linears=lambda d: ((d.hidden, d.heads * d.hd),), attn_extra=lambda d: 2 * d.heads * d.hd,
          mlp_extra=lambda d: 2 * d.inter, layer_extra=lambda d: 2 * d.hidden, extra_head=lambda d: d.vocab,
          window_rule=lambda r, n, w: [0 if (i + 1) % 4 == 0 else w for i in range(n)])
    return build(src, model, "dory", t)


@register("zaya")
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


@register("reformer")
def reformer(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_reformer.ReformerModelWithLMHead: word embeddings and axial position embeddings (one table per
    axis of axial_pos_shape, of axial_pos_embds_dim[axis] wide; or max_position_embeddings x hidden); per layer
    (attn_layers[i]) LSH attention (shared query_key and value) or local attention (query, key, value), all
    hidden -> heads x attention_head_size without bias, an output dense back, LayerNorms before attention and
    the chunked feed-forward (dense + bias, output + bias); a final LayerNorm over the two reversible streams
    (2 x hidden) and a head from 2 x hidden with its bias plus a separate bias vector."""
    r = Reader(cfg, model, "reformer")
    h, n, heads, hd = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                       r.int("attention_head_size"))
    vocab, ff, ctx = r.int("vocab_size"), r.int("feed_forward_size"), r.int("max_position_embeddings")
    kinds = r.list("attn_layers", length=n)
    if r.flag("axial_pos_embds", True):
        shape, dims = r.list("axial_pos_shape", int), r.list("axial_pos_embds_dim", int)
        positions = sum(s * d for s, d in zip(shape, dims))
    else:
        positions = ctx * h
    q = heads * hd
    blocks = []
    for i in range(1, n + 1):
        lsh = kinds[i - 1] == "lsh"
        attn = attention_part(f"Attention_{i}", "LSH Attn" if lsh else "Local Attn", h, heads, heads, hd, rope=False)
        if lsh:  # one query_key projection serves as both queries and keys
            attn = attn._replace(params=3 * h * q, matmul=3 * h * q, linears=((h, q), (h, q), (q, h)))
        ffn = mlp_part(f"FFN_{i}", "FFN", h, ff, False, True)
        blocks.append(standard_block(i, [], attn, ffn, "layernorm", h))
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Position_Embedding", "Embedding", positions)]
    head = [norm_part("Final_LayerNorm", "layernorm", 2 * h, out=2 * h), lm_head_part(vocab, 2 * h, False, True),
            Part("Head_Bias", "Parameters", vocab), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=hd, inter=ff, vocab=vocab,
                    ctx=ctx, tie=False, embed=embed, blocks=blocks, head=head, position="learned")
