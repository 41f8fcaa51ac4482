"""Document-conversion and OCR vision-language models: Granite-Docling and Unlimited-OCR.

Granite-Docling (modeling_granite_docling.GraniteDoclingForConditionalGeneration): an Idefics3-style SigLIP tower
whose connector runs a coarse (and, with use_fine_route, a fine) pixel-shuffle path with DeepStack mergers, an
optional density router, and a Granite text model. Unlimited-OCR (modeling_unlimited_ocr.py, after DeepSeek-OCR 2):
a SAM encoder with two downsampling convs feeding a CLIP encoder without patch embedding, a Linear projector over
both features, and a DeepSeek-style MoE text model (mixture_of_experts' unlimited_ocr_text). Both LM heads follow the
top-level tie_word_embeddings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .vision_language import retie, text_tower
from .vision_towers import clip_encoder, sam, vision_activations, vision_tower, vision_transient


def _path(v: Reader, h: int, out: int, scale: int, mergers: int) -> int:
    """modeling_granite_docling.GraniteDoclingConnectorPath: projection (hidden x scale^2 -> out_hidden_size, no bias;
    the 2-D position table is a buffer) and one GraniteDoclingDeepStackMerger per deepstack index (LayerNorm of the
    shuffled width, linear_1 to out, linear_2 out -> out, biased)."""
    wide = h * scale * scale
    return wide * out + mergers * (2 * wide + linear(wide, out, True) + linear(out, out, True))


def granite_docling(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """GraniteDoclingModel: vision_model (SigLIP layout, post_layernorm, then GraniteDoclingConnector: ln_in, the
    coarse path at scale_factor, the fine path at scale_factor // 2 when use_fine_route, ln_mid, mlp_fc2 without
    bias, ln_out), the density router when density_router_hidden_size (att Linear to 1, LayerNorm, fc1, fc2 to 1,
    biased) and text_model; the image adds (image_size / patch_size / scale_factor)^2 tokens per tile."""
    text = text_tower(cfg, model, "granite_docling", read_text)
    r = Reader(cfg, model, "granite_docling")
    text = retie(text, r.flag("tie_word_embeddings", True))
    tower, patches, vh, per_patch = vision_tower(r.sub("vision_config") or {}, r, "granite_docling_vision")
    v = r.child(r.sub("vision_config") or {}, "granite_docling_vision", prefix="vision_config.")
    out, scale = v.int("out_hidden_size"), v.int("scale_factor")
    mergers = len(v.list("deepstack_visual_indexes", int) or [])
    params = 2 * vh + _path(v, vh, out, scale, mergers) + 2 * out + out * out + 2 * out
    if v.flag("use_fine_route", True):
        params += _path(v, vh, out, scale // 2, mergers)
    router = r.opt_int("density_router_hidden_size")
    if router:
        params += linear(vh, 1, True) + 2 * vh + linear(vh, router, True) + linear(router, 1, True)
    proj = Part("Projector", "DeepStack pixel-shuffle connector", params, matmul=vh * scale * scale * out + out * out)
    tokens = patches // (scale * scale)
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, tower, proj), image_tokens=tokens,
                               vision_act=vision_activations(tower, patches, per_patch, vh),
                               vision_transient=vision_transient(patches, per_patch, vh))
    return dataclasses.replace(text, model_type="granite_docling", family="granite_docling", spec=spec,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, model))


def unlimited_ocr(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """UnlimitedOcrModel: vision_tower (UnlimitedOcrVisionModel: sam_encoder, the SAM layout and neck, then
    UnlimitedOcrSamVisionProj, two stride-2 3x3 convs without bias through downsample_channels; vision_encoder, a
    CLIP encoder with class and position embeddings, pre_layrnorm and its layers but no patch embedding and no
    post_layernorm), multi_modal_projector (a biased Linear from downsample_channels[-1] + the CLIP width to the text
    width), view_separator and image_newline (text width each) and language_model."""
    text = text_tower(cfg, model, "unlimited_ocr", read_text)
    r = Reader(cfg, model, "unlimited_ocr")
    text = retie(text, r.flag("tie_word_embeddings", False))
    th = text.hidden
    vc = r.child(r.sub("vision_config") or {}, "unlimited_ocr_vision", prefix="vision_config.")
    s = vc.child(vc.sub("sam_config") or {}, "unlimited_ocr_sam_vision_model", prefix="sam_config.")
    sam_tower, patches, sh, per_patch = sam(s, "unlimited_ocr_sam_vision_model")
    chans = s.list("downsample_channels", int, 2)
    down = 9 * s.int("output_channels", 256) * chans[0] + 9 * chans[0] * chans[-1]
    e = vc.child(vc.sub("encoder_config") or {}, "unlimited_ocr_vision_encoder", prefix="encoder_config.")
    clip_part, clip_tokens, ch, _ = clip_encoder(e)
    wide = chans[-1] + ch
    tower = Part("Vision_Tower", f"SAM + CLIP vision encoders ({clip_part.type})",
                 sam_tower.params + down + clip_part.params, matmul=sam_tower.matmul + clip_part.matmul)
    proj = Part("Projector", "Linear projector", linear(wide, th, True) + 2 * th, matmul=wide * th)
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, tower, proj), image_tokens=clip_tokens,
                               vision_act=vision_activations(sam_tower, patches, per_patch, sh),
                               vision_transient=vision_transient(patches, per_patch, sh))
    return dataclasses.replace(text, model_type="unlimited_ocr", family="unlimited_ocr", spec=spec,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, model))


WRAPPERS: dict[str, Wrapper] = {"granite_docling": granite_docling, "unlimited_ocr": unlimited_ocr}
