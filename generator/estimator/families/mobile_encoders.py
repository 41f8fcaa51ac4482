"""BERTs made small for phones: SqueezeBERT's grouped 1x1 convolutions and MobileBERT's bottlenecks and FFN stacks.

Both keep BERT's embeddings and MLM head (modeling_squeezebert.py, modeling_mobilebert.py in transformers 5.24) and
change what is inside a layer; the layer is laid out part by part in forward order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, add_part, attention_part, attention_type, linear, mlp_part, norm_part
from .assembly import Builder, assemble
from .encoder_heads import bert_mlm, decoder_part, encoder_tail, transform_part
from .task_heads import head_kind, logits_of


def _conv(n_in: int, n_out: int, groups: int) -> int:
    """A biased nn.Conv1d of kernel 1 in `groups` groups: out x in / groups weights + out."""
    return n_out * (n_in // groups) + n_out


def squeezebert(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_squeezebert.py. SqueezeBertEmbeddings: word, positions and token types of embedding_size (which
    must equal hidden_size) + LayerNorm. SqueezeBertModule: query/key/value as 1x1 Conv1d of q/k/v_groups,
    post_attention (Conv1d of post_attention_groups + LayerNorm), intermediate (Conv1d of intermediate_groups) and
    output (Conv1d of output_groups + LayerNorm), all biased. SqueezeBertModel keeps its pooler; BERT's MLM head."""
    r = Reader(cfg, model, "squeezebert")
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    inter, emb, ctx = r.int("intermediate_size"), r.int("embedding_size", h), r.int("max_position_embeddings", 512)
    if emb != h:  # SqueezeBertEmbeddings asserts it (no projection exists)
        raise ConfigError(model, "embedding_size", emb, f"must equal hidden_size {h}")
    tie = r.flag("tie_word_embeddings", True)
    qg, kg, vg = r.int("q_groups", 4), r.int("k_groups", 4), r.int("v_groups", 4)
    pg, ig, og = r.int("post_attention_groups", 1), r.int("intermediate_groups", 4), r.int("output_groups", 4)
    qkvo = _conv(h, h, qg) + _conv(h, h, kg) + _conv(h, h, vg) + _conv(h, h, pg)
    ffn_w = _conv(h, inter, ig) + _conv(inter, h, og)
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads, heads), h, heads, heads, h // heads,
                              qkv_bias=True, o_bias=True, rope=False, cached=False)
        # nn.Conv1d, not nn.Linear: peft's all-linear adapts none of them (tuners_utils: Linear and Conv1D only)
        attn = attn._replace(type="Grouped-Conv Attn", params=qkvo, matmul=qkvo - 4 * h, linears=())
        ffn = mlp_part(f"FFN_{i}", "Grouped-Conv MLP", h, inter, False, True)
        ffn = ffn._replace(params=ffn_w, matmul=ffn_w - inter - h, linears=())
        blocks.append(standard_block(i, [], attn, ffn, "layernorm", h, norms=("post_attn", "post_mlp"),
                                     kind="encoder", stack="encoder"))
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * emb, width=emb),
             Part("Position_Embedding", "Embedding", ctx * emb, width=emb),
             Part("Token_Type_Embedding", "Embedding", r.int("type_vocab_size", 2, minimum=0) * emb, width=emb),
             norm_part("Embedding_LayerNorm", "layernorm", h)]
    head = encoder_tail(cfg, r, h, vocab, bert_mlm(h, h, vocab, tie), pooler=True)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder",
                    logits=logits_of(head_kind(cfg), vocab, cfg), position="learned")


def _mobile_layer(i: int, r: Reader, h: int, t: int, heads: int, inter: int) -> Block:
    """modeling_mobilebert.MobileBertLayer with true_hidden_size t (else intra_bottleneck_size under use_bottleneck):
    Bottleneck.input (hidden -> t + norm) and, with key_query_shared_bottleneck, Bottleneck.attention (the same);
    query/key from t, value from t (use_bottleneck_attention) or hidden; MobileBertSelfOutput (t -> t + norm);
    num_feedforward_networks - 1 FFNLayers (t -> intermediate -> t + norm); intermediate, output (-> t + norm)
    and, under use_bottleneck, OutputBottleneck (t -> hidden + norm). NoNorm and LayerNorm both hold weight and
    bias."""
    hd = t // heads
    a = heads * hd
    parts: list[Part] = []
    bottleneck = r.flag("use_bottleneck", True)
    shared_kq = r.flag("key_query_shared_bottleneck", True)  # built even when use_bottleneck_attention skips it
    if bottleneck:
        ins = (2 if shared_kq else 1) * (linear(h, t, True) + 2 * t)
        parts.append(Part(f"Bottleneck_In_{i}", "Linear", ins, width=t, matmul=(2 if shared_kq else 1) * h * t,
                          act=h, transient=h + t))
    v_in = t if r.flag("use_bottleneck_attention", False) else h
    attn = attention_part(f"Attention_{i}", attention_type(heads, heads), t, heads, heads, hd, qkv_bias=True,
                          o_bias=True, o_in=t, rope=False, cached=False)
    parts += [attn._replace(params=attn.params + (v_in - t) * a, matmul=attn.matmul + (v_in - t) * a),
              add_part(f"Add_{i}_attn"), norm_part(f"LayerNorm_{i}_1", "layernorm", t)]
    for j in range(1, r.int("num_feedforward_networks", 4)):
        parts += [mlp_part(f"FFN_{i}_{j}", "MLP", t, inter, False, True), add_part(f"Add_{i}_ffn{j}"),
                  norm_part(f"LayerNorm_{i}_ffn{j}", "layernorm", t)]
    parts += [mlp_part(f"FFN_{i}", "MLP", t, inter, False, True), add_part(f"Add_{i}_ffn"),
              norm_part(f"LayerNorm_{i}_2", "layernorm", t)]
    if bottleneck:
        parts += [Part(f"Bottleneck_Out_{i}", "Linear", linear(t, h, True), matmul=t * h, act=t, transient=t + h),
                  add_part(f"Add_{i}_out"), norm_part(f"LayerNorm_{i}_3", "layernorm", h)]
    return Block(i, "encoder", tuple(parts), "encoder")


def mobilebert(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_mobilebert.py. MobileBertEmbeddings: word embeddings of embedding_size, embedding_transformation
    (3 x embedding_size under trigram_input -> hidden, biased, always built), positions and token types of hidden,
    a norm. MobileBertLMPredictionHead: BERT's transform, `dense` (vocab -> hidden - embedding_size, no bias)
    whose weight extends the tied decoder's, and the decoder's bias tied to `bias`."""
    r = Reader(cfg, model, "mobilebert")
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    inter, emb, ctx = r.int("intermediate_size"), r.int("embedding_size"), r.int("max_position_embeddings", 512)
    if emb > h:  # MobileBertLMPredictionHead.dense has hidden_size - embedding_size rows
        raise ConfigError(model, "embedding_size", emb, f"must not exceed hidden_size {h}")
    # MobileBertConfig.__post_init__ derives true_hidden_size, but a saved value (to_dict writes it) overrides it
    t = r.opt_int("true_hidden_size") or (r.int("intra_bottleneck_size") if r.flag("use_bottleneck", True) else h)
    tie = r.flag("tie_word_embeddings", True)
    wide = emb * (3 if r.flag("trigram_input", True) else 1)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * emb, width=emb),
             Part("Project_In", "Linear", linear(wide, h, True), matmul=wide * h),
             Part("Position_Embedding", "Embedding", ctx * h),
             Part("Token_Type_Embedding", "Embedding", r.int("type_vocab_size", 2, minimum=0) * h),
             norm_part("Embedding_LayerNorm", "layernorm", h)]
    blocks = [_mobile_layer(i, r, h, t, heads, inter) for i in range(1, n + 1)]
    dec = decoder_part(vocab, emb, tie)
    mlm = [transform_part(h, h), dec._replace(params=dec.params + vocab * (h - emb), matmul=vocab * h)]
    head = encoder_tail(cfg, r, h, vocab, mlm)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=t // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder",
                    logits=logits_of(head_kind(cfg), vocab, cfg), position="learned")


BUILDERS: dict[str, Builder] = {"squeezebert": squeezebert, "mobilebert": mobilebert}
