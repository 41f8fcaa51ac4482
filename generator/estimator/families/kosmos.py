"""KOSMOS-2 and KOSMOS-2.5: a vision encoder, an image-to-text resampler of latent queries, and a Magneto-style decoder.

KOSMOS-2 (modeling_kosmos2.Kosmos2ForConditionalGeneration): a CLIP-layout vision tower (vision_towers.clip),
Kosmos2ImageToTextProjection (dense to the text width, latent_query_num latent queries, one attention over
[image; latents]) and Kosmos2TextForCausalLM (sinusoidal positions, pre-norm layers whose self-attention carries an
inner LayerNorm and whose FFN a LayerNorm of ffn_dim). KOSMOS-2.5 (modeling_kosmos2_5.py): a Pix2Struct-style
vision encoder over flattened patches, the same projection, and a text model with a segment embedding instead of the
inner attention LayerNorm. One image adds latent_query_num tokens to the text sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, linear, lm_head_part, mlp_part, norm_part
from .assembly import Builder, assemble
from .vision_towers import TowerResult, vision_activations, vision_tower, vision_transient


def kosmos2_5_vision(v: Reader) -> TowerResult:
    """modeling_kosmos2_5.Kosmos2_5VisionModel: patch_projection (patch_embed_hidden_size -> hidden, bias), row and
    column embedders of max_num_patches rows, layers of query/key/value/output (hidden <-> heads x head_dim, no bias),
    a gated MLP (wi_0, wi_1, wo; no bias) and two weight-only norms, a final norm."""
    h, n, heads, hd, inter = (v.int("hidden_size"), v.int("num_hidden_layers"), v.int("num_attention_heads"),
                              v.int("head_dim"), v.int("intermediate_size"))
    patches = v.int("max_num_patches")
    inner = heads * hd
    params = linear(v.int("patch_embed_hidden_size"), h, True) + 2 * patches * h + n * (4 * h * inner + 3 * h * inter
                                                                                        + 2 * h) + h
    return (Part("Vision_Tower", f"Pix2Struct-style vision encoder ({n} layers)", params,
                 matmul=n * (4 * h * inner + 3 * h * inter)), patches, h, 8 * h + 3 * inter)


def kosmos(cfg: Mapping[str, Any], model: str) -> Arch:
    """The text model (embed_tokens, sinusoidal positions as a buffer, KOSMOS-2.5's segment_emb of 2 rows; per layer a
    self-attention with biased q/k/v/out_proj, on KOSMOS-2 its inner_attn_ln, self_attn_layer_norm, cross-attention
    with its LayerNorm when add_cross_attention, fc1/fc2 with biases and ffn_layernorm of ffn_dim, final_layer_norm; a
    closing layer_norm) and lm_head tied to embed_tokens: KOSMOS-2 by either tie_word_embeddings (each class ties its
    own), KOSMOS-2.5 by text_config's. Vision tower and image_to_text_projection (dense with bias, latent_query,
    x_attn with biased q/k/v/out_proj) ride in front."""
    mt = str(cfg.get("model_type"))
    v2 = mt == "kosmos-2"
    r = Reader(cfg, model, mt)
    t = r.child(r.sub("text_config") or {}, "kosmos_2_text_model" if v2 else "kosmos_2_5_text_model",
                prefix="text_config.")
    d, n, heads, ff, vocab = t.int("embed_dim"), t.int("layers"), t.int("attention_heads"), t.int("ffn_dim"), t.int("vocab_size")
    ctx, hd = t.int("max_position_embeddings"), d // heads
    vc = r.sub("vision_config") or {}
    if v2:
        tower, patches, vh, per_patch = vision_tower(vc, r, "kosmos_2_vision_model")
    else:
        tower, patches, vh, per_patch = kosmos2_5_vision(r.child(vc, "kosmos_2_5_vision_model", prefix="vision_config."))
    latents = r.int("latent_query_num")
    proj = Part("Projector", "Latent-query attention", linear(vh, d, True) + latents * d + 4 * linear(d, d, True),
                matmul=vh * d + 4 * d * d)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * d),
             Part("Sinusoidal_Positions", "Embedding", 0), tower, proj]
    if not v2:
        embed.insert(2, Part("Segment_Embedding", "Embedding", 2 * d))
    crossing = v2 and t.flag("add_cross_attention", False)
    blocks: list[Block] = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "Multi-Head Attn", d, heads, heads, hd, qkv_bias=True, o_bias=True,
                              rope=False, extra=2 * d if v2 else 0)
        cross = attention_part(f"Cross_Attention_{i}", "Cross Attn", d, heads, heads, hd, qkv_bias=True, o_bias=True,
                               rope=False, window=-1) if crossing else None
        ffn = mlp_part(f"FFN_{i}", "MLP", d, ff, False, True, extra=2 * ff)
        blocks.append(standard_block(i, [], attn, ffn, "layernorm", d, cross=cross))
    tie = t.flag("tie_word_embeddings", True)
    if v2:
        tie = r.flag("tie_word_embeddings", True) or tie
    head = [norm_part("Final_LayerNorm", "layernorm", d), lm_head_part(vocab, d, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=d, layers=n, heads=heads, kv=heads, head_dim=hd, inter=ff, vocab=vocab,
                    ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, position="learned", image_tokens=latents,
                    vision_act=vision_activations(tower, patches, per_patch, vh),
                    vision_transient=vision_transient(patches, per_patch, vh))


BUILDERS: dict[str, Builder] = {"kosmos-2": kosmos, "kosmos-2.5": kosmos}
