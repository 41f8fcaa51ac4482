"""More hybrids: LFM2/LFM3 short-convolution layers, RecurrentGemma (Griffin), Nemotron-H (modeling_<type>.py).

Convolution layers hold a fixed conv state (hidden x kernel) per sequence; RG-LRU layers their conv
and recurrent state; Nemotron-H's Mamba-2 layers their conv + SSM state; attention layers cache K/V.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ConfigError
from .arch import Arch
from .decoders import D, M, T, attention, build
from .hybrids import LEGACY, TRAITS, layer_types
from .moe import first_k_dense
from .registry import register, register_table
from .spec import Part, linear
from .ssm import mamba2_part


# --- LFM2 (modeling_lfm2.py): short-convolution layers (in_proj hidden -> 3 hidden, depthwise conv of
# conv_L_cache, out_proj) and attention layers (q/k LayerNorm of head_dim); the SwiGLU width is
# adjusted (2/3, multiplier, rounded up to block_multiple_of); the final norm is embedding_norm.
def _lfm_conv(d: D, n: int) -> Part:
    r = d.r
    h, k = d.hidden, r.int("conv_L_cache", 3)
    bias = r.flag("conv_bias", False)
    params = linear(h, 3 * h, bias) + h * k + (h if bias else 0) + linear(h, h, bias)
    lin = ((h, 3 * h), (h, h))
    return Part(f"ShortConv_{n}", "Short Conv", params, matmul=4 * h * h, linears=lin, act=6 * h, transient=4 * h,
                state=h * k)


def _lfm2_inter(d: D) -> int:
    inter = d.inter
    if d.f("block_auto_adjust_ff_dim", True):
        inter = int(2 * inter / 3)
        mult = d.r.number("block_ffn_dim_multiplier", 1.0, high=1e6)
        if mult is not None:
            inter = int(mult * inter)
        m = d.k("block_multiple_of", 256)
        inter = m * ((inter + m - 1) // m)
    return inter


def _lfm2_mixer(d: D, i: int) -> str:
    idx = d.r.list("full_attn_idxs", int)
    default = (lambda j: "full_attention" if idx is None or j in idx else "conv")
    return "attention" if layer_types(d, default)[i] in ("full_attention", "sliding_attention") else "conv"


LFM2 = T(qk_norm="head", tie=True, mixer=_lfm2_mixer, mixers={"conv": _lfm_conv})


def lfm2(cfg: Mapping[str, Any], model: str) -> Arch:
    from .decoders import D as _D
    from .reader import Reader
    r = Reader(cfg, model, "lfm2")
    d = _D(r, LFM2)
    inter = _lfm2_inter(d)
    return build(dict(cfg, intermediate_size=inter), model, "lfm2", LFM2)


register("lfm2")(lfm2)

TRAITS["lfm2_moe"] = T(qk_norm="head", tie=True, mixer=_lfm2_mixer, mixers={"conv": _lfm_conv},
                       moe=M(sparse=first_k_dense("num_dense_layers")))
register_table(TRAITS, build, only=("lfm2_moe",))

# modeling_lfm3.py: sandwich norms (4 per layer), attention with a per-head output gate (g_proj)
TRAITS["lfm3"] = T(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qk_norm="head", tie=True,
                   qkv_bias="attention_bias", o_bias="attention_bias",
                   attn_linears=lambda d: ((d.hidden, d.heads),) if d.f("use_attention_gate", True) else (),
                   mixer=lambda d, i: "conv" if layer_types(d, lambda j: "full_attention")[i] == "conv" else "attention",
                   mixers={"conv": _lfm_conv})
register_table(TRAITS, build, only=("lfm3",))


# --- RecurrentGemma (modeling_recurrent_gemma.py, Griffin: De et al. 2024, arXiv:2402.19427): block_types
# cycle over "recurrent" (RG-LRU) and "attention" (local, attention_window_size) temporal blocks.
def _rglru(d: D, n: int) -> Part:
    r = d.r
    h, lru, k = d.hidden, r.int("lru_width", d.hidden), r.int("conv1d_width", 4)
    bs = lru // d.heads
    params = 2 * linear(h, lru, True) + linear(lru, h, True) + lru * k + lru + lru + 2 * (d.heads * bs * bs + d.heads * bs)
    lin = ((h, lru), (h, lru), (lru, h))
    return Part(f"RG_LRU_{n}", "Recurrent (RG-LRU)", params, matmul=3 * h * lru, linears=lin, act=8 * lru,
                transient=4 * lru, state=lru * k + lru)


def _griffin_types(d: D) -> list[str]:
    types = d.r.list("block_types") or ["recurrent", "recurrent", "attention"]
    return [types[i % len(types)] for i in range(d.layers)]


def _griffin_attention(t: T, d: D, n: int, window: int) -> Part:
    p = attention(t, d, n, d.k("attention_window_size", 2048))
    return p._replace(params=p.params + d.hidden)  # o_proj has a bias, q/k/v do not


TRAITS["recurrent_gemma"] = T(tie=True, mlp_bias=True, qkv_bias="attention_bias", attn=_griffin_attention,
                              mixer=lambda d, i: "rglru" if _griffin_types(d)[i] == "recurrent" else "attention",
                              mixers={"rglru": _rglru})


def recurrent_gemma(cfg: Mapping[str, Any], model: str) -> Arch:
    from .reader import Reader
    r = Reader(cfg, model, "recurrent_gemma")
    inter = r.int("intermediate_size") // 2  # modeling_recurrent_gemma.py: MLP width intermediate_size // 2
    return build(dict(cfg, intermediate_size=inter), model, "recurrent_gemma", TRAITS["recurrent_gemma"])


register("recurrent_gemma")(recurrent_gemma)


# --- Nemotron-H (modeling_nemotron_h.py): one mixer per layer from layers_block_type (or the legacy
# hybrid_override_pattern M/*/-/E): Mamba-2, attention, a squared-ReLU up/down MLP, or MoE with
# non-gated experts and a shared expert; one RMSNorm per layer.
PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _nemotron_types(cfg: Mapping[str, Any], model: str) -> list[str]:
    types = cfg.get("layers_block_type", cfg.get("layer_types"))
    if types is None and isinstance(cfg.get("hybrid_override_pattern"), str):
        pattern = cfg["hybrid_override_pattern"]
        if not all(c in PATTERN for c in pattern):
            raise ConfigError(model, "hybrid_override_pattern", pattern, "must use only M, *, - and E")
        types = [PATTERN[c] for c in pattern]
    if types is None:
        types = ["linear_attention", "moe", "full_attention", "mlp"]
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise ConfigError(model, "layers_block_type", types, "must be a list of layer kinds")
    return [LEGACY.get(t, t) for t in types]


def _nemotron_mamba(d: D, n: int) -> Part:
    r = d.r
    heads, hd = r.int("mamba_num_heads"), r.int("mamba_head_dim")
    return mamba2_part(f"Mamba2_{n}", d.hidden, heads * hd, heads, hd, r.int("n_groups", 1), r.int("ssm_state_size"),
                       r.int("conv_kernel", 4), bias=r.flag("mamba_proj_bias", False),
                       conv_bias=r.flag("use_conv_bias", True))


def _nemotron_mlp(d: D, n: int) -> Part:
    from .spec import mlp_part
    return mlp_part(f"FFN_{n}", "MLP (ReLU²)", d.hidden, d.inter, False, d.f("mlp_bias", False))


def _nemotron_moe(d: D, n: int) -> Part:
    from .spec import moe_part
    r = d.r
    e, k = r.int("n_routed_experts"), r.int("num_experts_per_tok")
    latent = r.opt_int("moe_latent_size")
    width = latent or d.hidden
    shared = r.int("moe_shared_expert_intermediate_size")  # one shared expert whatever n_shared_experts says
    bias = d.f("mlp_bias", False)
    extra = (2 * linear(d.hidden, latent, bias) if latent else 0) + ((shared + d.hidden) if bias else 0)
    part = moe_part(f"MoE_{n}", width, e, k, r.int("moe_intermediate_size"), gated=False, router_params=d.hidden * e,
                    extra=extra)
    # the shared expert reads the full hidden state (up/down, no gate)
    return part._replace(type=f"MoE ({e} experts, top-{k})", params=part.params + 2 * d.hidden * shared,
                   active=part.active_params + 2 * d.hidden * shared, matmul=part.matmul + 2 * d.hidden * shared,
                   active_matmul=part.active_matmul_params + 2 * d.hidden * shared,
                   linears=((d.hidden, shared), (shared, d.hidden)), act=part.act + 2 * shared)


def nemotron_h(cfg: Mapping[str, Any], model: str) -> Arch:
    types = _nemotron_types(cfg, model)
    kinds = {"linear_attention": "mamba2", "full_attention": "attention", "mlp": "mlp", "moe": "moe"}
    for t in types:
        if t not in kinds:
            raise ConfigError(model, "layers_block_type", t, "is not a Nemotron-H layer kind")
    t = T(norms=("pre_attn",), never_tie=True,
          mixer=lambda d, i: kinds[types[i]], ffn=lambda d, i: "none",
          mixers={"mamba2": _nemotron_mamba, "mlp": _nemotron_mlp, "moe": _nemotron_moe})
    src = {k: v for k, v in cfg.items() if k != "layer_types"}
    return build(dict(src, num_hidden_layers=len(types)), model, "nemotron_h", t)


register("nemotron_h")(nemotron_h)
