"""Gemma encoder-decoders: T5Gemma (modeling_t5gemma.py) and T5Gemma 2 (modeling_t5gemma2.py).

Both stacks are Gemma layers read from the nested `encoder` and `decoder` configs: q/k/v/o of heads x head_dim
(num_key_value_heads for k/v, attention_bias), pre- and post-norms around attention and the gated MLP
(gate/up/down, no biases), Gemma RMSNorms (a weight of the width), a final norm per stack; sliding or full
attention per layer_types (sliding_window).
- T5Gemma: each stack embeds its own vocab_size; decoder layers add T5GemmaCrossAttention (q from the decoder, k/v
  from cross_attention_hidden_size = the encoder's hidden_size) between pre_/post_cross_attn_layernorm; the LM head
  (T5GemmaLMHead.out_proj, decoder hidden -> decoder vocab) is tied to the decoder's embed_tokens when the
  top-level tie_word_embeddings says so.
- T5Gemma 2: Gemma 3 layers (q_norm, k_norm of head_dim); the encoder is text_model + a SigLIP vision_tower + the
  Gemma 3 projector (mm_input_projection_weight, mm_soft_emb_norm); each embedding (T5Gemma2TextScaledWordEmbedding)
  holds an eoi_embedding of the width; the decoder's T5Gemma2MergedAttention attends to itself and to the encoder
  with the same q/k/v/o (no cross-attention weights, but a cache of the encoder's keys and values). Tied
  (T5Gemma2Model/T5Gemma2ForConditionalGeneration._tied_weights_keys), the decoder's embedding and the LM head are
  the encoder's text embedding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, attention_type, lm_head_part, mlp_part, norm_part
from .assembly import Builder, assemble
from .vision_language import vision_memory
from .vision_projectors import gemma3 as gemma3_projector
from .vision_towers import vision_tower

SANDWICH = ("pre_attn", "post_attn", "pre_mlp", "post_mlp")


def _windows(s: Reader, n: int, pattern: int) -> list[int]:
    """Per layer: sliding_window for "sliding_attention" layers, 0 for full ones; without layer_types, every
    pattern-th layer is full (T5GemmaModuleConfig: 2, T5Gemma2TextConfig: 6)."""
    types = s.list("layer_types", str)
    if not types or len(types) < n:
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    window = s.int("sliding_window", 4096)
    return [window if t == "sliding_attention" else 0 for t in types[:n]]


def gemma_stack(s: Reader, stack: str, first: int, pattern: int, *, qk_norm: bool, cross_in: int = 0,
                merged: bool = False) -> list[Block]:
    """The layers of one stack; cross_in > 0 adds T5Gemma's cross-attention (k/v from that width), merged adds
    T5Gemma 2's cache of the encoder's keys and values to the self-attention."""
    h, n = s.int("hidden_size"), s.int("num_hidden_layers")
    heads, kv = s.int("num_attention_heads"), s.int("num_key_value_heads")
    hd, inter = s.int("head_dim", h // heads), s.int("intermediate_size")
    bias = s.flag("attention_bias", False)
    out = []
    for j, w in enumerate(_windows(s, n, pattern)):
        i = first + j
        a = attention_part(f"Attention_{i}", attention_type(heads, kv), h, heads, kv, hd, qkv_bias=bias, o_bias=bias,
                           extra=2 * hd if qk_norm else 0, window=w, cached=stack == "decoder")
        cross = None
        if cross_in:
            cross = attention_part(f"Cross_Attention_{i}", "Cross Attn", h, heads, kv, hd, qkv_bias=bias, o_bias=bias,
                                   rope=False, window=-1)
            cross = cross._replace(params=cross.params + 2 * (cross_in - h) * kv * hd)
        elif merged:  # the encoder's K/V, projected by this layer's own k/v and cached once per sequence
            cross = Part(f"Cross_Attention_{i}", "Merged Cross Attn", 0, kv=2 * kv * hd, window=-1,
                         attn_flops=4 * heads * hd)
        ffn = mlp_part(f"FFN_{i}", "GeGLU", h, inter, True, False)
        out.append(standard_block(i, [], a, ffn, "rmsnorm", h, norms=SANDWICH, kind=stack, stack=stack, cross=cross,
                                  cross_norm=not merged))
    return out


def _finish(cfg: Mapping[str, Any], model: str, r: Reader, dec: Reader, embed: list[Part], blocks: list[Block],
            tie: bool, qk_norm: str | None = None, **spec_extra: Any) -> Arch:
    h, vocab = dec.int("hidden_size"), dec.int("vocab_size")
    heads, kv = dec.int("num_attention_heads"), dec.int("num_key_value_heads")
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    windows = tuple(max((p.window for p in b.parts if p.kv and p.window > 0), default=0) for b in blocks)
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=kv,
                    head_dim=dec.int("head_dim", h // heads), inter=dec.int("intermediate_size"), vocab=vocab,
                    ctx=dec.int("max_position_embeddings", 8192), tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="encoder-decoder", windows=windows, act="gelu_pytorch_tanh", qk_norm=qk_norm, **spec_extra)


def t5gemma(cfg: Mapping[str, Any], model: str) -> Arch:
    r = Reader(cfg, model, "t5gemma")
    enc = r.child(r.sub("encoder") or {}, "t5_gemma_module", prefix="encoder.")
    dec = r.child(r.sub("decoder") or {}, "t5_gemma_module", prefix="decoder.")
    eh = enc.int("hidden_size")
    tie = r.flag("tie_word_embeddings", True)
    embed = [Part("Input", "Input", width=-1), Part("Encoder_Embedding", "Embedding", enc.int("vocab_size") * eh),
             Part("Encoder_Final_Norm", "RMSNorm", eh, norm_width=eh)]
    blocks = gemma_stack(enc, "encoder", 1, 2, qk_norm=False)
    embed.append(Part("Embedding", "Embedding", dec.int("vocab_size") * dec.int("hidden_size")))
    # configuration_t5gemma.T5GemmaConfig: the decoder's cross_attention_hidden_size is the encoder's hidden_size
    blocks += gemma_stack(dec, "decoder", len(blocks) + 1, 2, qk_norm=False, cross_in=eh)
    return _finish(cfg, model, r, dec, embed, blocks, tie)


def t5gemma2(cfg: Mapping[str, Any], model: str) -> Arch:
    r = Reader(cfg, model, "t5gemma2")
    enc_cfg = r.sub("encoder") or {}
    e = r.child(enc_cfg, "t5gemma2_encoder", prefix="encoder.")
    text = e.child(e.sub("text_config") or {}, "t5gemma2_text", prefix="text_config.")
    dec = r.child(r.sub("decoder") or {}, "t5gemma2_decoder", prefix="decoder.")
    th, dh = text.int("hidden_size"), dec.int("hidden_size")
    tie = r.flag("tie_word_embeddings", True)
    tower, patches, vh, per_patch = vision_tower(e.sub("vision_config") or {}, e, "siglip_vision_model")
    proj, _ = gemma3_projector("t5gemma2", e, vh, th, enc_cfg)
    embed = [Part("Input", "Input", width=-1), Part("Encoder_Embedding", "Embedding", text.int("vocab_size") * th + th),
             tower, proj, Part("Encoder_Final_Norm", "RMSNorm", th, norm_width=th)]
    blocks = gemma_stack(text, "encoder", 1, 6, qk_norm=True)
    if not tie:  # the decoder's own embed_tokens and eoi_embedding
        embed.append(Part("Embedding", "Embedding", dec.int("vocab_size") * dh + dh))
    blocks += gemma_stack(dec, "decoder", len(blocks) + 1, 6, qk_norm=True, merged=True)
    act, transient = vision_memory(tower, patches, vh, per_patch)
    # modeling_t5gemma2.py T5Gemma2SelfAttention / T5Gemma2MergedAttention: q_norm and k_norm on each head
    return _finish(cfg, model, r, dec, embed, blocks, tie, "head", image_tokens=e.int("mm_tokens_per_image", 256),
                   vision_act=act, vision_transient=transient)


BUILDERS: dict[str, Builder] = {"t5gemma": t5gemma, "t5gemma2": t5gemma2}
