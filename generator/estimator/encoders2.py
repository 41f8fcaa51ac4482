"""DistilBERT (modeling_distilbert.py) and DeBERTa-v2/v3 (modeling_deberta_v2.py) with their heads."""

from __future__ import annotations

from typing import Any, Mapping

from .arch import Arch
from .assemble import assemble, standard_block
from .encoders import head_kind, logits_of, num_labels
from .reader import Reader
from .registry import register
from .spec import Part, attention_part, linear, mlp_part, norm_part


def _encoder_blocks(n: int, h: int, heads: int, inter: int, extra: int = 0) -> list:
    out = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "Multi-Head Attn", h, heads, heads, h // heads, qkv_bias=True, o_bias=True,
                              rope=False, cached=False, extra=extra)
        out.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True), "layernorm", h,
                                  norms=("post_attn", "post_mlp"), kind="encoder", stack="encoder"))
    return out


def _tail(kind: str, cfg: Mapping[str, Any], h: int, vocab: int, tie: bool, transform: int,
          seq: list[Part]) -> list[Part]:
    labels = num_labels(cfg)
    if kind in ("mlm", "pretrain"):
        head = [Part("LM_Transform", "Linear", transform, matmul=h * h),
                Part("LM_Head", "Linear", vocab if tie else vocab * h + 2 * vocab, width=vocab, matmul=vocab * h)]
    elif kind == "seq":
        head = seq
    elif kind in ("token", "qa"):
        out = 2 if kind == "qa" else labels
        head = [Part("Classifier", "Linear", linear(h, out, True), width=out)]
    elif kind == "choice":
        head = seq[:-1] + [Part("Classifier", "Linear", linear(seq[-1].width or h, 1, True), width=1)]
    else:
        head = []
    return head + [Part("Output", "Output", width=logits_of(kind, vocab, cfg) or h)]


@register("distilbert")
def distilbert(cfg: Mapping[str, Any], model: str) -> Arch:
    """Embeddings (word + positions, sinusoidal or learned, both nn.Embedding) + LayerNorm; post-norm
    layers with biased q/k/v/out_lin and lin1/lin2; MLM head: vocab_transform, vocab_layer_norm and the
    tied vocab_projector with its bias; classification: pre_classifier + classifier."""
    r = Reader(cfg, model, "distilbert", {"hidden_size": ("dim",), "num_hidden_layers": ("n_layers",),
                                          "num_attention_heads": ("n_heads",), "intermediate_size": ("hidden_dim",)})
    h, n, heads, inter, vocab = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                                 r.int("intermediate_size"), r.int("vocab_size"))
    ctx = r.int("max_position_embeddings", 512)
    tie = r.flag("tie_word_embeddings", True)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Position_Embedding", "Embedding", ctx * h), norm_part("Embedding_LayerNorm", "layernorm", h)]
    labels = num_labels(cfg)
    kind = head_kind(cfg)
    seq = [Part("Pre_Classifier", "Linear", linear(h, h, True), matmul=h * h),
           Part("Classifier", "Linear", linear(h, labels, True), width=labels)]
    head = _tail(kind, cfg, h, vocab, tie, linear(h, h, True) + 2 * h, seq)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=_encoder_blocks(n, h, heads, inter), head=head,
                    kind="encoder", logits=logits_of(kind, vocab, cfg), position="learned")


@register("deberta-v2")
def deberta_v2(cfg: Mapping[str, Any], model: str) -> Arch:
    """Embeddings (word of embedding_size, positions when position_biased_input, token types when
    type_vocab_size > 0, embed_proj to hidden without bias, LayerNorm); BERT-style post-norm layers;
    with relative_attention the encoder holds rel_embeddings (2 x position_buckets, else 2 x
    max_relative_positions, rows of hidden) and a LayerNorm when norm_rel_ebd says layer_norm;
    pos_key_proj / pos_query_proj per layer when share_att_key is false; an optional ConvLayer."""
    r = Reader(cfg, model, "deberta-v2")
    h, n, heads, inter, vocab = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                                 r.int("intermediate_size"), r.int("vocab_size"))
    ctx = r.int("max_position_embeddings", 512)
    emb = r.int("embedding_size", h)
    tie = r.flag("tie_word_embeddings", True)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * emb, width=emb)]
    if r.flag("position_biased_input", True):
        embed.append(Part("Position_Embedding", "Embedding", ctx * emb, width=emb))
    types = r.int("type_vocab_size", 0, minimum=0)
    if types:
        embed.append(Part("Token_Type_Embedding", "Embedding", types * emb, width=emb))
    if emb != h:
        embed.append(Part("Project_In", "Linear", emb * h, matmul=emb * h))
    embed.append(norm_part("Embedding_LayerNorm", "layernorm", h))
    extra = 0
    if r.flag("relative_attention", False):
        max_rel = r.int("max_relative_positions", -1, minimum=-1)
        max_rel = ctx if max_rel < 1 else max_rel
        buckets = r.int("position_buckets", -1, minimum=-1)
        rows = 2 * buckets if buckets > 0 else 2 * max_rel
        norm_rel = str(r.cfg.get("norm_rel_ebd") or "none").lower()
        embed.append(Part("Relative_Embeddings", "Embedding", rows * h + (2 * h if "layer_norm" in norm_rel else 0)))
        pos_types = r.cfg.get("pos_att_type") or []
        if isinstance(pos_types, str):
            pos_types = pos_types.lower().split("|")
        if not r.flag("share_att_key", False):
            extra = sum(linear(h, h, True) for t in ("c2p", "p2c") if t in pos_types)
    k = r.int("conv_kernel_size", 0, minimum=0)
    if k:
        groups = r.int("conv_groups", 1)
        embed.append(Part("Conv_Layer", "Conv1d", h * (h // groups) * k + h + 2 * h))
    kind = head_kind(cfg)
    pooled = r.int("pooler_hidden_size", h)
    labels = num_labels(cfg)
    seq = [Part("Pooler", "Linear", linear(pooled, pooled, True), matmul=pooled * pooled),
           Part("Classifier", "Linear", linear(pooled, labels, True), width=labels)]
    # the MLM transform maps hidden -> embedding_size (the tied decoder's width)
    head = _tail(kind, cfg, h, vocab, tie, linear(h, emb, True) + 2 * emb, seq)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=_encoder_blocks(n, h, heads, inter, extra),
                    head=head, kind="encoder", logits=logits_of(kind, vocab, cfg), position="relative")
