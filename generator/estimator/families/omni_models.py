"""Omni-modal wrappers (image, video and audio inputs): Nemotron-H Omni, a RADIO vision model and its pixel-shuffle
projector around a Nemotron-H language model; the home of the omni models' audio towers as they are added.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .vision_language import attach
from .vision_wrappers import tower_part, vision_reader, wrapper_parts


def nemotron_h_omni(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_nemotron_h_omni.NemotronH_Omni_Reasoning_V3: the language model (an AutoModelForCausalLM of
    text_config, its own tie), vision_model (modeling_radio.RadioModel: patch_projection channels x patch^2 ->
    hidden and, with video_temporal_patch_size, video_patch_projection of that many frames, no biases; a
    (max_img_size / patch)^2 position grid; num_cls_tokens + num_registers tokens; LayerNorm layers with q/k/v
    (qkv_bias), a biased o_proj, two layer scales and fc1/fc2 of hidden x mlp_ratio, or with use_swiglu_ffn a
    biased SwiGLU two thirds as wide rounded up to 8), vision_final_layernorm when the text model has
    num_nextn_predict_layers, and the projector (RMSNorm of vision_hidden_size x (1 / downsample_ratio)^2, linear_1
    to projector_hidden_size, linear_2 to the text width, no biases). The audio tower of an audio_config is not
    counted (the Arch says so)."""
    text, r, _ = wrapper_parts(cfg, model, "nemotron_h_omni", read_text)
    v = vision_reader(r, cfg, "radio")
    h, n, p, ch = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("patch_size"), v.int("num_channels", 3)
    ratio = v.number("mlp_ratio", 4.0, high=64.0)
    inter = int(h * ratio)
    if v.flag("use_swiglu_ffn", False):
        inter = (int(inter * 2 / 3) + 7) // 8 * 8
        mlp = 2 * linear(h, inter, True) + linear(inter, h, True)
    else:
        mlp = linear(h, inter, True) + linear(inter, h, True)
    layer = 4 * h + 3 * linear(h, h, v.flag("qkv_bias", True)) + linear(h, h, True) + 2 * h + mlp
    frames = v.opt_int("video_temporal_patch_size")
    side = v.int("max_img_size") // p
    params = (ch * p * p * h + (frames * ch * p * p * h if frames else 0) + side * side * h
              + (v.int("num_cls_tokens", 3, minimum=0) + v.int("num_registers", 7, minimum=0)) * h + n * layer)
    tc = cfg.get("text_config") or {}
    mtp = r.child(tc if isinstance(tc, Mapping) else {}, "nemotron_h", prefix="text_config.")
    vhs = r.int("vision_hidden_size")
    params += 2 * vhs if mtp.int("num_nextn_predict_layers", 0, minimum=0) > 0 else 0
    tower = tower_part(params, n, n * (4 * h * h + 2 * h * inter))
    s = int(1 / r.number("downsample_ratio", 0.5, low=1e-6))
    wide, mid, th = vhs * s * s, r.int("projector_hidden_size"), text.spec.hidden
    proj = Part("Projector", "Pixel-shuffle projector", wide + wide * mid + mid * th, matmul=wide * mid + mid * th)
    patches = (v.int("image_size") // p) ** 2
    arch = attach(text, cfg, r, (tower, proj), tokens=max(1, patches // (s * s)), act=patches * n * (8 * h + 2 * inter),
                  transient=patches * (4 * h + inter))
    if isinstance(cfg.get("audio_config"), Mapping):
        return dataclasses.replace(arch, approximate="the audio tower (audio_config) and its projector are not counted")
    return arch


WRAPPERS: dict[str, Wrapper] = {"nemotron_h_omni": nemotron_h_omni}
