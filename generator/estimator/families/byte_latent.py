"""The Byte Latent Transformer (modeling_blt.BltForCausalLM): bytes pass a local encoder, patches of bytes a global
transformer, and bytes again a local decoder, with cross-attention between bytes and patches; hash n-gram
embeddings and a frozen entropy model (the patcher) sit beside the byte embedding.

The three stacks are laid out as one layer sequence (encoder, global, decoder); the global layers run once per
patch (about patch_size bytes), which the per-token figures do not discount.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, attention_type, linear, lm_head_part, mlp_part, norm_part
from .assembly import Builder, assemble


class Stack:
    """One BltTransformerLayer stack's shapes (configuration_blt: K/V heads default to the heads, head_dim is
    hidden / heads, intermediate_size defaults to int(8 x hidden / 3))."""

    def __init__(self, s: Reader) -> None:
        self.r = s
        self.h, self.n, self.heads = s.int("hidden_size"), s.int("num_hidden_layers"), s.int("num_attention_heads")
        self.kv = s.int("num_key_value_heads", self.heads)
        self.hd = self.h // self.heads
        self.inter = s.int("intermediate_size", int(8 * self.h / 3))

    def params(self) -> int:
        """modeling_blt.BltTransformerLayer: q/k/v/o without bias, a gated MLP without bias, two RMSNorms."""
        attn = linear(self.h, self.heads * self.hd) + 2 * linear(self.h, self.kv * self.hd) \
            + linear(self.heads * self.hd, self.h)
        return self.n * (attn + 3 * self.h * self.inter + 2 * self.h)

    def block(self, k: int, window: int = 0, before: tuple[Part, ...] = (), after: tuple[Part, ...] = ()) -> Block:
        """Layer k of the model as a block, with parts (a projection, a cross-attention) before or after it."""
        attn = attention_part(f"Attention_{k}", attention_type(self.heads, self.kv), self.h, self.heads, self.kv,
                              self.hd, window=window)
        b = standard_block(k, list(before), attn, mlp_part(f"FFN_{k}", "SwiGLU", self.h, self.inter, True),
                           "rmsnorm", self.h)
        return Block(k, b.kind, b.parts + after, b.stack)

    def cross(self, k: int) -> Part:
        """modeling_blt.BltCrossAttention: q/k/v/o of the stack's width without bias, q_norm and k_norm (RMSNorms
        of the width); its keys and values are the other side's states, never cached."""
        return attention_part(f"Cross_Attention_{k}", "Cross Attn", self.h, self.heads, self.kv, self.hd,
                              rope=False, cached=False, extra=2 * self.h)


def blt(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_blt.BltForCausalLM: BltModel (local_encoder: byte embed_tokens, layers, patch_embedding_projection
    hidden -> hidden x cross_attn_k, cross-attention after the last layer or every layer by cross_attn_all_layers;
    global_transformer: layers, token_embedding_projection (encoder hidden x cross_attn_k -> global hidden) when
    those differ; local_decoder: patch_embedding_projection hidden_size_global -> hidden x cross_attn_k,
    cross-attention before the first layer or every layer, layers, a final RMSNorm; encoder_hash_tok_embedding of
    encoder_hash_byte_group_vocab rows per hash function and n-gram size; the patcher when patch_in_forward (a
    frozen byte LM: embed_tokens, layers, RMSNorm, lm_head)) and lm_head (decoder hidden -> vocab_size); with
    tie_word_embeddings the encoder's embed_tokens is the lm_head weight (_tied_weights_keys)."""
    r = Reader(cfg, model, "blt")
    enc = Stack(r.child(r.sub("encoder_config") or {}, "blt_local_encoder", prefix="encoder_config."))
    glo = Stack(r.child(r.sub("global_config") or {}, "blt_global_transformer", prefix="global_config."))
    dec = Stack(r.child(r.sub("decoder_config") or {}, "blt_local_decoder", prefix="decoder_config."))
    vocab, tie, k_top = r.int("vocab_size"), r.flag("tie_word_embeddings", False), r.int("cross_attn_k", 2)
    window = r.int("local_attention_window_len", 512)
    e_k, d_k = enc.r.int("cross_attn_k", 2), dec.r.int("cross_attn_k", 2)
    e_all, d_all = enc.r.flag("cross_attn_all_layers", False), dec.r.flag("cross_attn_all_layers", True)
    groups = len(r.list("encoder_hash_byte_group_size", int) or [3, 4, 5, 6, 7, 8])
    hashes = r.int("encoder_hash_byte_group_nb_functions", 1) * groups * r.int("encoder_hash_byte_group_vocab")
    embed = [Part("Input", "Input", width=-1),
             Part("Embedding", "Embedding", vocab * dec.h if tie else enc.r.int("vocab_size") * enc.h),
             Part("Hash_Embedding", "Embedding", hashes * enc.h), Part("RoPE", "RoPE")]
    if r.flag("patch_in_forward", True):
        p = Stack(r.child(r.sub("patcher_config") or {}, "blt_patcher", prefix="patcher_config."))
        pv = p.r.int("vocab_size")
        embed.append(Part("Patcher", f"Entropy model ({p.n} layers, frozen)", p.params() + 2 * pv * p.h + p.h,
                          matmul=p.n * (4 * p.h * p.h + 3 * p.h * p.inter) + pv * p.h))
    blocks: list[Block] = []
    for i in range(enc.n):
        k = len(blocks) + 1
        after = (enc.cross(k),) if e_all or i == enc.n - 1 else ()
        if i == enc.n - 1:
            after = (Part(f"Patch_Projection_{k}", "Linear", linear(enc.h, enc.h * e_k), matmul=enc.h * enc.h * e_k),
                     *after)
        blocks.append(enc.block(k, window, after=after))
    wide = enc.h * k_top
    for i in range(glo.n):
        k = len(blocks) + 1
        proj = (Part(f"Token_Projection_{k}", "Linear", linear(wide, glo.h), matmul=wide * glo.h),) \
            if i == 0 and wide != glo.h else ()
        blocks.append(glo.block(k, before=proj))
    g_in = dec.r.int("hidden_size_global")
    for i in range(dec.n):
        k = len(blocks) + 1
        before = (dec.cross(k),) if d_all or i == 0 else ()
        if i == 0:
            before = (Part(f"Patch_Projection_{k}", "Linear", linear(g_in, dec.h * d_k), matmul=g_in * dec.h * d_k),
                      *before)
        blocks.append(dec.block(k, before=before))
    head = [norm_part("Final_RMSNorm", "rmsnorm", dec.h), lm_head_part(vocab, dec.h, tie),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=dec.h, layers=len(blocks), heads=dec.heads, kv=dec.kv, head_dim=dec.hd,
                    inter=dec.inter, vocab=vocab, ctx=r.int("max_position_embeddings"), tie=tie, embed=embed,
                    blocks=blocks, head=head, family="blt",
                    notes=(f"bytes: {enc.n} local encoder, {glo.n} global (per patch), {dec.n} local decoder layers",))


BUILDERS: dict[str, Builder] = {"blt": blt}
