"""Hyper-connections between layers: each layer's Part for its two mixing modules and the head's collapse, with the
tensors they keep for the backward (Zhu et al. 2024, arXiv:2409.19606; DeepSeek-V4's manifold-constrained form)."""

from __future__ import annotations

from ..graph.parts import Part
from .decoder import Dims

# The Parts' types, which memory/ reads as the same strings (activations.HYPER_CONNECTION_TYPES, ends.
# HYPER_HEAD_TEMPORARIES; tests/test_layer_streams.py holds them equal). The head's names its norm's form:
# DeepSeek-V4's returns x * rsqrt(mean(x^2)), HY-V4's the rsqrt alone.
HYPER_CONNECTIONS, HYPER_CONNECTIONS_FP32 = "Hyper-connections", "Hyper-connections (fp32 mixing)"
HYPER_HEAD, HYPER_HEAD_RSQRT = "Hyper-connections head", "Hyper-connections head (rsqrt norm)"


def layer_part(streams: int, hidden: int, params: int, sinkhorn: int | None = None, autocast: bool = True) -> Part:
    """A layer's attn_hc and ffn_hc (transformers 5.24 modeling_deepseek_v4.DeepseekV4HyperConnection and
    DeepseekV4DecoderLayer; modeling_hy_v4.HYV4HyperConnection and HYV4DecoderLayer), m = `streams` streams of
    `hidden` width. Each module reads the m streams (the layer's input, then the stream between its two sublayers)
    and keeps, per token:
    - the streams flattened to fp32, its norm's input: m x hidden in fp32 (act32). Where the stream is fp32 already
      (a full AMP step), `.float()` makes no copy and these are the streams themselves;
    - the streams in their own dtype, saved by the collapse's pre-weighting and (DeepSeek-V4) the comb matmul: m x
      hidden in bf16 with frozen weights; in a full AMP step they are the fp32 tensors above;
    - the sublayer's output (the attention's, the MLP's), saved by the post-weighting: bf16 in DeepSeek-V4's; HY-V4's
      takes its fp32 copy (`.float()`, act32);
    - with autocast on (DeepSeek-V4's modules; HY-V4's turn it off): where fn trains, autocast's bf16 copy of the
      normalised streams, the projection's input;
    - DeepSeek-V4's Sinkhorn projection of comb (`sinkhorn` = hc_sinkhorn_iters; None: no comb, HY-V4): one
      division, then two per further iteration, each [m, m] fp32 per token.
    HY-V4's layer mixes the streams in fp32 ((post.float() x out.float() + residual.float()).to(dtype)): its type
    says so (HYPER_CONNECTIONS_FP32), and its backward makes the streams' gradient in fp32 (activations.py).
    Read off the live tensors of CPU-simulated steps (data/measurements/FINDINGS.md F103)."""
    m, h = streams, hidden
    flat = 2 * m * h  # both modules
    sink = 0 if sinkhorn is None else 2 * max(1, 2 * sinkhorn - 1) * m * m
    outputs = 2 * h
    return Part("Hyper_Connections", HYPER_CONNECTIONS if autocast else HYPER_CONNECTIONS_FP32, params,
                act32=flat + sink + (0 if autocast else outputs),
                act=outputs + flat if autocast else 0,
                act_frozen=flat + (outputs if autocast else 0))


def head_part(streams: int, hidden: int, params: int, autocast: bool = True, kind: str = HYPER_HEAD) -> Part:
    """The head's collapse of the m streams into one (DeepseekV4HyperHead, HYV4HyperHead): its norm's fp32 input
    (the stream itself in a full AMP step), the stream saved by its pre-weighting (bf16 with frozen weights) and,
    with autocast on and hc_fn training, autocast's bf16 copy of the normalised streams."""
    m, h = streams, hidden
    return Part("Head_Extra", kind, params, act32=m * h, act=m * h if autocast else 0, act_frozen=m * h)


def deepseek_v4_layer(d: Dims) -> Part:
    # DeepseekV4HyperConnection (attn_hc, ffn_hc): fn ((2 + m) m x m.hidden), base ((2 + m) m), scale (3)
    m = d.k("hc_mult")
    return layer_part(m, d.hidden, 2 * ((2 + m) * m * m * d.hidden + (2 + m) * m + 3),
                      sinkhorn=d.k("hc_sinkhorn_iters", 20, minimum=0))  # DeepseekV4Config's default


def hy_v4_layer(d: Dims) -> Part:
    # HYV4HyperConnection (attn_hc, ffn_hc): fn (2m x m.hidden), base (2m), scale (2); no comb, autocast off
    m = d.k("hc_mult")
    return layer_part(m, d.hidden, 2 * (2 * m * m * d.hidden + 2 * m + 2), autocast=False)


def _head_params(d: Dims) -> int:
    # DeepseekV4HyperHead, HYV4HyperHead: hc_fn (m x m.hidden), hc_base (m), hc_scale (1)
    return d.k("hc_mult") ** 2 * d.hidden + d.k("hc_mult") + 1


def deepseek_v4_head(d: Dims) -> Part:
    return head_part(d.k("hc_mult"), d.hidden, _head_params(d))


def hy_v4_head(d: Dims) -> Part:
    return head_part(d.k("hc_mult"), d.hidden, _head_params(d), autocast=False, kind=HYPER_HEAD_RSQRT)
