"""The decoders before llama: GPT-2, GPT-Neo(X), GPT-J, OPT, BLOOM, Falcon, phi, CodeGen, CTRL, XGLM, BioGPT, MPT, CPM-Ant, XLNet, Reformer (transformers 5.24 modeling_<type>.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import (
    Block,
    Part,
    attention_part,
    attention_type,
    cross_attention_part,
    lm_head_part,
    mlp_part,
    norm_part,
)
from ..graph.stacks import alike
from .assembly import Builder, assemble, plain_attention
from .decoder import DecoderTraits, Dims, partial_rotary

GPT2_KEYS = {
    "hidden_size": ("n_embd",),
    "num_hidden_layers": ("n_layer",),
    "num_attention_heads": ("n_head",),
    "max_position_embeddings": ("n_positions", "n_ctx"),
    "intermediate_size": ("n_inner",),
}


def _gptj_rotary(d: Dims) -> int:  # modeling_gptj.py: rotary_dim of each head (None: all of it)
    return d.r.int("rotary_dim", d.hd) or d.hd


def _falcon_kv(d: Dims) -> int:
    # modeling_falcon.FalconAttention: new_decoder_architecture uses num_kv_heads; else multi_query (default
    # true) means one K/V head; else full multi-head.
    if d.f("new_decoder_architecture"):
        return d.r.int("num_kv_heads", d.heads)
    return 1 if d.f("multi_query", True) else d.heads


def _falcon_layout(d: Dims) -> tuple[tuple[str, ...], bool]:
    if d.f("new_decoder_architecture"):
        n = d.r.int("num_ln_in_parallel_attn", 2)
        return (("pre_attn", "pre_mlp") if n == 2 else ("pre_attn",)), True
    if d.f("parallel_attn", True):
        return ("pre_attn",), True
    return ("pre_attn", "pre_mlp"), False


def _neox_layout(d: Dims) -> tuple[tuple[str, ...], bool]:
    return ("pre_attn", "pre_mlp"), d.f("use_parallel_residual", True)




def _opt_norm(d: Dims) -> str:  # modeling_opt.py: layer_norm_elementwise_affine=False drops the norms' weights
    return "layernorm" if d.f("layer_norm_elementwise_affine", True) else "layernorm_noparams"


def _opt_final_norm(d: Dims) -> bool:  # OPT-350m: do_layer_norm_before=False has no final norm
    return d.f("do_layer_norm_before", True) and not d.r.cfg.get("_remove_final_layer_norm", False)


GPT2_ALIASES = {"hidden_size": ("n_embd",), "num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",),
                "max_position_embeddings": ("n_positions",), "intermediate_size": ("n_inner",)}


def _head(norm: str | None, hidden: int, vocab: int, tie: bool, bias: bool = False) -> list[Part]:
    out = [norm_part("Final_LayerNorm", norm, hidden)] if norm else []
    return out + [lm_head_part(vocab, hidden, tie, bias), Part("Output", "Output", width=vocab)]


def _embed(vocab: int, hidden: int, positions: int, pos_name: str = "Position_Embedding") -> list[Part]:
    out = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * hidden)]
    out.append(Part(pos_name, "Embedding", positions * hidden) if positions else Part("Sinusoidal", "Positions"))
    return out


def _simple(cfg: Mapping[str, Any], model: str, mt: str, *, aliases: Mapping[str, tuple[str, ...]] = GPT2_ALIASES,
            positions: int | None = None, qkv_bias: bool = True, o_bias: bool = True, mlp_bias: bool = True,
            fused: bool = False, kv: int | None = None, norms: tuple[str, ...] = ("pre_attn", "pre_mlp"),
            final_norm: bool = True, head_bias: bool = False, inter_x4: bool = True, norm: str = "layernorm",
            rope: bool = False, windows: tuple[int, ...] = (), inter: int | None = None,
            parallel: bool = False, cross: bool = False, cached_windows: bool = True, **kw: Any) -> Arch:
    """Learned/sinusoidal positions, LayerNorm, fc1/fc2 MLP: the GPT-2 block and its relatives. `cross`: the
    family's layers take a cross-attention when add_cross_attention is on (decoder.DecoderTraits.cross).
    `cached_windows` False: the layers attend to their windows, but the cache keeps every token."""
    r = Reader(cfg, model, mt, aliases)
    crossed = cross and r.on("add_cross_attention")
    h, n, heads = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads")
    vocab, ctx = r.int("vocab_size"), r.int("max_position_embeddings", kw.pop("ctx_default", None))
    inter = inter or r.int("intermediate_size", 4 * h if inter_x4 else None)
    kv_heads = kv or heads
    hd = h // heads
    tie = r.flag("tie_word_embeddings", True)
    def layer(i: int) -> Block:
        w = windows[i - 1] if windows else 0
        attn = attention_part(f"Attention_{i}", attention_type(heads, kv_heads), h, heads, kv_heads, hd,
                              qkv_bias=qkv_bias, o_bias=o_bias, fused_qkv=fused, rope=rope,
                              window=w if cached_windows else 0)
        ffn = mlp_part(f"FFN_{i}", "MLP", h, inter, False, mlp_bias)
        xattn = cross_attention_part(i, h, heads, hd, bias=qkv_bias, fused_kv=fused) if crossed else None
        if parallel:  # one norm feeds attention and MLP (GPT-J)
            parts = (norm_part(f"LayerNorm_{i}_1", norm, h), attn, ffn, Part(f"Add_{i}", "Add"))
            return Block(i, "attention", parts)
        return standard_block(i, [], attn, ffn, norm, h, norms=norms, kind="sliding" if w else "attention", cross=xattn)
    # a layer depends on its index only through its names and its window: one built per window, the others numbered
    blocks = alike(range(1, n + 1), layer, windows[:n] if len(windows) >= n else ())
    pos = ctx + kw.pop("pos_offset", 0) if positions is None else positions
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=kv_heads, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=_embed(vocab, h, pos) if not rope else
                    [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE")],
                    blocks=blocks, head=_head(norm if final_norm else None, h, vocab, tie, head_bias),
                    windows=windows, position="rope" if rope else "learned" if pos else "sinusoidal", **kw)


def gpt_bigcode(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_gpt_bigcode.py: c_attn emits q + one shared K/V head when multi_query. With add_cross_attention,
    GPTBigCodeBlock adds crossattention (q_attn, c_attn of 2 x hidden, c_proj, all biased) and ln_cross_attn;
    GPTBigCodeBlock refuses it under multi_query (NotImplementedError), so the estimator does too."""
    r = Reader(cfg, model, "gpt_bigcode", GPT2_ALIASES)
    heads = r.int("num_attention_heads")
    mqa = r.flag("multi_query", True)
    if mqa and r.on("add_cross_attention"):
        raise ConfigError(model, "add_cross_attention", True,
                          "GPTBigCodeBlock implements cross-attention only without multi_query")
    return _simple(cfg, model, "gpt_bigcode", fused=True, kv=1 if mqa else heads, cross=True)


def gpt_neo(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_gpt_neo.py: q/k/v without bias, out_proj with; "local" layers attend to window_size, masking full
    # T x T scores. transformers' cache keeps every token of them: its DynamicCache windows a layer the config's
    # layer_types or sliding_window name (cache_utils.get_layer_types_and_kwargs), and GPTNeoConfig has neither.
    aliases = {"num_hidden_layers": ("num_layers",), "num_attention_heads": ("num_heads",)}
    r = Reader(cfg, model, "gpt_neo", aliases)
    types = r.list("attention_layers")
    w = r.int("window_size", 256)
    n = r.int("num_hidden_layers")
    windows = tuple(w if types and i < len(types) and types[i] == "local" else 0 for i in range(n))
    return _simple(cfg, model, "gpt_neo", aliases=aliases, qkv_bias=False, windows=windows, cached_windows=False)


def codegen(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_codegen.py: GPT-J's parallel block, fused qkv_proj and out_proj without bias, biased head.
    return _simple(cfg, model, "codegen", qkv_bias=False, o_bias=False, fused=True, parallel=True, head_bias=True,
                   rope=True)


def openai_gpt(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_openai.py: post-norm blocks (ln after attention and after MLP), no final norm, tied head.
    return _simple(cfg, model, "openai-gpt", fused=True, norms=("post_attn", "post_mlp"), final_norm=False)


def ctrl(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_ctrl.py: sinusoidal positions, Wq/Wk/Wv/dense with bias, ffn of dff, tied head with a bias.
    return _simple(cfg, model, "ctrl", aliases={**GPT2_ALIASES, "intermediate_size": ("dff",)}, positions=0,
                   head_bias=True)


def xglm(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_xglm.py: sinusoidal positions (a buffer), pre-norm fairseq block, final layer_norm; with
    # add_cross_attention, XGLMDecoderLayer.encoder_attn (biased q/k/v/out_proj) and encoder_attn_layer_norm.
    aliases = {"hidden_size": ("d_model",), "num_hidden_layers": ("num_layers",),
               "num_attention_heads": ("attention_heads",), "intermediate_size": ("ffn_dim",)}
    return _simple(cfg, model, "xglm", aliases=aliases, positions=0, cross=True)


def biogpt(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_biogpt.py: learned positions with fairseq's offset of 2, tied output_projection.
    return _simple(cfg, model, "biogpt", aliases={}, pos_offset=2)


def mpt(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_mpt.py: ALiBi, Wqkv and out_proj without bias, up_proj of 4 x d_model, LayerNorm without bias.
    aliases = {"hidden_size": ("d_model",), "num_hidden_layers": ("n_layers",), "num_attention_heads": ("n_heads",),
               "max_position_embeddings": ("max_seq_len",)}
    r = Reader(cfg, model, "mpt", aliases)
    h = r.int("hidden_size")
    return _simple(cfg, model, "mpt", aliases=aliases, positions=0, qkv_bias=False, o_bias=False, mlp_bias=False,
                   fused=True, norm="layernorm_nobias" if r.flag("no_bias", True) else "layernorm", inter=4 * h)


def gpt_neox_japanese(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_gpt_neox_japanese.py: fused qkv and MLP without bias; only the last layer's attention
    # has a dense_bias (hidden); intermediate = hidden x intermediate_multiple_size.
    r = Reader(cfg, model, "gpt_neox_japanese")
    h = r.int("hidden_size")
    arch = _simple(cfg, model, "gpt_neox_japanese", aliases={}, positions=0, qkv_bias=False, o_bias=False,
                   mlp_bias=False, fused=True, rope=True, inter=h * r.int("intermediate_multiple_size", 4))
    spec = arch.spec
    extra = Part("Dense_Bias", "Parameters", h)
    last = spec.blocks[-1]
    blocks = (*spec.blocks[:-1], Block(last.index, last.kind, (*last.parts, extra), last.stack))
    return dataclasses.replace(arch, spec=dataclasses.replace(spec, blocks=blocks))


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
    blocks = [standard_block(i, [], plain_attention(i, h, heads, hd), mlp_part(f"FFN_{i}", "GLU", h, ff, True), "layernorm_nobias",
                             h) for i in range(1, n + 1)]
    head = [norm_part("Final_LayerNorm", "layernorm_nobias", h), lm_head_part(vocab, h, False),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=hd, inter=ff, vocab=vocab,
                    ctx=r.int("position_bias_max_distance", 2048), tie=False, embed=embed, blocks=blocks, head=head,
                    position="relative")


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
        positions = sum(s * d for s, d in zip(shape, dims, strict=False))
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


TRAITS: dict[str, DecoderTraits] = {
    "gpt2": DecoderTraits(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
              position="learned", tie=True, act_default="gelu_new", aliases=GPT2_KEYS, head_dim_key=False,
              inter_x4=True, mha=True, rotary=lambda d: d.hd, cross=True,
              defaults={"max_position_embeddings": 1024, "vocab_size": 50257, "hidden_size": 768,
                        "num_hidden_layers": 12, "num_attention_heads": 12}),
    "gpt_neox": DecoderTraits(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias="attention_bias", o_bias="attention_bias",
                  mlp_bias=True, act_default="gelu", mha=True, layout=_neox_layout,
                  rotary=partial_rotary(0.25, neox_key=True), defaults={"attention_bias": True}),
    "gptj": DecoderTraits(norm="layernorm", norms=("pre_attn",), parallel=True, mlp="plain", mlp_bias=True, head_bias=True,
              act_default="gelu_new", aliases=GPT2_KEYS, head_dim_key=False, inter_x4=True, mha=True,
              rotary=_gptj_rotary, defaults={"max_position_embeddings": 2048}),
    "opt": DecoderTraits(norm="layernorm", mlp="plain", qkv_bias="enable_bias", o_bias="enable_bias", mlp_bias="enable_bias",
             position="learned", position_offset=2, tie=True, act_default="relu",
             aliases={"intermediate_size": ("ffn_dim",)}, head_dim_key=False, mha=True,
             embed_proj_key="word_embed_proj_dim", norm_rule=_opt_norm, final_norm_rule=_opt_final_norm,
             defaults={"enable_bias": True}),
    "bloom": DecoderTraits(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
               position="alibi", embed_norm=True, tie=True, act_default="gelu", head_dim_key=False,
               inter_x4_always=True, mha=True, default_context=2048,
               aliases={"hidden_size": ("n_embed",), "num_hidden_layers": ("n_layer",),
                        "num_attention_heads": ("n_head",), "max_position_embeddings": ("seq_length",)}),
    "falcon": DecoderTraits(norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias="bias", o_bias="bias", mlp_bias="bias",
                tie=True, act_default="gelu", head_dim_key=False, inter_x4=True, kv_rule=_falcon_kv,
                layout=_falcon_layout, aliases={"num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",),
                                                "intermediate_size": ("ffn_hidden_size",)},
                defaults={"max_position_embeddings": 2048}),
    "phi": DecoderTraits(norm="layernorm", norms=("pre_attn",), parallel=True, mlp="plain", qkv_bias=True, o_bias=True,
             mlp_bias=True, qk_norm="head", qk_norm_kind="layernorm", qk_norm_key="qk_layernorm", head_bias=True,
             act_default="gelu_new", rotary=partial_rotary(0.5)),
}

BUILDERS: dict[str, Builder] = {
    "gpt_bigcode": gpt_bigcode,
    "gpt_neo": gpt_neo,
    "codegen": codegen,
    "openai-gpt": openai_gpt,
    "ctrl": ctrl,
    "xglm": xglm,
    "biogpt": biogpt,
    "mpt": mpt,
    "gpt_neox_japanese": gpt_neox_japanese,
    "cpmant": cpmant,
    "xlnet": xlnet,
    "reformer": reformer,
}
