"""Vision-language models: the text tower (its own builder), the vision tower and the projector.

Vision towers (each a stack of pre-norm ViT layers): CLIP (modeling_clip.CLIPVisionTransformer: class
embedding, pre- and post-LayerNorm), SigLIP (modeling_siglip.py: patch conv with bias, post-LayerNorm,
optional attention-pooling head), Idefics3/SmolVLM (SigLIP-like), Pixtral (RMSNorm, gated MLP),
Qwen2-VL / Qwen2.5-VL (3-D patch conv, fused qkv, patch merger MLP). Projectors per family.
Memory for images (memory.py): `image_tokens` is what one image adds to the text sequence, from the
vision config (patches, merges, tokens-per-image keys); each training sample and each served
sequence carries one image, whose vision-tower activations are added per sample.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..errors import ConfigError
from .arch import Arch
from .config import architectures_of
from .reader import Reader
from .registry import BUILDERS, register
from .spec import Part, linear

# Default text model_type of each VLM when text_config omits it, and text types read as a base family.
DEFAULT_TEXT = {"llava": "llama", "llava_next": "llama", "paligemma": "gemma", "idefics3": "llama", "smolvlm": "llama",
                "gemma3": "gemma3_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text",
                "mistral3": "mistral", "llava_onevision": "qwen2", "aya_vision": "cohere2", "got_ocr2": "qwen2",
                "fuyu": "persimmon", "internvl": "qwen2", "moss_transcribe_diarize": "qwen3"}
TEXT_AS = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2"}
DEFAULT_VISION = {"llava": "clip_vision_model", "llava_next": "clip_vision_model", "paligemma": "siglip_vision_model",
                  "gemma3": "siglip_vision_model", "idefics3": "idefics3_vision", "smolvlm": "smolvlm_vision",
                  "qwen2_vl": "qwen2_vl_vision", "qwen2_5_vl": "qwen2_5_vl_vision", "mistral3": "pixtral",
                  "llava_onevision": "siglip_vision_model", "aya_vision": "siglip_vision_model"}


def _vit_layer(h: int, inter: int, *, bias: bool = True, rms: bool = False, gated: bool = False) -> int:
    attn = 4 * linear(h, h, bias)
    mlp = (3 if gated else 2) * h * inter + ((2 * inter + h if gated else inter + h) if bias else 0)
    return attn + mlp + 2 * (h if rms else 2 * h)


def vision_tower(vc: Mapping[str, Any], r: Reader, kind: str) -> tuple[Part, int, int, int]:
    """(tower part, patches per image, hidden width out, per-patch activation elements per layer)."""
    v = r.child(vc, kind, prefix="vision_config.")
    if kind in ("qwen2_vl_vision", "qwen2_5_vl_vision"):
        h = v.int("embed_dim") if kind == "qwen2_vl_vision" else v.int("hidden_size")
        depth, p, tp, ch = v.int("depth"), v.int("patch_size", 14), v.int("temporal_patch_size", 2), v.int("in_channels", 3)
        if kind == "qwen2_vl_vision":
            inter = h * v.int("mlp_ratio", 4)
            layer = 4 * h * h + 3 * h + h + 2 * h * inter + inter + h + 4 * h  # fused qkv + proj (biases), LayerNorms
        else:
            inter = v.int("intermediate_size")
            layer = 4 * h * h + 4 * h + 3 * h * inter + 2 * inter + h + 2 * h  # gated MLP with biases, RMSNorms
        params = ch * tp * p * p * h + depth * layer
        patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
        tower = Part("Vision_Tower", f"Vision transformer ({depth} layers)", params,
                     matmul=depth * (4 * h * h + 2 * h * inter))
        return tower, patches, h, 8 * h + 3 * inter
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    patches = (size // p) ** 2
    if kind == "pixtral":
        params = ch * p * p * h + h + n * _vit_layer(h, inter, bias=False, rms=True, gated=True)
        patches = min(patches, (1024 // p) ** 2)  # a nominal 1024 x 1024 image
    elif kind == "clip_vision_model":
        params = h + ch * p * p * h + (patches + 1) * h + 4 * h + n * _vit_layer(h, inter)
    elif kind in ("siglip_vision_model", "idefics3_vision", "smolvlm_vision"):
        params = ch * p * p * h + h + patches * h + 2 * h + n * _vit_layer(h, inter)
        if kind == "siglip_vision_model" and v.flag("vision_use_head", True):
            # attention-pooling head: probe, nn.MultiheadAttention (in_proj 3h x h + 3h, out_proj), LayerNorm, MLP
            params += h + 3 * h * h + 3 * h + h * h + h + 2 * h + 2 * h * inter + inter + h
    else:
        raise ConfigError(r.model, "vision_config.model_type", kind, "is not a supported vision tower")
    return Part("Vision_Tower", f"Vision transformer ({n} layers)", params, matmul=n * (4 * h * h + 2 * h * inter)), \
        patches, h, 8 * h + 2 * inter


def projector(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> tuple[Part, int]:
    """(projector part, how many text tokens one vision patch grid becomes / patches factor as divisor)."""
    if mt in ("llava", "llava_next", "llava_onevision"):
        # modeling_llava.LlavaMultiModalProjector: linear_1 (vision x feature layers -> text), GELU, linear_2
        layers = cfg.get("vision_feature_layer", -2)
        n = len(layers) if isinstance(layers, list) else 1
        bias = r.flag("multimodal_projector_bias", True)
        params = linear(vh * n, th, bias) + linear(th, th, bias) + (th if mt != "llava" else 0)  # image_newline
        return Part("Projector", "MLP projector", params, matmul=vh * n * th + th * th), 1
    if mt == "paligemma":
        pd = r.int("projection_dim", th)
        return Part("Projector", "Linear projector", linear(vh, pd, True), matmul=vh * pd), 1
    if mt == "gemma3":  # mm_input_projection_weight (vision x text) + mm_soft_emb_norm (vision)
        return Part("Projector", "Linear projector", vh * th + vh, matmul=vh * th), 1
    if mt in ("idefics3", "smolvlm"):  # pixel shuffle by scale_factor, then modality_projection without bias
        s = r.int("scale_factor", 2)
        return Part("Projector", "Pixel-shuffle projector", vh * s * s * th, matmul=vh * s * s * th), s * s
    if mt == "mistral3":  # RMSNorm, patch merger (vision x m^2 -> vision), linear_1, GELU, linear_2
        m = r.int("spatial_merge_size", 2)
        bias = r.flag("multimodal_projector_bias", False)
        params = vh + vh * m * m * vh + linear(vh, th, bias) + linear(th, th, bias)
        return Part("Projector", "Patch-merger projector", params, matmul=vh * m * m * vh + vh * th + th * th), m * m
    if mt in ("qwen2_vl", "qwen2_5_vl"):  # merger: norm, Linear(4 v, 4 v), GELU, Linear(4 v, text)
        vc = cfg.get("vision_config") or {}
        v = r.child(vc, mt + "_vision")
        m = v.int("spatial_merge_size", 2)
        out = v.int("hidden_size", th) if mt == "qwen2_vl" else v.int("out_hidden_size", th)
        wide = vh * m * m
        norm = 2 * vh if mt == "qwen2_vl" else vh
        return Part("Projector", "Patch merger", norm + linear(wide, wide, True) + linear(wide, out, True),
                    matmul=wide * wide + wide * out), m * m
    raise ConfigError(r.model, "model_type", mt, "has no projector rule")


def text_tower(cfg: Mapping[str, Any], model: str, mt: str) -> Arch:
    text = cfg.get("text_config")
    if text is None:  # older Qwen2-VL / Qwen2.5-VL files keep the text keys at the top level
        text = {k: v for k, v in cfg.items() if k not in ("vision_config", "model_type", "architectures", "auto_map")}
    if not isinstance(text, Mapping):
        raise ConfigError(model, "text_config", text, "must be a JSON object")
    tt = text.get("model_type") or DEFAULT_TEXT.get(mt)
    if not isinstance(tt, str):
        raise ConfigError(model, "text_config.model_type", tt, "is missing")
    base = TEXT_AS.get(tt, tt)
    sub = dict(text, model_type=base)
    if base in BUILDERS:
        return BUILDERS[base](sub, model)
    raise ConfigError(model, "text_config.model_type", tt, "is not a supported text model")


def _retie(p: Part, tie: bool, vocab: int, hidden: int) -> Part:
    if not p.name.startswith("LM_Head"):
        return p
    bias = p.params % (vocab * hidden) if p.params else 0
    return p._replace(params=(0 if tie else vocab * hidden) + bias)


def retie(arch: Arch, tie: bool) -> Arch:
    """The wrapper's tie_word_embeddings decides whether its LM head shares the text embedding."""
    spec = arch.spec
    head = tuple(_retie(p, tie, spec.vocab, spec.hidden) for p in spec.head)
    return dataclasses.replace(arch, tie=tie, spec=dataclasses.replace(spec, head=head, tied=tie))


def vlm(cfg: Mapping[str, Any], model: str) -> Arch:
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt)
    spec = text.spec
    r = Reader(cfg, model, mt)
    vc = cfg.get("vision_config") or {}
    if not isinstance(vc, Mapping):
        raise ConfigError(model, "vision_config", vc, "must be a JSON object")
    vkind = vc.get("model_type") or DEFAULT_VISION.get(mt)
    tower, patches, vh, per_patch = vision_tower(vc, r, str(vkind))
    proj, shrink = projector(mt, r, vh, spec.hidden, cfg)
    tokens = patches // shrink
    if mt == "gemma3":
        tokens = r.int("mm_tokens_per_image", 256)
    elif mt in ("llava", "llava_next") and isinstance(cfg.get("image_seq_length"), int):
        tokens = r.int("image_seq_length")
    if mt == "llava_next":  # anyres: the base image plus up to 4 tiles (image_grid_pinpoints)
        tokens *= 5
    vlayers = tower.matmul and 1
    vision_act = patches * per_patch * max(1, tower.params // max(1, 12 * vh * vh)) if vlayers else 0
    embed = (*spec.embed, tower, proj)
    # The LM head hangs on the top-level model: its tie_word_embeddings decides (not text_config's).
    tie = r.flag("tie_word_embeddings", text.tie)
    head = tuple(_retie(p, tie, spec.vocab, spec.hidden) for p in spec.head)
    new = dataclasses.replace(spec, embed=embed, head=head, tied=tie, image_tokens=tokens, vision_act=vision_act,
                              vision_transient=patches * (per_patch + 2 * vh))
    return dataclasses.replace(text, model_type=mt, family=mt, spec=new, tie=tie, uses=tuple(r.uses) + text.uses,
                               architectures=architectures_of(cfg, model))


for _mt in ("llava", "llava_next", "paligemma", "gemma3", "idefics3", "smolvlm", "qwen2_vl", "qwen2_5_vl", "mistral3"):
    register(_mt)(vlm)
