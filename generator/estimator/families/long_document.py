"""Long-input encoder-decoders: LED (modeling_led.py), PEGASUS-X (modeling_pegasus_x.py) and LongT5 (modeling_longt5.py).

Each is a BART-style or T5-style encoder-decoder (encoder_decoders.py) whose encoder attends locally with a few
global tokens, which adds parameters to the encoder only:
- LED: post-norm BART layers (learned positions without offset, max_encoder_position_embeddings for the encoder
  and max_decoder_position_embeddings for the decoder); LEDEncoderSelfAttention's Longformer attention holds a
  second, biased query/key/value for the global tokens (query_global, key_global, value_global).
- PEGASUS-X: pre-norm layers without attention biases, sinusoidal positions as a buffer, a LayerNorm closing each
  stack; the encoder learns num_global_tokens global embeddings (embed_global) and each encoder layer normalises
  them with its own global_self_attn_layer_norm.
- LongT5: T5 layers; with encoder_attention_type "transient-global" each encoder layer's
  LongT5TransientGlobalAttention adds global_input_layer_norm (d_model), and the first also
  global_relative_attention_bias (buckets x heads). "local" attention has T5's parameters.
"""

from __future__ import annotations

from ..config.reader import Reader
from ..graph.parts import Part, linear, norm_part
from .assembly import Builder, bind
from .encoder_decoders import BartTraits, T5Traits, bart_like, t5


def _led_global_qkv(r: Reader, stack: str, d: int) -> int:
    # modeling_led.LEDEncoderSelfAttention: query_global, key_global, value_global (d -> d, bias) beside q/k/v
    return 3 * linear(d, d, True) if stack == "encoder" else 0


def _pegasus_x_global_tokens(r: Reader, d: int) -> list[Part]:
    # modeling_pegasus_x.PegasusXEncoder.embed_global: nn.Embedding(num_global_tokens, d_model)
    return [Part("Global_Embedding", "Embedding", r.int("num_global_tokens", 32) * d)]


def _pegasus_x_global_norm(r: Reader, stack: str, i: int, d: int) -> list[Part]:
    # modeling_pegasus_x.PegasusXEncoderLayer.global_self_attn_layer_norm
    return [norm_part(f"Global_LayerNorm_{i}", "layernorm", d)] if stack == "encoder" else []


def _longt5_global(r: Reader, j: int, heads: int, d: int) -> int:
    # modeling_longt5.LongT5TransientGlobalAttention: global_input_layer_norm; global_relative_attention_bias
    # where has_relative_attention_bias (the first layer)
    if r.str("encoder_attention_type", "local") != "transient-global":
        return 0
    return d + (r.int("relative_attention_num_buckets", 32) * heads if j == 0 else 0)


BARTS: dict[str, BartTraits] = {
    "led": BartTraits(pos_offset=0, positions_key="max_decoder_position_embeddings",
                      encoder_positions_key="max_encoder_position_embeddings", attn_extra=_led_global_qkv),
    "pegasus_x": BartTraits(pos_offset=None, table_params=False, pre_norm=True, embed_norm=False, final_norm=True,
                            bias=False, encoder_extra=_pegasus_x_global_tokens, layer_pre=_pegasus_x_global_norm),
}

BUILDERS: dict[str, Builder] = {
    **bind(BARTS, bart_like),
    **bind({"longt5": T5Traits(encoder_attn_extra=_longt5_global)}, t5),
}
