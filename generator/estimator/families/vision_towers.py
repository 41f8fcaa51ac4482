"""Vision towers of vision-language models: each a stack of pre-norm ViT layers over image patches.

One rule per tower kind (the vision_config's model_type), each following its modeling file. A tower is returned as
(part, patches per image, output width, per-patch activation elements per layer) for vision_language.vlm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ..config.reader import Reader
from ..graph.parts import NORM_PARAMS_PER_WIDTH, Part, linear

TowerResult = tuple[Part, int, int, int]


def vit_layer(h: int, inter: int, *, bias: bool = True, o_bias: bool | None = None, mlp_bias: bool | None = None,
              norm: str = "layernorm", gated: bool = False, extra: int = 0) -> int:
    """One pre-norm ViT layer: q/k/v/o of h x h, an MLP (fc1/fc2, or gate/up/down when gated), two norms."""
    o_bias = bias if o_bias is None else o_bias
    mlp_bias = bias if mlp_bias is None else mlp_bias
    attn = 3 * linear(h, h, bias) + linear(h, h, o_bias)
    mlp = (2 if gated else 1) * linear(h, inter, mlp_bias) + linear(inter, h, mlp_bias)
    return attn + mlp + 2 * NORM_PARAMS_PER_WIDTH[norm] * h + extra


def _side(v: Reader, name: str, default: int | None = None) -> int:
    """image_size / patch_size given as an int or as [height, width] (square towers read the first)."""
    raw = v.cfg.get(name, v.defaults.get(name, default))
    if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], int):
        return int(raw[0])
    return v.int(name, default)


def _part(params: int, n: int, h: int, inter: int, patches: int, per_patch: int, gated: bool = False) -> TowerResult:
    """The tower's Part: its matmul weights are each layer's q/k/v/o (4 x h x h) and its MLP's two matrices, or
    three where the MLP is gated (gate, up, down)."""
    mlp = (3 if gated else 2) * h * inter
    return (Part("Vision_Tower", f"Vision transformer ({n} layers)", params, matmul=n * (4 * h * h + mlp)),
            patches, h, per_patch)


def qwen_vl(v: Reader, kind: str) -> TowerResult:
    """modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel / modeling_qwen2_5_vl: 3-D patch conv, fused qkv."""
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
    part, _, _, _ = _part(params, depth, h, inter, patches, 0, gated=kind != "qwen2_vl_vision")
    # Saved per patch and layer by a trained block (a block's saved tensors, FINDINGS.md F76), in bf16 widths: its two
    # norms' inputs (Qwen2-VL's LayerNorms: 1 h each; Qwen2.5-VL's Qwen2RMSNorms: 2 h each in fp32, and the normalised
    # bf16 copy the weight's gradient reads) and outputs, q and k after the rotary, the qkv output v is a view of
    # (3 h), SDPA's output and the concatenation proj reads; the MLP: fc1's output, quick_gelu's sigmoid and its
    # product (3 inter), or gate, SiLU, up and their product (4 inter).
    return part, patches, h, (11 * h + 3 * inter if kind == "qwen2_vl_vision" else 15 * h + 4 * inter)


def exaone4_5(v: Reader, kind: str) -> TowerResult:
    """modeling_exaone4_5.Exaone4_5_VisionModel: Qwen2.5-VL's tower with grouped K/V heads: a fused biased qkv of
    hidden + 2 x num_key_value_heads x head_dim, a biased proj, a biased gated MLP, RMSNorms; patch conv without
    bias. The merger is the projector."""
    h, depth, inter = v.int("hidden_size"), v.int("depth"), v.int("intermediate_size")
    p, tp, ch = v.int("patch_size", 14), v.int("temporal_patch_size", 2), v.int("in_channels", 3)
    heads = v.int("num_heads")
    kv = v.int("num_key_value_heads", heads) * (h // heads)
    layer = 2 * h + linear(h, h + 2 * kv, True) + linear(h, h, True) + 2 * linear(h, inter, True) \
        + linear(inter, h, True)
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    return _part(ch * tp * p * p * h + depth * layer, depth, h, inter, patches, 8 * h + 3 * inter, gated=True)


def siglip2(v: Reader, kind: str) -> TowerResult:
    """modeling_siglip2.Siglip2VisionTransformer: a Linear patch embedding (channels x patch^2 -> hidden, bias),
    num_patches learned positions, SigLIP layers, post-LayerNorm and (vision_use_head) the attention-pooling head."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, patches = v.int("patch_size"), v.int("num_channels", 3), v.int("num_patches")
    params = linear(ch * p * p, h, True) + patches * h + 2 * h + n * vit_layer(h, inter)
    if v.flag("vision_use_head", True):
        params += h + 3 * h * h + 3 * h + h * h + h + 2 * h + 2 * h * inter + inter + h
    return _part(params, n, h, inter, patches, 8 * h + 2 * inter)


def video_llama_3(v: Reader, kind: str) -> TowerResult:
    """modeling_video_llama_3.VideoLlama3VisionModel: a SigLIP tower with rotary positions instead of learned ones:
    patch conv with bias, SigLIP layers, post-LayerNorm."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch = v.int("patch_size"), v.int("num_channels", 3)
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    return _part(ch * p * p * h + h + 2 * h + n * vit_layer(h, inter), n, h, inter, patches, 8 * h + 2 * inter)


def pixtral(v: Reader, kind: str) -> TowerResult:
    """modeling_pixtral.PixtralVisionModel: patch conv without bias, ln_pre, RMSNorm layers with a gated MLP."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    params = ch * p * p * h + h + n * vit_layer(h, inter, bias=False, norm="rmsnorm", gated=True)
    # a nominal 1024 x 1024 image, as PixtralImageProcessor makes it: whole patches, rounded up (_num_image_tokens)
    patches = min((size // p) ** 2, (-(-1024 // p)) ** 2)
    # saved per patch and layer by a trained PixtralAttentionLayer (FINDINGS.md F76), in bf16 widths: its two
    # PixtralRMSNorms' fp32 inputs, normalised bf16 copies and outputs (8 h), q and k after the rotary, v, and SDPA's
    # output o_proj reads (4 h); gate, SiLU, up and their product (4 inter)
    return _part(params, n, h, inter, patches, 12 * h + 4 * inter, gated=True)


def clip(v: Reader, kind: str) -> TowerResult:
    """modeling_clip.CLIPVisionTransformer: class embedding, patch conv, positions, pre- and post-LayerNorm. Its
    quick_gelu (activations.QuickGELUActivation: input * sigmoid(1.702 x)) keeps the sigmoid beside its input: one
    more MLP-wide tensor per patch and layer (read off llava-1.5's simulated step, FINDINGS.md F73)."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    patches = (size // p) ** 2
    params = h + ch * p * p * h + (patches + 1) * h + 4 * h + n * vit_layer(h, inter)
    kept = 3 if v.str("hidden_act", "quick_gelu") == "quick_gelu" else 2
    return _part(params, n, h, inter, patches, 8 * h + kept * inter)


def blip(v: Reader, kind: str) -> TowerResult:
    """modeling_blip.BlipVisionModel (modeling_blip_2.Blip2VisionModel, InstructBLIP alike): class embedding, a
    3-channel patch conv with bias, num_patches + 1 positions, layers with a fused qkv (BLIP: biased; BLIP-2: q and
    v biases when qkv_bias, one 3h vector) and a biased projection, biased fc1/fc2, two LayerNorms; post_layernorm."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, size = _side(v, "patch_size"), _side(v, "image_size")
    patches = (size // p) ** 2
    bias = True if kind == "blip_vision_model" else v.flag("qkv_bias", True)
    layer = vit_layer(h, inter, bias=bias, o_bias=True, mlp_bias=True)
    params = h + linear(3 * p * p, h, True) + (patches + 1) * h + n * layer + 2 * h
    return _part(params, n, h, inter, patches + 1, 8 * h + 2 * inter)


def vit(v: Reader, kind: str) -> TowerResult:
    """modeling_vit.ViTModel as AutoModel builds it (DeiT alike, modeling_deit.DeiTModel, with a distillation token
    and one more position): cls token, patch conv with bias, num_patches + 1 positions, layers of q/k/v (qkv_bias)
    and a biased o_proj, fc1/fc2 with biases, two LayerNorms; a final LayerNorm and the pooler (a biased Linear to
    pooler_output_size, the hidden size when unset)."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = _side(v, "patch_size"), v.int("num_channels", 3), _side(v, "image_size")
    tokens = (size // p) ** 2 + (2 if kind == "deit" else 1)
    layer = vit_layer(h, inter, bias=v.flag("qkv_bias", True), o_bias=True, mlp_bias=True)
    params = (tokens - (size // p) ** 2) * h + linear(ch * p * p, h, True) + tokens * h + n * layer + 2 * h
    params += linear(h, v.int("pooler_output_size", h), True)
    return _part(params, n, h, inter, tokens, 8 * h + 2 * inter)


def sam_encoder(v: Reader) -> tuple[int, int, int, int, int]:
    """modeling_sam.SamVisionEncoder (GOT-OCR2's, PP-FormulaNet's, Unlimited-OCR's and DeepSeek-VL hybrid's alike):
    patch conv with bias, absolute positions (use_abs_pos) of the grid, layers of two LayerNorms, a fused qkv
    (qkv_bias), a biased proj, relative position tables (use_rel_pos) of 2 x side - 1 rows per axis and head_dim
    (side: window_size, or the grid on global_attn_indexes), lin1 / lin2 of mlp_dim (else hidden x mlp_ratio); then
    the neck (sam_neck). (params, layers, hidden, mlp width, grid side)."""
    h, n, heads, p, size = (v.int("hidden_size"), v.int("num_hidden_layers"), v.int("num_attention_heads"),
                            v.int("patch_size"), v.int("image_size"))
    mlp = v.opt_int("mlp_dim") or int(h * v.number("mlp_ratio", 4.0, high=64.0))
    oc, win = v.int("output_channels", 256), v.int("window_size", 14)
    grid, hd = size // p, h // heads
    glob = set(v.list("global_attn_indexes", int) or [])
    rel = v.flag("use_rel_pos", True)
    params = v.int("num_channels", 3) * p * p * h + h + (grid * grid * h if v.flag("use_abs_pos", True) else 0)
    for i in range(n):
        side = grid if i in glob else win
        params += (4 * h + linear(h, 3 * h, v.flag("qkv_bias", True)) + linear(h, h, True) + linear(h, mlp, True)
                   + linear(mlp, h, True) + (2 * (2 * side - 1) * hd if rel else 0))
    return params + sam_neck(h, oc), n, h, mlp, grid


def sam_neck(h: int, oc: int) -> int:
    """modeling_sam.SamVisionNeck (DeepSeek-VL hybrid's high_res_vision_neck alike): conv1 1x1 h -> oc, a
    LayerNorm, conv2 3x3 oc -> oc, a LayerNorm; no conv biases."""
    return h * oc + 2 * oc + oc * oc * 9 + 2 * oc


def sam(v: Reader, kind: str) -> TowerResult:
    """The SAM encoder and neck (sam_encoder) as a vision tower part: grid x grid patches of 8 h + 2 mlp saved
    elements per layer."""
    params, n, h, mlp, grid = sam_encoder(v)
    tower = Part("Vision_Tower", f"SAM vision transformer ({n} layers)", params, matmul=n * (4 * h * h + 2 * h * mlp))
    return tower, grid * grid, h, 8 * h + 2 * mlp


def clip_encoder(v: Reader) -> TowerResult:
    """A CLIP vision transformer fed patch embeddings from elsewhere (modeling_unlimited_ocr.UnlimitedOcrVisionEncoder,
    a CLIPVisionModel without post_layernorm whose patch conv is unused): class embedding, num_patches + 1
    positions, pre-LayerNorm and the CLIP layers."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    patches = (_side(v, "image_size") // _side(v, "patch_size")) ** 2
    return _part(h + (patches + 1) * h + 2 * h + n * vit_layer(h, inter), n, h, inter, patches + 1, 8 * h + 2 * inter)


def siglip(v: Reader, kind: str) -> TowerResult:
    """modeling_siglip.SiglipVisionTransformer (Idefics3 / SmolVLM alike): patch conv with bias, positions,
    post-LayerNorm, and (SigLIP, vision_use_head) an attention-pooling head."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    patches = (size // p) ** 2
    params = ch * p * p * h + h + patches * h + 2 * h + n * vit_layer(h, inter)
    if kind == "siglip_vision_model" and v.flag("vision_use_head", True):
        # attention-pooling head: probe, nn.MultiheadAttention (in_proj 3h x h + 3h, out_proj), LayerNorm, MLP
        params += h + 3 * h * h + 3 * h + h * h + h + 2 * h + 2 * h * inter + inter + h
    return _part(params, n, h, inter, patches, 8 * h + 2 * inter)


def internvl(v: Reader, kind: str) -> TowerResult:
    """modeling_internvl.InternVLVisionModel (Qianfan-OCR alike): cls token, optional mask token, absolute
    positions, patch conv with bias; layers with q/k/v (attention_bias), a biased projection_layer, optional q/k
    RMSNorms of the full width, layer-scale lambda_1/lambda_2 and LayerNorm or RMSNorm (norm_type); a final
    LayerNorm unless use_mean_pooling."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = _side(v, "patch_size"), v.int("num_channels", 3), _side(v, "image_size")
    patches = (size // p) ** 2
    norm = "rmsnorm" if v.str("norm_type", "layer_norm") == "rms_norm" else "layernorm"
    qk = 2 * h if v.flag("use_qk_norm", False) else 0
    layer = vit_layer(h, inter, bias=v.flag("attention_bias", False), o_bias=True, mlp_bias=True, norm=norm,
                      extra=qk + 2 * h)
    params = h + ch * p * p * h + h + n * layer
    params += h if v.flag("use_mask_token", False) else 0
    params += (patches + 1) * h if v.flag("use_absolute_position_embeddings", True) else 0
    params += 0 if v.flag("use_mean_pooling", True) else 2 * h
    return _part(params, n, h, inter, patches, 8 * h + 2 * inter)


def qwen3_vl(v: Reader, kind: str) -> TowerResult:
    """modeling_qwen3_vl.Qwen3VLVisionModel (Qwen3.5 alike): 3-D patch conv with bias, learned positions
    (num_position_embeddings), LayerNorm layers with a fused biased qkv, biased proj and fc1/fc2. The merger and the
    DeepStack mergers are the projector (vision_projectors.qwen3_vl)."""
    h, depth, inter = v.int("hidden_size"), v.int("depth"), v.int("intermediate_size")
    p, tp, ch = v.int("patch_size", 16), v.int("temporal_patch_size", 2), v.int("in_channels", 3)
    params = ch * tp * p * p * h + h + v.int("num_position_embeddings") * h + depth * vit_layer(h, inter)
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    # saved per patch and layer (FINDINGS.md F76), as qwen_vl's Qwen2-VL: 11 h; fc1's output and the GELU's (2 inter)
    return _part(params, depth, h, inter, patches, 11 * h + 2 * inter)


def glm4v(v: Reader, kind: str) -> TowerResult:
    """modeling_glm4v.Glm4vVisionModel: learned positions ((image_size / patch_size)^2), 3-D patch conv with bias,
    RMSNorm layers with a fused qkv (attention_bias), proj without bias and a gated MLP as wide as out_hidden_size
    (no bias); post_conv_layernorm, the merge conv (hidden -> out_hidden_size, kernel spatial_merge_size, bias) and
    post_layernorm. The patch merger is the projector (vision_projectors.glm4v)."""
    h, depth, out = v.int("hidden_size"), v.int("depth"), v.int("out_hidden_size")
    p, tp, ch, m = v.int("patch_size", 14), v.int("temporal_patch_size", 2), v.int("in_channels", 3), \
        v.int("spatial_merge_size", 2)
    patches = (v.int("image_size") // p) ** 2
    layer = 2 * h + linear(h, 3 * h, v.flag("attention_bias", False)) + h * h + 3 * h * out
    params = patches * h + ch * tp * p * p * h + h + depth * layer + h + linear(h * m * m, out, True) + h
    return _part(params, depth, h, out, patches, 8 * h + 3 * out, gated=True)


def glm_ocr(v: Reader, kind: str) -> TowerResult:
    """modeling_glm_ocr.GlmOcrVisionModel: 3-D patch conv with bias, RMSNorm layers with qkv and proj biased by
    attention_bias, q/k RMSNorms of head_dim, a gated MLP of intermediate_size (biases by attention_bias); the merge
    conv and post_layernorm. No learned positions, no post-conv norm. The patch merger is the projector."""
    h, depth, out, inter = v.int("hidden_size"), v.int("depth"), v.int("out_hidden_size"), v.int("intermediate_size")
    p, tp, ch, m = v.int("patch_size", 14), v.int("temporal_patch_size", 2), v.int("in_channels", 3), \
        v.int("spatial_merge_size", 2)
    bias = v.flag("attention_bias", True)
    hd = h // v.int("num_heads")
    layer = 2 * h + linear(h, 3 * h, bias) + linear(h, h, bias) + 2 * hd + 2 * linear(h, inter, bias) \
        + linear(inter, h, bias)
    params = ch * tp * p * p * h + h + depth * layer + linear(h * m * m, out, True) + h
    return _part(params, depth, h, inter, (v.int("image_size") // p) ** 2, 8 * h + 3 * inter, gated=True)


def hy_v4_vl(v: Reader, kind: str) -> TowerResult:
    """modeling_hy_v4_vl.HYV4VLVisionModel: patch conv with bias, (max_image_size / patch_size)^2 + 1 learned
    positions, LayerNorm layers with biased q/k/v/o and fc1/fc2. The patch merger is the projector."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch = v.int("patch_size"), v.int("num_channels", 3)
    grid = v.int("max_image_size") // p
    params = ch * p * p * h + h + (grid * grid + 1) * h + n * vit_layer(h, inter)
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    return _part(params, n, h, inter, patches, 8 * h + 2 * inter)


def step3p7(v: Reader, kind: str) -> TowerResult:
    """modeling_step3p7.Step3p7VisionModel: patch conv without bias, (image_size / patch_size)^2 learned positions,
    pre-LayerNorm, LayerNorm layers with biased q/k/v/out and fc1/fc2 of int(hidden x mlp_ratio) (the config
    derives intermediate_size), layer scales lambda_1/lambda_2; two stride-2 3x3 convs (h -> 2h -> 4h, bias)."""
    h, n, p = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("patch_size")
    inter = v.derived("intermediate_size", int(h * v.number("mlp_ratio", 8960 / 1536, high=1e6)),
                      "int(hidden_size x mlp_ratio)")
    grid = v.int("image_size") // p
    params = (v.int("num_channels", 3) * p * p * h + grid * grid * h + 2 * h + n * vit_layer(h, inter, extra=2 * h)
              + h * 2 * h * 9 + 2 * h + 2 * h * 4 * h * 9 + 4 * h)
    return _part(params, n, h, inter, grid * grid, 8 * h + 2 * inter)[0], grid * grid, 4 * h, 8 * h + 2 * inter


def ernie4_5_vl_moe(v: Reader, kind: str) -> TowerResult:
    """modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeVisionTransformerPretrainedModel: a Linear patch embedding (channels x
    patch^2 -> hidden, no bias), LayerNorm blocks with a fused biased qkv, biased proj and fc1/fc2 of
    intermediate_size, a final LayerNorm. The resampler is the projector."""
    h, n, inter, p = v.int("hidden_size"), v.int("depth"), v.int("intermediate_size"), _side(v, "patch_size")
    params = v.int("in_channels", 3) * p * p * h + n * vit_layer(h, inter) + 2 * h
    return _part(params, n, h, inter, (448 // p) ** 2, 8 * h + 2 * inter)  # a nominal 448 x 448 image


# image_processing_gemma4.py Gemma4ImageProcessor.max_soft_tokens: the soft tokens one image becomes by default.
GEMMA4_SOFT_TOKENS = 280


def gemma4_vision(v: Reader, kind: str) -> TowerResult:
    """modeling_gemma4.Gemma4VisionModel: a bias-free Linear patch embedding (3 x patch^2 -> hidden) plus a
    2 x position_embedding_size x hidden table of x and y positions; layers of bias-free q/k/v/o
    (Gemma4ClippableLinear; q and k RMSNorms of head_dim, v's without scale), a gated MLP and four RMSNorms; a
    parameter-free pooler averaging pooling_kernel_size^2 patches into one soft token. An image is
    GEMMA4_SOFT_TOKENS x pooling_kernel_size^2 patches at most (image_processing_gemma4.py max_patches)."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    heads, hd = v.int("num_attention_heads"), v.int("head_dim")
    kv, p, k = v.int("num_key_value_heads", heads), v.int("patch_size"), v.int("pooling_kernel_size")
    layer = 2 * h * heads * hd + 2 * h * kv * hd + 3 * h * inter + 4 * h + 2 * hd
    params = 3 * p * p * h + 2 * v.int("position_embedding_size") * h + n * layer
    # Saved per patch and layer by a trained layer (Gemma4VisionEncoderLayer's saved tensors, FINDINGS.md F76), in bf16
    # widths: its four Gemma4RMSNorms' fp32 inputs and normalised fp32 copies (16 h), q/k/v's norms' fp32 inputs and
    # q's and k's copies (10 h), q, k, v (3 h), the inputs of q/k/v, o and gate/up (3 h); the MLP's gate, GELU, up and
    # product (4 inter).
    return _part(params, n, h, inter, GEMMA4_SOFT_TOKENS * k * k, 32 * h + 4 * inter, gated=True)


TOWERS: dict[str, Callable[[Reader, str], TowerResult]] = {
    "qwen2_vl_vision": qwen_vl, "qwen2_5_vl_vision": qwen_vl, "pixtral": pixtral, "clip_vision_model": clip,
    "siglip_vision_model": siglip, "idefics3_vision": siglip, "smolvlm_vision": siglip,
    "paddleocr_vl_vision": siglip, "video_llama_3_vision": video_llama_3, "siglip2_vision_model": siglip2, "exaone4_5_vision": exaone4_5,
    "internvl_vision": internvl, "qianfan_ocr_vision": internvl,
    "qwen3_vl_vision": qwen3_vl, "qwen3_vl_moe_vision": qwen3_vl, "qwen3_5_vision": qwen3_vl,
    "qwen3_5_moe_vision": qwen3_vl, "qwen2_5_omni_vision_encoder": qwen_vl, "qwen3_omni_moe_vision_encoder": qwen3_vl,
    "glm4v_vision": glm4v, "glm4v_moe_vision": glm4v, "glm_ocr_vision": glm_ocr,
    "hy_v4_vl_vision": hy_v4_vl, "step3p5_vision": step3p7,
    "ernie4_5_vl_moe_vision": ernie4_5_vl_moe, "gemma4_vision": gemma4_vision,
    "vit": vit, "deit": vit, "granite_docling_vision": siglip, "idefics_vision": clip, "idefics2_vision": siglip, "kosmos_2_vision_model": clip,
    **dict.fromkeys(("blip_vision_model", "blip_2_vision_model", "instructblip_vision_model",
                     "instructblipvideo_vision_model"), blip),
}


# Wrappers whose config class fixes the vision config class (sub_configs): the file's vision_config.model_type does
# not choose the tower (Qwen3.5 files name it "qwen3_5"). Others take any (AutoConfig): the file's, else a default.
FIXED_VISION = {mt: mt + "_vision" for mt in ("ernie4_5_vl_moe", "exaone4_5", "glm4v", "glm4v_moe", "glm_ocr", "hy_v4_vl", "idefics3", "internvl",
                                               "paddleocr_vl", "qianfan_ocr", "qwen2_5_vl", "qwen2_vl", "qwen3_5",
                                               "qwen3_5_moe", "qwen3_vl", "qwen3_vl_moe", "smolvlm",
                                               "video_llama_3")} | {
    "qwen2_5_omni_thinker": "qwen2_5_omni_vision_encoder", "qwen3_omni_moe_thinker": "qwen3_omni_moe_vision_encoder",
    "step3p7": "step3p5_vision"}
DEFAULT_VISION = {  # AutoConfig wrappers whose vision_config names no model_type
    **dict.fromkeys(("llava", "llava_next", "llava_next_video", "vipllava", "video_llava"), "clip_vision_model"),
    **dict.fromkeys(("paligemma", "gemma3", "shieldgemma2", "llava_onevision", "aya_vision", "deepseek_vl",
                     "cohere2_vision"), "siglip_vision_model"),
    "mistral3": "pixtral", "lighton_ocr": "pixtral", "mistral_large4": "pixtral",
}


def tower_kind(mt: str, vc: Mapping[str, Any]) -> str:
    """The vision tower a wrapper builds: its fixed vision config class, else the file's, else the default."""
    given = vc.get("model_type") if isinstance(vc, Mapping) else None
    return FIXED_VISION.get(mt) or (given if isinstance(given, str) else DEFAULT_VISION.get(mt, ""))


def vision_transient(patches: int, per_patch: int, vh: int) -> int:
    """Serving working set of a tower per image, elements: one layer's per-patch activations plus its input and
    output (2 x width) for every patch."""
    return patches * (per_patch + 2 * vh)


def vision_activations(tower: Part, patches: int, per_patch: int, vh: int, layers: int = 0) -> int:
    """Saved elements of a tower per image: per-patch activations times its layers (`layers` where its Linears are
    itemised, tower_linears.layer_count; else about params / 12 vh^2, a ViT layer's with an MLP 4 x wide)."""
    n = layers or max(1, tower.params // max(1, 12 * vh * vh))
    return patches * per_patch * n if tower.matmul else 0


def vision_tower(vc: Mapping[str, Any], r: Reader, kind: str, key: str = "vision_config") -> TowerResult:
    """(tower part, patches per image, hidden width out, per-patch activation elements per layer); `key`: where the
    tower's config sits in the file."""
    if kind not in TOWERS:
        raise ConfigError(r.model, f"{key}.model_type", kind, "is not a supported vision tower")
    return TOWERS[kind](r.child(vc, kind, prefix=f"{key}."), kind)
