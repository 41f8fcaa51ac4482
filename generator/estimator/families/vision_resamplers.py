"""Vision-language wrappers whose projector merges or resamples the vision tokens: MiniCPM-V 4.6 / 4.7 and
MiniCPM-OCR (a window-attention merger inside the SigLIP tower, then a downsampling MLP merger).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .vision_language import attach
from .vision_towers import vit_layer
from .vision_wrappers import tower_part, vision_reader, wrapper_parts


def downsample_mlp(h: int, out: int) -> int:
    """modeling_minicpmv4_6.MiniCPMV4_6DownsampleMLP: pre_norm LayerNorm of 4 h, linear_1 4 h square, linear_2
    4 h -> out, biases (4 = two 2 x 2 merges, whatever merge_kernel_size says)."""
    return 2 * 4 * h + linear(4 * h, 4 * h, True) + linear(4 * h, out, True)


def minicpm(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_minicpmv4_6.MiniCPMV4_6ForConditionalGeneration (MiniCPM-V 4.7 and MiniCPM-OCR alike): a SigLIP
    tower (patch conv with bias, (image/patch)^2 positions, LayerNorm layers with biased q/k/v/out and fc1/fc2,
    post_layernorm) holding vit_merger (MiniCPMV4_6ViTWindowAttentionMerger: one more attention and its LayerNorm,
    pre_norm over the k x k window, linear_1 window hidden -> window intermediate, linear_2 back to hidden, biases);
    the merger (merger_times - 1 DownsampleMLPs to the vision width, one to the text width); the text model and an
    LM head tied by the top-level tie_word_embeddings."""
    mt = str(cfg.get("model_type"))
    text, r, _ = wrapper_parts(cfg, model, mt, read_text)
    v = vision_reader(r, cfg, mt + "_vision")
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    kernel = v.list("window_kernel_size", int, length=2) or [2, 2]
    k = kernel[0] * kernel[1]
    patches = (size // p) ** 2
    window = 4 * linear(h, h, True) + 2 * h + 2 * k * h + linear(k * h, k * inter, True) + linear(k * inter, h, True)
    params = ch * p * p * h + h + patches * h + n * vit_layer(h, inter) + 2 * h + window
    tower = tower_part(params, n + 1, (n + 1) * 4 * h * h + n * 2 * h * inter + 2 * k * k * h * inter)
    times, th = r.int("merger_times", 1), text.spec.hidden
    merger = (times - 1) * downsample_mlp(h, h) + downsample_mlp(h, th)
    proj = Part("Projector", "Downsampling MLP merger", merger, matmul=merger)
    shrink = 16 if r.str("downsample_mode", "16x") == "16x" else 4
    return attach(text, cfg, r, (tower, proj), tokens=max(1, patches // shrink), act=patches * n * (8 * h + 2 * inter),
                  transient=patches * (4 * h + inter), tie=r.flag("tie_word_embeddings", text.tie))


WRAPPERS: dict[str, Wrapper] = dict.fromkeys(("minicpmv4_6", "minicpmv4_7", "minicpm_ocr"), minicpm)
