"""dots.3-Note (modeling_dots3_note.py): its MLA text model (latent_attention.py) with a mixture-of-experts vision
encoder and a rotary audio encoder, each ending in its adapter to the text width.

Both towers are nodes beside the token embedding, as vision_language.attach lays them out; the model always builds
both (Dots3NoteModel), from the class defaults where the file has no vision_config or audio_config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.parts import Part, linear
from .assembly import Builder
from .decoder import build
from .latent_attention import TRAITS
from .vision_language import attach
from .vision_towers import vision_transient

# Dots3NoteVisionConfig.__post_init__: the released schedule of routed experts per layer (-1: a dense MLP).
PYRAMID = [-1] * 25 + list(range(4, 65, 4)) + [64]
# A nominal 448 x 448 image and a nominal 30 s clip, as the other towers price one input.
IMAGE_SIDE, CLIP_SECONDS = 448, 30
VISION_ALIASES = {"hidden_size": ("embed_dim",), "num_attention_heads": ("num_heads",), "attention_bias": ("use_bias",)}
AUDIO_ALIASES = {"adapter_input_size": ("whisper_adapter_in_dim",),
                 "adapter_out_dim": ("whisper_adapter_out_dim", "adapter_output_size")}
# Dots3NoteAudioConfig.__post_init__: released files keep the encoder's sizes in a Whisper-style whisper_config.
WHISPER_KEYS = {"d_model": "hidden_size", "encoder_attention_heads": "num_attention_heads",
                "encoder_layers": "num_hidden_layers", "encoder_ffn_dim": "intermediate_size",
                "num_mel_bins": "feature_size", "max_source_positions": "max_position_embeddings"}


def _experts(v: Reader, n: int) -> list[tuple[int, int]]:
    """(routed experts, experts per token) of each vision layer, 0 experts for a dense MLP: mlp_layer_types with
    per_layer_config's num_local_experts (keyed by the layer index), else the pyramid_num_routed schedule."""
    types = v.list("mlp_layer_types", str, n)
    per = v.cfg.get("per_layer_config")
    per = per if isinstance(per, Mapping) else {}
    top = v.int("num_experts_per_tok", 2)
    if types is None:
        counts = v.list("pyramid_num_routed", int, n) or PYRAMID
        return [(c, min(top, c)) if c > 0 else (0, 0) for c in counts[:n]]
    out = []
    for i, kind in enumerate(types[:n]):
        over = per.get(str(i), per.get(i))
        layer = Reader({**v.cfg, **over}, v.model, v.model_type, v.aliases) if isinstance(over, Mapping) else v
        layer.uses = v.uses
        e = layer.int("num_local_experts") if kind == "sparse" else 0
        out.append((e, min(layer.int("num_experts_per_tok", top), e)))
    return out


def vision(v: Reader) -> tuple[Part, Part, int, int, int]:
    """modeling_dots3_note.Dots3NoteVisionModel: patch_embed (a Conv2d channels -> hidden of patch_size with bias,
    then an RMSNorm), blocks (Dots3NoteVisionBlock: two RMSNorms, attention with a fused qkv and proj of
    attention_bias and q/k RMSNorms of head_dim, then Dots3NoteVisionMLP (gate/up/down of intermediate_size,
    mlp_bias) or Dots3NoteVisionMoE (a float32 router of experts x hidden, experts of moe_intermediate_size, no
    shared expert)), a final RMSNorm, and the merger (Dots3NoteVisionMerger: a LayerNorm of adapter_in_dim, then
    Linear(adapter_in_dim x merge^2, same) and Linear(-> adapter_out_dim), biased). Returns (tower, merger, patches
    per image, merge^2, per-patch activations per layer)."""
    h, n, heads, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("num_attention_heads"), \
        v.int("intermediate_size")
    p, mi, bias = v.int("patch_size"), v.int("moe_intermediate_size"), v.flag("attention_bias", False)
    attn = linear(h, 3 * h, bias) + linear(h, h, bias) + 2 * (h // heads) + 2 * h
    params = v.int("num_channels", 3) * p * p * h + h + h + n * attn + h
    active = params
    mm = mm_active = n * 4 * h * h
    for e, k in _experts(v, n):
        if e:
            params += e * h + e * 3 * h * mi
            active += e * h + k * 3 * h * mi
            mm, mm_active = mm + e * h + e * 3 * h * mi, mm_active + e * h + k * 3 * h * mi
        else:
            dense = 2 * linear(h, inter, v.flag("mlp_bias", False)) + linear(inter, h, v.flag("mlp_bias", False))
            params, active, mm, mm_active = params + dense, active + dense, mm + 3 * h * inter, mm_active + 3 * h * inter
    tower = Part("Vision_Tower", f"Mixture-of-experts vision transformer ({n} layers)", params, active=active,
                 matmul=mm, active_matmul=mm_active)
    m, ai, ao = v.int("adapter_merge_size", 2), v.int("adapter_in_dim"), v.int("adapter_out_dim")
    wide = ai * m * m
    merger = Part("Projector", "Patch merger", 2 * ai + linear(wide, wide, True) + linear(wide, ao, True),
                  matmul=wide * wide + wide * ao)
    return tower, merger, (IMAGE_SIDE // p) ** 2, m * m, 8 * h + 3 * inter


def audio_reader(r: Reader, ac: Mapping[str, Any]) -> Reader:
    """The audio config with a released file's whisper_config sizes read under their field names."""
    wc = ac.get("whisper_config")
    legacy = {WHISPER_KEYS[k]: v for k, v in wc.items() if k in WHISPER_KEYS} if isinstance(wc, Mapping) else {}
    return r.child({**ac, **legacy}, "dots3_note_audio_encoder", AUDIO_ALIASES, prefix="audio_config.")


def audio(a: Reader) -> tuple[Part, Part, int, int, int]:
    """modeling_dots3_note.Dots3NoteAudioModel: conv_stem (three 3 x 3 stride-2 Conv2d of downsample_hidden_size
    channels with bias, conv_out (channels x ceil(feature_size / 8) -> hidden, no bias)), layers (Dots3NoteAudioLayer:
    two RMSNorms, q_proj/v_proj/o_proj of heads x hidden / heads with attention_bias and k_proj hidden x hidden
    without, a fused gate_up_proj and down_proj with biases), a final RMSNorm, and the adapter (Dots3NoteAudioAdapter:
    a LayerNorm, fc1 adapter_input_size -> adapter_out_dim and fc2, biased). Returns (tower, adapter, tokens per
    clip, saved and working elements per token)."""
    d, n, inter, heads = a.int("hidden_size"), a.int("num_hidden_layers"), a.int("intermediate_size"), \
        a.int("num_attention_heads")
    ch, feats, bias = a.int("downsample_hidden_size"), a.int("feature_size"), a.flag("attention_bias", True)
    wide = heads * (d // heads)
    stem = linear(9, ch, True) + 2 * linear(9 * ch, ch, True) + linear(ch * ((feats + 7) // 8), d)
    layer = 2 * linear(d, wide, bias) + linear(d, d) + linear(wide, d, bias) + 2 * d \
        + linear(d, 2 * inter, True) + linear(inter, d, True)
    tower = Part("Audio_Tower", f"Audio encoder ({n} layers)", stem + n * layer + d,
                 matmul=n * (4 * d * d + 3 * d * inter))
    ai, ao = a.int("adapter_input_size"), a.int("adapter_out_dim")
    adapter = Part("Audio_Projector", "Audio adapter", 2 * ai + linear(ai, ao, True) + linear(ao, ao, True),
                   matmul=ai * ao + ao * ao)
    tokens = CLIP_SECONDS * a.int("sampling_rate", 16000) // (a.int("hop_length", 160) * 8)
    return tower, adapter, tokens, n * (8 * d + 3 * inter), 4 * d + 2 * inter


def dots3_note(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_dots3_note.Dots3NoteForConditionalGeneration: the text model of text_config (the top-level keys in
    published files), the vision tower and the audio tower; Dots3NoteForCausalLM is the text model alone. One sample
    carries one image or one clip."""
    text = cfg.get("text_config")
    if text is None:  # Dots3NoteConfig.__post_init__: published checkpoints keep the text keys at the top level
        text = {k: v for k, v in cfg.items() if k not in ("vision_config", "audio_config", "architectures")}
    if not isinstance(text, Mapping):
        raise ConfigError(model, "text_config", text, "must be a JSON object")
    arch = build(dict(text, model_type="dots3_note_text"), model, "dots3_note_text", TRAITS["dots3_note_text"])
    archs = architectures_of(cfg, model)
    if archs and archs[0].endswith("ForCausalLM"):
        return dataclasses.replace(arch, model_type="dots3_note", family="dots3_note", architectures=archs)
    r = Reader(cfg, model, "dots3_note")
    v = r.child(r.sub("vision_config") or {}, "dots3_note_vision_encoder", VISION_ALIASES, prefix="vision_config.")
    tower, merger, patches, shrink, per_patch = vision(v)
    a_tower, adapter, tokens, saved, working = audio(audio_reader(r, r.sub("audio_config") or {}))
    vlayers = v.int("num_hidden_layers")
    act = max(patches * per_patch * vlayers, tokens * saved)
    transient = max(vision_transient(patches, per_patch, v.int("hidden_size")), tokens * working)
    return attach(arch, cfg, r, (tower, merger, a_tower, adapter), tokens=max(patches // shrink, tokens), act=act,
                  transient=transient)


BUILDERS: dict[str, Builder] = {"dots3_note": dots3_note}
