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

from dataclasses import dataclass
from typing import Any, Mapping

from .arch import Arch
from .assemble import assemble, standard_block
from .spec import attention_type
from .reader import Reader
from .registry import register_table
from .spec import Block, Part, attention_part, linear, mlp_part, norm_part


@dataclass(frozen=True)
class E:
    """Traits of a BERT-like family."""

    emb_key: str | None = None  # embedding width key when it may differ from hidden_size
    positions: str = "absolute"  # "absolute", "none", "roformer" (sinusoidal table of head_dim in the encoder)
    token_types: bool = True
    embed_norm: bool = True
    pre_norm: bool = False  # norms before attention / MLP, + a final encoder norm (megatron, xlm-roberta-xl)
    lm_head: str = "bert"  # "bert" (cls.predictions), "roberta" (lm_head), "electra", "rembert", "none"
    lm_pooler: bool = False  # the LM classes keep the pooler (big_bird)
    cls_head: str = "bert"  # sequence classification: "bert" (pooler + classifier), "roberta" (dense + out_proj)
    pos_offset: int = 0
    extra: Any = None  # callable(reader, hidden) -> extra embedding parameters
    layer_extra: Any = None  # callable(reader, hidden) -> extra parameters per layer


def num_labels(cfg: Mapping[str, Any]) -> int:
    labels = cfg.get("id2label")
    if isinstance(labels, Mapping) and labels:
        return len(labels)
    n = cfg.get("num_labels")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 2


def head_kind(cfg: Mapping[str, Any]) -> str:
    """What the checkpoint's class puts on top: mlm, seq, token, qa, choice, pretrain or base."""
    archs = cfg.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    for suffix, kind in (("ForSequenceClassification", "seq"), ("ForTokenClassification", "token"),
                         ("ForQuestionAnswering", "qa"), ("ForMultipleChoice", "choice"),
                         ("ForPreTraining", "pretrain"), ("ForMaskedLM", "mlm"), ("ForCausalLM", "mlm"),
                         ("LMHeadModel", "mlm"), ("Model", "base")):
        if name.endswith(suffix):
            return kind
    return "mlm"


def _decoder(vocab: int, emb: int, tie: bool) -> int:
    """The MLM decoder: tied to the word embeddings (only the bias vector is new), or, untied, its own
    weight and bias beside the head's bias parameter."""
    return vocab if tie else vocab * emb + 2 * vocab


def _lm_head(e: E, r: Reader, h: int, emb: int, vocab: int, tie: bool) -> list[Part]:
    if e.lm_head == "electra":  # generator_predictions: dense h -> emb + LayerNorm(emb); generator_lm_head
        return [Part("LM_Transform", "Linear", linear(h, emb, True) + 2 * emb, matmul=h * emb),
                Part("LM_Head", "Linear", vocab + (0 if tie else vocab * emb), width=vocab, matmul=vocab * emb)]
    if e.lm_head == "rembert":  # cls.predictions: dense h -> output_embedding_size + LayerNorm, untied decoder
        out = r.int("output_embedding_size", h)
        return [Part("LM_Transform", "Linear", linear(h, out, True) + 2 * out, matmul=h * out),
                Part("LM_Head", "Linear", linear(out, vocab, True), width=vocab, matmul=vocab * out)]
    if e.lm_head == "plain":  # modeling_bert_generation.py: only the (tied) decoder and its bias
        return [Part("LM_Head", "Linear", _decoder(vocab, emb, tie), width=vocab, matmul=vocab * emb)]
    # bert: transform.dense + LayerNorm, decoder tied to the word embeddings, bias of vocab
    return [Part("LM_Transform", "Linear", linear(h, h, True) + 2 * h, matmul=h * h),
            Part("LM_Head", "Linear", _decoder(vocab, emb, tie), width=vocab, matmul=vocab * emb)]


def heads(e: E, r: Reader, kind: str, h: int, emb: int, vocab: int, tie: bool, cfg: Mapping[str, Any]) -> list[Part]:
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
    return [pooler]


def logits_of(kind: str, vocab: int, cfg: Mapping[str, Any]) -> int:
    return vocab if kind in ("mlm", "pretrain") else 2 if kind == "qa" else num_labels(cfg) if kind != "base" else 0


def bert_like(cfg: Mapping[str, Any], model: str, mt: str, e: E) -> Arch:
    r = Reader(cfg, model, mt)
    h, n, heads_n = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads")
    vocab, inter = r.int("vocab_size"), r.int("intermediate_size")
    ctx = r.int("max_position_embeddings", 512)
    emb = r.int(e.emb_key, h) if e.emb_key else h
    tie = r.flag("tie_word_embeddings", True)
    hd = h // heads_n
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * emb, width=emb)]
    if e.positions == "absolute":
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
    blocks = []
    norms = ("pre_attn", "pre_mlp") if e.pre_norm else ("post_attn", "post_mlp")
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads_n, heads_n), h, heads_n, heads_n, hd,
                              qkv_bias=True, o_bias=True, rope=e.positions == "roformer", cached=False)
        ffn = mlp_part(f"FFN_{i}", "MLP", h, inter, False, True)
        b = standard_block(i, [], attn, ffn, "layernorm", h, norms=norms, kind="encoder", stack="encoder")
        if e.layer_extra:
            b = Block(b.index, b.kind, (*b.parts, Part(f"Extra_{i}", "Parameters", e.layer_extra(r, h))), b.stack)
        blocks.append(b)
    head: list[Part] = [norm_part("Final_LayerNorm", "layernorm", h)] if e.pre_norm else []
    kind = head_kind(cfg)
    head += heads(e, r, kind, h, emb, vocab, tie, cfg)
    head.append(Part("Output", "Output", width=logits_of(kind, vocab, cfg) or h))
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads_n, kv=heads_n, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder",
                    logits=logits_of(kind, vocab, cfg), position="learned")


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


FAMILIES: dict[str, E] = {
    "bert": E(), "megatron-bert": E(pre_norm=True, embed_norm=False),
    "ernie": E(extra=lambda r, h: r.int("task_type_vocab_size", 3) * h if r.flag("use_task_id", False) else 0),
    "big_bird": E(lm_pooler=True), "roc_bert": E(extra=_roc_bert),
    "roberta": E(lm_head="roberta", cls_head="roberta"), "camembert": E(lm_head="roberta", cls_head="roberta"),
    "xlm-roberta": E(lm_head="roberta", cls_head="roberta"), "data2vec-text": E(lm_head="roberta", cls_head="roberta"),
    "roberta-prelayernorm": E(lm_head="roberta", cls_head="roberta", pre_norm=True),
    "xlm-roberta-xl": E(lm_head="roberta", cls_head="roberta", pre_norm=True, embed_norm=False),
    "xmod": E(lm_head="roberta", cls_head="roberta", layer_extra=_xmod_adapters),
    "bert-generation": E(token_types=False, lm_head="plain"),
    "electra": E(emb_key="embedding_size", lm_head="electra", cls_head="roberta"),
    "rembert": E(emb_key="input_embedding_size", lm_head="rembert"),
    "roformer": E(emb_key="embedding_size", positions="roformer"),
}


register_table(FAMILIES, bert_like)
