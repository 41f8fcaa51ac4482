"""LFM2 / LFM2-MoE / LFM3: gated short-convolution layers beside attention (transformers 5.24 modeling_lfm2*.py); a convolution layer holds a fixed conv state (hidden x kernel) per sequence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .assembly import Builder
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule, build
from .decoder import Dims as _D
from .linear_attention import layer_types
from .mixture_of_experts import first_k_dense


# --- LFM2 (modeling_lfm2.py): short-convolution layers (in_proj hidden -> 3 hidden, depthwise conv of
# conv_L_cache, out_proj) and attention layers (q/k LayerNorm of head_dim); the SwiGLU width is
# adjusted (2/3, multiplier, rounded up to block_multiple_of); the final norm is embedding_norm.
def _lfm_conv(d: Dims, n: int) -> Part:
    r = d.r
    h, k = d.hidden, r.int("conv_L_cache", 3)
    bias = r.flag("conv_bias", False)
    params = linear(h, 3 * h, bias) + h * k + (h if bias else 0) + linear(h, h, bias)
    lin = ((h, 3 * h), (h, h))
    return Part(f"ShortConv_{n}", "Short Conv", params, matmul=4 * h * h, linears=lin, act=6 * h, transient=4 * h,
                state=h * k)


def _lfm2_inter(d: Dims) -> int:
    inter = d.inter
    if d.f("block_auto_adjust_ff_dim", True):
        inter = int(2 * inter / 3)
        mult = d.r.number("block_ffn_dim_multiplier", 1.0, high=1e6)
        if mult is not None:
            inter = int(mult * inter)
        m = d.k("block_multiple_of", 256)
        inter = m * ((inter + m - 1) // m)
    return inter


def _lfm2_kinds(d: Dims) -> list[str]:
    idx = d.r.list("full_attn_idxs", int)
    default = (lambda j: "full_attention" if idx is None or j in idx else "conv")
    return ["attention" if t in ("full_attention", "sliding_attention") else "conv" for t in layer_types(d, default)]


_lfm2_mixer = StackRule(_lfm2_kinds)


LFM2 = DecoderTraits(qk_norm="head", tie=True, mixer=_lfm2_mixer, mixers={"conv": _lfm_conv})


def lfm2(cfg: Mapping[str, Any], model: str) -> Arch:
    r = Reader(cfg, model, "lfm2")
    d = _D(r, LFM2)
    inter = _lfm2_inter(d)
    return build(dict(cfg, intermediate_size=inter), model, "lfm2", LFM2)


TRAITS: dict[str, DecoderTraits] = {
    "lfm2_moe": DecoderTraits(qk_norm="head", tie=True, mixer=_lfm2_mixer, mixers={"conv": _lfm_conv},
                       moe=ExpertTraits(sparse=first_k_dense("num_dense_layers"))),
    # modeling_lfm3.py: sandwich norms (4 per layer), attention with a per-head output gate (g_proj)
"lfm3": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qk_norm="head", tie=True,
                   qkv_bias="attention_bias", o_bias="attention_bias",
                   attn_linears=lambda d: ((d.hidden, d.heads),) if d.f("use_attention_gate", True) else (),
                   mixer=StackRule(lambda d: ["conv" if t == "conv" else "attention"
                                                for t in layer_types(d, lambda j: "full_attention")]),
                   mixers={"conv": _lfm_conv}),
}


BUILDERS: dict[str, Builder] = {
    "lfm2": lfm2,
}
