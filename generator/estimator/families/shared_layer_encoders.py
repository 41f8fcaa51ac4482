"""Encoders that run one set of layer weights more than once: ALBERT's layer groups and Funnel's block repeats.

Every pass is a layer of the graph (its compute and activations count each time); only the first pass of a
layer holds its parameters, later passes are marked shared and hold none, so the count equals transformers'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, attention_type, linear, mlp_part, norm_part
from .assembly import Builder, assemble
from .encoder_heads import bert_mlm, decoder_part, encoder_tail
from .task_heads import head_kind, logits_of, num_labels


def shared_pass(b: Block, index: int) -> Block:
    """Block `b` run again as layer `index`: the same parts, renumbered, holding no parameters, no weights of
    their own in a matmul (autocast caches one bf16 copy of a weight however often it runs: matmul 0) while their
    compute counts again (active_matmul), and no matrices a quantised checkpoint would store twice."""
    tag = f"_{b.index}"
    parts = tuple(p._replace(name=p.name.replace(tag, f"_{index}", 1), params=0, matmul=0,
                             active_matmul=p.active_matmul_params,
                             mats=tuple((0, i, o) for _, i, o in p.weight_mats) or p.mats)
                  for p in b.parts)
    return Block(index, b.kind, parts, b.stack)


def _post_norm_layer(i: int, h: int, attn: Part, ffn: Part) -> Block:
    return standard_block(i, [], attn, ffn, "layernorm", h, norms=("post_attn", "post_mlp"), kind="encoder",
                          stack="encoder")


def albert(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_albert.py. AlbertEmbeddings: word, positions and token types of embedding_size + LayerNorm;
    AlbertTransformer.embedding_hidden_mapping_in (embedding_size -> hidden, always built); num_hidden_groups
    AlbertLayerGroups of inner_group_num AlbertLayers (q/k/v/dense with biases + LayerNorm, ffn / ffn_output +
    full_layer_layer_norm); layer i of num_hidden_layers runs group int(i / (num_hidden_layers /
    num_hidden_groups)). AlbertMLMHead: dense hidden -> embedding_size + LayerNorm, the tied decoder and its
    `bias`; the pooler only outside the MLM, token and QA classes."""
    r = Reader(cfg, model, "albert")
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    inter, emb, ctx = r.int("intermediate_size"), r.int("embedding_size"), r.int("max_position_embeddings", 512)
    groups, inner = r.int("num_hidden_groups", 1), r.int("inner_group_num", 1)
    tie = r.flag("tie_word_embeddings", True)
    hd = h // heads
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * emb, width=emb),
             Part("Position_Embedding", "Embedding", ctx * emb, width=emb),
             Part("Token_Type_Embedding", "Embedding", r.int("type_vocab_size", 2, minimum=0) * emb, width=emb),
             norm_part("Embedding_LayerNorm", "layernorm", emb, emb),
             Part("Project_In", "Linear", linear(emb, h, True), matmul=emb * h)]
    first: dict[tuple[int, int], Block] = {}
    blocks: list[Block] = []
    for i in range(n):
        group = int(i / (n / groups))
        for j in range(inner):
            index = len(blocks) + 1
            if (group, j) in first:
                blocks.append(shared_pass(first[(group, j)], index))
                continue
            attn = attention_part(f"Attention_{index}", attention_type(heads, heads), h, heads, heads, hd,
                                  qkv_bias=True, o_bias=True, rope=False, cached=False)
            b = _post_norm_layer(index, h, attn, mlp_part(f"FFN_{index}", "MLP", h, inter, False, True))
            first[(group, j)] = b
            blocks.append(b)
    kind = head_kind(cfg)
    head = encoder_tail(cfg, r, h, vocab, bert_mlm(h, emb, vocab, tie), pooler=kind == "pretrain")
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=heads, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder",
                    logits=logits_of(kind, vocab, cfg), position="learned")


def _funnel_layer(i: int, d: int, heads: int, dh: int, inner: int, stack: str = "encoder") -> Block:
    """modeling_funnel.FunnelLayer: FunnelRelMultiheadAttention (q_head without bias, k_head / v_head with,
    r_w_bias, r_r_bias, r_s_bias of heads x d_head, r_kernel d_model x heads x d_head, seg_embed 2 x heads x
    d_head, post_proj + LayerNorm) and FunnelPositionwiseFFN (linear_1 / linear_2 with biases + LayerNorm)."""
    rel = d * heads * dh + 5 * heads * dh
    attn = attention_part(f"Attention_{i}", "Relative Attn", d, heads, heads, dh, qkv_bias=False, kv_bias=True,
                          o_bias=True, extra=rel, rope=False, cached=False)
    b = _post_norm_layer(i, d, attn, mlp_part(f"FFN_{i}", "MLP", d, inner, False, True))
    return Block(b.index, b.kind, b.parts, stack)


def funnel(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_funnel.py. FunnelEmbeddings: word embeddings + LayerNorm. FunnelEncoder: one block per entry of
    block_sizes, each layer of block b run block_repeats[b] times (the sequence is pooled between blocks);
    FunnelDecoder: num_decoder_layers layers after upsampling. FunnelForMaskedLM: lm_head d_model -> vocab with a
    bias, its weight tied to the word embeddings. The classes on FunnelBaseModel (sequence classification,
    multiple choice) have no decoder and a FunnelClassificationHead (linear_hidden + linear_out).
    Activations count every layer at the full length (pooling shortens the sequence of later blocks)."""
    r = Reader(cfg, model, "funnel")
    d, heads, dh, inner = r.int("d_model"), r.int("n_head"), r.int("d_head"), r.int("d_inner")
    vocab = r.int("vocab_size")
    sizes = r.list("block_sizes", int) or [4, 4, 4]
    repeats = r.list("block_repeats", int) or [1] * len(sizes)
    if len(repeats) != len(sizes):
        raise ConfigError(model, "block_repeats", repeats, f"must have one entry per block ({len(sizes)})")
    tie = r.flag("tie_word_embeddings", True)
    kind = head_kind(cfg)
    blocks: list[Block] = []
    for size, times in zip(sizes, repeats, strict=True):
        for _ in range(size):
            layer = _funnel_layer(len(blocks) + 1, d, heads, dh, inner)
            blocks.append(layer)
            blocks += [shared_pass(layer, len(blocks) + 1) for _ in range(times - 1)]
    if kind not in ("seq", "choice"):
        for _ in range(r.int("num_decoder_layers", 2, minimum=0)):
            blocks.append(_funnel_layer(len(blocks) + 1, d, heads, dh, inner, "decoder"))
    labels = 1 if kind == "choice" else num_labels(cfg)
    if kind in ("seq", "choice"):
        head = [Part("Classifier", "Linear", linear(d, d, True) + linear(d, labels, True), matmul=d * d, width=labels),
                Part("Output", "Output", width=labels)]
    else:
        head = encoder_tail(cfg, r, d, vocab, [decoder_part(vocab, d, tie, separate_bias=False)])
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * d),
             norm_part("Embedding_LayerNorm", "layernorm", d)]
    return assemble(cfg, model, r, hidden=d, layers=len(blocks), heads=heads, kv=heads, head_dim=dh, inter=inner,
                    vocab=vocab, ctx=r.int("max_position_embeddings", 512), tie=tie, embed=embed, blocks=blocks,
                    head=head, kind="encoder", logits=logits_of(kind, vocab, cfg), position="relative")


BUILDERS: dict[str, Builder] = {"albert": albert, "funnel": funnel}
