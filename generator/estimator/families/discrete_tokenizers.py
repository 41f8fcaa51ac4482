"""Models that read images and audio as discrete codes: Apertus 1.5, whose VQGAN image tokenizer and WavTokenizer
audio encoder turn an input into ids of the text vocabulary (modeling_apertus1p5.py, modeling_wavtokenizer.py).

The tokenizers are nodes beside the token embedding. They run in float32 and end in an argmax, so no gradient
flows through them: a sample's image or clip adds its codes to the text sequence and nothing to the saved
activations; serving holds the tokenizer's largest feature map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .deepseek_vision import vq_encoder
from .vision_language import attach, text_tower

CLIP_SECONDS = 30  # a nominal clip, as the other audio towers price one


def image_tokenizer(v: Reader) -> tuple[Part, int, int]:
    """modeling_apertus1p5.Apertus1p5VisionTokenizerModel: the encoder (deepseek_vision.vq_encoder with attention
    blocks at the stages whose resolution / 2^stage is in attn_resolutions; conv_out 3x3 to latent_channels with
    bias), quant_conv (1x1 latent_channels -> embed_dim, bias) and the quantizer's embedding (a Linear embed_dim ->
    codebook_size without bias). Returns (part, codes per image at `resolution`, working set per image)."""
    base, mult = v.int("base_channels"), v.list("channel_multiplier", int, length=1) or [1, 1, 2, 2, 4]
    res, attn = v.int("resolution"), set(v.list("attn_resolutions", int) or [16])
    lat, dim = v.int("latent_channels"), v.int("embed_dim")
    params, c = vq_encoder(v.int("in_channels", 3), base, mult, v.int("num_res_blocks"),
                           [res // 2 ** i in attn for i in range(len(mult))])
    params += linear(9 * c, lat, True) + linear(lat, dim, True) + dim * v.int("codebook_size")
    side = res // 2 ** (len(mult) - 1)
    part = Part("Vision_Tokenizer", f"VQGAN image tokenizer ({len(mult)} stages)", params)
    return part, side * side, 2 * res * res * base * mult[0]


def _conv(a: Reader, c_in: int, c_out: int, k: int) -> int:
    """modeling_wavtokenizer.WavTokenizerConv1d: a Conv1d with bias under weight_norm (weight_g adds one value per
    output channel) or followed by GroupNorm(1, out) (time_group_norm)."""
    return linear(c_in * k, c_out, True) + (c_out if a.str("norm_type", "weight_norm") == "weight_norm" else 2 * c_out)


def wavtokenizer_encoder(a: Reader) -> tuple[Part, int, int]:
    """modeling_wavtokenizer.WavTokenizerEncoderModel: the SEANet encoder (WavTokenizerEncoder: a first conv
    audio_channels -> num_filters of kernel_size; per ratio of upsampling_ratios, reversed, num_residual_layers
    ResNet blocks (a residual_kernel_size conv to dim / compress, a 1-wide conv back, and a 1-wide shortcut conv
    when use_conv_shortcut) and a stride-ratio conv of kernel 2 x ratio doubling the width; an LSTM of
    num_lstm_layers (4 gates of input and hidden weights with two biases each); a last conv to hidden_size of
    last_kernel_size), and the quantizer, whose codebook is buffers. Returns (part, codes per clip, working set per
    clip)."""
    nf, ratios = a.int("num_filters"), a.list("upsampling_ratios", int, length=1) or [6, 5, 5, 4]
    compress, k_res, shortcut = a.int("compress", 2), a.int("residual_kernel_size"), a.flag("use_conv_shortcut", True)
    params, scale, hop = _conv(a, a.int("audio_channels", 1), nf, a.int("kernel_size")), nf, 1
    for ratio in reversed(ratios):
        block = _conv(a, scale, scale // compress, k_res) + _conv(a, scale // compress, scale, 1)
        params += a.int("num_residual_layers") * (block + (_conv(a, scale, scale, 1) if shortcut else 0))
        params += _conv(a, scale, 2 * scale, 2 * ratio)
        scale, hop = 2 * scale, hop * ratio
    params += a.int("num_lstm_layers") * (8 * scale * scale + 8 * scale)
    params += _conv(a, scale, a.int("hidden_size"), a.int("last_kernel_size"))
    rate = a.int("sampling_rate", 24000)
    part = Part("Audio_Tokenizer", f"WavTokenizer audio encoder ({len(ratios)} stages)", params)
    return part, -(-rate // hop) * CLIP_SECONDS, 2 * rate * CLIP_SECONDS * nf


def apertus1p5(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_apertus1p5.Apertus1p5ForConditionalGeneration: the text model (Apertus1p5TextModel and an LM head
    of output_vocab_size or vocab_size rows, tied by tie_word_embeddings), vision_tokenizer and audio_tokenizer
    (an AutoModel of audio_config, WavTokenizer's encoder by default). One sample carries one image or one clip."""
    text = text_tower(cfg, model, "apertus1p5", read_text)
    r = Reader(cfg, model, "apertus1p5")
    v = r.child(r.sub("vision_config") or {}, "apertus1p5_vision_tokenizer", prefix="vision_config.")
    image, codes, image_work = image_tokenizer(v)
    ac = r.sub("audio_config") or {}
    kind = ac.get("model_type") or "wavtokenizer_encoder"
    if kind not in SUB_CONFIGS:
        raise ConfigError(model, "audio_config.model_type", kind, "is not a supported audio tokenizer")
    clip, frames, clip_work = wavtokenizer_encoder(r.child(ac, str(kind), prefix="audio_config."))
    return attach(text, cfg, r, (image, clip), tokens=max(codes, frames), act=0,
                  transient=max(image_work, clip_work), tie=r.flag("tie_word_embeddings", text.tie))


WRAPPERS: dict[str, Wrapper] = {"apertus1p5": apertus1p5}
# Config classes read only as a sub-config: the audio tokenizer (an AutoConfig, WavTokenizer's or its encoder's).
SUB_CONFIGS = ("wavtokenizer_encoder", "wavtokenizer")
