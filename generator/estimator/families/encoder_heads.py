"""The heads that BERT-style encoders outside encoders.py put on top: the MLM transform and decoder, and the tail.

Most masked-LM heads are the one of modeling_bert.BertLMPredictionHead: a transform (dense + activation + LayerNorm)
into the decoder's width, then a decoder Linear whose weight is tied to the word embeddings. Some keep a separate
`bias` Parameter tied to the decoder's bias (BERT, ALBERT, SqueezeBERT, FNet, NomicBERT...), some only the decoder's
own bias (ConvBERT, GTE, ESMC, Funnel). With tie_word_embeddings false transformers 5.24 ties nothing, so the
decoder keeps its own weight and bias beside the separate `bias`. Classification heads follow encoders.heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.reader import Reader
from ..graph.parts import Part, linear
from .encoders import EncoderTraits, heads
from .task_heads import head_kind, logits_of


def decoder_part(vocab: int, width: int, tie: bool, *, separate_bias: bool = True, bias: bool = True,
                 name: str = "LM_Head") -> Part:
    """The MLM decoder: width -> vocab. Tied, only one bias vector remains (the decoder's, or the separate
    `bias` it is tied to); untied, the weight, the decoder's bias and the separate `bias` Parameter."""
    biases = (1 if bias else 0) + (1 if separate_bias else 0)
    params = (min(biases, 1) * vocab) if tie else vocab * width + biases * vocab
    return Part(name, "Linear", params, width=vocab, matmul=vocab * width)


def transform_part(h: int, width: int, *, norm: int = 2, bias: bool = True) -> Part:
    """The MLM transform: dense hidden -> width (+ bias), activation, a norm of `norm` parameters per width."""
    return Part("LM_Transform", "Linear", linear(h, width, bias) + norm * width, matmul=h * width)


def bert_mlm(h: int, width: int, vocab: int, tie: bool, *, separate_bias: bool = True) -> list[Part]:
    """modeling_bert.BertLMPredictionHead and its copies: the transform into `width`, the decoder."""
    return [transform_part(h, width), decoder_part(vocab, width, tie, separate_bias=separate_bias)]


def encoder_tail(cfg: Mapping[str, Any], r: Reader, h: int, vocab: int, mlm: list[Part], *, pooler: bool = False,
                 cls_head: str = "bert") -> list[Part]:
    """What follows the encoder, by the class `architectures` names: the masked-LM parts (after the pooler when
    the LM class keeps one), or the classification heads of encoders.heads; then the output node."""
    kind = head_kind(cfg)
    if kind in ("mlm", "pretrain"):
        out = ([Part("Pooler", "Linear", linear(h, h, True), matmul=h * h)] if pooler or kind == "pretrain" else [])
        out += mlm + ([Part("NSP_Head", "Linear", linear(h, 2, True))] if kind == "pretrain" else [])
    else:
        out = heads(EncoderTraits(cls_head=cls_head), r, kind, h, h, vocab, True, cfg)
    return out + [Part("Output", "Output", width=logits_of(kind, vocab, cfg) or h)]
