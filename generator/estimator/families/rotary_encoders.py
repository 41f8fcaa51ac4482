"""Encoders with rotary positions (no position table): GTE, NomicBERT, Jina-Embeddings-v3, ESM C, UltraBERT, NeoMME.

Each is an EncoderTraits-like entry (RotaryTraits) read by one builder: word embeddings (+ token types, + a norm),
a stack of bidirectional attention layers (biases, gated or plain MLP, post- or pre-norm as the modeling file
builds them) and the class's masked-LM head, all from transformers 5.24 modeling_<type>.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..config.windows import layer_windows
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, attention_type, linear, mlp_part, norm_part
from .assembly import Builder, assemble, bind
from .encoder_heads import decoder_part, encoder_tail, transform_part
from .task_heads import head_kind, logits_of

# The MLM head: (reader, hidden, vocab, tie) -> its parts.
Head = Callable[[Reader, int, int, bool], list[Part]]


@dataclass(frozen=True)
class RotaryTraits:
    """How one rotary encoder lays out its embeddings, layers and head."""

    head: Head
    norm: str = "layernorm"  # the layers' norms (NORM_PARAMS_PER_WIDTH kind)
    norms: tuple[str, ...] = ("post_attn", "post_mlp")
    gated: bool = True
    qkv_bias: bool | str = True
    o_bias: bool | str = True
    mlp_bias: bool | str = False
    down_bias: bool = False  # only the down projection has a bias (GTE)
    token_types: bool = True
    embed_norm: str | None = "layernorm"
    final_norm: str | None = None
    gqa: bool = False  # num_key_value_heads is read
    tie: bool = True  # tie_word_embeddings when the config has none
    attn_extra: Callable[[Reader, int, int, int], int] | None = None  # (reader, hidden, heads, head_dim)
    gate: bool = False  # a sigmoid output gate hidden -> heads x head_dim (NeoMME)
    qk_norm: str | None = None  # q_norm / k_norm: on each head ("head"), over the projection ("flat"), weight-less
    # ("noscale"), as Arch.qk_norm
    layer_extra: int = 0  # parameters per layer outside attention and MLP
    embed: Callable[[Reader, int, int, int], list[Part]] | None = None  # (reader, hidden, vocab, kv width): in place
    # of the word embedding table


def _bert_head(separate_bias: bool) -> Head:
    # modeling_gte.GteLMHead (decoder bias only) / modeling_nomic_bert.NomicBertLMPredictionHead and
    # modeling_jina_embeddings_v3.JinaEmbeddingsV3LMHead (a separate `bias` tied to the decoder's)
    def head(r: Reader, h: int, vocab: int, tie: bool) -> list[Part]:
        return [transform_part(h, h), decoder_part(vocab, h, tie, separate_bias=separate_bias)]
    return head


def _esmc_head(r: Reader, h: int, vocab: int, tie: bool) -> list[Part]:
    # modeling_esmc.EsmcMaskedLMHead: dense + LayerNorm + decoder with a bias; EsmcForMaskedLM ties nothing
    return [transform_part(h, h), decoder_part(vocab, h, False, separate_bias=False)]


def _ultrabert_head(r: Reader, h: int, vocab: int, tie: bool) -> list[Part]:
    # modeling_ultrabert.UltrabertPredictionHead: linear1 (hidden -> prediction_head_size), linear2 back, no
    # biases or norm; the decoder without a bias, tied to embed_tokens
    p = r.int("prediction_head_size", 768)
    return [Part("LM_Transform", "Linear", 2 * h * p, matmul=2 * h * p),
            decoder_part(vocab, h, tie, separate_bias=False, bias=False)]


def _neomme_head(r: Reader, h: int, vocab: int, tie: bool) -> list[Part]:
    # modeling_neomme.NeoMMEForMaskedLM: hidden @ unembedding_projection.weight (-> embedding_rank), then lm_head;
    # both tied to the factorised embeddings
    rank = r.int("embedding_rank")
    return [Part("LM_Transform", "Linear", 0 if tie else rank * h, width=rank, matmul=rank * h),
            decoder_part(vocab, rank, tie, separate_bias=False, bias=False)]


def _neomme_embed(r: Reader, h: int, vocab: int, kv_width: int) -> list[Part]:
    """modeling_neomme.NeoMMEEmbeddings (vocab -> embedding_rank -> hidden, no bias), NeoMMEPatchEmbeddings
    (LayerNorm over patch_dim = 3 x patch_size^2, up_proj -> 2 x hidden, down_proj back with a bias) and
    NeoMMEModel.value_embeddings (vocab x K/V width, added to the values of the first and last global layers)."""
    rank, patch = r.int("embedding_rank"), 3 * r.int("patch_size", 32) ** 2
    return [Part("Embedding", "Embedding", vocab * rank, width=rank),
            Part("Project_In", "Linear", rank * h, matmul=rank * h),
            Part("Patch_Embedding", "Linear", 2 * patch + patch * 2 * h + linear(2 * h, h, True)),
            Part("Value_Embedding", "Embedding", vocab * kv_width, width=kv_width)]


def rotary_encoder(cfg: Mapping[str, Any], model: str, mt: str, t: RotaryTraits) -> Arch:
    r = Reader(cfg, model, mt)
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    kv = r.int("num_key_value_heads", heads) if t.gqa else heads
    hd = r.opt_int("head_dim") or r.derived("head_dim", h // heads, "hidden_size // num_attention_heads")
    inter = r.int("intermediate_size")
    ctx = r.int("max_position_embeddings", 512)
    tie = r.flag("tie_word_embeddings", t.tie)
    embed: list[Part] = [Part("Input", "Input", width=-1)]
    embed += t.embed(r, h, vocab, kv * hd) if t.embed else [Part("Embedding", "Embedding", vocab * h)]
    if t.token_types:
        types = r.int("type_vocab_size", 2, minimum=0)
        if types:
            embed.append(Part("Token_Type_Embedding", "Embedding", types * h))
    if t.embed_norm:
        embed.append(norm_part("Embedding_LayerNorm", t.embed_norm, h))
    embed.append(Part("RoPE", "RoPE"))
    windows = layer_windows(cfg, model, mt, n, r.uses)
    mlp_bias = r.flag(t.mlp_bias)
    gate = heads * hd if t.gate else 0
    extra = (t.attn_extra(r, h, heads, hd) if t.attn_extra else 0) + h * gate
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads, kv), h, heads, kv, hd, qkv_bias=r.flag(t.qkv_bias),
                              o_bias=r.flag(t.o_bias), extra=extra, window=windows[i - 1], cached=False,
                              extra_linears=((h, gate),) if gate else ())
        ffn = mlp_part(f"FFN_{i}", "GLU" if t.gated else "MLP", h, inter, t.gated, mlp_bias,
                       extra=h if t.down_bias else 0)
        b = standard_block(i, [], attn, ffn, t.norm, h, norms=t.norms, kind="encoder", stack="encoder")
        if t.layer_extra:
            b = Block(i, b.kind, (*b.parts, Part(f"Extra_{i}", "Parameters", t.layer_extra)), b.stack)
        blocks.append(b)
    head = [norm_part("Final_Norm", t.final_norm, h)] if t.final_norm else []
    head += encoder_tail(cfg, r, h, vocab, t.head(r, h, vocab, tie))
    kind = head_kind(cfg)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=kv, head_dim=hd, inter=inter, vocab=vocab,
                    ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder", windows=windows,
                    logits=logits_of(kind, vocab, cfg), position="rope", qk_norm=t.qk_norm)


PRE_NORM = ("pre_attn", "pre_mlp")

TRAITS: dict[str, RotaryTraits] = {
    # modeling_gte.py: q/k/v/o with biases, gate/up without and down_proj with a bias, post-norm LayerNorms
    "gte": RotaryTraits(head=_bert_head(False), down_bias=True),
    # modeling_nomic_bert.py: no biases anywhere in the layers
    "nomic_bert": RotaryTraits(head=_bert_head(True), qkv_bias=False, o_bias=False),
    # modeling_jina_embeddings_v3.py: biased q/k/v/o and a plain fc1/fc2 MLP with biases
    "jina_embeddings_v3": RotaryTraits(head=_bert_head(True), gated=False, mlp_bias=True),
    # modeling_esmc.py: pre-norm LayerNorms, q_norm/k_norm over hidden_size without bias, a bias-free final norm
    "esmc": RotaryTraits(head=_esmc_head, norms=PRE_NORM, qkv_bias="attention_bias", o_bias="attention_bias",
                         mlp_bias="mlp_bias", token_types=False, embed_norm=None, final_norm="layernorm_nobias",
                         gqa=True, tie=False, attn_extra=lambda r, h, heads, hd: 2 * h, qk_norm="flat"),
    # modeling_ultrabert.py: a llama layer (RMSNorm, GQA, gated MLP) without causality, sliding layers by layer_types
    "ultrabert": RotaryTraits(head=_ultrabert_head, norm="rmsnorm", norms=PRE_NORM, qkv_bias="attention_bias",
                              o_bias="attention_bias", mlp_bias="mlp_bias", token_types=False, embed_norm=None,
                              final_norm="rmsnorm", gqa=True, tie=False),
    # modeling_neomme.py: scale-free RMSNorms, GQA with parameter-free q/k norms, exclusive self-attention (alpha per
    # head), a sigmoid-gated o_proj, a plain relu2 MLP, lambdas (2) per layer
    "neomme": RotaryTraits(head=_neomme_head, norm="layernorm_noparams", norms=PRE_NORM, gated=False,
                           qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", token_types=False,
                           embed_norm="layernorm_noparams", final_norm="layernorm_noparams", gqa=True, gate=True,
                           attn_extra=lambda r, h, heads, hd: heads, layer_extra=2, embed=_neomme_embed,
                           qk_norm="noscale"),
}

BUILDERS: dict[str, Builder] = bind(TRAITS, rotary_encoder)
