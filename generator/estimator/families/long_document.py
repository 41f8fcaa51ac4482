"""Long-input models and their local attention: LED (modeling_led.py), PEGASUS-X (modeling_pegasus_x.py), LongT5
(modeling_longt5.py), BigBird-Pegasus (modeling_bigbird_pegasus.py) and BigBird (modeling_big_bird.py).

Each is a BART-style or T5-style encoder-decoder (encoder_decoders.py), or BigBird a BERT-like encoder
(encoders.py), whose encoder attends locally with a few global tokens, which adds parameters to the encoder only:
- LED: post-norm BART layers (learned positions without offset, max_encoder_position_embeddings for the encoder
  and max_decoder_position_embeddings for the decoder); LEDEncoderSelfAttention's Longformer attention holds a
  second, biased query/key/value for the global tokens (query_global, key_global, value_global).
- PEGASUS-X: pre-norm layers without attention biases, sinusoidal positions as a buffer, a LayerNorm closing each
  stack; the encoder learns num_global_tokens global embeddings (embed_global) and each encoder layer normalises
  them with its own global_self_attn_layer_norm.
- LongT5: T5 layers; with encoder_attention_type "transient-global" each encoder layer's
  LongT5TransientGlobalAttention adds global_input_layer_norm (d_model), and the first also
  global_relative_attention_bias (buckets x heads). "local" attention has T5's parameters.
- BigBird and BigBird-Pegasus: BERT's and Pegasus' layers; with attention_type "block_sparse" the encoder's
  self-attention scores blocks of keys, not every key.
Where the local attention's scores are known, its part says how many keys a query scores (Part.keys), so its
activations grow with T, not T x T (FINDINGS.md F100).
"""

from __future__ import annotations

from ..config.reader import Reader
from ..graph.parts import Part, linear, norm_part
from .assembly import Builder, bind
from .encoder_decoders import BartTraits, T5Traits, bart_like, t5
from .encoders import EncoderTraits, bert_like


def _led_global_qkv(r: Reader, stack: str, d: int) -> int:
    # modeling_led.LEDEncoderSelfAttention: query_global, key_global, value_global (d -> d, bias) beside q/k/v
    return 3 * linear(d, d, True) if stack == "encoder" else 0


def _pegasus_x_global_tokens(r: Reader, d: int) -> list[Part]:
    # modeling_pegasus_x.PegasusXEncoder.embed_global: nn.Embedding(num_global_tokens, d_model)
    return [Part("Global_Embedding", "Embedding", r.int("num_global_tokens", 32) * d)]


def _pegasus_x_global_norm(r: Reader, stack: str, i: int, d: int) -> list[Part]:
    # modeling_pegasus_x.PegasusXEncoderLayer.global_self_attn_layer_norm
    return [norm_part(f"Global_LayerNorm_{i}", "layernorm", d)] if stack == "encoder" else []


def _local(p: Part, keys: int, kept: int = 0, stride: int = 0) -> Part:
    """The self-attention part `p` as a local attention: `keys` scored per query (Part.keys), one side key per
    `stride` tokens (Part.key_stride), and `kept` more elements per token its code saves (trained or frozen)."""
    return p._replace(keys=keys, key_stride=stride, act=p.act + kept, act_frozen=p.frozen_act + kept)


def _pegasus_x_local(r: Reader, stack: str, j: int, d: int, p: Part) -> Part:
    """modeling_pegasus_x.PegasusXGlobalLocalAttention: each block of block_size tokens scores its own block and the
    num_global_tokens global tokens (compute_local_attention_representations), and the global tokens score every
    token (compute_global_attention_representations): block_size + 2 x num_global_tokens scores per token and head.
    A staggered layer (every other one) pads half a block at either end: a block's more, per sequence, not priced."""
    if stack != "encoder":
        return p
    return _local(p, r.int("block_size", 512) + 2 * r.int("num_global_tokens", 32))


def _block_sparse(r: Reader, stack: str, j: int, d: int, p: Part) -> Part:
    """modeling_big_bird.BigBirdBlockSparseAttention.bigbird_block_sparse_attention (BigBird-Pegasus' is its copy),
    with attention_type "block_sparse": of n = T / block_size query blocks, the first and last score every key,
    the second and second-to-last 4 + r blocks (r: num_random_blocks), the n - 4 others 5 + r (three sliding, two
    global, r random): about (7 + r) x block_size scores per token and head (over by (12 + 2r) x block_size^2 per
    sequence). It keeps the gathered keys and values beside them: the sliding blocks' keys and values
    concatenated (3 blocks each), the random keys gathered and transposed (r blocks each), the query block's own
    key and value (a block each): (8 + 2r) x head_dim elements per token and head. Read off a CPU-simulated step of
    BigBird-Pegasus at 2,048 tokens (F100). Sequences up to (5 + 2r) x block_size run BigBird's full attention, which
    the keys cap at T."""
    if stack != "encoder" or r.str("attention_type", "block_sparse") != "block_sparse":
        return p
    block, rand = r.int("block_size", 64), r.int("num_random_blocks", 3, minimum=0)
    return _local(p, (7 + rand) * block, p.heads * (d // p.heads) * (8 + 2 * rand))


def _longt5_local(r: Reader, stack: str, j: int, d: int, p: Part) -> Part:
    """modeling_longt5.LongT5LocalAttention and LongT5TransientGlobalAttention: queries in blocks of local_radius + 1
    tokens score their block and its two neighbours (_concatenate_3_blocks), 3 x block keys; "transient-global"
    adds one side key per global_block_size tokens (the blocks' aggregates: Part.key_stride). The einsums keep the
    query's and the three blocks' keys' and values' copies: 7 x heads x d_kv per token (the side keys' and values'
    tiles beside them, 2 x T / global_block_size / block of them per token, are not priced). Read off CPU-simulated
    steps at 4,096 and 8,192 tokens (F100)."""
    block = r.int("local_radius", 127, minimum=0) + 1
    stride = r.int("global_block_size", 16) if r.str("encoder_attention_type", "local") == "transient-global" else 0
    return _local(p, 3 * block, 7 * p.heads * r.int("d_kv"), stride)


def sliding_chunks(r: Reader, stack: str, j: int, d: int, p: Part) -> Part:
    """modeling_longformer.LongformerSelfAttention (LED's encoder attention is its copy): each query scores the
    w = attention_window / 2 tokens either side and itself, 2w + 1 keys (_sliding_chunks_query_key_matmul; the
    window is layer j's where attention_window lists one per layer), its softmax in fp32, then cast. The AV product
    (_sliding_chunks_matmul_attn_probs_value) pads the probabilities to 3w + 2 columns and keeps them, and the
    query and key chunks and the value chunks it multiplies: w + 1 more elements and 7 x head_dim per token and
    head. Read off real-tensor CPU steps of LED and Longformer (F100). No global token (global_attention_mask) is
    priced: a run that marks some adds their rows."""
    if stack != "encoder":
        return p
    windows = r.cfg.get("attention_window")
    window = r.list("attention_window", int, j + 1)[j] if isinstance(windows, list) else r.int("attention_window", 512)
    w = window // 2
    return _local(p, 2 * w + 1, p.heads * (w + 1 + 7 * (d // p.heads)))


def _longt5_global(r: Reader, j: int, heads: int, d: int) -> int:
    # modeling_longt5.LongT5TransientGlobalAttention: global_input_layer_norm; global_relative_attention_bias
    # where has_relative_attention_bias (the first layer)
    if r.str("encoder_attention_type", "local") != "transient-global":
        return 0
    return d + (r.int("relative_attention_num_buckets", 32) * heads if j == 0 else 0)


BARTS: dict[str, BartTraits] = {
    "led": BartTraits(pos_offset=0, positions_key="max_decoder_position_embeddings",
                      encoder_positions_key="max_encoder_position_embeddings", attn_extra=_led_global_qkv,
                      local=sliding_chunks),
    "pegasus_x": BartTraits(pos_offset=None, table_params=False, pre_norm=True, embed_norm=False, final_norm=True,
                            bias=False, encoder_extra=_pegasus_x_global_tokens, layer_pre=_pegasus_x_global_norm,
                            local=_pegasus_x_local),
    "bigbird_pegasus": BartTraits(pos_offset=0, pre_norm=True, bias="use_bias", causal_tied=False, local=_block_sparse),
}

BUILDERS: dict[str, Builder] = {
    **bind(BARTS, bart_like),
    **bind({"longt5": T5Traits(encoder_attn_extra=_longt5_global, local=_longt5_local)}, t5),
    **bind({"big_bird": EncoderTraits(lm_pooler=True, local=_block_sparse)}, bert_like),
}
