"""Speech-language models: a text model (its own family's builder), an audio tower and the projector between them.

The audio tower is a node of the graph beside the token embedding, as a vision tower is (vision_language.vlm);
its kind is the audio_config's model_type (audio_towers.py), else the wrapper's default. The LM head follows the
wrapper's tie_word_embeddings. Memory for audio: `image_tokens` is what one clip adds to the text sequence (the
tower's frames over the projector's stacking), and the tower's activations are added per sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.parts import Part, Spec, linear
from . import vision_projectors
from .assembly import TextReader, Wrapper
from .audio_towers import TOWERS, audio_tower
from .vision_language import retie, text_tower
from .vision_towers import tower_kind, vision_tower, vision_transient

# The audio config class each wrapper builds when audio_config names no model_type (its SubConfigSpec default);
# musicflamingo's config class always reads it as AudioFlamingo3's (configuration_musicflamingo.py).
DEFAULT_AUDIO = {"qwen2_5_omni_thinker": "qwen2_5_omni_audio_encoder",
                 "qwen3_omni_moe_thinker": "qwen3_omni_moe_audio_encoder", "qwen2_audio": "qwen2_audio_encoder", "audioflamingo3": "audioflamingo3_encoder",
                 "omniasr": "omniasr_audio", "voxtral": "voxtral_encoder", "voxtral_realtime": "voxtral_realtime_encoder", "glmasr": "glmasr_encoder", "qwen3_asr": "qwen3_asr_encoder",
                 "moss_transcribe_diarize": "moss_transcribe_diarize_audio"}
FIXED_AUDIO = {"musicflamingo": "audioflamingo3_encoder", "granite_speech": "granite_speech_encoder",
               "granite_speech_plus": "granite_speech_plus_encoder", "moss_transcribe_diarize": "moss_transcribe_diarize_audio"}

# Wrappers whose audio tower's config is not audio_config.
AUDIO_KEY = {"granite_speech": "encoder_config", "granite_speech_plus": "encoder_config"}
# Config classes read only as a wrapper's sub-config: the audio towers and the Q-Former.
SUB_CONFIGS = (*TOWERS, "blip_2_qformer")

ProjectorResult = tuple[Part, int]  # (projector part, how many tower frames become one text token)
AudioProjector = Callable[[Reader, Reader, int, int], ProjectorResult]


def _proj(params: int, matmul: int, shrink: int = 1, typ: str = "Audio projector") -> ProjectorResult:
    return Part("Projector", typ, params, matmul=matmul), shrink


def one_linear(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_qwen2_audio.Qwen2AudioMultiModalProjector (OmniASR's multi_modal_projector alike): one Linear (audio
    width -> text, bias); Qwen2-Audio's tower's avg_pooler halves the frames."""
    return _proj(linear(ad, th, True), ad * th, 2 if r.model_type == "qwen2_audio" else 1, "Linear projector")


def two_linear(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_audioflamingo3.AudioFlamingo3MultiModalProjector (MusicFlamingo alike): linear_1 (audio -> text),
    GELU, linear_2 (text -> text), biases by projector_bias; the tower's avg_pooler halves the frames."""
    bias = r.flag("projector_bias", True)
    return _proj(linear(ad, th, bias) + linear(th, th, bias), ad * th + th * th, 2)


def voxtral(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_voxtral.VoxtralMultiModalProjector: linear_1 (the audio intermediate_size, four frames stacked ->
    text) and linear_2 (text -> text), no bias."""
    wide = a.int("intermediate_size")
    return _proj(linear(wide, th) + linear(th, th), wide * th + th * th, max(1, wide // ad))


def voxtral_realtime(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_voxtral_realtime.VoxtralRealtimeMultiModalProjector: linear_1 (downsample_factor frames stacked ->
    text), GELU, linear_2 (text -> text), no bias."""
    m = r.int("downsample_factor", 4)
    return _proj(linear(ad * m, th) + linear(th, th), ad * m * th + th * th, m)


def glmasr(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_glmasr.GlmAsrMultiModalProjector: linear_1 (the audio intermediate_size, frames stacked -> 2 x
    text), GELU, linear_2 (2 x text -> text), biases."""
    wide = a.int("intermediate_size")
    return _proj(linear(wide, 2 * th, True) + linear(2 * th, th, True), 2 * wide * th + 2 * th * th,
                 max(1, wide // ad))


def qwen3_asr(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_qwen3_asr.Qwen3ASRMultiModalProjector: linear_1 (d_model -> d_model), GELU, linear_2 (d_model ->
    output_dim), biases."""
    out = a.int("output_dim")
    return _proj(linear(ad, ad, True) + linear(ad, out, True), ad * ad + ad * out)


def qformer(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_granite_speech.GraniteSpeechEncoderProjector: window_size / downsample_rate learned queries, a
    Q-Former (modeling_blip_2.Blip2QFormerModel: a LayerNorm; per layer self-attention q/k/v/dense with biases and a
    LayerNorm, cross-attention every cross_attention_frequency layers with k/v from encoder_hidden_size, the query
    feed-forward intermediate_query/output_query with a LayerNorm, and the text one when use_qformer_text_input),
    then a Linear (Q-Former width -> text, bias). Each window of window_size frames becomes its queries."""
    pc = r.sub("projector_config") or {}
    q = r.child(pc, str(pc.get("model_type") or "blip_2_qformer"), prefix="projector_config.")
    h, n, inter = q.int("hidden_size"), q.int("num_hidden_layers"), q.int("intermediate_size")
    enc, freq = q.int("encoder_hidden_size", ad), q.int("cross_attention_frequency", 2)
    ffn = linear(h, inter, True) + linear(inter, h, True) + 2 * h
    layer = 4 * linear(h, h, True) + 2 * h + ffn * (2 if q.flag("use_qformer_text_input", False) else 1)
    cross = 2 * linear(h, h, True) + 2 * linear(enc, h, True) + 2 * h
    params = 2 * h + n * layer + len(range(0, n, freq)) * cross
    window, rate = r.int("window_size"), r.int("downsample_rate")
    params += window // rate * h + linear(h, th, True)
    mm = n * (4 * h * h + 2 * h * inter) + len(range(0, n, freq)) * (2 * h * h + 2 * enc * h) + h * th
    return _proj(params, mm, rate, "Q-Former projector")


def moss(r: Reader, a: Reader, ad: int, th: int) -> ProjectorResult:
    """modeling_moss_transcribe_diarize.py: audio_merge_size frames stacked, linear_1, linear_2 (projector_bias),
    LayerNorm."""
    m = r.int("audio_merge_size", 4)
    merged, bias = ad * m, r.flag("projector_bias", True)
    return _proj(linear(merged, th, bias) + linear(th, th, bias) + 2 * th, merged * th + th * th, m)


PROJECTORS: dict[str, AudioProjector] = {
    "qwen2_audio": one_linear, "omniasr": one_linear, "audioflamingo3": two_linear, "musicflamingo": two_linear, "voxtral": voxtral, "voxtral_realtime": voxtral_realtime,
    "glmasr": glmasr, "qwen3_asr": qwen3_asr, "moss_transcribe_diarize": moss,
    "granite_speech": qformer, "granite_speech_plus": qformer,
}


def audio_kind(mt: str, ac: Mapping[str, Any]) -> str:
    """The audio tower a wrapper builds: its fixed audio config class, else the file's, else the default."""
    given = ac.get("model_type")
    return FIXED_AUDIO.get(mt) or (given if isinstance(given, str) else DEFAULT_AUDIO.get(mt, ""))


def wrapped(text: Arch, spec: Spec, cfg: Mapping[str, Any], model: str, r: Reader, mt: str) -> Arch:
    """The text model as the wrapper `mt` with the whole graph `spec`, its head tied by the wrapper's
    tie_word_embeddings."""
    text = retie(dataclasses.replace(text, spec=spec), r.flag("tie_word_embeddings", text.tie))
    return dataclasses.replace(text, model_type=mt, family=mt, uses=tuple(r.uses) + text.uses,
                               architectures=architectures_of(cfg, model))


def with_audio(text: Arch, cfg: Mapping[str, Any], model: str, r: Reader, mt: str,
               extra: tuple[Part, ...] = ()) -> Arch:
    """`text` with the wrapper's audio tower and projector in front of it (and `extra` parts, an omni model's
    vision tower), its head tied by the wrapper's tie_word_embeddings."""
    spec = text.spec
    key = AUDIO_KEY.get(mt, "audio_config")
    ac = cfg.get(key) or {}
    if not isinstance(ac, Mapping):
        raise ConfigError(model, key, ac, "must be a JSON object")
    kind = audio_kind(mt, ac)
    tower, frames, ad, saved, working = audio_tower(ac, r, kind, key)
    parts: tuple[Part, ...] = (tower,)
    shrink = 1
    if mt in PROJECTORS:
        proj, shrink = PROJECTORS[mt](r, r.child(ac, kind, prefix=f"{key}."), ad, spec.hidden)
        parts += (proj,)
    new = dataclasses.replace(spec, embed=(*spec.embed, *parts, *extra),
                              image_tokens=max(spec.image_tokens, frames // shrink),
                              vision_act=spec.vision_act + frames * saved,
                              vision_transient=max(spec.vision_transient, frames * working))
    return wrapped(text, new, cfg, model, r, mt)


def speech_lm(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """An audio tower, a projector and a text model (modeling_qwen2_audio.Qwen2AudioForConditionalGeneration and
    the wrappers in PROJECTORS)."""
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    return with_audio(text, cfg, model, Reader(cfg, model, mt), mt)


def omni_thinker(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_qwen2_5_omni.Qwen2_5OmniThinkerForConditionalGeneration (Qwen3-Omni-MoE alike): an audio tower whose
    projection is its own (audio_towers), a Qwen2.5-VL (Qwen3-Omni: Qwen3-VL) vision tower and patch merger, and the
    text model; one sample carries one image or one clip."""
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    r = Reader(cfg, model, mt)
    vc = cfg.get("vision_config") or {}
    if not isinstance(vc, Mapping):
        raise ConfigError(model, "vision_config", vc, "must be a JSON object")
    tower, patches, vh, per_patch = vision_tower(vc, r, tower_kind(mt, vc))
    merge = vision_projectors.qwen3_vl if mt == "qwen3_omni_moe_thinker" else vision_projectors.qwen_vl
    proj, shrink = merge(mt, r, vh, text.spec.hidden, cfg)
    vlayers = tower.matmul // max(1, 12 * vh * vh)
    spec = dataclasses.replace(text.spec, image_tokens=patches // shrink, vision_act=patches * per_patch * vlayers,
                               vision_transient=vision_transient(patches, per_patch, vh))
    return with_audio(dataclasses.replace(text, spec=spec), cfg, model, r, mt,
                      (tower, proj._replace(name="Vision_Projector")))


def vibevoice_asr(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_vibevoice_asr.VibeVoiceAsrModel: two tokenizer encoders (acoustic_tokenizer_encoder_config,
    semantic_tokenizer_encoder_config) run side by side, a projector per path (linear_1 tokenizer width -> text,
    RMSNorm, linear_2, biases; VibeVoiceAsrMultiModalProjector) and the text model."""
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    r = Reader(cfg, model, mt)
    th = text.spec.hidden
    parts: list[Part] = []
    frames = saved = working = 0
    for path in ("acoustic", "semantic"):
        key = f"{path}_tokenizer_encoder_config"
        ac = r.sub(key) or {}
        tower, frames, ad, per, work = audio_tower(ac, r, "vibevoice_acoustic_tokenizer_encoder", key)
        name = path.capitalize()
        parts += [tower._replace(name=f"{name}_Tower"),
                  Part(f"{name}_Projector", "Audio projector", linear(ad, th, True) + th + linear(th, th, True),
                       matmul=ad * th + th * th)]
        saved, working = saved + per, max(working, work)
    spec = text.spec
    new = dataclasses.replace(spec, embed=(*spec.embed, *parts), image_tokens=frames, vision_act=frames * saved,
                              vision_transient=frames * working)
    return wrapped(text, new, cfg, model, r, mt)


WRAPPERS: dict[str, Wrapper] = {"vibevoice_asr": vibevoice_asr,**dict.fromkeys(PROJECTORS, speech_lm), "qwen2_5_omni_thinker": omni_thinker,
                                "qwen3_omni_moe_thinker": omni_thinker}
