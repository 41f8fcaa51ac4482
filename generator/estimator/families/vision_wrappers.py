"""Vision-language wrappers whose vision side is its own: Llama 4, Aria, Ovis2 (a tower, adapter or projector each
modeling file lays out), around a text tower of any family.

Each builds the text tower with vision_language.text_tower, counts the vision parts as its modeling file builds them
and hands both to vision_language.attach.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .vision_language import attach, text_tower
from .vision_towers import vision_tower, vision_transient, vit_layer


def wrapper_parts(cfg: Mapping[str, Any], model: str, mt: str, read_text: TextReader) -> tuple[Arch, Reader, bool]:
    """(text tower, the wrapper's reader, whether the named class is the text tower alone: a ForCausalLM)."""
    text = text_tower(cfg, model, mt, read_text)
    archs = architectures_of(cfg, model)
    return text, Reader(cfg, model, mt), bool(archs) and archs[0].endswith("ForCausalLM")


def vision_reader(r: Reader, cfg: Mapping[str, Any], kind: str, key: str = "vision_config") -> Reader:
    """A reader of a nested config (vision_config by default) under its config class's defaults."""
    vc = cfg.get(key) or {}
    if not isinstance(vc, Mapping):
        raise ConfigError(r.model, key, vc, "must be a JSON object")
    return r.child(vc, kind, prefix=key + ".")


def tower_part(params: int, n: int, matmul: int, name: str = "Vision_Tower", what: str = "Vision transformer") -> Part:
    return Part(name, f"{what} ({n} layers)", params, matmul=matmul)


def llama4(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_llama4.Llama4ForConditionalGeneration: Llama4VisionModel (an unfolded patch Linear without bias,
    class embedding, (image/patch)^2 + 1 positions, layernorm_pre/post, LayerNorm layers with biased q/k/v/o and
    fc1/fc2, and vision_adapter: pixel shuffle then fc1 intermediate_size -> projector_input_dim, fc2
    projector_output_dim square, no biases); multi_modal_projector linear_1 vision_output_dim -> text width, no bias.
    The language model is a Llama4ForCausalLM of text_config (its own tie)."""
    text, r, alone = wrapper_parts(cfg, model, "llama4", read_text)
    if alone:
        return dataclasses.replace(text, model_type="llama4", architectures=architectures_of(cfg, model))
    v = vision_reader(r, cfg, "llama4_vision_model")
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    pin, pout = v.int("projector_input_dim"), v.int("projector_output_dim")
    patches = (size // p) ** 2
    params = ch * p * p * h + h + (patches + 1) * h + 4 * h + n * vit_layer(h, inter) + inter * pin + pout * pout
    tower = tower_part(params, n, n * (4 * h * h + 2 * h * inter) + inter * pin + pout * pout)
    out, th = v.int("vision_output_dim"), text.spec.hidden
    proj = Part("Projector", "Linear projector", out * th, matmul=out * th)
    ratio = v.number("pixel_shuffle_ratio", 0.5)
    tokens = max(1, int(patches * ratio * ratio))
    return attach(text, cfg, r, (tower, proj), tokens=tokens, act=patches * n * (8 * h + 2 * inter),
                  transient=patches * (4 * h + inter))


def aria(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_aria.AriaForConditionalGeneration: an Idefics3 vision tower, AriaProjector (query of
    max(projector_patch_to_query_dict) rows x vision width; AriaCrossAttention: q/k/v without bias, an
    nn.MultiheadAttention, a biased Linear, two LayerNorms; a LayerNorm; AriaProjectorMLP vision -> text -> text
    without biases), an AriaTextModel and an LM head tied by the top-level tie_word_embeddings."""
    text, r, _ = wrapper_parts(cfg, model, "aria", read_text)
    tower, patches, vh, per_patch = vision_tower(cfg.get("vision_config") or {}, r, "idefics3_vision")
    th = text.spec.hidden
    queries = r.sub("projector_patch_to_query_dict")
    q = max(int(x) for x in queries.values()) if queries else 256  # AriaConfig.__post_init__: {1225: 128, 4900: 256}
    mha = linear(vh, 3 * vh, True) + linear(vh, vh, True)
    params = q * vh + 3 * vh * vh + mha + linear(vh, vh, True) + 4 * vh + 2 * vh + vh * th + th * th
    proj = Part("Projector", "Cross-attention projector", params, matmul=5 * vh * vh + vh * th + th * th)
    layers = max(1, tower.matmul // max(1, 12 * vh * vh))
    return attach(text, cfg, r, (tower, proj), tokens=q, act=patches * per_patch * layers,
                  transient=vision_transient(patches, per_patch, vh), tie=r.flag("tie_word_embeddings", text.tie))


def ovis2(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_ovis2.Ovis2ForConditionalGeneration: Ovis2VisionModel (patch conv with bias, positions, an
    RMSNorm after the embedding, RMSNorm layers with q/k/v/out (qkv_bias) and a gated MLP (mlp_bias), a final
    RMSNorm; head_linear hidden x hidden_stride^2 -> vocab_size - num_visual_indicator_tokens without bias and its
    LayerNorm), visual_embeddings_table (vision vocab_size x the top-level hidden_size), the text model, and an LM
    head of the top-level hidden_size x vocab_size tied (tie_word_embeddings) to the text embedding."""
    text, r, _ = wrapper_parts(cfg, model, "ovis2", read_text)
    v = vision_reader(r, cfg, "ovis2_vision")
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, ch, size = v.int("patch_size"), v.int("num_channels", 3), v.int("image_size")
    stride, vocab = v.int("hidden_stride", 1), v.int("vocab_size")
    rows = vocab - v.int("num_visual_indicator_tokens", 5, minimum=0)
    patches = (size // p) ** 2
    layer = vit_layer(h, inter, bias=v.flag("qkv_bias", False), mlp_bias=v.flag("mlp_bias", False), norm="rmsnorm",
                      gated=True)
    params = ch * p * p * h + h + patches * h + h + n * layer + h + h * stride * stride * rows + 2 * rows
    tower = tower_part(params, n, n * (4 * h * h + 3 * h * inter) + h * stride * stride * rows)
    top_h, top_vocab = r.int("hidden_size"), r.int("vocab_size")
    table = Part("Visual_Embedding", "Embedding", vocab * top_h)
    tie = r.flag("tie_word_embeddings", True)
    arch = attach(text, cfg, r, (tower, table), tokens=patches // (stride * stride),
                  act=patches * n * (8 * h + 3 * inter), transient=patches * (4 * h + inter), tie=tie)
    head = tuple(q._replace(params=0 if tie else top_h * top_vocab) if q.name == "LM_Head" else q
                 for q in arch.spec.head)
    return dataclasses.replace(arch, spec=dataclasses.replace(arch.spec, head=head))


def lfm3_vl(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_lfm3_vl.Lfm3VlForConditionalGeneration: Lfm3VlVisionModel (patch_embed Linear of channels x
    temporal_patch_size x patch^2 without bias, embedding_norm; per layer_types entry a gated depthwise conv
    (in_proj h -> 3 h, a conv_kernel_size^2 depthwise conv, out_proj) or grouped-query attention with q/k RMSNorms of
    head_dim, a gated MLP, two RMSNorms; no biases), the projector (LayerNorm of the vision width, linear_1 vision x
    spatial_merge_size^2 -> projector_hidden_size, linear_2 to the text width, projector_bias), the text model and an
    LM head tied by the top-level tie_word_embeddings."""
    text, r, _ = wrapper_parts(cfg, model, "lfm3_vl", read_text)
    v = vision_reader(r, cfg, "lfm3_vl_vision")
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, tp, ch, m = v.int("patch_size"), v.int("temporal_patch_size", 2), v.int("in_channels", 3), \
        v.int("spatial_merge_size", 2)
    heads = v.int("num_attention_heads")
    hd = h // heads
    kv = v.int("num_key_value_heads", heads) * hd
    k = v.int("conv_kernel_size", 3)
    types = v.list("layer_types") or ["conv" if i < 2 or i % 2 else "full_attention" for i in range(n)]
    conv = 3 * h * h + k * k * h + h * h
    attn = 2 * h * h + 2 * h * kv + 2 * hd
    params = ch * tp * p * p * h + h + sum((conv if t == "conv" else attn) + 3 * h * inter + 2 * h for t in types[:n])
    tower = tower_part(params, n, n * (4 * h * h + 3 * h * inter))
    mid, bias, th = r.int("projector_hidden_size"), r.flag("projector_bias", True), text.spec.hidden
    proj = Part("Projector", "MLP projector", 2 * h + linear(h * m * m, mid, bias) + linear(mid, th, bias),
                matmul=h * m * m * mid + mid * th)
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    return attach(text, cfg, r, (tower, proj), tokens=patches // (m * m), act=patches * n * (8 * h + 3 * inter),
                  transient=patches * (4 * h + inter), tie=r.flag("tie_word_embeddings", True))


def kimi_k25(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_kimi_k25.Kimi_K25ForConditionalGeneration: Kimi_K25VisionModel (patch conv of 3 channels with bias,
    a pos_emb_height x pos_emb_width learned position grid, LayerNorm layers with biased q/k/v/proj and fc1/fc2,
    final_layernorm), mm_projector (pre_norm LayerNorm of projection_hidden_size, in_proj square over
    merge_kernel_size merged patches, out_proj to the text width, biases), the text model and an LM head tied by
    the top-level tie_word_embeddings."""
    text, r, _ = wrapper_parts(cfg, model, "kimi_k25", read_text)
    v = vision_reader(r, cfg, "kimi_k25_vision")
    h, n, inter, p = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size"), v.int("patch_size")
    params = 3 * p * p * h + h + v.int("pos_emb_height") * v.int("pos_emb_width") * h + n * vit_layer(h, inter) + 2 * h
    tower = tower_part(params, n, n * (4 * h * h + 2 * h * inter))
    kernel = v.list("merge_kernel_size", int, length=2) or [2, 2]
    wide, th = h * kernel[0] * kernel[1], text.spec.hidden
    proj = Part("Projector", "Patch merger", 2 * r.int("projection_hidden_size", h) + linear(wide, wide, True)
                + linear(wide, th, True), matmul=wide * wide + wide * th)
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    return attach(text, cfg, r, (tower, proj), tokens=patches // (kernel[0] * kernel[1]),
                  act=patches * n * (8 * h + 2 * inter), transient=patches * (4 * h + inter),
                  tie=r.flag("tie_word_embeddings", True))


def minimax_m3_vl(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_minimax_m3_vl.MiniMaxM3SparseForConditionalGeneration: MiniMaxM3VLVisionModel (a 3-D patch conv
    without bias, pre_layrnorm, CLIP layers with biased q/k/v/out and fc1/fc2; no post norm), the projector (per
    patch linear_1 vision -> projector_hidden_size, linear_2 -> text; then over spatial_merge_size^2 patches
    merge_linear_1 text x merge^2 -> projector_hidden_size, merge_linear_2 -> text; biases), the MiniMax-M3 text
    model and an LM head tied by the top-level tie_word_embeddings."""
    text, r, _ = wrapper_parts(cfg, model, "minimax_m3_vl", read_text)
    v = vision_reader(r, cfg, "minimax_m3_vl_vision")
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    p, tp, ch, m = v.int("patch_size"), v.int("temporal_patch_size", 2), v.int("num_channels", 3), \
        v.int("spatial_merge_size", 2)
    tower = tower_part(ch * tp * p * p * h + 2 * h + n * vit_layer(h, inter), n, n * (4 * h * h + 2 * h * inter))
    mid, th = r.int("projector_hidden_size"), text.spec.hidden
    params = linear(h, mid, True) + linear(mid, th, True) + linear(th * m * m, mid, True) + linear(mid, th, True)
    proj = Part("Projector", "Two-stage MLP patch merger", params, matmul=h * mid + mid * th + (th * m * m * mid
                                                                                              + mid * th) // (m * m))
    patches = (448 // p) ** 2  # a nominal 448 x 448 image (the processor resizes dynamically)
    return attach(text, cfg, r, (tower, proj), tokens=patches // (m * m), act=patches * n * (8 * h + 2 * inter),
                  transient=patches * (4 * h + inter), tie=r.flag("tie_word_embeddings", False))


def molmo2(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_molmo2.Molmo2ForConditionalGeneration: Molmo2VisionModel (num_position_embeddings positions, a
    biased patch Linear, LayerNorm layers with q/k/v/o of heads x head_dim (attention_bias) and biased fc1/fc2; a
    legacy vit_config keeps only the layers up to the deepest vision_feature_layer), the adapter (image_pooling_2d:
    attention from hidden x len(vision_feature_layer) with biases by attention_bias; image_projector: gate/up
    (mlp_bias) and down to text_hidden_size without bias), Molmo2TextModel (an Olmo2-style decoder whose q/k
    RMSNorms are per head for qk_norm_type "qwen3", so read as qwen3, or over the projection for "olmo", read as
    olmo2; its embedding has additional_vocab_size more rows) and an LM head the class never ties (it declares no
    _tied_weights_keys, whatever tie_word_embeddings says)."""
    tc = cfg.get("text_config") or {}
    qk = tc.get("qk_norm_type", "qwen3") if isinstance(tc, Mapping) else "qwen3"
    text = text_tower(cfg, model, "molmo2", read_text, base="olmo2" if qk == "olmo" else "qwen3")
    r = Reader(cfg, model, "molmo2")
    legacy = "vision_config" not in cfg and "vit_config" in cfg
    vc = cfg.get("vit_config") if legacy else cfg.get("vision_config")
    v = r.child(vc if isinstance(vc, Mapping) else {}, "molmo2_vision", prefix="vision_config.",
                aliases={"patch_size": ("image_patch_size",), "num_position_embeddings": ("image_num_pos",)})
    a = vision_reader(r, cfg, "molmo2_adapter", "adapter_config")
    h, n, inter, p = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size"), v.int("patch_size")
    feature = a.list("vision_feature_layer", int) or [24, 18]  # Molmo2AdapterConfig.__post_init__
    if legacy:
        n = max(x % n for x in feature) + 1
    heads, kv, hd = v.int("num_attention_heads"), v.int("num_key_value_heads"), v.int("head_dim")
    bias = v.flag("attention_bias", True)
    layer = 4 * h + linear(h, heads * hd, bias) + 2 * linear(h, kv * hd, bias) + linear(heads * hd, h, bias) \
        + linear(h, inter, True) + linear(inter, h, True)
    pos = v.opt_int("num_position_embeddings") or (378 // p) ** 2
    tower = tower_part(pos * h + linear(p * p * v.int("num_channels", 3), h, True) + n * layer, n,
                       n * (4 * h * h + 2 * h * inter))
    ah, aheads, akv, ahd = a.int("hidden_size"), a.int("num_attention_heads"), a.int("num_key_value_heads"), \
        a.int("head_dim")
    wide, abias, ainter = ah * len(feature), a.flag("attention_bias", True), a.int("intermediate_size")
    pool = linear(wide, aheads * ahd, abias) + 2 * linear(wide, akv * ahd, abias) + linear(aheads * ahd, ah, abias)
    mlp = 2 * linear(ah, ainter, a.flag("mlp_bias", False)) + ainter * a.int("text_hidden_size")
    proj = Part("Projector", "Attention pooling + SwiGLU projector", pool + mlp, matmul=pool + mlp)
    t = r.child(tc if isinstance(tc, Mapping) else {}, "molmo2_text", prefix="text_config.")
    extra = Part("Additional_Embedding", "Embedding", t.int("additional_vocab_size", 128, minimum=0) * text.spec.hidden)
    return attach(text, cfg, r, (extra, tower, proj), tokens=pos // 4, act=pos * n * (8 * h + 2 * inter),
                  transient=pos * (4 * h + inter), tie=False)


def cosmos3_edge(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_cosmos3_edge.Cosmos3EdgeForConditionalGeneration: Cosmos3EdgeVisionModel (SigLIP2-style: a biased
    patch Linear, num_patches positions, LayerNorm layers with biased q/k/v/out and fc1/fc2, post_layernorm; no
    pooling head), the projector (Cosmos3EdgePatchMerger: LayerNorm of the vision width, linear_fc1 vision x
    spatial_merge_size^2 -> projector_hidden_size, linear_fc2 to the text width, biases), Cosmos3EdgeTextModel (a
    llama layout with a plain fc1/fc2 MLP: read as arcee) and an LM head never tied (_tied_weights_keys is
    empty)."""
    text, r, _ = wrapper_parts(cfg, model, "cosmos3_edge", read_text)
    v = vision_reader(r, cfg, "cosmos3_edge_vision")
    h, n, inter, p = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size"), v.int("patch_size")
    patches, m = v.int("num_patches"), v.int("spatial_merge_size", 2)
    params = linear(v.int("num_channels", 3) * p * p, h, True) + patches * h + n * vit_layer(h, inter) + 2 * h
    tower = tower_part(params, n, n * (4 * h * h + 2 * h * inter))
    mid, th = r.int("projector_hidden_size"), text.spec.hidden
    proj = Part("Projector", "Patch merger", 2 * h + linear(h * m * m, mid, True) + linear(mid, th, True),
                matmul=h * m * m * mid + mid * th)
    return attach(text, cfg, r, (tower, proj), tokens=patches // (m * m), act=patches * n * (8 * h + 2 * inter),
                  transient=patches * (4 * h + inter), tie=False)


WRAPPERS: dict[str, Wrapper] = {
    "cosmos3_edge": cosmos3_edge,
    "molmo2": molmo2,
    "minimax_m3_vl": minimax_m3_vl,
    "kimi_k25": kimi_k25,
    "lfm3_vl": lfm3_vl,
    "llama4": llama4,
    "aria": aria,
    "ovis2": ovis2,
}
