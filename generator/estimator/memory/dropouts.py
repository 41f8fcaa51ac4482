"""The model's own dropouts in a training step: which of a model type's tensors each drops, and so keeps a mask of.

A dropout with p > 0 keeps a mask per element for its backward: bool on CUDA (at::native_dropout, the fused
kernel), the input's dtype on CPU (at::_dropout_impl multiplies by a noise tensor of the input's dtype and autograd
saves it); p = 0 returns its input (no mask). activations.mask_bytes prices the mask, activations.block_activation_bytes
and ends.embed_dropout_bytes the tensors below.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.arch import Arch
from ..graph.parts import Block


class ModelDropouts(NamedTuple):
    """One model type's dropouts, each read from a config key (a dropout whose p is 0 keeps nothing)."""

    layer_key: str
    per_layer: int  # hidden-wide dropouts per layer, on residual branches; BRANCHES: one per branch the layer has
    embed_key: str = ""
    embed: int = 0  # hidden-wide dropouts per token outside the layers (the embedding output, a stack's output)
    inter: int = 0  # MLP-wide dropouts per layer, between the activation and the down projection
    inter_key: str = ""  # the MLP-wide dropout's key, where it is not layer_key


BRANCHES = -1

# Read off transformers 5.24's modeling files: gpt2/gptj/gpt_bigcode (attn.resid_dropout + mlp.dropout, wte drop),
# gpt_neo (resid_dropout x 2, embed_dropout), opt (two nn.functional.dropout per OPTDecoderLayer), phi
# (resid_dropout on both branches, embed_dropout), starcoder2 (attention and MLP residual_dropout,
# embedding_dropout), gpt_neox (post_attention/post_mlp_dropout, emb_dropout), bloom (dropout_add after attention
# and MLP), xglm (two per layer + the embeddings'). T5 and its copies (modeling_t5.py, modeling_mt5.py,
# modeling_umt5.py, modeling_longt5.py, modeling_switch_transformers.py), all on config.dropout_rate:
# T5LayerSelfAttention, T5LayerCrossAttention and T5LayerFF each drop their branch's output; T5DenseActDense and
# T5DenseGatedActDense drop the MLP-wide tensor wo reads; each T5Stack drops its input embeddings and its final
# norm's output (four per token for an encoder and a decoder). BART and
# the encoder-decoders copied from it (modeling_bart.py, mbart, marian, pegasus, m2m_100, blenderbot,
# blenderbot_small, plbart): config.dropout on each residual branch's output and on each stack's embeddings (two per
# token), config.activation_dropout between fc1's activation and fc2. BERT and its copies (modeling_bert.py,
# roberta, xlm_roberta): hidden_dropout_prob in BertSelfOutput and BertOutput and on the embeddings; DistilBERT
# (modeling_distilbert.py): config.dropout after the FFN's lin2 and on the embeddings.
DROPOUTS: dict[str, ModelDropouts] = {
    "gpt2": ModelDropouts("resid_pdrop", 2, "embd_pdrop", 1), "gptj": ModelDropouts("resid_pdrop", 2, "embd_pdrop", 1),
    "gpt_bigcode": ModelDropouts("resid_pdrop", 2, "embd_pdrop", 1),
    "gpt_neo": ModelDropouts("resid_dropout", 2, "embed_dropout", 1), "opt": ModelDropouts("dropout", 2),
    "phi": ModelDropouts("resid_pdrop", 2, "embd_pdrop", 1),
    "starcoder2": ModelDropouts("residual_dropout", 2, "embedding_dropout", 1),
    "gpt_neox": ModelDropouts("hidden_dropout", 2, "hidden_dropout", 1), "bloom": ModelDropouts("hidden_dropout", 2),
    "xglm": ModelDropouts("dropout", 2, "dropout", 1),
    **dict.fromkeys(("t5", "mt5", "umt5", "longt5", "switch_transformers"),
                    ModelDropouts("dropout_rate", BRANCHES, "dropout_rate", 4, 1)),
    **dict.fromkeys(("bart", "mbart", "marian", "pegasus", "m2m_100", "blenderbot", "blenderbot-small", "plbart"),
                    ModelDropouts("dropout", BRANCHES, "dropout", 2, 1, "activation_dropout")),
    **dict.fromkeys(("bert", "roberta", "xlm-roberta"), ModelDropouts("hidden_dropout_prob", 2, "hidden_dropout_prob", 1)),
    "distilbert": ModelDropouts("dropout", 1, "dropout", 1),
}


def _active(a: Arch, key: str) -> bool:
    p = a.raw.get(key) if key else None
    return isinstance(p, (int, float)) and not isinstance(p, bool) and p > 0


def layer_dropouts(a: Arch, b: Block) -> tuple[int, int]:
    """(hidden-wide, MLP-wide) dropouts of one layer with p > 0, in train mode (DROPOUTS). A layer's branches are
    its parts with Linears: attention, cross-attention, MLP."""
    d = DROPOUTS.get(a.model_type)
    if d is None:
        return 0, 0
    per_layer = sum(1 for p in b.parts if p.linears) if d.per_layer == BRANCHES else d.per_layer
    return (per_layer if _active(a, d.layer_key) else 0), (d.inter if _active(a, d.inter_key or d.layer_key) else 0)


def embed_dropouts(a: Arch) -> int:
    """Hidden-wide dropouts per token outside the layers with p > 0, in train mode (DROPOUTS)."""
    d = DROPOUTS.get(a.model_type)
    return d.embed if d is not None and _active(a, d.embed_key) else 0
