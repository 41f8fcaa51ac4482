"""Projectors of vision-language models: what maps the vision tower's patches into the text model's width.

One rule per wrapper model_type, each following its modeling file; each returns (projector part, how many vision
patches become one text token).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .vision_towers import tower_kind

ProjectorResult = tuple[Part, int]


def _mlp(typ: str, params: int, matmul: int, shrink: int = 1) -> ProjectorResult:
    return Part("Projector", typ, params, matmul=matmul), shrink


def llava(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_llava.LlavaMultiModalProjector: linear_1 (vision x feature layers -> text), GELU, linear_2; the
    LLaVA-NeXT family (llava_next, llava_next_video, llava_onevision) adds image_newline (text width)."""
    layers = r.cfg.get("vision_feature_layer", r.defaults.get("vision_feature_layer", -2))
    n = len(layers) if isinstance(layers, list) else 1
    bias = r.flag("multimodal_projector_bias", True)
    newline = th if mt in ("llava_next", "llava_next_video", "llava_onevision") else 0
    return _mlp("MLP projector", linear(vh * n, th, bias) + linear(th, th, bias) + newline, vh * n * th + th * th)


def vipllava(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_vipllava.VipLlavaMultiModalProjector: LayerNorm over the concatenated feature layers, linear_1,
    GELU, linear_2 (biases)."""
    layers = r.cfg.get("vision_feature_layer", r.defaults.get("vision_feature_layer", [-2, -5, -8, -11, 6]))
    wide = vh * (len(layers) if isinstance(layers, list) else 1)
    return _mlp("MLP projector", 2 * wide + linear(wide, th, True) + linear(th, th, True), wide * th + th * th)


def paligemma(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    pd = r.int("projection_dim", th)
    return _mlp("Linear projector", linear(vh, pd, True), vh * pd)


def gemma3(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_gemma3.Gemma3MultiModalProjector: mm_input_projection_weight (vision x text), mm_soft_emb_norm."""
    return _mlp("Linear projector", vh * th + vh, vh * th)


def idefics3(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """Pixel shuffle by scale_factor, then modality_projection without bias (modeling_idefics3.py)."""
    s = r.int("scale_factor", 2)
    return _mlp("Pixel-shuffle projector", vh * s * s * th, vh * s * s * th, s * s)


def mistral3(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_mistral3.Mistral3MultiModalProjector (LightOnOCR alike, no bias): RMSNorm, patch merger
    (vision x m^2 -> vision), linear_1, GELU, linear_2."""
    m = r.int("spatial_merge_size", 2)
    bias = r.flag("multimodal_projector_bias", False) if mt in ("mistral3", "mistral_large4") else False
    params = vh + vh * m * m * vh + linear(vh, th, bias) + linear(th, th, bias)
    return _mlp("Patch-merger projector", params, vh * m * m * vh + vh * th + th * th, m * m)


def qwen_vl(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """merger (modeling_qwen2_vl.PatchMerger; Qwen2.5-VL, EXAONE 4.5 and HyperCLOVAX alike): norm (Qwen2-VL a
    LayerNorm, else an RMSNorm), Linear(4 v, 4 v), GELU, Linear(4 v, out) with biases; out is Qwen2-VL's
    vision hidden_size, else out_hidden_size. HyperCLOVAX-Vision-V2 adds its projector, Linear(out_hidden_size,
    text) with bias (modeling_hyperclovax_vision_v2.py)."""
    v = _vision(r, cfg, mt)
    m = v.int("spatial_merge_size", 2)
    out = v.int("hidden_size", th) if mt == "qwen2_vl" else v.int("out_hidden_size", th)
    wide = vh * m * m
    params = (2 * vh if mt == "qwen2_vl" else vh) + linear(wide, wide, True) + linear(wide, out, True)
    if mt == "hyperclovax_vision_v2":
        params += linear(out, th, True)
    return _mlp("Patch merger", params, wide * wide + wide * out, m * m)


def paddleocr_vl(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_paddleocr_vl.PaddleOCRProjector: LayerNorm (vision width), linear_1 (4 v -> 4 v), GELU, linear_2
    (4 v -> text), biases."""
    m = _vision(r, cfg, mt).int("spatial_merge_size", 2)
    wide = vh * m * m
    return _mlp("Patch merger", 2 * vh + linear(wide, wide, True) + linear(wide, th, True), wide * wide + wide * th,
                m * m)


def lfm2_vl(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_lfm2_vl.Lfm2VlMultiModalProjector: pixel unshuffle by downsample_factor, LayerNorm
    (projector_use_layernorm), linear_1 to projector_hidden_size, GELU, linear_2 (projector_bias)."""
    d = r.int("downsample_factor", 2)
    wide, mid, bias = vh * d * d, r.int("projector_hidden_size"), r.flag("projector_bias", True)
    norm = 2 * wide if r.flag("projector_use_layernorm", True) else 0
    return _mlp("MLP projector", norm + linear(wide, mid, bias) + linear(mid, th, bias), wide * mid + mid * th, d * d)


def aya_vision(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_aya_vision.AyaVisionMultiModalProjector (Cohere2-Vision alike, without the LayerNorm): pixel
    shuffle by downsample_factor, LayerNorm, linear_1 to alignment_intermediate_size, SwiGLU halving it,
    linear_2 to the text width (biases)."""
    d = r.int("downsample_factor", 2)
    wide = vh * d * d
    mid = r.int("alignment_intermediate_size", th)
    norm = 2 * wide if mt == "aya_vision" else 0
    return _mlp("SwiGLU projector", norm + linear(wide, mid, True) + linear(mid // 2, th, True),
                wide * mid + mid // 2 * th, d * d)


def two_linear(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_deepseek_vl.DeepseekVLAligner (VideoLLaMA3's readout alike): linear1 (vision -> text), GELU,
    linear2 (biases)."""
    return _mlp("MLP projector", linear(vh, th, True) + linear(th, th, True), vh * th + th * th)


def internvl(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_internvl.InternVLMultiModalProjector (Qianfan-OCR alike): pixel shuffle by 1/downsample_ratio,
    LayerNorm, linear_1, GELU, linear_2 (biases)."""
    d = int(1 / r.number("downsample_ratio", 0.5, low=1e-6))
    wide = vh * d * d
    return _mlp("Pixel-shuffle projector", 2 * wide + linear(wide, th, True) + linear(th, th, True),
                wide * th + th * th, d * d)


def _vision(r: Reader, cfg: Mapping[str, Any], mt: str) -> Reader:
    vc = cfg.get("vision_config") or {}
    return r.child(vc, tower_kind(mt, vc) or mt + "_vision", prefix="vision_config.")


def qwen3_vl(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_qwen3_vl.Qwen3VLVisionPatchMerger: LayerNorm (vision width), linear_fc1 (4 v -> 4 v), GELU,
    linear_fc2 (4 v -> out_hidden_size), biases; and one more per deepstack_visual_indexes entry, whose LayerNorm
    follows the shuffle (4 v wide)."""
    v = _vision(r, cfg, mt)
    m, out = v.int("spatial_merge_size", 2), v.int("out_hidden_size")
    wide = vh * m * m
    one = linear(wide, wide, True) + linear(wide, out, True)
    deep = len(v.list("deepstack_visual_indexes", int) or []) if v.has("deepstack_visual_indexes") else 0
    return _mlp("Patch merger", 2 * vh + one + deep * (2 * wide + one), (1 + deep) * (wide * wide + wide * out),
                m * m)


def glm4v(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_glm4v.Glm4vVisionPatchMerger over the merge conv's output (out_hidden_size): proj, LayerNorm, GELU,
    gate/up to intermediate_size (GLM-OCR: out_hidden_size x in_channels), down; no biases."""
    v = _vision(r, cfg, mt)
    out, m = v.int("out_hidden_size"), v.int("spatial_merge_size", 2)
    # GLM-OCR's merger is out_hidden_size x in_channels wide (modeling_glm_ocr.GlmOcrVisionModel)
    inter = out * v.int("in_channels", 3) if mt == "glm_ocr" else v.int("intermediate_size")
    return _mlp("Patch merger", out * out + 2 * out + 3 * out * inter, out * out + 3 * out * inter, m * m)


def hy_v4_vl(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_hy_v4_vl.HYV4VLVisionPatchMerger: before_rms (vision width), proj_conv (v -> v m^2, kernel m, bias),
    GELU, proj_out (1x1 conv v m^2 -> out_hidden_size, bias) and an image_newline of out_hidden_size."""
    v = _vision(r, cfg, mt)
    m, out = v.int("spatial_merge_size", 2), v.int("out_hidden_size")
    wide = vh * m * m
    return _mlp("Patch merger", vh + linear(wide, wide, True) + linear(wide, out, True) + out,
                wide * wide + wide * out, m * m)


def step3p7(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_step3p7.Step3p7Model.multi_modal_projector: one Linear from the downsampled vision width (4 v,
    given here as vh) to the text width, biased by projector_bias; the two stride-2 convs leave 1/16 of the
    patches."""
    return _mlp("Linear projector", linear(vh, th, r.flag("projector_bias", False)), vh * th, 16)


def ernie4_5_vl_moe(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeVariableResolutionResamplerModel: spatial_linear (fc1, fc2 over v m^2,
    LayerNorm) and temporal_linear (fc1 from v m^2 x temporal_merge_size, fc2, LayerNorm), biases; mlp to the text
    width with bias and an RMSNorm after it."""
    v = _vision(r, cfg, mt)
    m, t = v.int("spatial_merge_size", 2), v.int("temporal_merge_size", 2)
    wide = vh * m * m
    params = 2 * linear(wide, wide, True) + 2 * wide + linear(wide * t, wide, True) + linear(wide, wide, True) \
        + 2 * wide + linear(wide, th, True) + th
    return _mlp("Resampler", params, 2 * wide * wide + wide * th, m * m)


PROJECTORS: dict[str, Callable[[str, Reader, int, int, Mapping[str, Any]], ProjectorResult]] = {
    "llava": llava, "llava_next": llava, "llava_next_video": llava, "llava_onevision": llava, "video_llava": llava,
    "vipllava": vipllava, "paligemma": paligemma, "gemma3": gemma3, "shieldgemma2": gemma3,
    "idefics3": idefics3, "smolvlm": idefics3, "mistral3": mistral3, "lighton_ocr": mistral3,
    "mistral_large4": mistral3,
    "qwen2_vl": qwen_vl, "qwen2_5_vl": qwen_vl, "exaone4_5": qwen_vl, "hyperclovax_vision_v2": qwen_vl,
    "paddleocr_vl": paddleocr_vl, "lfm2_vl": lfm2_vl, "aya_vision": aya_vision, "cohere2_vision": aya_vision,
    "deepseek_vl": two_linear, "video_llama_3": two_linear, "internvl": internvl, "qianfan_ocr": internvl,
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "cosmos3_omni"), qwen3_vl),
    **dict.fromkeys(("glm4v", "glm46v", "glmga", "glm4v_moe", "glm_ocr"), glm4v),
    "hy_v4_vl": hy_v4_vl, "step3p7": step3p7, "ernie4_5_vl_moe": ernie4_5_vl_moe,
}


def projector(mt: str, r: Reader, vh: int, th: int, cfg: Mapping[str, Any]) -> ProjectorResult:
    """(projector part, how many vision patches become one text token)."""
    if mt not in PROJECTORS:
        raise ConfigError(r.model, "model_type", mt, "has no projector rule")
    return PROJECTORS[mt](mt, r, vh, th, cfg)
