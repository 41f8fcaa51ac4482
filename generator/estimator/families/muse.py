"""Muse Spark and Muse Glimmer (modeling_muse_spark.py, modeling_muse_glimmer.py): text towers and the VLM wrapper.

Both share a ViT over temporal patches with a learned position table, a two-Linear vision adapter and a projection
to the text width; Spark adds a convolutional audio tower and a text tower whose experts run at moe_hidden_size
between a down and an up projection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, linear, lm_head_part, mlp_part, moe_part, norm_part
from .assembly import Builder, TextReader, Wrapper, assemble
from .decoder import DecoderTraits
from .vision_towers import vit_layer

# modeling_muse_glimmer.MuseGlimmerTextDecoderLayer: gated attention (gate_proj hidden -> heads x head_dim, q/k and
# output norms without weights), four centred RMSNorms around attention and the SwiGLU MLP, untied head.
GLIMMER = DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias",
                        o_bias="attention_bias", attn_linears=lambda d: ((d.hidden, d.heads * d.hd),))


def muse_spark_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_muse_spark.MuseSparkTextModel: an embedding normed without weights; per layer gated attention as
    Glimmer's, a centred RMSNorm before attention and before the MLP, a weightless one after attention, an input-
    scaled one after the MLP, two residual gates (hidden each); on "sparse" layers (mlp_layer_types, default all)
    MuseSparkMoE: router (experts x hidden), pre_expert_proj hidden -> moe_hidden_size and its RMSNorm, 3-D experts
    of moe_intermediate_size at moe_hidden_size with a post-expert RMSNorm, post_expert_proj back; else a SwiGLU of
    intermediate_size. Final RMSNorm, untied head."""
    r = Reader(cfg, model, "muse_spark_text")
    h, n, heads, kv, hd = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                           r.int("num_key_value_heads"), r.int("head_dim"))
    vocab, inter, bias = r.int("vocab_size"), r.int("intermediate_size"), r.flag("attention_bias")
    experts, top_k, mh, mi = (r.int("num_local_experts"), r.int("num_experts_per_tok"), r.int("moe_hidden_size"),
                              r.int("moe_intermediate_size"))
    types = r.list("layer_types", str, length=n) or [
        "full_attention" if (n - 1 - i) % 4 == 0 else "sliding_attention" for i in range(n)]
    mlps = r.list("mlp_layer_types", str, length=n) or ["sparse"] * n
    window = r.opt_int("sliding_window") or 0
    windows = tuple(window if t == "sliding_attention" else 0 for t in types[:n])
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "Gated Attn", h, heads, kv, hd, qkv_bias=bias, o_bias=bias,
                              window=windows[i - 1], extra=h * heads * hd, extra_linears=((h, heads * hd),))
        if mlps[i - 1] == "sparse":
            ffn = moe_part(f"MoE_{i}", mh, experts, top_k, mi, router_params=experts * h,
                           extra=2 * h * mh + 2 * mh)
            ffn = ffn._replace(type=f"MoE ({experts} experts, top-{top_k})", matmul=ffn.matmul + 2 * h * mh,
                               active_matmul=ffn.active_matmul + 2 * h * mh)
        else:
            ffn = mlp_part(f"FFN_{i}", "SwiGLU", h, inter, True)
        block = standard_block(i, [], attn, ffn, "rmsnorm", h, norms=("pre_attn", "pre_mlp", "post_mlp"),
                               kind="sliding" if windows[i - 1] else "attention")
        blocks.append(Block(i, block.kind, (*block.parts, Part(f"Residual_Gates_{i}", "Parameters", 2 * h))))
    tie = r.flag("tie_word_embeddings", False)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE")]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=kv, head_dim=hd, inter=inter, vocab=vocab,
                    ctx=r.int("max_position_embeddings"), tie=tie, embed=embed, blocks=blocks, head=head,
                    windows=windows, experts=experts if "sparse" in mlps[:n] else 0,
                    top_k=top_k if "sparse" in mlps[:n] else 0)


def _vision(r: Reader, cfg: Mapping[str, Any], mt: str, th: int) -> tuple[Part, Part, int]:
    """MuseSparkVisionModel (MuseGlimmerVisionModel alike): a Linear patch embedding (patch_temporal x 3 x patch^2
    -> hidden, no bias), pos_emb_height x pos_emb_width positions, ln_pre, LayerNorm layers with biased q/k/v/proj
    and fc1/fc2, ln_post; then MuseSparkVisionAdapter (fc1 out_hidden_size -> projector_hidden_size, fc2, no bias)
    and vision_projection (projector_hidden_size -> text). The merge (merge_size^2 patches) is a pixel shuffle."""
    v = r.child(cfg.get("vision_config") or {}, f"{mt}_vision", prefix="vision_config.")
    h, n, inter, p = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size"), v.int("patch_size")
    grid = v.int("pos_emb_height") * v.int("pos_emb_width")
    params = v.int("patch_temporal") * 3 * p * p * h + grid * h + 4 * h + n * vit_layer(h, inter)
    tower = Part("Vision_Tower", f"Vision transformer ({n} layers)", params, matmul=n * (4 * h * h + 2 * h * inter))
    out, mid = r.int("out_hidden_size"), r.int("projector_hidden_size")
    proj = Part("Projector", "Vision adapter", out * mid + mid * mid + mid * th, matmul=out * mid + mid * mid + mid * th)
    m = v.int("merge_size")
    return tower, proj, grid // (m * m)


def _audio(r: Reader, cfg: Mapping[str, Any]) -> Part:
    """modeling_muse_spark.MuseSparkAudioModel: per stage a patch embedding (Linear of in-channels x patch_size ->
    width with bias, RMSNorm; the first stage reads the mono waveform) and depths[i] conv blocks (a depthwise causal
    Conv1d of conv_kernel_size with bias, RMSNorm, fc1/fc2 of width x mlp_ratio with biases); a final RMSNorm, proj
    to out_hidden_size with bias and its RMSNorm."""
    a = r.child(cfg.get("audio_config") or {}, "muse_spark_audio", prefix="audio_config.")
    sizes, patches, depths = a.list("hidden_sizes", int), a.list("patch_sizes", int), a.list("depths", int)
    stages = a.int("num_hidden_layers")
    if not (sizes and patches and depths) or not len(sizes) == len(patches) == len(depths) == stages:
        raise ConfigError(r.model, "audio_config.hidden_sizes", sizes, "must list one width per stage, as "
                          "patch_sizes and depths do")
    kernel, ratio, out = a.int("conv_kernel_size"), a.number("mlp_ratio", 4.0, high=1e6), a.int("out_hidden_size")
    params = mm = 0
    prev = 1
    for w, p, depth in zip(sizes, patches, depths, strict=True):
        wide = int(w * ratio)
        params += linear(prev * p, w, True) + w + depth * (w * kernel + w + w + linear(w, wide, True) + linear(wide, w, True))
        mm += prev * p * w + depth * 2 * w * wide
        prev = w
    params += prev + linear(prev, out, True) + out
    return Part("Audio_Tower", f"Audio encoder ({stages} stages)", params, matmul=mm + prev * out)


def muse(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """MuseSparkForConditionalGeneration / MuseGlimmerForConditionalGeneration: the text tower of text_config
    (its head follows text_config), the vision tower, adapter and projection, and (Spark) the audio tower."""
    mt = str(cfg.get("model_type"))
    text_cfg = cfg.get("text_config") or {}
    if not isinstance(text_cfg, Mapping):
        raise ConfigError(model, "text_config", text_cfg, "must be a JSON object")
    text = read_text(dict(text_cfg, model_type=f"{mt}_text"), model)
    r = Reader(cfg, model, mt)
    tower, proj, tokens = _vision(r, cfg, mt, text.hidden)
    extra = (tower, proj, _audio(r, cfg)) if mt == "muse_spark" else (tower, proj)
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, *extra), image_tokens=tokens)
    return dataclasses.replace(text, model_type=mt, family=mt, spec=spec, uses=tuple(r.uses) + text.uses,
                               architectures=architectures_of(cfg, model))


TRAITS: dict[str, DecoderTraits] = {"muse_glimmer_text": GLIMMER}
BUILDERS: dict[str, Builder] = {"muse_spark_text": muse_spark_text}
WRAPPERS: dict[str, Wrapper] = {"muse_spark": muse, "muse_glimmer": muse}
