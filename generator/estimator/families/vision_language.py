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
import math
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..config.transformers_defaults import CLASS_DEFAULTS
from ..graph.layout import standard_block
from ..graph.parts import (
    Part,
    attention_part,
    attention_type,
    linear,
    mlp_part,
    norm_part,
)
from .assembly import Builder, TextReader, Wrapper, assemble
from .decoder import DecoderTraits, Dims, attention, build
from .llama import TRAITS as LLAMA_TRAITS
from .tower_inference import inference_elements, mllama_inference_elements
from .tower_linears import layer_count, layer_norm_tower, tower_linears
from .vision_projectors import PROJECTORS, projector
from .vision_towers import sam, tower_kind, vision_activations, vision_tower, vision_transient

# Default text model_type of each VLM when text_config omits it, and text types read as a base family.
DEFAULT_TEXT = {"llava": "llama", "llava_next": "llama", "paligemma": "gemma", "idefics3": "llama", "smolvlm": "llama",
                "gemma3": "gemma3_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text",
                "mistral3": "mistral", "llava_onevision": "qwen2", "aya_vision": "cohere2", "got_ocr2": "qwen2",
                "fuyu": "persimmon", "internvl": "qwen2", "moss_transcribe_diarize": "qwen3",
                "llava_next_video": "llama", "vipllava": "llama", "video_llava": "llama", "shieldgemma2": "gemma3_text",
                "deepseek_vl": "llama", "qianfan_ocr": "qwen3", "lighton_ocr": "qwen3", "cohere2_vision": "cohere2",
                "qwen2_audio": "qwen2", "audioflamingo3": "qwen2", "musicflamingo": "qwen2", "voxtral": "llama",
                "glmasr": "llama", "omniasr": "llama", "vibevoice_asr": "qwen2", "granite_speech": "granite", "granite_speech_plus": "granite", "qwen3_asr": "qwen3", "voxtral_realtime": "voxtral_realtime_text", "qwen2_5_omni_thinker": "qwen2_5_omni_text",
                "qwen3_omni_moe_thinker": "qwen3_omni_moe_text",
                "hy_v4_vl": "hy_v4_vl_text", "step3p7": "step3p5",
                "mistral_large4": "mistral_large4_text", "ernie4_5_vl_moe": "ernie4_5_vl_moe_text",
                "pp_chart2table": "qwen2", "florence2": "bart",
                "pp_formulanet": "pp_formulanet_text", "granite_docling": "granite_docling_text",
                "unlimited_ocr": "unlimited_ocr_text",
                "blip-2": "opt", "idefics2": "mistral", "instructblip": "opt", "instructblipvideo": "opt"}


# Wrappers whose image_seq_length (when the config gives it) is the tokens one image adds.
IMAGE_SEQ_LENGTH = ("llava", "llava_next", "llava_next_video", "vipllava", "video_llava", "internvl", "qianfan_ocr")

# What a text tower's modeling file fixes that its base family reads from a key: GLM-OCR's text attention has no
# q/k/v bias (modeling_glm_ocr.GlmOcrTextAttention).
TEXT_FIXED: dict[str, dict[str, Any]] = {"glm_ocr_text": {"attention_bias": False}}

TEXT_AS = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2", "qwen3_vl_text": "qwen3",
           "qwen3_vl_moe_text": "qwen3_moe", "glm4v_text": "glm4", "glm4v_moe_text": "glm4_moe", "glm_ocr_text": "glm4",
           "paddleocr_vl_text": "ernie4_5", "qwen2_5_omni_text": "qwen2", "qwen3_omni_moe_text": "qwen3_moe",
           "hy_v4_vl_text": "hy_v4", "ultrabert": "llama", "cosmos3_edge_text": "arcee",
           "pp_formulanet_text": "mbart", "granite_docling_text": "granite"}




def text_tower(cfg: Mapping[str, Any], model: str, mt: str, read_text: TextReader, base: str | None = None) -> Arch:
    """The language model inside a wrapper, read by its own family's builder (`read_text`: normalise's); `base`
    names the family that reads it where the wrapper's modeling file decides (else TEXT_AS, else its own)."""
    text = cfg.get("text_config")
    if text is None:  # older Qwen2-VL / Qwen2.5-VL files keep the text keys at the top level
        text = {k: v for k, v in cfg.items() if k not in ("vision_config", "model_type", "architectures", "auto_map")}
    if not isinstance(text, Mapping):
        raise ConfigError(model, "text_config", text, "must be a JSON object")
    tt = text.get("model_type") or DEFAULT_TEXT.get(mt)
    if not isinstance(tt, str):
        raise ConfigError(model, "text_config.model_type", tt, "is missing")
    base = base or TEXT_AS.get(tt, tt)
    if base == tt:
        return read_text(dict(text, model_type=tt), model)
    # Read as `base`, but a key the file leaves out takes the text config class's own default, and a class
    # without head_dim derives it (hidden_size // num_attention_heads in its modeling file).
    own = CLASS_DEFAULTS.get(tt, {})
    sub = {**{k: v for k, v in own.items() if v is not None}, **{k: v for k, v in text.items() if v is not None},
           **TEXT_FIXED.get(tt, {})}
    if tt in CLASS_DEFAULTS and "head_dim" not in own and "head_dim" not in sub:
        sub["head_dim"] = int(sub.get("hidden_size", 0)) // max(1, int(sub.get("num_attention_heads", 1)))
    return read_text(dict(sub, model_type=base), model)


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


def vision_memory(tower: Part, patches: int, vh: int, per_patch: int, layers: int = 0) -> tuple[int, int]:
    """(saved activations, serving working set) of one image in a vision tower, elements: per patch, per layer
    (`layers`, else the tower's parameters over a ViT layer's 12 x width^2), as vision_towers.py counts them."""
    return vision_activations(tower, patches, per_patch, vh, layers), vision_transient(patches, per_patch, vh)


def vlm(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    archs = architectures_of(cfg, model)
    if archs and archs[0].endswith("ForCausalLM"):  # Qwen3_5ForCausalLM and alike: the text tower alone
        return dataclasses.replace(text, model_type=mt, architectures=archs)
    spec = text.spec
    r = Reader(cfg, model, mt)
    vc = cfg.get("vision_config") or {}
    if not isinstance(vc, Mapping):
        raise ConfigError(model, "vision_config", vc, "must be a JSON object")
    kind = tower_kind(mt, vc)
    tower, patches, vh, per_patch = vision_tower(vc, r, kind)
    proj, shrink = projector(mt, r, vh, spec.hidden, cfg)
    tokens = patches // shrink
    if kind == "pixtral":  # PixtralProcessor closes each row of tokens with [IMG_BREAK] (the last with [IMG_END])
        tokens += math.isqrt(tokens)
    if mt in ("gemma3", "shieldgemma2"):
        tokens = r.int("mm_tokens_per_image", 256)
    elif mt in IMAGE_SEQ_LENGTH and isinstance(cfg.get("image_seq_length"), int):
        tokens = r.int("image_seq_length")
    tiles = 5 if mt in ("llava_next", "llava_next_video") else 1  # anyres: the base image, up to 4 tiles (pinpoints)
    tokens *= tiles
    # The LM head hangs on the top-level model: its tie_word_embeddings decides (not text_config's).
    linears = tower_linears(mt, r, vc, kind, (vh, spec.hidden), (tiles * patches, tokens))
    vision_act, vision_transient = vision_memory(tower, patches, vh, per_patch, layer_count(linears))
    transient, pixels = inference_elements(r.child(vc, kind, prefix="vision_config."), kind, tiles * patches, vh) \
        or (vision_transient, 0)
    # modeling_video_llava.VideoLlavaModel holds two towers of vision_config: image_tower and video_tower.
    towers = (tower, tower._replace(name="Video_Tower")) if mt == "video_llava" else (tower,)
    return attach(text, cfg, r, (*towers, proj), tokens=tokens, act=vision_act, transient=transient,
                  tie=r.flag("tie_word_embeddings", text.tie), linears=linears,
                  layer_norm=layer_norm_tower(r, vc, kind), pixels=pixels)


def attach(text: Arch, cfg: Mapping[str, Any], r: Reader, parts: tuple[Part, ...], *, tokens: int, act: int,
           transient: int, tie: bool | None = None, linears: tuple | None = None, layer_norm: bool = False,
           pixels: int = 0) -> Arch:
    """The wrapper's model: its text tower with the vision (audio, protein) parts after the token embedding, the
    tokens one image adds, the tower's activations per image, its Linears (Spec.tower_linears; None: not itemised),
    whether its norms are LayerNorms (Spec.tower_layer_norm), an image's pixels (Spec.image_pixels; 0: not read)
    and the LM head tied as `tie` says (the text tower's own tie when None). The Arch takes the wrapper's
    model_type, family and `architectures`."""
    spec = text.spec
    tie = text.tie if tie is None else tie
    head = tuple(_retie(p, tie, spec.vocab, spec.hidden) for p in spec.head)
    new = dataclasses.replace(spec, embed=(*spec.embed, *parts), head=head, tied=tie, image_tokens=tokens,
                              vision_act=act, vision_transient=transient, tower_linears=linears,
                              tower_layer_norm=layer_norm, image_pixels=pixels)
    return dataclasses.replace(text, model_type=r.model_type, family=r.model_type, spec=new, tie=tie,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, r.model))


def _cross(t: DecoderTraits, d: Dims, n: int) -> Part:
    # modeling_mllama.MllamaTextCrossAttention: q/k/v/o (keys and values from the vision states), q/k
    # RMSNorm of head_dim, and the layer's two tanh gates (attention, MLP). Its KV is the image's
    # cross-attention states, cached once per sequence (window -1: over the vision tokens).
    p = attention(t, d, n, 0, extra=2 * d.hd + 2)
    return p._replace(name=f"Cross_Attention_{n}", type="Cross Attn", window=-1)


def mllama_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_mllama.MllamaForCausalLM: llama self-attention layers, cross-attention layers at
    cross_attention_layers, an embedding of vocab_size + 8 rows, an untied head of vocab_size."""
    r = Reader(cfg, model, "mllama_text_model")
    cross = set(r.list("cross_attention_layers", int) or [])
    t = DecoderTraits(mixer=lambda d, i: "cross" if i in cross else "attention", mixers={}, top_extra=lambda d: 8 * d.hidden)
    t = dataclasses.replace(t, mixers={"cross": lambda d, n: _cross(t, d, n)})
    return build(cfg, model, "mllama_text_model", t, family="mllama")


def mllama_vision(vc: Mapping[str, Any], r: Reader) -> tuple[Part, int, int, int, int, int]:
    """MllamaVisionModel: class embedding, patch conv, gated position/tile embeddings, a local transformer
    (num_hidden_layers) and a gated global one (num_global_layers), LayerNorms with bias. (tower, vision tokens per
    image, output width, hidden width, saved elements per image, cross-attention tokens per image): every tile's
    patches and class token, padded to a multiple of 8 (num_padding_patches), through every layer at a ViT layer's
    8 x hidden + 2 x MLP width, and the [tokens, tokens] attention mask the layers share (read off the CPU
    simulation, FINDINGS.md F73); the tower's output slices the padding off (modeling_mllama MllamaVisionModel:
    hidden_state[:, :, :slice_index]), so the text model's cross-attention reads every tile's patches and class
    token unpadded."""
    v = r.child(vc, "mllama_vision_model", prefix="vision_config.")
    h, inter, p = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    n, g = v.int("num_hidden_layers"), v.int("num_global_layers")
    tiles, size = v.int("max_num_tiles", 4), v.int("image_size")
    ratios = v.list("supported_aspect_ratios", list)
    ids = len(ratios) if ratios else 8
    patches = (size // p) ** 2 + 1
    layer = 4 * h * h + linear(h, inter, True) + linear(inter, h, True) + 4 * h
    params = (h + v.int("num_channels", 3) * p * p * h + 1 + patches * h + (ids + 1) * tiles * patches * h
              + 2 * (1 + (ids + 1) * tiles * h) + 4 * h + n * layer + g * (layer + 2))
    out = v.int("vision_output_dim", h * 6)
    tokens = tiles * -(-patches // 8) * 8
    act = tokens * (n + g) * (8 * h + 2 * inter) + tokens * tokens
    return Part("Vision_Tower", f"Vision transformer ({n}+{g} layers)", params,
                matmul=(n + g) * (4 * h * h + 2 * h * inter)), tokens, out, h, act, tiles * patches


def mllama(cfg: Mapping[str, Any], model: str) -> Arch:
    archs = architectures_of(cfg, model)
    text_cfg = cfg.get("text_config") or {}
    if not isinstance(text_cfg, Mapping):
        raise ConfigError(model, "text_config", text_cfg, "must be a JSON object")
    text = mllama_text(dict(text_cfg, model_type="mllama_text_model"), model)
    if archs and isinstance(archs[0], str) and archs[0].endswith("ForCausalLM"):
        return dataclasses.replace(text, model_type="mllama", architectures=archs)
    r = Reader(cfg, model, "mllama")
    vc = cfg.get("vision_config") or {}
    tower, vision_tokens, out, vh, act, cross = mllama_vision(vc, r)
    spec = text.spec
    proj = Part("Projector", "Linear projector", linear(out, spec.hidden, True), matmul=out * spec.hidden)
    # Image tokens do not enter the text sequence: the cross-attention layers cache K/V over them.
    linears = tower_linears("mllama", r, vc, "mllama_vision_model", (vh, spec.hidden), (vision_tokens, vision_tokens))
    transient, pixels = mllama_inference_elements(r.child(vc, "mllama_vision_model", prefix="vision_config."),
                                                  vision_tokens, vh)
    # A served sequence with its image caches the cross-attention layers' K and V over its tokens (profile's
    # encoder_tokens; MllamaTextCrossAttention updates past_key_values with them)
    new = dataclasses.replace(spec, embed=(*spec.embed, tower, proj), image_tokens=0, tower_linears=linears,
                              tower_layer_norm=layer_norm_tower(r, vc, "mllama_vision_model"), vision_act=act,
                              vision_transient=transient, image_pixels=pixels, encoder_tokens=cross, encoder_kept=False,
                              notes=(f"one image = {cross:,} vision tokens held as cross-attention K/V",))
    return dataclasses.replace(text, model_type="mllama", family="mllama", spec=new, architectures=archs)


def fuyu(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_fuyu.py: a Persimmon decoder (text_config) and vision_embed_tokens, one Linear from a
    patch (patch_size^2 x num_channels) to the hidden size; no vision encoder."""
    r = Reader(cfg, model, "fuyu")
    text_cfg = cfg.get("text_config") or {}
    if not isinstance(text_cfg, Mapping):
        raise ConfigError(model, "text_config", text_cfg, "must be a JSON object")
    text = build(dict(text_cfg, model_type="persimmon"), model, "persimmon", LLAMA_TRAITS["persimmon"])
    spec = text.spec
    p, ch = r.int("patch_size", 30), r.int("num_channels", 3)
    patch = p * p * ch
    proj = Part("Projector", "Patch embedding", linear(patch, spec.hidden, True), matmul=patch * spec.hidden)
    tie = r.flag("tie_word_embeddings", False)
    head = tuple(q._replace(params=0 if tie else spec.vocab * spec.hidden) if q.name == "LM_Head" else q
                 for q in spec.head)
    tokens = (r.int("image_size", 300) // p) ** 2
    new = dataclasses.replace(spec, embed=(*spec.embed, proj), head=head, tied=tie, image_tokens=tokens,
                              vision_transient=tokens * patch)
    return dataclasses.replace(text, model_type="fuyu", family="fuyu", spec=new, tie=tie)


def git(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_git.py: a CLIP image encoder (vision_config), visual_projection (Linear + LayerNorm), BERT
    layers over [image tokens; text] with word + position embeddings and LayerNorm, an untied output
    Linear with bias."""
    r = Reader(cfg, model, "git")
    h, n, heads, vocab, inter = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                                 r.int("vocab_size"), r.int("intermediate_size"))
    ctx = r.int("max_position_embeddings", 1024)
    vc = cfg.get("vision_config") or {}
    v = r.child(vc, "git_vision_model", prefix="vision_config.")
    vh, vn, vi, vp, vs = (v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size"),
                          v.int("patch_size"), v.int("image_size"))
    patches = (vs // vp) ** 2
    vlayer = 4 * linear(vh, vh, True) + linear(vh, vi, True) + linear(vi, vh, True) + 4 * vh
    tower = vh + v.int("num_channels", 3) * vp * vp * vh + (patches + 1) * vh + 4 * vh + vn * vlayer
    images = r.opt_int("num_image_with_embedding")
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Position_Embedding", "Embedding", ctx * h), norm_part("Embedding_LayerNorm", "layernorm", h),
             Part("Vision_Tower", f"CLIP vision transformer ({vn} layers)", tower, matmul=vn * (4 * vh * vh + 2 * vh * vi)),
             Part("Projector", "Linear + LayerNorm", linear(vh, h, True) + 2 * h + (images * vh if images else 0),
                  matmul=vh * h)]
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", attention_type(heads, heads), h, heads, heads, h // heads,
                              qkv_bias=True, o_bias=True, rope=False)
        blocks.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True), "layernorm", h,
                                     norms=("post_attn", "post_mlp")))
    tie = r.flag("tie_word_embeddings", False)
    head = [Part("LM_Head", "Linear", vocab + (0 if tie else h * vocab), width=vocab, matmul=h * vocab),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=h // heads, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, position="learned",
                    image_tokens=patches + 1)


def got_ocr2(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_got_ocr2.py: a SAM-style ViT with its conv neck (vision_towers.sam), two strided convs up to the text
    width and a Linear projector; a Qwen2 text tower. PP-Chart2Table (configuration_pp_chart2table.PPChart2TableConfig)
    builds the same class from its own config classes."""
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    spec = text.spec
    r = Reader(cfg, model, mt)
    v = r.child(cfg.get("vision_config") or {}, mt + "_vision", prefix="vision_config.")
    tower, _, h, _ = sam(v, mt + "_vision")
    n, mlp, oc = v.int("num_hidden_layers"), v.int("mlp_dim"), v.int("output_channels", 256)
    grid = v.int("image_size") // v.int("patch_size")
    th = spec.hidden
    proj = Part("Projector", "Conv + Linear projector", oc * 2 * oc * 9 + 2 * oc * th * 9 + linear(th, th, True),
                matmul=th * th)
    tokens = (grid // 4) ** 2  # two stride-2 convs
    new = dataclasses.replace(spec, embed=(*spec.embed, tower, proj), image_tokens=tokens,
                              vision_act=grid * grid * n * (8 * h + 2 * mlp), vision_transient=grid * grid * (4 * h + mlp))
    text = retie(dataclasses.replace(text, spec=new), r.flag("tie_word_embeddings", text.tie))
    return dataclasses.replace(text, model_type=mt, family=mt, architectures=architectures_of(cfg, model))


BUILDERS: dict[str, Builder] = {
    "mllama": mllama,
    "mllama_text_model": mllama_text,
    "fuyu": fuyu,
    "git": git,
}

# Wrappers around a language model of any family: normalise passes them its own reader for the text tower.
WRAPPERS: dict[str, Wrapper] = {
    **dict.fromkeys(PROJECTORS, vlm),
    "got_ocr2": got_ocr2,
    "pp_chart2table": got_ocr2,
}
