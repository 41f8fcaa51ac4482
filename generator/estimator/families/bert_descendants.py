"""BERT descendants that differ from BERT only by an embedding or a per-layer extra: each an EncoderTraits entry read
by encoders.bert_like, with the extra counted from its modeling file.
"""

from __future__ import annotations

from typing import Any

from ..config.reader import Reader
from ..graph.parts import linear
from .assembly import Builder, bind
from .encoders import EncoderTraits, bert_like
from .long_document import sliding_chunks


def _mpnet_relative(r: Reader, h: int) -> int:
    # modeling_mpnet.MPNetEncoder.relative_attention_bias: an Embedding(relative_attention_num_buckets, heads), once
    return r.int("relative_attention_num_buckets", 32) * r.int("num_attention_heads")


def _layoutlm_2d(r: Reader, h: int) -> int:
    # modeling_layoutlm.LayoutLMEmbeddings: x, y, h and w position embeddings of max_2d_position_embeddings rows
    return 4 * r.int("max_2d_position_embeddings", 1024) * h


def _tapas_types(r: Reader, h: int) -> int:
    # modeling_tapas.TapasEmbeddings: one token-type embedding per entry of type_vocab_sizes
    sizes = r.list("type_vocab_sizes", int) or [3, 256, 256, 2, 256, 256, 10]
    return sum(sizes) * h


def _head_conv(key: str):
    # modeling_yoso.YosoSelfAttention / modeling_nystromformer.NystromformerSelfAttention: a depthwise Conv2d over
    # the values, (key, 1) per head without bias, when the key is set
    def extra(r: Reader, h: int) -> int:
        k = r.opt_int(key)
        return r.int("num_attention_heads") * k if k else 0
    return extra


def _longformer_global(r: Reader, h: int) -> int:
    # modeling_longformer.LongformerSelfAttention: query_global, key_global, value_global (h -> h, biases)
    return 3 * linear(h, h, True)


ROBERTA_HEADS: dict[str, Any] = {"lm_head": "roberta", "cls_head": "roberta"}

TRAITS: dict[str, EncoderTraits] = {
    # modeling_ibert.py: RoBERTa's layout (quantisation-aware modules hold no further parameters in float mode)
    "ibert": EncoderTraits(**ROBERTA_HEADS),
    # modeling_mpnet.py: no token types, the relative-position bias once in the encoder, RoBERTa-style heads
    "mpnet": EncoderTraits(token_types=False, extra=_mpnet_relative, **ROBERTA_HEADS),
    # modeling_mra.py / modeling_yoso.py / modeling_nystromformer.py: max_position_embeddings + 2 positions
    "mra": EncoderTraits(pos_offset=2),
    "yoso": EncoderTraits(pos_offset=2, layer_extra=_head_conv("conv_window")),
    "nystromformer": EncoderTraits(pos_offset=2, layer_extra=_head_conv("conv_kernel_size")),
    # modeling_layoutlm.py: 2-D position embeddings; LayoutLMForMaskedLM keeps the pooler
    "layoutlm": EncoderTraits(extra=_layoutlm_2d, lm_pooler=True),
    "tapas": EncoderTraits(token_types=False, extra=_tapas_types),
    "longformer": EncoderTraits(layer_extra=_longformer_global, local=sliding_chunks, positions="after_pad",
                                **ROBERTA_HEADS),
}

BUILDERS: dict[str, Builder] = bind(TRAITS, bert_like)
