"""Recurrent language models without attention: RWKV and xLSTM (transformers 5.24 modeling_<type>.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import (
    Part,
    linear,
    lm_head_part,
    mlp_part,
    norm_part,
)
from .assembly import Builder, assemble


def _ends(vocab: int, h: int, tie: bool, norm: str = "layernorm", bias: bool = False) -> tuple[list[Part], list[Part]]:
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    head = [norm_part("Final_" + ("RMSNorm" if norm == "rmsnorm" else "LayerNorm"), norm, h),
            lm_head_part(vocab, h, tie, bias), Part("Output", "Output", width=vocab)]
    return embed, head


def rwkv(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_rwkv.py (Peng et al. 2023, arXiv:2305.13048): time-mix (key/value/receptance/output of
    attention_hidden_size, decay, first and three mix vectors) and channel-mix (key to intermediate,
    receptance, value back, two mix vectors); LayerNorms; block 0 adds pre_ln. State per sequence and
    layer: 5 x hidden (attention x, numerator, denominator, max; feed-forward x)."""
    r = Reader(cfg, model, "rwkv")
    h, n, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size")
    a = r.int("attention_hidden_size", h)
    inter = r.int("intermediate_size", 4 * h)
    blocks = []
    for i in range(1, n + 1):
        tm = Part(f"TimeMix_{i}", "RWKV Time-mix", 3 * h * a + a * h + 2 * a + 3 * h, matmul=4 * h * a,
                  linears=((h, a), (h, a), (h, a), (a, h)), act=8 * a, transient=5 * a, state=4 * h, scan=(6, a))
        cm = Part(f"ChannelMix_{i}", "RWKV Channel-mix", h * inter + h * h + inter * h + 2 * h,
                  matmul=2 * h * inter + h * h, linears=((h, inter), (h, h), (inter, h)), act=2 * inter + 2 * h,
                  transient=2 * inter, state=h)
        pre = [norm_part(f"Pre_LayerNorm_{i}", "layernorm", h)] if i == 1 else []
        blocks.append(standard_block(i, pre, tm, cm, "layernorm", h, kind="recurrent"))
    tie = r.flag("tie_word_embeddings", False)
    embed, head = _ends(vocab, h, tie)
    ctx = r.int("context_length", 1024)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=1, kv=1, head_dim=h, inter=inter, vocab=vocab, ctx=ctx,
                    tie=tie, embed=embed, blocks=blocks, head=head, position="none")


def _round_up(x: float, m: int) -> int:
    return int(((x + m - 1) // m) * m)


def xlstm(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_xlstm.py (Beck et al. 2024, arXiv:2405.04517): mLSTM blocks. q/k of qk_dim, v and the
    output gate of v_dim, input/forget gates per head (with bias), a multi-head norm,
    out_proj; a SwiGLU of hidden x ffn_proj_factor (rounded up). State per layer: the matrix memory
    heads x d_qk x d_v plus the normaliser (heads x d_qk) and max (heads)."""
    r = Reader(cfg, model, "xlstm", {"num_hidden_layers": ("num_blocks",), "hidden_size": ("embedding_dim",)})
    # xLSTMConfig keeps num_blocks and embedding_dim beside num_hidden_layers and hidden_size: the model stacks
    # num_blocks blocks of hidden_size and embeds at embedding_dim (modeling_xlstm.xLSTMModel).
    h, vocab, heads = r.int("hidden_size"), r.int("vocab_size"), r.int("num_heads")
    n = r.int("num_blocks") if r.has("num_blocks") else r.int("num_hidden_layers")
    emb = r.int("embedding_dim") if r.has("embedding_dim") else h
    bias = r.flag("use_bias", False)
    # modeling_xlstm.xLSTMLayer: v_dim / qk_dim = int(hidden_size x factor), not rounded (only the FFN is)
    qk = int(h * r.number("qk_dim_factor", 0.5, high=64))
    v = int(h * r.number("v_dim_factor", 1.0, high=64))
    ffn = _round_up(h * r.number("ffn_proj_factor", 2.667, high=64), r.int("ffn_round_up_to_multiple_of", 64))
    blocks = []
    for i in range(1, n + 1):
        lin = ((h, qk), (h, qk), (h, v), (h, v), (v, h))
        params = sum(linear(a, b, bias) for a, b in lin) + 2 * linear(h, heads, True) + v
        m = Part(f"mLSTM_{i}", "mLSTM", params, matmul=sum(a * b for a, b in lin) + 2 * h * heads, linears=lin,
                 act=2 * qk + 4 * v, act32=2 * heads, transient=2 * qk + 2 * v,
                 state=heads * (qk // heads) * (v // heads) + qk + heads)
        f = mlp_part(f"FFN_{i}", "SwiGLU", h, ffn, True, bias)
        blocks.append(standard_block(i, [], m, f, "rmsnorm", h, kind="recurrent"))
    tie = False  # modeling_xlstm.py ties nothing, whatever tie_word_embeddings says
    embed, head = _ends(vocab, h, tie, "rmsnorm")
    embed = [p._replace(params=vocab * emb) if p.type == "Embedding" else p for p in embed]
    if not r.flag("add_out_norm", True):
        head = head[1:]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=heads, head_dim=qk // heads, inter=ffn,
                    vocab=vocab, ctx=r.int("max_position_embeddings", 1 << 20), tie=tie, embed=embed, blocks=blocks,
                    head=head, position="none")

BUILDERS: dict[str, Builder] = {
    "rwkv": rwkv,
    "xlstm": xlstm,
}
