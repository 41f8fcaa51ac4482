"""Vision-language models whose image patches pass a perceiver resampler: IDEFICS (gated cross-attention) and Idefics2.

IDEFICS (modeling_idefics.IdeficsForVisionText2Text): a CLIP-style vision tower, an optional perceiver resampler
(use_resampler) and a llama-style decoder into which a gated cross-attention layer over the image is inserted before
every cross_layer_interval-th layer; images stay out of the text sequence (their keys and values are cached).
Idefics2 (modeling_idefics2.Idefics2ForConditionalGeneration): a SigLIP-style tower, a connector (a gated MLP to the
text width, then a perceiver resampler of resampler_n_latents latents) and a text model of any family; one image
adds resampler_n_latents tokens to the text sequence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, lm_head_part, mlp_part, norm_part
from .assembly import Builder, TextReader, Wrapper, assemble
from .vision_language import retie, text_tower
from .vision_towers import vision_activations, vision_tower, vision_transient


def idefics_resampler(p: Reader, width: int) -> tuple[Part, int]:
    """idefics/perceiver.IdeficsPerceiverResampler over the vision width: latents, resampler_depth blocks of
    IdeficsPerceiverAttention (context and latents LayerNorms, optional q/k LayerNorms of head_dim, q/k/v/output
    without bias) and IdeficsMLP (LayerNorm, fc to 4 x width, c_proj; no bias), a final LayerNorm."""
    depth, heads, hd, latents = (p.int("resampler_depth"), p.int("resampler_n_heads"), p.int("resampler_head_dim"),
                                 p.int("resampler_n_latents"))
    inner = heads * hd
    qk = 2 * 2 * hd if p.flag("qk_layer_norms_perceiver", False) else 0
    attn = 4 * width + qk + 3 * width * inner + inner * width
    mlp = 2 * width + 2 * width * 4 * width
    return Part("Resampler", f"Perceiver resampler ({depth} blocks, {latents} latents)",
                latents * width + depth * (attn + mlp) + 2 * width,
                matmul=depth * (4 * width * inner + 8 * width * width)), latents


def idefics(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_idefics.IdeficsModel: decoupled embeddings (vocab_size + additional_vocab_size rows), the vision tower
    (vision.IdeficsVisionTransformer, CLIP's layout at embed_dim), the resampler when use_resampler, llama layers
    (IdeficsDecoderLayer: q/k/v/o without bias, gated MLP, RMSNorms) and num_hidden_layers // cross_layer_interval
    IdeficsGatedCrossAttentionLayer (q from the text, k/v from the vision width, q/k RMSNorms when qk_layer_norms,
    gated MLP, two RMSNorms, alpha gates of one value or hidden_size each by alpha_type), a final RMSNorm; the LM head
    (IdeficsDecoupledLinear) tied to the embeddings by tie_word_embeddings."""
    r = Reader(cfg, model, "idefics")
    h, n, nh, inter = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("intermediate_size")
    vocab, extra_rows = r.int("vocab_size"), r.int("additional_vocab_size", 0, minimum=0)
    ctx, hd = r.int("max_position_embeddings", 2048), h // nh
    tower, patches, vw, per_patch = vision_tower(r.sub("vision_config") or {}, r, "idefics_vision")
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", (vocab + extra_rows) * h),
             Part("RoPE", "RoPE"), tower]
    image = patches + 1
    if r.flag("use_resampler", False):
        res, image = idefics_resampler(r.child(r.sub("perceiver_config") or {}, "idefics_perciever",
                                               prefix="perceiver_config."), vw)
        embed.append(res)
    gate = h if r.str("alpha_type", "float") == "vector" else 1
    qk = 2 * hd if r.flag("qk_layer_norms", False) else 0
    interval = r.int("cross_layer_interval", 1)
    crossing = n // interval
    blocks: list[Block] = []
    for i in range(n):
        if i % interval == 0 and i // interval < crossing:
            k = len(blocks) + 1
            cross = attention_part(f"Cross_Attention_{k}", "Cross Attn", h, nh, nh, hd, rope=False, window=-1,
                                   extra=2 * (vw - h) * h + qk + 2 * gate)
            blocks.append(standard_block(k, [], cross, mlp_part(f"FFN_{k}", "SwiGLU", h, inter, True), "rmsnorm", h))
        k = len(blocks) + 1
        attn = attention_part(f"Attention_{k}", "Multi-Head Attn", h, nh, nh, hd)
        blocks.append(standard_block(k, [], attn, mlp_part(f"FFN_{k}", "SwiGLU", h, inter, True), "rmsnorm", h))
    tie = r.flag("tie_word_embeddings", False)
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab + extra_rows, h, tie),
            Part("Output", "Output", width=vocab + extra_rows)]
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=nh, kv=nh, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, image_tokens=0,
                    vision_act=vision_activations(tower, patches, per_patch, vw),
                    vision_transient=vision_transient(patches, per_patch, vw),
                    notes=(f"one image = {image:,} vision tokens held as cross-attention K/V",))


def idefics2_resampler(p: Reader, width: int) -> Part:
    """modeling_idefics2.Idefics2PerceiverResampler at the text width (configuration_idefics2.Idefics2Config forces
    the perceiver's hidden_size to it): latents, resampler_depth Idefics2PerceiverLayer (latents, context and
    post-attention RMSNorms, q of resampler_n_heads x resampler_head_dim, k/v of num_key_value_heads, o, no bias; a
    gated MLP of 4 x width without bias), a final RMSNorm."""
    depth, heads, hd, latents = (p.int("resampler_depth"), p.int("resampler_n_heads"), p.int("resampler_head_dim"),
                                 p.int("resampler_n_latents"))
    kv = p.int("num_key_value_heads")
    attn = 3 * width + width * heads * hd + 2 * width * kv * hd + heads * hd * width
    mlp = 3 * width * 4 * width
    return Part("Resampler", f"Perceiver resampler ({depth} layers, {latents} latents)",
                latents * width + depth * (attn + mlp) + width,
                matmul=depth * (2 * width * heads * hd + 2 * width * kv * hd + 12 * width * width))


def idefics2(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_idefics2.Idefics2Model: vision_model (the SigLIP layout), the connector (Idefics2Connector:
    modality_projection, a gated MLP vision width -> text intermediate_size -> text width without bias, and the
    perceiver resampler) and text_model; lm_head on the top-level model, tied by its tie_word_embeddings."""
    text = text_tower(cfg, model, "idefics2", read_text)
    r = Reader(cfg, model, "idefics2")
    text = retie(text, r.flag("tie_word_embeddings", False))
    spec = text.spec
    th = spec.hidden
    tower, patches, vh, per_patch = vision_tower(r.sub("vision_config") or {}, r, "idefics2_vision")
    p = r.child(r.sub("perceiver_config") or {}, "idefics2_perceiver", prefix="perceiver_config.")
    proj = Part("Projector", "Gated MLP projector", 2 * vh * text.intermediate + text.intermediate * th,
                matmul=(2 * vh + th) * text.intermediate)
    res = idefics2_resampler(p, th)
    latents = p.int("resampler_n_latents")
    new = dataclasses.replace(spec, embed=(*spec.embed, tower, proj, res), image_tokens=latents,
                              vision_act=vision_activations(tower, patches, per_patch, vh),
                              vision_transient=vision_transient(patches, per_patch, vh))
    return dataclasses.replace(text, model_type="idefics2", family="idefics2", spec=new,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, model))


BUILDERS: dict[str, Builder] = {"idefics": idefics}

WRAPPERS: dict[str, Wrapper] = {"idefics2": idefics2}
