"""Perceiver IO on text (modeling_perceiver.py): a cross-attention into a latent array, latent self-attention blocks
applied num_blocks times with one set of weights, and a cross-attention decoder back to the token positions.

The text classes (PerceiverForMaskedLM, PerceiverForSequenceClassification) are laid out; the latent layers run
over num_latents latents rather than the input tokens (config/known_gaps.APPROXIMATE says so for memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Block, Part, add_part, attention_part, linear, mlp_part, norm_part
from .assembly import Builder, assemble
from .shared_layer_encoders import shared_pass
from .task_heads import head_kind, logits_of, num_labels


def _layer(i: int, stack: str, r: Reader, *, q: int, kv: int, qk: int | None, v: int | None, heads: int, widen: int,
           cross: bool) -> Block:
    """modeling_perceiver.PerceiverLayer: PerceiverSelfAttention (layernorm1 over q_dim, layernorm2 over kv_dim
    when cross, biased query / key / value) and PerceiverSelfOutput (v -> q_dim when cross, else v -> v), then a
    LayerNorm and PerceiverMLP (q_dim -> widening x q_dim -> q_dim, biases). Unset qk_channels are kv_dim (cross,
    cross_attention_shape_for_attention "kv") or q_dim; unset v_channels are qk_channels."""
    if qk is None:
        qk = kv if cross and r.str("cross_attention_shape_for_attention", "kv") == "kv" else q
    v = v or qk
    out = q if cross else v
    params = linear(q, qk, True) + linear(kv, qk, True) + linear(kv, v, True) + linear(v, out, True)
    mm = q * qk + kv * qk + kv * v + v * out
    attn = attention_part(f"Attention_{i}", "Cross Attn" if cross else "Multi-Head Attn", q, heads, heads, qk // heads,
                          v_dim=v // heads, rope=False, cached=False)._replace(params=params, matmul=mm, width=out)
    norms = [norm_part(f"LayerNorm_{i}_1", "layernorm", q)] + ([norm_part(f"LayerNorm_{i}_kv", "layernorm", kv)]
                                                               if cross else [])
    parts = (*norms, attn, add_part(f"Add_{i}_attn"), norm_part(f"LayerNorm_{i}_2", "layernorm", q),
             mlp_part(f"FFN_{i}", "MLP", q, widen * q, False, True), add_part(f"Add_{i}_ffn"))
    return Block(i, "cross" if cross else "encoder", parts, stack)


def perceiver(cfg: Mapping[str, Any], model: str) -> Arch:
    """PerceiverTextPreprocessor (embeddings of d_model + position embeddings), PerceiverEmbeddings.latents
    (num_latents x d_latents), PerceiverEncoder (a cross-attention from d_model inputs into d_latents latents, then
    num_self_attends_per_block latent layers run num_blocks times). PerceiverForMaskedLM decodes with a
    PerceiverBasicDecoder: trainable position queries (max_position_embeddings x d_model), a cross-attention of 8
    heads (qk 256, v d_model) into the latents; PerceiverEmbeddingDecoder multiplies by the word embeddings and
    adds a bias. PerceiverForSequenceClassification: one trainable query of d_latents, a one-head cross-attention
    and final_layer d_latents -> num_labels."""
    r = Reader(cfg, model, "perceiver")
    d, lat, n_lat = r.int("d_model"), r.int("d_latents"), r.int("num_latents")
    vocab, ctx = r.int("vocab_size"), r.int("max_position_embeddings", 2048)
    qk, v = r.opt_int("qk_channels"), r.opt_int("v_channels")
    self_heads = r.int("num_self_attention_heads")
    kind = head_kind(cfg)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * d, width=d),
             Part("Position_Embedding", "Embedding", ctx * d, width=d),
             Part("Latents", "Parameters", n_lat * lat, width=lat)]
    blocks = [_layer(1, "encoder", r, q=lat, kv=d, qk=qk, v=v, heads=r.int("num_cross_attention_heads"),
                     widen=r.int("cross_attention_widening_factor", 1), cross=True)]
    per_block = r.int("num_self_attends_per_block")
    widen = r.int("self_attention_widening_factor", 1)
    first = [_layer(i, "encoder", r, q=lat, kv=lat, qk=qk, v=v, heads=self_heads, widen=widen, cross=False)
             for i in range(2, per_block + 2)]
    blocks += first
    for _ in range(r.int("num_blocks", 1) - 1):
        blocks += [shared_pass(b, len(blocks) + 1) for b in first]
    if kind == "seq":
        labels = num_labels(cfg)
        queries = Part("Decoder_Queries", "Parameters", lat)
        dec = _layer(len(blocks) + 1, "decoder", r, q=lat, kv=lat, qk=None, v=None, heads=1, widen=1, cross=True)
        head = [queries, *dec.parts, Part("Classifier", "Linear", linear(lat, labels, True), width=labels)]
        width = labels
    else:  # the masked LM
        queries = Part("Decoder_Queries", "Parameters", ctx * d, width=d)
        dec = _layer(len(blocks) + 1, "decoder", r, q=d, kv=lat, qk=8 * 32, v=d, heads=8, widen=1, cross=True)
        head = [queries, *dec.parts, Part("LM_Head", "Linear", vocab, width=vocab, matmul=vocab * d)]
        width = vocab
    head.append(Part("Output", "Output", width=width))
    return assemble(cfg, model, r, hidden=lat, layers=len(blocks), heads=self_heads, kv=self_heads,
                    head_dim=(qk or lat) // self_heads, inter=widen * lat, vocab=vocab, ctx=ctx, tie=True, embed=embed,
                    blocks=blocks, head=head, kind="encoder", logits=logits_of(kind, vocab, cfg), position="learned")


BUILDERS: dict[str, Builder] = {"perceiver": perceiver}
