"""Bidirectional vision-language encoders: ModernVBERT (ModernBERT) and UltraVBERT (UltraBERT), each a SigLIP vision
model, a pixel-shuffle connector into the text width and a masked-LM head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..graph.parts import Part
from .assembly import TextReader, Wrapper
from .vision_language import attach
from .vision_towers import tower_kind, vision_tower, vision_transient
from .vision_wrappers import wrapper_parts


def vbert(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_modernvbert.ModernVBertForMaskedLM / modeling_ultravbert.UltraVBertForMaskedLM: vision_model (an
    AutoModel of vision_config: SigLIP, its pooling head when vision_use_head), the connector (pixel shuffle by
    pixel_shuffle_factor, modality_projection vision x factor^2 -> text without bias; UltraVBERT adds an RMSNorm of
    the text width), the text model, the prediction head (ModernVBERT: the ModernBERT head its text tower already
    has; UltraVBERT: UltraVBertPredictionHead, linear1 / linear2 through prediction_head_size, no biases) and
    lm_head tied by the top-level tie_word_embeddings."""
    mt = str(cfg.get("model_type"))
    text, r, _ = wrapper_parts(cfg, model, mt, read_text)
    vc = cfg.get("vision_config") or {}
    tower, patches, vh, per_patch = vision_tower(vc, r, tower_kind(mt, vc) or "siglip_vision_model")
    th, f = text.spec.hidden, r.int("pixel_shuffle_factor", 4)
    proj = Part("Projector", "Pixel-shuffle projector", vh * f * f * th + (th if mt == "ultravbert" else 0),
                matmul=vh * f * f * th)
    if mt == "ultravbert":
        tc = cfg.get("text_config") or {}
        t = r.child(tc if isinstance(tc, Mapping) else {}, "ultrabert", prefix="text_config.")
        size = t.int("prediction_head_size", 768)
        pred = Part("Prediction_Head", "Linear", 2 * th * size, matmul=2 * th * size)
        spec = text.spec
        at = next(i for i, q in enumerate(spec.head) if q.name.startswith("LM_Head"))
        text = dataclasses.replace(text, spec=dataclasses.replace(spec, head=(*spec.head[:at], pred,
                                                                               *spec.head[at:])))
    layers = max(1, tower.matmul // max(1, 12 * vh * vh))
    return attach(text, cfg, r, (tower, proj), tokens=max(1, patches // (f * f)), act=patches * per_patch * layers,
                  transient=vision_transient(patches, per_patch, vh), tie=r.flag("tie_word_embeddings", False))


WRAPPERS: dict[str, Wrapper] = dict.fromkeys(("modernvbert", "ultravbert"), vbert)
