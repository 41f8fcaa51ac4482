"""BERT variants that change the layer itself: ConvBERT, DeBERTa (v1), LUKE, FNet, and Flaubert (read as XLM).

Each lays out BERT's embeddings, post-norm layers and heads with what its modeling file (transformers 5.24) changes:
ConvBERT's span-based dynamic convolution beside a narrower attention, DeBERTa's disentangled attention, LUKE's
entity embeddings and entity-aware queries, FNet's parameter-free Fourier mixing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, attention_type, linear, mlp_part, norm_part
from .assembly import Builder, assemble
from .encoder_heads import bert_mlm, decoder_part, encoder_tail, transform_part
from .encoders import xlm
from .task_heads import head_kind, logits_of, num_labels


def _layer(i: int, h: int, mixer: Part, ffn: Part) -> Block:
    return standard_block(i, [], mixer, ffn, "layernorm", h, norms=("post_attn", "post_mlp"), kind="encoder",
                          stack="encoder")


def _bert_embed(r: Reader, vocab: int, width: int, ctx: int, *, positions: bool = True, norm: int = 0) -> list[Part]:
    """Word, position and token-type tables of `width` (+ a LayerNorm of `norm` when given)."""
    out = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * width, width=width)]
    if positions:
        out.append(Part("Position_Embedding", "Embedding", ctx * width, width=width))
    types = r.int("type_vocab_size", 2, minimum=0)
    if types:
        out.append(Part("Token_Type_Embedding", "Embedding", types * width, width=width))
    if norm:
        out.append(norm_part("Embedding_LayerNorm", "layernorm", norm, width))
    return out


def _finish(cfg: Mapping[str, Any], model: str, r: Reader, *, h: int, heads: int, hd: int, inter: int, vocab: int,
            ctx: int, tie: bool, embed: list[Part], blocks: list[Block], head: list[Part], position: str) -> Arch:
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=heads, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder",
                    logits=logits_of(head_kind(cfg), vocab, cfg), position=position)


def _grouped(p: Part, n_in: int, n_out: int, groups: int) -> Part:
    """modeling_convbert.GroupedLinearLayer in place of a plain MLP: each Linear is `groups` blocks of
    (in / groups) x (out / groups) plus a full bias."""
    w = groups * (n_in // groups) * (n_out // groups)
    return p._replace(type="Grouped MLP", params=2 * w + n_in + n_out, matmul=2 * w)


def convbert(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_convbert.py. ConvBertSelfAttention keeps num_attention_heads // head_ratio heads (at least 1) of
    (hidden // heads) // 2 dims: query/key/value, key_conv_attn_layer (a SeparableConv1D: depthwise hidden x
    conv_kernel_size and pointwise hidden -> all_head_size without biases, one bias of all_head_size),
    conv_kernel_layer (all_head_size -> heads x conv_kernel_size) and conv_out_layer, all biased; the output dense
    reads the concatenated hidden width. Intermediate/output are GroupedLinearLayers when num_groups > 1.
    Embeddings of embedding_size (+ embeddings_project when it differs). ConvBertGeneratorPredictions: dense
    hidden -> embedding_size + LayerNorm; generator_lm_head with a bias, tied to the word embeddings."""
    r = Reader(cfg, model, "convbert")
    h, n, vocab, inter = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size"), r.int("intermediate_size")
    emb, ctx, k = r.int("embedding_size", h), r.int("max_position_embeddings", 512), r.int("conv_kernel_size", 9)
    heads = max(r.int("num_attention_heads") // r.int("head_ratio", 2), 1)
    hd = (h // heads) // 2
    a = heads * hd
    groups = r.int("num_groups", 1)
    tie = r.flag("tie_word_embeddings", True)
    conv = h * k + h * a + a + linear(a, heads * k, True) + linear(h, a, True)
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "Conv + Multi-Head Attn", h, heads, heads, hd, qkv_bias=True,
                              o_bias=True, o_in=h, extra=conv, rope=False, cached=False,
                              extra_linears=((h, a), (h, a), (a, heads * k)))
        ffn = mlp_part(f"FFN_{i}", "MLP", h, inter, False, True)
        blocks.append(_layer(i, h, attn, _grouped(ffn, h, inter, groups) if groups > 1 else ffn))
    embed = _bert_embed(r, vocab, emb, ctx, norm=emb)
    if emb != h:
        embed.append(Part("Project_In", "Linear", linear(emb, h, True), matmul=emb * h))
    mlm = [transform_part(h, emb), decoder_part(vocab, emb, tie, separate_bias=False)]
    head = encoder_tail(cfg, r, h, vocab, mlm, cls_head="roberta")
    return _finish(cfg, model, r, h=h, heads=heads, hd=hd, inter=inter, vocab=vocab, ctx=ctx, tie=tie, embed=embed,
                   blocks=blocks, head=head, position="learned")


def _pos_types(r: Reader) -> list[str]:
    v = r.cfg.get("pos_att_type")
    if isinstance(v, str):
        return [x.strip() for x in v.lower().split("|")]
    return [str(x) for x in v] if isinstance(v, list) else []


def deberta(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_deberta.py. DebertaEmbeddings: word embeddings of embedding_size, positions when
    position_biased_input, token types when type_vocab_size > 0, embed_proj (no bias) when embedding_size differs,
    LayerNorm of hidden. DisentangledSelfAttention: in_proj hidden -> 3 x hidden without bias, q_bias and v_bias;
    head_logits_proj / head_weights_proj (heads x heads) when talking_head; with relative_attention pos_proj (no
    bias, for c2p) and pos_q_proj (for p2c), and the encoder's rel_embeddings (2 x max_relative_positions, the
    context when < 1). MLM: legacy, the BERT head into embedding_size (decoder tied, with the `bias` it is tied
    to); otherwise DebertaLMPredictionHead (dense + LayerNorm + bias, multiplied by the word embeddings).
    Sequence classification: ContextPooler (dense of pooler_hidden_size) + classifier from hidden_size."""
    r = Reader(cfg, model, "deberta")
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    inter, ctx = r.int("intermediate_size"), r.int("max_position_embeddings", 512)
    emb, tie, hd = r.int("embedding_size", h), r.flag("tie_word_embeddings", True), h // heads
    a = heads * hd
    embed = _bert_embed(r, vocab, emb, ctx, positions=r.flag("position_biased_input", True))
    if emb != h:
        embed.append(Part("Project_In", "Linear", emb * h, matmul=emb * h))
    embed.append(norm_part("Embedding_LayerNorm", "layernorm", h))
    extra = 2 * a + (2 * heads * heads if r.flag("talking_head", False) else 0)
    if r.flag("relative_attention", False):
        max_rel = r.int("max_relative_positions", -1, minimum=-1)
        embed.append(Part("Relative_Embeddings", "Embedding", 2 * (ctx if max_rel < 1 else max_rel) * h))
        types = _pos_types(r)
        extra += (h * a if "c2p" in types else 0) + (linear(h, a, True) if "p2c" in types else 0)
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "Disentangled Attn", h, heads, heads, hd, o_bias=True, extra=extra,
                              fused_qkv=True, rope=False, cached=False)
        blocks.append(_layer(i, h, attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True)))
    if r.flag("legacy", True):
        mlm = bert_mlm(h, emb, vocab, tie)
    else:
        mlm = [transform_part(h, h), Part("LM_Head", "Linear", vocab, width=vocab, matmul=vocab * h)]
    if head_kind(cfg) == "seq":
        pooled, labels = r.int("pooler_hidden_size", h), num_labels(cfg)
        head = [Part("Pooler", "Linear", linear(pooled, pooled, True), matmul=pooled * pooled),
                Part("Classifier", "Linear", linear(h, labels, True), width=labels),  # ContextPooler.output_dim: hidden
                Part("Output", "Output", width=labels)]
    else:
        head = encoder_tail(cfg, r, h, vocab, mlm)
    return _finish(cfg, model, r, h=h, heads=heads, hd=hd, inter=inter, vocab=vocab, ctx=ctx, tie=tie, embed=embed,
                   blocks=blocks, head=head, position="relative")


def luke(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_luke.py. LukeEmbeddings (BERT's) and LukeEntityEmbeddings: entity_vocab_size x entity_emb_size,
    entity_embedding_dense (no bias) when entity_emb_size differs, positions, token types, LayerNorm. LukeSelfAttention
    adds w2e_query, e2w_query and e2e_query when use_entity_aware_attention. LukeModel keeps its pooler.
    LukeForMaskedLM: LukeLMHead (dense + LayerNorm + decoder with a bias and a `bias` tied to it; the decoder
    weight is its own) and EntityPredictionHead (dense hidden -> entity_emb_size + LayerNorm, decoder tied to the
    entity embeddings, a bias)."""
    r = Reader(cfg, model, "luke")
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    inter, ctx, tie = r.int("intermediate_size"), r.int("max_position_embeddings", 512), r.flag("tie_word_embeddings", True)
    ents, ent_emb = r.int("entity_vocab_size"), r.int("entity_emb_size")
    types = r.int("type_vocab_size", 2, minimum=0)
    embed = _bert_embed(r, vocab, h, ctx, norm=h)
    embed.append(Part("Entity_Embedding", "Embedding", ents * ent_emb + (ent_emb * h if ent_emb != h else 0)
                      + (ctx + types) * h + 2 * h, width=ent_emb))  # + positions, token types, LayerNorm
    entity_queries = 3 * linear(h, h, True) if r.flag("use_entity_aware_attention", True) else 0
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads, heads), h, heads, heads, h // heads,
                              qkv_bias=True, o_bias=True, extra=entity_queries, rope=False, cached=False)
        blocks.append(_layer(i, h, attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True)))
    words = [transform_part(h, h), Part("LM_Head", "Linear", vocab * h + (1 if tie else 2) * vocab, width=vocab,
                                        matmul=vocab * h)]
    entities = [transform_part(h, ent_emb)._replace(name="Entity_Transform"),
                decoder_part(ents, ent_emb, tie, bias=False, name="Entity_Head")]
    head = encoder_tail(cfg, r, h, vocab, words + entities, pooler=True)
    return _finish(cfg, model, r, h=h, heads=heads, hd=h // heads, inter=inter, vocab=vocab, ctx=ctx, tie=tie,
                   embed=embed, blocks=blocks, head=head, position="learned")


def fnet(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_fnet.py. FNetEmbeddings: word, positions, token types, LayerNorm and a projection (hidden ->
    hidden, biased). FNetLayer: a 2-D Fourier transform over sequence and hidden (no parameters) + LayerNorm, then
    BERT's intermediate/output + LayerNorm. FNetModel keeps its pooler; the MLM head is BERT's."""
    r = Reader(cfg, model, "fnet")
    h, n, vocab, inter = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size"), r.int("intermediate_size")
    ctx, tie = r.int("max_position_embeddings", 512), r.flag("tie_word_embeddings", True)
    embed = _bert_embed(r, vocab, h, ctx, norm=h) + [Part("Project_In", "Linear", linear(h, h, True), matmul=h * h)]
    blocks = [_layer(i, h, Part(f"Fourier_{i}", "Fourier Transform", act=2 * h, transient=2 * h),
                     mlp_part(f"FFN_{i}", "MLP", h, inter, False, True)) for i in range(1, n + 1)]
    head = encoder_tail(cfg, r, h, vocab, bert_mlm(h, h, vocab, tie), pooler=True)
    return _finish(cfg, model, r, h=h, heads=1, hd=h, inter=inter, vocab=vocab, ctx=ctx, tie=tie, embed=embed,
                   blocks=blocks, head=head, position="learned")


def flaubert(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_flaubert.py: XLM's layers and prediction layer (encoders.xlm), pre-norm when pre_norm."""
    return xlm(cfg, model, "flaubert", "pre_norm")


BUILDERS: dict[str, Builder] = {"convbert": convbert, "deberta": deberta, "luke": luke, "fnet": fnet,
                                "flaubert": flaubert}
