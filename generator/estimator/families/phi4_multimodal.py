"""Phi-4-multimodal (modeling_phi4_multimodal.py): a Phi-3 decoder with a SigLIP image tower and a conformer audio tower.

The towers hang on the decoder's embed_tokens_extend: Phi4MultimodalImageEmbedding (SigLIP with its pooling head,
two feature extensors, img_projection_up/down) and Phi4MultimodalAudioEmbedding (the conformer encoder and two
up/down projection pairs, for speech and for vision-speech).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .assembly import Builder
from .decoder import build
from .llama import TRAITS as LLAMA_TRAITS
from .vision_towers import siglip


def _audio(a: Reader, th: int) -> Part:
    """Phi4MultimodalAudioModel and its projections: NeMo conv subsampling (a 3x3 Conv2d from one channel, then per
    further halving of time_reduction a depthwise 3x3 and a pointwise Conv2d, biases; out Linear from channels x
    nemo_final_size), the relative attention bias table (bias_max_distance buckets, doubled unless symmetric, per
    head), and num_blocks conformer layers: two macaron MLPs (LayerNorm, gate_up d -> 2 x intermediate, down,
    biases), biased q/k/v/o, the conv module (LayerNorm; GLU pointwise conv d -> 2 x ext_pw_out_channel with b1/b2;
    depthwise conv of kernel_size x depthwise_multiplier and pointwise conv to depthwise_separable_out_channel;
    ext_pw_conv_1d d -> ext_pw_out_channel; biases) and two LayerNorms. Then up_proj / down_proj for speech and for
    vision-speech (d x downsample_rate -> text, text -> text, biases)."""
    d, n, inter, heads = a.int("hidden_size"), a.int("num_blocks"), a.int("intermediate_size"), a.int("num_attention_heads")
    c, feats, reduction = a.int("nemo_conv_channels"), a.int("input_size"), a.int("time_reduction")
    halvings = max(reduction.bit_length() - 1, 0)  # int(log2(time_reduction))
    final = feats
    for _ in range(halvings):
        final = (final - 1) // 2 + 1  # configuration_phi4_multimodal: nemo_final_size
    subsampling = 9 * c + c + max(halvings - 1, 0) * (9 * c + c + c * c + c) + linear(c * final, d, True)
    buckets = a.int("bias_max_distance") * (1 if a.flag("bias_symmetric", False) else 2)
    ext, sep, mult, k = (a.int("ext_pw_out_channel"), a.int("depthwise_separable_out_channel"),
                         a.int("depthwise_multiplier"), a.int("kernel_size"))
    mlp = 2 * d + linear(d, 2 * inter, True) + linear(inter, d, True)
    conv = 2 * d + linear(d, 2 * ext, True) + 2 * ext + d * mult * k + d * mult + linear(d * mult, sep, True) \
        + linear(d, ext, True)
    layer = 2 * mlp + 4 * linear(d, d, True) + conv + 4 * d
    wide = d * a.int("downsample_rate")
    proj = 2 * (linear(wide, th, True) + linear(th, th, True))
    return Part("Audio_Tower", f"Conformer audio encoder ({n} layers)", subsampling + buckets * heads + n * layer + proj,
                matmul=n * (4 * d * inter + 4 * d * d + 2 * d * ext) + 2 * (wide * th + th * th))


def phi4_multimodal(cfg: Mapping[str, Any], model: str) -> Arch:
    """Phi4MultimodalForCausalLM: the Phi-3 decoder (fused qkv and gate_up) plus both towers."""
    text = build(cfg, model, "phi4_multimodal", LLAMA_TRAITS["phi3"])
    r = Reader(cfg, model, "phi4_multimodal")
    th = text.hidden
    v = r.child(cfg.get("vision_config") or {}, "phi4_multimodal_vision", prefix="vision_config.")
    tower, patches, vh, per_patch = siglip(v, "siglip_vision_model")
    image = Part("Projector", "Image projection", linear(vh, th, True) + linear(th, th, True) + 2 * vh,
                 matmul=vh * th + th * th)
    audio = _audio(r.child(cfg.get("audio_config") or {}, "phi4_multimodal_audio", prefix="audio_config."), th)
    grid = -(-v.int("image_size") // v.int("patch_size"))
    tokens = ((grid + grid % 2) // 2) ** 2  # Phi4MultimodalImageEmbedding.num_img_tokens (2x2 average pooling)
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, tower, image, audio), image_tokens=tokens,
                               vision_act=patches * per_patch)
    return dataclasses.replace(text, spec=spec, uses=tuple(r.uses) + text.uses)


BUILDERS: dict[str, Builder] = {"phi4_multimodal": phi4_multimodal}
