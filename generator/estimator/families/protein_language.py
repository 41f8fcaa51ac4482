"""Protein-text models: Evolla, a SaProt protein encoder and a sequence-compressor resampler whose latents a llama
decoder reads through gated cross-attention adapters (modeling_evolla.py).

The protein encoder and the resampler are nodes beside the token embedding (the report counts them outside the
language model, as a vision tower); the adapters are parts of the decoder layers they follow. Protein residues stay
out of the text sequence: the text attends to resampler_num_latents latents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Block, Part, attention_part, linear, mlp_part, norm_part
from .assembly import Builder
from .decoder import build
from .llama import LLAMA

# EvollaForProteinText2Text declares no _tied_weights_keys: its lm_head is never tied, whatever the config says.
EVOLLA = dataclasses.replace(LLAMA, never_tie=True)


def saprot(p: Reader) -> tuple[Part, int, int, int]:
    """modeling_evolla.EvollaSaProtProteinEncoder: word_embeddings (vocab_size x width), a LayerNorm when
    emb_layer_norm_before, learned positions only when position_embedding_type is "absolute" (rotary by default,
    a buffer), ESM layers (EvollaSaProtLayer: a pre-attention LayerNorm, query/key/value and the output dense with
    biases, a pre-FFN LayerNorm, intermediate and output dense with biases) and emb_layer_norm_after. Returns (part,
    residues per protein, saved and working elements per residue). SaProtConfig has no model_type of its own: its
    defaults are read here (configuration_evolla.SaProtConfig)."""
    d, n, inter = p.int("hidden_size", 1280), p.int("num_hidden_layers", 33), p.int("intermediate_size", 5120)
    ctx = p.int("max_position_embeddings", 1026)
    params = p.int("vocab_size", 446) * d + (2 * d if p.flag("emb_layer_norm_before", False) else 0)
    if p.str("position_embedding_type", "rotary") == "absolute":
        params += ctx * d
    layer = 4 * linear(d, d, True) + 2 * d + linear(d, inter, True) + linear(inter, d, True) + 2 * d
    params += n * layer + 2 * d
    part = Part("Protein_Encoder", f"SaProt protein encoder ({n} layers)", params,
                matmul=n * (4 * d * d + 2 * d * inter))
    return part, ctx, n * (8 * d + 2 * inter), 4 * d + inter


def resampler(r: Reader, width: int, hidden: int) -> tuple[Part, int]:
    """modeling_evolla.EvollaSequenceCompressorResampler: resampler_num_latents latents of the protein width,
    resampler_depth blocks of EvollaSequenceCompressorAttention (norm_media and norm_latents LayerNorms, to_q, to_kv
    and to_out of resampler_heads x resampler_dim_head without bias) and EvollaFeedForward (a LayerNorm, fc1 to
    resampler_ff_mult x width, fc2, no bias), protein_projector (width -> text, bias) and a LayerNorm of the text
    width. Returns (part, latents)."""
    depth, heads, hd = r.int("resampler_depth"), r.int("resampler_heads"), r.int("resampler_dim_head")
    latents, mult = r.int("resampler_num_latents"), r.int("resampler_ff_mult")
    inner, wide = heads * hd, mult * width
    attn = 4 * width + linear(width, inner) + linear(width, 2 * inner) + linear(inner, width)
    ff = 2 * width + linear(width, wide) + linear(wide, width)
    params = latents * width + depth * (attn + ff) + linear(width, hidden, True) + 2 * hidden
    part = Part("Protein_Resampler", f"Sequence compressor resampler ({depth} blocks, {latents} latents)", params,
                matmul=depth * (4 * width * inner + 2 * width * wide) + width * hidden)
    return part, latents


def adapter(r: Reader, k: int, h: int, heads: int) -> tuple[Part, ...]:
    """modeling_evolla.EvollaSequenceAlignerCrossAttention with protein_encoder_dim = hidden_size: attention_norm
    (RMSNorm), query and key_protein/value_protein with biases (heads x int(hidden / heads) wide), out_proj (hidden
    -> hidden, aligner_enable_bias), gate_attention and gate_ffw (one value each), and ff (EvollaFeedForward: a
    LayerNorm, fc1 to aligner_ffn_mult x hidden, GELU, fc2, no bias)."""
    hd = h // heads
    cross = attention_part(f"Adapter_Cross_Attention_{k}", "Gated Cross Attn", h, heads, heads, hd, qkv_bias=True,
                           o_bias=r.flag("aligner_enable_bias", True), o_in=h, rope=False, window=-1, extra=2)
    ffn = mlp_part(f"Adapter_FFN_{k}", "GELU MLP", h, r.int("aligner_ffn_mult") * h, False)
    return (norm_part(f"Adapter_RMSNorm_{k}", "rmsnorm", h), cross, norm_part(f"Adapter_LayerNorm_{k}", "layernorm", h),
            ffn)


def evolla(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_evolla.EvollaForProteinText2Text: the llama decoder of the top-level keys (EvollaModel:
    EvollaAttention, EvollaMLP, RMSNorms; lm_head never tied), the protein encoder and
    resampler (EvollaProteinEncoder), and an adapter after every layer i with (i + 1) a multiple of
    max(num_hidden_layers // aligner_num_add_layers, 1) (EvollaDecoderLayer)."""
    text = build(cfg, model, "evolla", EVOLLA)
    r = Reader(cfg, model, "evolla")
    spec = text.spec
    h, n = spec.hidden, len(spec.blocks)
    step = max(n // r.int("aligner_num_add_layers"), 1)
    blocks = tuple(Block(b.index, b.kind, b.parts + adapter(r, b.index, h, text.heads), b.stack) if (i + 1) % step == 0 else b
                   for i, b in enumerate(spec.blocks))
    p = r.child(r.sub("protein_encoder_config") or {}, "saprot", prefix="protein_encoder_config.")
    encoder, residues, saved, working = saprot(p)
    res, latents = resampler(r, p.int("hidden_size", 1280), h)
    new = dataclasses.replace(spec, embed=(*spec.embed, encoder, res), blocks=blocks,
                              vision_act=spec.vision_act + residues * saved,
                              vision_transient=max(spec.vision_transient, residues * working),
                              notes=(*spec.notes, f"one protein = {latents:,} resampler latents held as adapter K/V"))
    return dataclasses.replace(text, spec=new, uses=text.uses + tuple(r.uses))


BUILDERS: dict[str, Builder] = {"evolla": evolla}
