"""Nemotron 3.5 Transcribe: a speech recognition encoder, a speaker diarization model and a word-timestamp head
around a Nemotron-H language model (modeling_nemotron3_5_transcribe.py, modeling_nemotron3_diarization.py).

Every audio part is a node beside the token embedding, as speech_language.with_audio lays out an audio tower; its
names start with "Audio" or "Projector" so that the report counts them outside the language model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .speech_language import wrapped
from .vision_language import retie, text_tower

# A nominal clip: 30 s of 100 log-mel frames per second, as the other speech towers price one clip.
CLIP_MEL_FRAMES = 3000


def _layer(a: Reader, qk_norm: bool) -> tuple[int, int]:
    """(parameters, matmul weights) of one pre-norm layer (modeling_nemotron3_5_transcribe.
    Nemotron3_5TranscribeAsrAudioLayer; modeling_nemotron3_diarization.Nemotron3DiarizationAudioLayer alike):
    q_proj and v_proj of heads x head_dim and k_proj of K/V heads x head_dim without bias, o_proj with bias, a
    LayerNorm on q and on k of head_dim (the transcribe attention only), layer_norm1/layer_norm2, fc1/fc2 with
    biases."""
    d, inter, heads = a.int("hidden_size"), a.int("intermediate_size"), a.int("num_attention_heads")
    hd = a.int("head_dim", d // heads)
    kv = a.int("num_key_value_heads", heads) * hd
    attn = 2 * linear(d, heads * hd) + linear(d, kv) + linear(heads * hd, d, True) + (4 * hd if qk_norm else 0)
    params = attn + 4 * d + linear(d, inter, True) + linear(inter, d, True)
    return params, d * (2 * heads * hd + kv) + heads * hd * d + 2 * d * inter


def _stack(a: Reader, qk_norm: bool) -> tuple[int, int, int, int]:
    """(parameters, matmul weights, saved elements per frame, working set per frame) of the layers with their
    input_layer_norm and final layer_norm (Nemotron3_5TranscribeAsrAudioModel, Nemotron3DiarizationAudioModel,
    Nemotron3_5TranscribeWordTimestampModel); each layer saves about 8 d + 2 inter elements per frame."""
    d, n, inter = a.int("hidden_size"), a.int("num_hidden_layers"), a.int("intermediate_size")
    params, mm = _layer(a, qk_norm)
    return n * params + 4 * d, n * mm, n * (8 * d + 2 * inter), 4 * d + inter


def _stacking(a: Reader) -> int:
    """Nemotron3_5TranscribeFeatureStacking (Nemotron3DiarizationFeatureStacking alike): subsampling_factor
    log-mel frames stacked, one Linear to the width without bias."""
    return linear(a.int("subsampling_factor", 8) * a.int("num_mel_bins"), a.int("hidden_size"))


def diarizer(r: Reader, dc: Mapping[str, Any]) -> tuple[Part, int, int, int]:
    """modeling_nemotron3_diarization.Nemotron3DiarizationForAudioFrameClassification: its audio tower (feature
    stacking, layers without q/k norms), proj (encoder width -> head_config.hidden_size, bias), the sub-pixel
    upsampler (Conv1d head width -> head width x subsampling_factor, kernel 3, bias), the classifier (dense head
    width -> head width and out_proj -> num_speakers, biases) and silence_embeds of the encoder width. Returns
    (part, speakers, saved and working elements per encoder frame)."""
    d = r.child(dc, "nemotron3_diarization", prefix="audio_config.diarization_config.")
    ac, hc = d.sub("audio_config") or {}, d.sub("head_config") or {}
    a = r.child(ac, "nemotron3_diarization_audio", prefix="audio_config.diarization_config.audio_config.")
    # Nemotron3DiarizationHeadConfig has no model_type of its own: its defaults are read here (192, 8).
    h = r.child(hc, "nemotron3_diarization_head", prefix="audio_config.diarization_config.head_config.")
    hh, speakers, up = h.int("hidden_size", 192), h.int("num_speakers", 8), h.int("subsampling_factor", 8)
    width = a.int("hidden_size")
    params, mm, saved, working = _stack(a, qk_norm=False)
    head = linear(h.int("audio_hidden_size", width), hh, True) + linear(3 * hh, hh * up, True) \
        + linear(hh, hh, True) + linear(hh, speakers, True)
    part = Part("Audio_Diarizer", f"Speaker diarization ({a.int('num_hidden_layers')} layers)",
                _stacking(a) + params + head + width, matmul=mm + width * hh + 3 * hh * hh * up)
    return part, speakers, saved, working


def transcriber(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_nemotron3_5_transcribe.Nemotron3_5TranscribeForConditionalGeneration: the audio tower
    (Nemotron3_5TranscribeAudioModel: asr_encoder of feature stacking, layers with q/k LayerNorms and a final
    LayerNorm; the diarization model; asr_norm of the encoder width and speaker_norm of num_speakers, LayerNorms;
    the speaker embedding is a buffer), multi_modal_projector (encoder width -> text, bias), the language model,
    word_timestamp_encoder (Nemotron3_5TranscribeWordTimestampModel: a ConvTranspose1d upsampler of kernel and
    stride upsampling_factor with bias, then the same layers), lm_head (never tied: _tied_weights_keys is None) and
    word_timestamp_head (a kernel-1 Conv1d to its vocab_size, bias). One clip: 30 s of log-mel frames over the
    subsampling factor, each encoder frame one text token."""
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    r = Reader(cfg, model, mt)
    au = r.child(r.sub("audio_config") or {}, "nemotron3_5_transcribe_audio", prefix="audio_config.")
    asr = r.child(au.sub("asr_config") or {}, "nemotron3_5_transcribe_asr_audio", prefix="audio_config.asr_config.")
    d, th = asr.int("hidden_size"), text.spec.hidden
    params, mm, saved, working = _stack(asr, qk_norm=True)
    tower = Part("Audio_Tower", f"Speech recognition encoder ({asr.int('num_hidden_layers')} layers)",
                 _stacking(asr) + params, matmul=mm)
    diar, speakers, d_saved, d_working = diarizer(r, au.sub("diarization_config") or {})
    norms = Part("Audio_Norms", "LayerNorm", 2 * d + 2 * speakers)
    proj = Part("Projector", "Linear projector", linear(d, th, True), matmul=d * th)
    w = r.child(r.sub("word_timestamp_config") or {}, "nemotron3_5_transcribe_word_timestamp",
                prefix="word_timestamp_config.")
    wd, up, classes = w.int("hidden_size"), w.int("upsampling_factor", 2), w.int("vocab_size")
    w_params, w_mm, w_saved, w_working = _stack(w, qk_norm=True)
    words = Part("Audio_Word_Timestamps", f"Word timestamp encoder ({w.int('num_hidden_layers')} layers)",
                 linear(wd * up, wd, True) + w_params, matmul=wd * wd * up + w_mm)
    head = Part("Audio_Word_Timestamp_Head", "Conv1d classifier", linear(wd, classes, True), matmul=wd * classes)
    frames = CLIP_MEL_FRAMES // asr.int("subsampling_factor", 8)
    spec = text.spec
    new = dataclasses.replace(spec, embed=(*spec.embed, tower, diar, norms, proj, words, head),
                              image_tokens=max(spec.image_tokens, frames),
                              vision_act=spec.vision_act + frames * (saved + d_saved + up * w_saved),
                              vision_transient=max(spec.vision_transient, frames * max(working, d_working),
                                                   up * frames * w_working))
    return retie(wrapped(text, new, cfg, model, r, mt), False)


WRAPPERS: dict[str, Wrapper] = {"nemo_speechlm": transcriber}
# Config classes read only as this wrapper's sub-configs (the diarization model is an AutoConfig sub-config).
SUB_CONFIGS = ("nemotron3_diarization", "nemotron3_diarization_audio")
