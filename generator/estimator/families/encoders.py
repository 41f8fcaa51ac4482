"""Encoder-only models (BERT and its descendants) with their heads (modeling_bert.py and relatives).

A BERT layer: q/k/v/o with biases, post-attention LayerNorm, intermediate (fc1) and output (fc2)
with biases, post-MLP LayerNorm (pre-norm variants move the norms before each sub-block and add a
final one). Embeddings: word + absolute positions + token types + LayerNorm, projected when the
embedding width differs from the hidden size. The head follows `architectures` (masked LM, sequence
or token classification, QA, bare model with pooler); without one, the masked-LM head.
Memory semantics (memory.py): training at the job's tokens capped at the context; serving is a
batch of sequences at the context, with no KV cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import (
    Block,
    Part,
    add_part,
    attention_part,
    attention_type,
    cross_attention_part,
    linear,
    mlp_part,
    norm_part,
)
from ..graph.stacks import alike
from .assembly import Builder, assemble, bind
from .task_heads import head_kind, logits_of, num_labels


@dataclass(frozen=True)
class EncoderTraits:
    """Traits of a BERT-like family."""

    emb_key: str | None = None  # embedding width key when it may differ from hidden_size
    # "absolute"; "after_pad" (RoBERTa's: the ids start after padding_idx, create_position_ids_from_input_ids);
    # "none"; "roformer" (sinusoidal table of head_dim in the encoder)
    positions: str = "absolute"
    token_types: bool = True
    embed_norm: bool = True
    pre_norm: bool = False  # norms before attention / MLP, + a final encoder norm (megatron, xlm-roberta-xl)
    lm_head: str = "bert"  # "bert" (cls.predictions), "roberta" (lm_head), "electra", "rembert", "none"
    lm_pooler: bool = False  # the LM classes keep the pooler (big_bird)
    pooler: bool = True  # the bare model has a pooler (not ElectraModel, RoFormerModel, BertGenerationEncoder)
    cls_head: str = "bert"  # sequence classification: "bert" (pooler + classifier), "roberta" (dense + out_proj)
    pos_offset: int = 0
    extra: Any = None  # callable(reader, hidden) -> extra embedding parameters
    layer_extra: Any = None  # callable(reader, hidden) -> extra parameters per layer
    local: Any = None  # callable(reader, stack, layer (0-based), hidden, attention part) -> its local attention


def _decoder(vocab: int, emb: int, tie: bool) -> int:
    """The MLM decoder: tied to the word embeddings (only the bias vector is new), or, untied, its own
    weight and bias beside the head's bias parameter."""
    return vocab if tie else vocab * emb + 2 * vocab


def _lm_head(e: EncoderTraits, r: Reader, h: int, emb: int, vocab: int, tie: bool) -> list[Part]:
    if e.lm_head == "electra":  # generator_predictions: dense h -> emb + LayerNorm(emb); generator_lm_head
        return [Part("LM_Transform", "Linear", linear(h, emb, True) + 2 * emb, matmul=h * emb),
                Part("LM_Head", "Linear", vocab + (0 if tie else vocab * emb), width=vocab, matmul=vocab * emb)]
    if e.lm_head == "roformer":  # as electra's, but cls.predictions keeps its own bias beside the decoder's
        return [Part("LM_Transform", "Linear", linear(h, emb, True) + 2 * emb, matmul=h * emb),
                Part("LM_Head", "Linear", vocab + (0 if tie else vocab * emb + vocab), width=vocab, matmul=vocab * emb)]
    if e.lm_head == "rembert":  # cls.predictions: dense h -> output_embedding_size + LayerNorm, untied decoder
        out = r.int("output_embedding_size", h)
        return [Part("LM_Transform", "Linear", linear(h, out, True) + 2 * out, matmul=h * out),
                Part("LM_Head", "Linear", linear(out, vocab, True), width=vocab, matmul=vocab * out)]
    if e.lm_head == "plain":  # modeling_bert_generation.py: only the (tied) decoder and its bias
        return [Part("LM_Head", "Linear", _decoder(vocab, emb, tie), width=vocab, matmul=vocab * emb)]
    # bert: transform.dense + LayerNorm, decoder tied to the word embeddings, bias of vocab
    return [Part("LM_Transform", "Linear", linear(h, h, True) + 2 * h, matmul=h * h),
            Part("LM_Head", "Linear", _decoder(vocab, emb, tie), width=vocab, matmul=vocab * emb)]


def heads(e: EncoderTraits, r: Reader, kind: str, h: int, emb: int, vocab: int, tie: bool, cfg: Mapping[str, Any]) -> list[Part]:
    labels = num_labels(cfg)
    pooler = Part("Pooler", "Linear", linear(h, h, True), matmul=h * h)
    if kind == "mlm":
        return ([pooler] if e.lm_pooler else []) + _lm_head(e, r, h, emb, vocab, tie)
    if kind == "pretrain":
        return [pooler] + _lm_head(e, r, h, emb, vocab, tie) + [Part("NSP_Head", "Linear", linear(h, 2, True))]
    if kind == "seq":
        if e.cls_head == "roberta":  # dense + out_proj on the first token
            return [Part("Classifier", "Linear", linear(h, h, True) + linear(h, labels, True), matmul=h * h,
                         width=labels)]
        return [pooler, Part("Classifier", "Linear", linear(h, labels, True), width=labels)]
    if kind == "token":
        return [Part("Classifier", "Linear", linear(h, labels, True), width=labels)]
    if kind == "qa":
        return [Part("QA_Head", "Linear", linear(h, 2, True), width=2)]
    if kind == "choice":
        return [pooler, Part("Classifier", "Linear", linear(h, 1, True), width=1)]
    return [pooler] if e.pooler else []


def bert_like(cfg: Mapping[str, Any], model: str, mt: str, e: EncoderTraits) -> Arch:
    r = Reader(cfg, model, mt)
    h, n, heads_n = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads")
    vocab, inter = r.int("vocab_size"), r.int("intermediate_size")
    ctx = r.int("max_position_embeddings", 512)
    # a sequence's positions: all the table's, or those after padding_idx (XLM-R: 514 - 1 - 1 = 512)
    usable = ctx - (r.int("pad_token_id", 1, minimum=0) + 1 if e.positions == "after_pad" else 0)
    if usable < 1:
        raise ConfigError(model, "pad_token_id", r.cfg.get("pad_token_id"), f"leaves no position of {ctx}")
    emb = r.int(e.emb_key, h) if e.emb_key else h
    tie = r.flag("tie_word_embeddings", True)
    hd = h // heads_n
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * emb, width=emb)]
    if e.positions in ("absolute", "after_pad"):
        embed.append(Part("Position_Embedding", "Embedding", (ctx + e.pos_offset) * emb, width=emb))
    if e.token_types:
        types = r.int("type_vocab_size", 2, minimum=0)
        if types:
            embed.append(Part("Token_Type_Embedding", "Embedding", types * emb, width=emb))
    if e.extra:
        embed.append(Part("Embedding_Extra", "Parameters", e.extra(r, h)))
    if e.embed_norm:
        embed.append(norm_part("Embedding_LayerNorm", "layernorm", emb, emb))
    if emb != h:
        embed.append(Part("Project_In", "Linear", linear(emb, h, True), matmul=emb * h))
    if e.positions == "roformer":
        embed.append(Part("Sinusoidal_Positions", "Embedding", ctx * hd))
    norms = ("pre_attn", "pre_mlp") if e.pre_norm else ("post_attn", "post_mlp")
    # add_cross_attention (a decoder, e.g. EncoderDecoderModel's): BertLayer.crossattention, q/k/v/o + its LayerNorm
    dec = r.flag("add_cross_attention", False)

    def layer(i: int) -> Block:
        attn = attention_part(f"Attention_{i}", attention_type(heads_n, heads_n), h, heads_n, heads_n, hd,
                              qkv_bias=True, o_bias=True, rope=e.positions == "roformer", cached=dec)
        attn = e.local(r, "decoder" if dec else "encoder", i - 1, h, attn) if e.local else attn
        cross = cross_attention_part(i, h, heads_n, hd, bias=True) if dec else None
        ffn = mlp_part(f"FFN_{i}", "MLP", h, inter, False, True)
        b = standard_block(i, [], attn, ffn, "layernorm", h, norms=norms, kind="attention" if dec else "encoder",
                           stack="decoder" if dec else "encoder", cross=cross)
        if e.layer_extra:
            b = Block(b.index, b.kind, (*b.parts, Part(f"Extra_{i}", "Parameters", e.layer_extra(r, h))), b.stack)
        return b
    # every layer alike: built once, numbered (graph/stacks.py); a local attention may differ by layer
    blocks = [layer(i) for i in range(1, n + 1)] if e.local else alike(range(1, n + 1), layer)
    head: list[Part] = [norm_part("Final_LayerNorm", "layernorm", h)] if e.pre_norm else []
    kind = head_kind(cfg)
    head += heads(e, r, kind, h, emb, vocab, tie, cfg)
    head.append(Part("Output", "Output", width=logits_of(kind, vocab, cfg) or h))
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads_n, kv=heads_n, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=usable, tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="decoder" if dec else "encoder", logits=logits_of(kind, vocab, cfg), position="learned")


def _roc_bert(r: Reader, h: int) -> int:
    # modeling_roc_bert.py: pronunciation and shape embeddings concatenated and mapped back to hidden.
    out, width = 0, h
    if r.flag("enable_pronunciation", True):
        d = r.int("pronunciation_embed_dim", 768)
        out += r.int("pronunciation_vocab_size", 910) * d
        width += d
    if r.flag("enable_shape", True):
        d = r.int("shape_embed_dim", 512)
        out += r.int("shape_vocab_size", 24858) * d
        width += d
    if r.flag("concat_input", True):
        out += linear(width, h, True)
    return out


def _xmod_adapters(r: Reader, h: int) -> int:
    # modeling_xmod.py: one bottleneck adapter (h -> h / reduction -> h, biases) per language per layer.
    langs = r.list("languages") or ["en_XX"]
    b = h // r.int("adapter_reduction_factor", 2)
    per = linear(h, b, True) + linear(b, h, True)
    return len(langs) * per + (2 * h if r.flag("adapter_layer_norm", False) else 0)


ROBERTA: dict[str, Any] = {"lm_head": "roberta", "cls_head": "roberta", "positions": "after_pad"}
FAMILIES: dict[str, EncoderTraits] = {
    "bert": EncoderTraits(), "megatron-bert": EncoderTraits(pre_norm=True, embed_norm=False),
    "ernie": EncoderTraits(extra=lambda r, h: r.int("task_type_vocab_size", 3) * h if r.flag("use_task_id", False) else 0),
    "roc_bert": EncoderTraits(extra=_roc_bert),
    **{t: EncoderTraits(**ROBERTA) for t in ("roberta", "camembert", "xlm-roberta", "data2vec-text")},
    "roberta-prelayernorm": EncoderTraits(**ROBERTA, pre_norm=True),
    "xlm-roberta-xl": EncoderTraits(**ROBERTA, pre_norm=True, embed_norm=False),
    "xmod": EncoderTraits(**ROBERTA, layer_extra=_xmod_adapters),
    "bert-generation": EncoderTraits(token_types=False, lm_head="plain", pooler=False),
    "electra": EncoderTraits(emb_key="embedding_size", lm_head="electra", cls_head="roberta", pooler=False),
    "rembert": EncoderTraits(emb_key="input_embedding_size", lm_head="rembert"),
    # modeling_roformer.py: cls.predictions.transform maps hidden_size -> embedding_size (+ LayerNorm)
    "roformer": EncoderTraits(emb_key="embedding_size", positions="roformer", lm_head="roformer", pooler=False),
}


def _encoder_blocks(n: int, h: int, heads: int, inter: int, extra: int = 0) -> list:
    def layer(i: int) -> Block:
        attn = attention_part(f"Attention_{i}", "Multi-Head Attn", h, heads, heads, h // heads, qkv_bias=True, o_bias=True,
                              rope=False, cached=False, extra=extra)
        return standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True), "layernorm", h,
                              norms=("post_attn", "post_mlp"), kind="encoder", stack="encoder")
    return alike(range(1, n + 1), layer)


def _tail(kind: str, cfg: Mapping[str, Any], h: int, vocab: int, tie: bool, transform: int,
          seq: list[Part], biases: int = 2) -> list[Part]:  # biases of an untied decoder (its own + `bias`)
    labels = num_labels(cfg)
    if kind in ("mlm", "pretrain"):
        head = [Part("LM_Transform", "Linear", transform, matmul=h * h),
                Part("LM_Head", "Linear", vocab if tie else vocab * h + biases * vocab, width=vocab, matmul=vocab * h)]
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
    head = _tail(kind, cfg, h, vocab, tie, linear(h, h, True) + 2 * h, seq, 1)  # vocab_projector: one bias
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=_encoder_blocks(n, h, heads, inter), head=head,
                    kind="encoder", logits=logits_of(kind, vocab, cfg), position="learned")


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


def xlm(cfg: Mapping[str, Any], model: str, mt: str = "xlm", pre_norm: str | None = None) -> Arch:
    """modeling_xlm.py: post-norm BERT-style layers (q/k/v/out_lin, lin1/lin2 of 4 x emb_dim, biases),
    learned positions, language embeddings when n_langs > 1 and use_lang_emb, a tied prediction head
    with a bias; Flaubert's (modeling_flaubert.py) moves the norms before each sub-block when pre_norm."""
    r = Reader(cfg, model, mt, {"hidden_size": ("emb_dim",), "num_hidden_layers": ("n_layers",),
                                   "num_attention_heads": ("n_heads",)})
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    ctx = r.int("max_position_embeddings", 512)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Position_Embedding", "Embedding", ctx * h)]
    if r.int("n_langs", 1) > 1 and r.flag("use_lang_emb", True):
        embed.append(Part("Language_Embedding", "Embedding", r.int("n_langs") * h))
    embed.append(norm_part("Embedding_LayerNorm", "layernorm", h))
    def layer(i: int) -> Block:
        attn = attention_part(f"Attention_{i}", attention_type(heads, heads), h, heads, heads, h // heads, qkv_bias=True,
                              o_bias=True, rope=False)
        return standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, 4 * h, False, True), "layernorm", h,
                              norms=("pre_attn", "pre_mlp") if r.flag(pre_norm) else ("post_attn", "post_mlp"))
    blocks = alike(range(1, n + 1), layer)
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


def modernbert(cfg: Mapping[str, Any], model: str) -> Arch:
    return modernbert_like(cfg, model, "modernbert", False)


def modernbert_decoder(cfg: Mapping[str, Any], model: str) -> Arch:
    return modernbert_like(cfg, model, "modernbert-decoder", True)

BUILDERS: dict[str, Builder] = {
    **bind(FAMILIES, bert_like),
    "distilbert": distilbert,
    "deberta-v2": deberta_v2,
    "xlm": xlm,
    "modernbert": modernbert,
    "modernbert-decoder": modernbert_decoder,
}
