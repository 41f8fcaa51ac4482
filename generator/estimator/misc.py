"""Single families with their own layouts: RWKV, xLSTM, XLM, ModernBERT (encoder and decoder)."""

from __future__ import annotations

from typing import Any, Mapping

from .arch import Arch
from .assemble import assemble, standard_block
from .spec import attention_type, lm_head_part
from .encoders import head_kind, logits_of, num_labels
from .reader import Reader
from .registry import register
from .spec import Block, Part, add_part, attention_part, linear, mlp_part, norm_part


def _ends(vocab: int, h: int, tie: bool, norm: str = "layernorm", bias: bool = False) -> tuple[list[Part], list[Part]]:
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    head = [norm_part("Final_" + ("RMSNorm" if norm == "rmsnorm" else "LayerNorm"), norm, h),
            lm_head_part(vocab, h, tie, bias), Part("Output", "Output", width=vocab)]
    return embed, head


@register("rwkv")
def rwkv(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_rwkv.py (Peng et al. 2023, arXiv:2305.13048): time-mix (key/value/receptance/output of
    attention_hidden_size, decay, first and three mix vectors) and channel-mix (key to intermediate,
    receptance, value back, two mix vectors); LayerNorms; block 0 adds pre_ln. State per sequence and
    layer: 5 x hidden (attention x, numerator, denominator, max; feed-forward x)."""
    r = Reader(cfg, model, "rwkv")
    h, n, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size")
    a = r.int("attention_hidden_size", h)
    inter = r.int("intermediate_size", 4 * h)
    blocks = []
    for i in range(1, n + 1):
        tm = Part(f"TimeMix_{i}", "RWKV Time-mix", 3 * h * a + a * h + 2 * a + 3 * h, matmul=4 * h * a,
                  linears=((h, a), (h, a), (h, a), (a, h)), act=8 * a, transient=5 * a, state=4 * h)
        cm = Part(f"ChannelMix_{i}", "RWKV Channel-mix", h * inter + h * h + inter * h + 2 * h,
                  matmul=2 * h * inter + h * h, linears=((h, inter), (h, h), (inter, h)), act=2 * inter + 2 * h,
                  transient=2 * inter, state=h)
        pre = [norm_part(f"Pre_LayerNorm_{i}", "layernorm", h)] if i == 1 else []
        blocks.append(standard_block(i, pre, tm, cm, "layernorm", h, kind="recurrent"))
    tie = r.flag("tie_word_embeddings", False)
    embed, head = _ends(vocab, h, tie)
    ctx = r.int("context_length", 1024)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=1, kv=1, head_dim=h, inter=inter, vocab=vocab, ctx=ctx,
                    tie=tie, embed=embed, blocks=blocks, head=head, position="none")


def _round_up(x: float, m: int) -> int:
    return int(((x + m - 1) // m) * m)


@register("xlstm")
def xlstm(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_xlstm.py (Beck et al. 2024, arXiv:2405.04517): mLSTM blocks. q/k of qk_dim, v and the
    output gate of v_dim (rounded up to 64), input/forget gates per head (with bias), a multi-head norm,
    out_proj; a SwiGLU of hidden x ffn_proj_factor (rounded up). State per layer: the matrix memory
    heads x d_qk x d_v plus the normaliser (heads x d_qk) and max (heads)."""
    r = Reader(cfg, model, "xlstm", {"num_hidden_layers": ("num_blocks",), "hidden_size": ("embedding_dim",)})
    h, n, vocab, heads = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size"), r.int("num_heads")
    bias = r.flag("use_bias", False)
    qk = _round_up(h * r.number("qk_dim_factor", 0.5, high=64), 64)
    v = _round_up(h * r.number("v_dim_factor", 1.0, high=64), 64)
    ffn = _round_up(h * r.number("ffn_proj_factor", 2.667, high=64), r.int("ffn_round_up_to_multiple_of", 64))
    blocks = []
    for i in range(1, n + 1):
        lin = ((h, qk), (h, qk), (h, v), (h, v), (v, h))
        params = sum(linear(a, b, bias) for a, b in lin) + 2 * linear(h, heads, True) + v
        m = Part(f"mLSTM_{i}", "mLSTM", params, matmul=sum(a * b for a, b in lin) + 2 * h * heads, linears=lin,
                 act=2 * qk + 4 * v, act32=2 * heads, transient=2 * qk + 2 * v,
                 state=heads * (qk // heads) * (v // heads) + qk + heads)
        f = mlp_part(f"FFN_{i}", "SwiGLU", h, ffn, True, bias)
        blocks.append(standard_block(i, [], m, f, "rmsnorm", h, kind="recurrent"))
    tie = False  # modeling_xlstm.py ties nothing, whatever tie_word_embeddings says
    embed, head = _ends(vocab, h, tie, "rmsnorm")
    if not r.flag("add_out_norm", True):
        head = head[1:]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=qk // heads, inter=ffn,
                    vocab=vocab, ctx=r.int("max_position_embeddings", 1 << 20), tie=tie, embed=embed, blocks=blocks,
                    head=head, position="none")


@register("xlm")
def xlm(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_xlm.py: post-norm BERT-style layers (q/k/v/out_lin, lin1/lin2 of 4 x emb_dim, biases),
    learned positions, language embeddings when n_langs > 1 and use_lang_emb, a tied prediction head
    with a bias."""
    r = Reader(cfg, model, "xlm", {"hidden_size": ("emb_dim",), "num_hidden_layers": ("n_layers",),
                                   "num_attention_heads": ("n_heads",)})
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    ctx = r.int("max_position_embeddings", 512)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Position_Embedding", "Embedding", ctx * h)]
    if r.int("n_langs", 1) > 1 and r.flag("use_lang_emb", True):
        embed.append(Part("Language_Embedding", "Embedding", r.int("n_langs") * h))
    embed.append(norm_part("Embedding_LayerNorm", "layernorm", h))
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads, heads), h, heads, heads, h // heads, qkv_bias=True,
                              o_bias=True, rope=False)
        blocks.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, 4 * h, False, True), "layernorm", h,
                                     norms=("post_attn", "post_mlp")))
    tie = r.flag("tie_word_embeddings", True)
    head = [Part("LM_Head", "Linear", vocab + (0 if tie else vocab * h), width=vocab, matmul=vocab * h),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=4 * h,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, position="learned")


def modernbert_like(cfg: Mapping[str, Any], model: str, mt: str, decoder: bool) -> Arch:
    """modeling_modernbert.py / modeling_modernbert_decoder.py: LayerNorms without bias (norm_bias), fused
    Wqkv (encoder) or q/k/v (decoder), a GeGLU Wi (hidden -> 2 x intermediate) and Wo, no attn_norm in layer 0,
    local (sliding) attention on layers other than every global_attn_every_n_layers-th; head: dense + norm,
    tied decoder with a bias (decoder_bias)."""
    r = Reader(cfg, model, mt)
    h, n, heads, vocab, inter = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                                 r.int("vocab_size"), r.int("intermediate_size"))
    ctx = r.int("max_position_embeddings", 8192)
    norm = "layernorm" if r.flag("norm_bias", False) else "layernorm_nobias"
    ab, mb = r.flag("attention_bias", False), r.flag("mlp_bias", False)
    every = r.int("global_attn_every_n_layers", 3)
    local = r.int("local_attention", 128)
    types = r.cfg.get("layer_types")
    blocks = []
    for i in range(1, n + 1):
        t = types[i - 1] if isinstance(types, list) and len(types) >= n else \
            ("full_attention" if (i - 1) % every == 0 else "sliding_attention")
        w = (local // 2 if not decoder else r.int("sliding_window", local // 2)) if "sliding" in str(t) else 0
        attn = attention_part(f"Attention_{i}", attention_type(heads, heads), h, heads, heads, h // heads,
                              qkv_bias=ab, o_bias=ab, fused_qkv=not decoder, window=w, cached=decoder)
        ffn = mlp_part(f"FFN_{i}", "GeGLU", h, inter, True, mb, fused=True)
        pre = [] if i == 1 else [norm_part(f"LayerNorm_{i}_1", norm, h)]
        blocks.append(Block(i, "attention" if decoder else "encoder",
                            (*pre, attn, add_part(f"Add_{i}_attn"), norm_part(f"LayerNorm_{i}_2", norm, h), ffn,
                             add_part(f"Add_{i}_ffn")), "decoder" if decoder else "encoder"))
    tie = r.flag("tie_word_embeddings", True)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             norm_part("Embedding_LayerNorm", norm, h)]
    cls_bias = r.flag("classifier_bias", False)
    transform = Part("LM_Transform", "Linear", linear(h, h, cls_bias) + (2 if norm == "layernorm" else 1) * h,
                     matmul=h * h)
    kind = "mlm" if decoder else head_kind(cfg)
    head: list[Part] = [norm_part("Final_LayerNorm", norm, h)]
    if kind in ("mlm", "pretrain"):
        head += [transform, Part("LM_Head", "Linear", (vocab if r.flag("decoder_bias", True) else 0)
                                 + (0 if tie else vocab * h), width=vocab, matmul=vocab * h)]
    elif kind == "seq":
        head += [transform, Part("Classifier", "Linear", linear(h, num_labels(cfg), True), width=num_labels(cfg))]
    elif kind in ("token", "qa"):
        out = 2 if kind == "qa" else num_labels(cfg)
        head += [transform, Part("Classifier", "Linear", linear(h, out, True), width=out)]
    head.append(Part("Output", "Output", width=logits_of(kind, vocab, cfg) or h))
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="decoder" if decoder else "encoder", logits=logits_of(kind, vocab, cfg), position="rope")


@register("modernbert")
def modernbert(cfg: Mapping[str, Any], model: str) -> Arch:
    return modernbert_like(cfg, model, "modernbert", False)


@register("modernbert-decoder")
def modernbert_decoder(cfg: Mapping[str, Any], model: str) -> Arch:
    return modernbert_like(cfg, model, "modernbert-decoder", True)
