"""Audio towers of speech-language models: the encoders that turn a log-mel clip into frames for the text model.

One rule per tower kind (the audio_config's model_type), each following its modeling file. A tower is returned as
(part, frames per clip, output width, saved activation elements per frame over all layers, working set per frame)
for speech_language.speech_lm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ..config.reader import Reader
from ..graph.parts import Part, linear

AudioResult = tuple[Part, int, int, int, int]


def _part(params: int, n: int, d: int, inter: int, frames: int, name: str = "Audio encoder") -> AudioResult:
    """A stack of n transformer layers of width d: per frame each saves about 8 d + 2 inter elements."""
    return (Part("Audio_Tower", f"{name} ({n} layers)", params, matmul=n * (4 * d * d + 2 * d * inter)),
            frames, d, n * (8 * d + 2 * inter), 4 * d + inter)


def whisper_layer(d: int, inter: int, kv: int | None = None) -> int:
    """One pre-norm Whisper encoder layer (modeling_whisper.WhisperEncoderLayer): q/v/out with bias, k_proj without
    (its K/V width `kv` when grouped, GLM-ASR), fc1/fc2 with bias, two LayerNorms."""
    kv = d if kv is None else kv
    return linear(d, d, True) + linear(d, kv) + linear(d, kv, True) + linear(d, d, True) \
        + linear(d, inter, True) + linear(inter, d, True) + 4 * d


def whisper_like(a: Reader, kind: str) -> AudioResult:
    """The Whisper encoder as the speech LMs hold it (modeling_qwen2_audio.Qwen2AudioEncoder; AudioFlamingo3, Voxtral,
    MOSS alike): conv1 (num_mel_bins -> d, k 3) and conv2 (d -> d, k 3, stride 2) with bias, max_source_positions
    learned positions, Whisper layers, a final LayerNorm. GLM-ASR (modeling_glmasr.GlmAsrEncoder) uses rotary
    positions and grouped K/V heads; Qwen2.5-Omni (modeling_qwen2_5_omni.Qwen2_5OmniAudioEncoder) has sinusoidal
    positions (a buffer), audio_bos_eos_token (2 x output_dim) and proj (d -> output_dim, bias)."""
    d, n, inter, mels = a.int("hidden_size"), a.int("num_hidden_layers"), a.int("intermediate_size"), \
        a.int("num_mel_bins")
    kv = None
    if kind == "glmasr_encoder":
        heads = a.int("num_attention_heads")
        kv = a.int("num_key_value_heads", heads) * (d // heads)
        frames = a.int("max_position_embeddings", 1500)
        positions = 0
    else:
        frames = a.int("max_source_positions")
        positions = 0 if kind == "qwen2_5_omni_audio_encoder" else frames * d
    params = linear(mels * 3, d, True) + linear(d * 3, d, True) + positions + n * whisper_layer(d, inter, kv) + 2 * d
    if kind == "qwen2_5_omni_audio_encoder":
        out = a.int("output_dim")
        params += 2 * out + linear(d, out, True)
    return _part(params, n, d, inter, frames)


def _conv2d_out(size: int) -> int:
    """Height after a 3 x 3 stride-2 padding-1 convolution."""
    return (size + 1) // 2


def qwen3_audio(a: Reader, kind: str) -> AudioResult:
    """modeling_qwen3_omni_moe.Qwen3OmniMoeAudioEncoder (modeling_qwen3_asr.Qwen3ASREncoder alike): three 3 x 3
    stride-2 Conv2d of downsample_hidden_size channels with bias over the mel axis, conv_out (channels x mels / 8 ->
    d, no bias), sinusoidal positions (a buffer), Whisper layers whose k_proj has a bias too, ln_post; Qwen3-Omni then
    proj1 (d -> d, bias), GELU, proj2 (d -> output_dim, bias), which Qwen3-ASR keeps in its projector."""
    d, n, inter, mels = a.int("hidden_size"), a.int("num_hidden_layers"), a.int("intermediate_size"), \
        a.int("num_mel_bins")
    ch = a.int("downsample_hidden_size")
    freq = _conv2d_out(_conv2d_out(_conv2d_out(mels)))
    convs = linear(9, ch, True) + 2 * linear(9 * ch, ch, True) + linear(ch * freq, d)
    params = convs + n * (whisper_layer(d, inter) + d) + 2 * d
    if kind == "qwen3_omni_moe_audio_encoder":
        params += linear(d, d, True) + linear(d, a.int("output_dim"), True)
    return _part(params, n, d, inter, a.int("max_source_positions", 1500))


def voxtral_realtime(a: Reader, kind: str) -> AudioResult:
    """modeling_voxtral_realtime.VoxtralRealtimeEncoder: causal conv1 (num_mel_bins -> d, k 3) and conv2 (d -> d, k 3,
    stride 2) with bias, rotary positions, RMSNorm layers whose attention is heads x head_dim wide (q/v/o biased,
    k not; num_key_value_heads is num_attention_heads) and a gated MLP with a biased down_proj, a final RMSNorm."""
    d, n, inter, mels = a.int("hidden_size"), a.int("num_hidden_layers"), a.int("intermediate_size"), \
        a.int("num_mel_bins")
    heads = a.int("num_attention_heads")
    wide = heads * a.int("head_dim", d // heads)
    layer = linear(d, wide, True) + linear(d, wide) + linear(d, wide, True) + linear(wide, d, True) \
        + 2 * linear(d, inter) + linear(inter, d, True) + 2 * d
    params = linear(mels * 3, d, True) + linear(d * 3, d, True) + n * layer + d
    return _part(params, n, d, inter, a.int("max_position_embeddings", 1500))


def omniasr(a: Reader, kind: str) -> AudioResult:
    """modeling_omniasr.OmniASRAudioModel (a wav2vec2 encoder): a Conv1d stack over the waveform (conv_dim,
    conv_kernel, conv_stride; conv_bias) each with a LayerNorm, a LayerNorm and projection (last conv_dim -> d,
    bias), a grouped positional conv (num_conv_pos_embeddings wide, bias), post-norm layers with biased q/k/v/out and
    fc1/fc2, a final LayerNorm. Frames: a nominal 30 s of 16 kHz audio over the product of the strides."""
    d, n, inter = a.int("hidden_size"), a.int("num_hidden_layers"), a.int("intermediate_size")
    dims, kernels = a.list("conv_dim", int) or [512], a.list("conv_kernel", int) or [10]
    strides, bias = a.list("conv_stride", int) or [5], a.flag("conv_bias", True)
    params, width, step = 0, 1, 1
    for out, k, s in zip(dims, kernels, strides, strict=False):
        params += linear(width * k, out, bias) + 2 * out
        width, step = out, step * s
    params += 2 * width + linear(width, d, True)
    k, groups = a.int("num_conv_pos_embeddings"), a.int("num_conv_pos_embedding_groups")
    params += d * (d // groups) * k + d
    params += n * (4 * linear(d, d, True) + linear(d, inter, True) + linear(inter, d, True) + 4 * d) + 2 * d
    return _part(params, n, d, inter, 480_000 // step)


def granite_conformer(a: Reader, kind: str) -> AudioResult:
    """modeling_granite_speech.GraniteSpeechCTCEncoder: input_linear (input_dim -> d, bias), Conformer blocks (two
    half-step feed-forwards of LayerNorm, up d -> d x feedforward_mult and down with biases; attention of LayerNorm,
    to_q and to_kv without bias, to_out with bias and a relative-position table of 2 x max_pos_emb + 1 rows of
    dim_head; the conv module of LayerNorm, up_conv 1 x 1 (d -> 2 x inner, bias), depthwise conv (conv_kernel_size,
    no bias), BatchNorm and down_conv 1 x 1 (inner -> d, bias); a post LayerNorm), then out (d -> output_dim) and
    out_mid (output_dim -> d), biased. Frames: a nominal 30 s at 50 frames per second."""
    d, n, heads = a.int("hidden_dim"), a.int("num_layers"), a.int("num_heads")
    dh = a.int("dim_head", d // heads)
    inner, ff, conv = heads * dh, d * a.int("feedforward_mult"), d * a.int("conv_expansion_factor")
    out = a.int("output_dim")
    half = 2 * d + linear(d, ff, True) + linear(ff, d, True)
    attn = 2 * d + linear(d, inner) + linear(d, 2 * inner) + linear(inner, d, True) + (2 * a.int("max_pos_emb") + 1) * dh
    convs = 2 * d + linear(d, 2 * conv, True) + conv * a.int("conv_kernel_size") + 2 * conv + linear(conv, d, True)
    params = linear(a.int("input_dim"), d, True) + n * (2 * half + attn + convs + 2 * d) + linear(d, out, True) \
        + linear(out, d, True)
    part, frames, width, _, working = _part(params, n, d, ff, 1500, "Conformer encoder")
    mm = n * (4 * d * ff + 4 * d * inner + 3 * d * conv)
    return part._replace(matmul=mm), frames, width, n * (10 * d + 4 * ff + 4 * conv), working


def _convnext(h: int, k: int, mult: int) -> int:
    """modeling_vibevoice_acoustic_tokenizer.VibeVoiceAcousticTokenizerConvNext1dLayer: two RMSNorms, a depthwise
    causal conv (kernel k, bias), fc1/fc2 (h -> mult x h -> h, biases), two layer scales."""
    return 2 * h + h * k + h + linear(h, mult * h, True) + linear(mult * h, h, True) + 2 * h


def vibevoice_tokenizer(a: Reader, kind: str) -> AudioResult:
    """modeling_vibevoice_acoustic_tokenizer.VibeVoiceAcousticTokenizerEncoderModel: a stem (causal conv channels ->
    num_filters, kernel_size, bias, and depths[0] ConvNeXt layers), one stage per downsampling ratio r (a strided
    causal conv doubling the width, kernel 2 r, bias, and the next depths entry of ConvNeXt layers), a head conv
    (-> hidden_size, bias). Frames: a nominal 60 s of 24 kHz audio over the product of the ratios."""
    nf, k, mult, out = a.int("num_filters"), a.int("kernel_size"), a.int("ffn_expansion", 4), a.int("hidden_size")
    ratios = a.list("downsampling_ratios", int) or [2]
    depths = a.list("depths", int, len(ratios) + 1) or [3] * (len(ratios) + 1)
    step = 1
    for rate in ratios:
        step *= rate
    params = linear(a.int("channels", 1) * k, nf, True) + depths[0] * _convnext(nf, k, mult)
    up, saved, mm = step, depths[0] * step * 14 * nf, depths[0] * step * 2 * mult * nf * nf
    for i, rate in enumerate(ratios):
        h = nf * 2 ** (i + 1)
        up //= rate
        params += linear(h // 2 * 2 * rate, h, True) + depths[i + 1] * _convnext(h, k, mult)
        saved += depths[i + 1] * up * 14 * h
        mm += up * h * h * rate + depths[i + 1] * up * 2 * mult * h * h
    width = nf * 2 ** len(ratios)
    params += linear(width * k, out, True)
    layers = sum(depths[:len(ratios) + 1])
    part = Part("Audio_Tower", f"Convolutional audio tokenizer ({layers} layers)", params, matmul=mm + width * k * out)
    return part, 1_440_000 // step, out, saved, 4 * mult * width


TOWERS: dict[str, Callable[[Reader, str], AudioResult]] = {
    **dict.fromkeys(("qwen2_audio_encoder", "audioflamingo3_encoder", "voxtral_encoder", "glmasr_encoder",
                     "qwen2_5_omni_audio_encoder", "moss_transcribe_diarize_audio"), whisper_like),
    "voxtral_realtime_encoder": voxtral_realtime, "granite_speech_encoder": granite_conformer,
    "granite_speech_plus_encoder": granite_conformer, "vibevoice_acoustic_tokenizer_encoder": vibevoice_tokenizer, "omniasr_audio": omniasr, "qwen3_asr_encoder": qwen3_audio, "qwen3_omni_moe_audio_encoder": qwen3_audio,
}


def audio_tower(ac: Mapping[str, Any], r: Reader, kind: str, key: str = "audio_config") -> AudioResult:
    """(tower part, frames per clip, output width, saved elements per frame, working set per frame); `key` is where
    the wrapper keeps the tower's config."""
    if kind not in TOWERS:
        raise ConfigError(r.model, f"{key}.model_type", kind, "is not a supported audio tower")
    return TOWERS[kind](r.child(ac, kind, prefix=f"{key}."), kind)
