"""Decoders mixing attention with linear-attention layers: gated DeltaNet (Qwen3-Next, Qwen3.5, OLMo-hybrid), lightning attention (MiniMax), KDA (Kimi-Linear, Ling hybrid), LaRA (transformers 5.24 modeling_<type>.py).

Per layer the config says which mixer runs (`layer_types`, or the family's pattern keys). Gated-DeltaNet /
linear-attention layers hold conv + a heads x d_k x d_v recurrent state (Yang et al. 2024, arXiv:2412.06464;
modeling_qwen3_next.Qwen3NextGatedDeltaNet and its cache), whatever the length."""

from __future__ import annotations

from collections.abc import Callable

from ...errors import ConfigError
from ..graph.parts import Part
from .assembly import mla_part
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule
from .mamba import ssm_state_fp32
from .mixture_of_experts import _n_shared, _width, first_k_dense, qwen_sparse

LEGACY = {"mamba": "linear_attention", "attention": "full_attention", "hybrid": "full_attention"}


def layer_types(d: Dims, default: Callable[[int], str]) -> list[str]:
    """The config's layer_types (legacy names remapped, configuration_utils._LEGACY_LAYER_TYPE_REMAP)."""
    types = d.r.cfg.get("layer_types")
    if types is None:
        return [default(i) for i in range(d.layers)]
    if not isinstance(types, list) or len(types) < d.layers or not all(isinstance(t, str) for t in types):
        raise ConfigError(d.r.model, "layer_types", types, f"must list {d.layers} layer types")
    return [str(LEGACY.get(t, t)) for t in types]


def is_linear(name: str) -> bool:
    return name in ("linear_attention", "mamba", "conv", "recurrent", "lightning_attention")


# torch_chunk_gated_delta_rule's and chunk_kimi_delta_attention's chunk_size default, which no caller overrides
# (modeling_qwen3_next.py, modeling_kimi_linear.py), and the chunk of flash-linear-attention's kernels.
DELTA_CHUNK = 64


def gdn_part(d: Dims, n: int, *, split: bool = False, prefix: str = "linear_") -> Part:
    """Gated DeltaNet (modeling_qwen3_next.py / modeling_qwen3_5.py): in_proj to q, k (key heads x d_k),
    v and z (value heads x d_v), b and a (value heads); conv1d over q, k, v; dt_bias and A_log per value
    head; a gated RMSNorm of d_v; out_proj. State per sequence: conv (conv_dim x kernel) + heads x d_k x d_v."""
    r = d.r
    nk, nv = r.int(prefix + "num_key_heads"), r.int(prefix + "num_value_heads")
    dk, dv = r.int(prefix + "key_head_dim"), r.int(prefix + "value_head_dim")
    kernel = r.int(prefix + "conv_kernel_dim", 4)
    key, value = nk * dk, nv * dv
    conv = 2 * key + value
    proj = 2 * key + 2 * value + 2 * nv
    params = d.hidden * proj + conv * kernel + 2 * nv + dv + value * d.hidden
    lin = ((d.hidden, 2 * key + value), (d.hidden, value), (d.hidden, nv), (d.hidden, nv)) if split else \
        ((d.hidden, 2 * key + 2 * value), (d.hidden, 2 * nv))
    return Part(f"DeltaNet_{n}", "Gated DeltaNet", params, matmul=d.hidden * proj + value * d.hidden,
                linears=lin + ((value, d.hidden),), act=proj + conv + 3 * value, act32=nv, transient=proj + conv + value,
                state=conv * kernel + (2 if ssm_state_fp32(r, "mamba_ssm_dtype") else 1) * nv * dk * dv,
                scan=(3, nk, nv, dk, dv, DELTA_CHUNK, kernel))


def _qwen_next_types(d: Dims) -> list[str]:
    interval = d.k("full_attention_interval", 4)
    return layer_types(d, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention")


QWEN_NEXT_MIXER = StackRule(lambda d: ["attention" if t == "full_attention" else "gdn" for t in _qwen_next_types(d)])


# --- minimax (modeling_minimax.py): lightning (linear) attention layers with a fused qkv_proj, an RMSNorm
# of heads x head_dim, out_proj and an output gate; state per layer heads x head_dim x head_dim.
def _lightning(d: Dims, n: int) -> Part:
    inner = d.heads * d.hd
    params = d.hidden * 3 * inner + inner + inner * d.hidden + d.hidden * inner
    lin = ((d.hidden, 3 * inner), (inner, d.hidden), (d.hidden, inner))
    return Part(f"Lightning_{n}", "Lightning Attn", params, matmul=sum(i * o for i, o in lin), linears=lin,
                act=6 * inner, transient=5 * inner, state=d.heads * d.hd * d.hd)


def _types_mixer(linear_name: str, default: Callable[[int], str] = lambda i: "full_attention") -> Callable[[Dims, int], str]:
    return StackRule(lambda d: [linear_name if is_linear(t) else "attention" for t in layer_types(d, default)])


# --- Kimi Delta Attention (modeling_kimi_linear.py) and bailing_hybrid's linear attention: q/k/v of
# heads x head_dim, a short conv over each, a low-rank (kimi) or full (bailing) forget gate, beta per
# head, an output gate, an RMSNorm of head_dim. State: conv (3 x heads x head_dim x kernel) + heads x d x d.
def _kda(d: Dims, n: int, *, low_rank: bool) -> Part:
    r = d.r
    nh, hd = r.int("linear_num_heads"), r.int("linear_head_dim")
    k = r.int("linear_conv_kernel_dim", 4)
    inner = nh * hd
    h = d.hidden
    if low_rank:  # f_a/f_b and g_a/g_b: hidden -> head_dim -> inner
        gates = 2 * (h * hd + hd * inner)
        lin: tuple[tuple[int, int], ...] = ((h, inner),) * 3 + ((h, hd), (hd, inner), (h, nh), (h, hd), (hd, inner),
                                                               (inner, h))
    else:  # bailing: f_proj hidden -> inner, g_proj hidden -> inner
        gates = 2 * h * inner
        lin = ((h, inner),) * 3 + ((h, inner), (h, nh), (h, inner), (inner, h))
    params = 3 * h * inner + 3 * inner * k + inner + nh + gates + h * nh + hd + inner * h
    return Part(f"Linear_Attention_{n}", "Kimi Delta Attn" if low_rank else "Linear Attn", params,
                matmul=sum(i * o for i, o in lin), linears=lin, act=9 * inner, act32=nh, transient=5 * inner,
                state=3 * inner * k + nh * hd * hd, scan=(4, nh, hd, DELTA_CHUNK, k, int(low_rank)))


def _kimi_mla(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    return mla_part(f"Attention_{n}", d.r, d.hidden, d.heads, window=window, bias=d.f("attention_bias"))


KIMI_MOE = ExpertTraits(top_k="num_experts_per_token", shared=_n_shared("num_shared_experts"), sparse=first_k_dense())


CTX = {"max_position_embeddings": ("model_max_length",)}


def _bailing_mla(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_bailing_hybrid.py: MLA layers also gate their output per head (g_proj hidden -> heads).
    return mla_part(f"Attention_{n}", d.r, d.hidden, d.heads, window=window, extra=d.hidden * d.heads,
                    bias=d.f("attention_bias"))


# --- olmo_hybrid (modeling_olmo_hybrid.py): Gated DeltaNet with separate q/k/v/a/b/g projections, olmo3
# attention (flat q/k RMSNorm) elsewhere; two hidden-width norms per layer either way.
def _olmo_gdn(d: Dims, n: int) -> Part:
    r = d.r
    nk, nv = r.int("linear_num_key_heads"), r.int("linear_num_value_heads")
    dk, dv = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
    kernel = r.int("linear_conv_kernel_dim", 4)
    key, value, h = nk * dk, nv * dv, d.hidden
    conv = 2 * key + value
    lin = ((h, key), (h, key), (h, value), (h, nv), (h, nv), (h, value), (value, h))
    params = sum(i * o for i, o in lin) + conv * kernel + dv + 2 * nv
    return Part(f"DeltaNet_{n}", "Gated DeltaNet", params, matmul=sum(i * o for i, o in lin), linears=lin,
                act=2 * conv + 3 * value, act32=nv, transient=2 * conv + value, state=conv * kernel + nv * dk * dv,
                scan=(3, nk, nv, dk, dv, DELTA_CHUNK, kernel))


TRAITS: dict[str, DecoderTraits] = {
    # modeling_qwen3_next.py: gated attention (q_proj also emits the gate) with q/k RMSNorm every
    # full_attention_interval-th layer, Gated DeltaNet elsewhere; qwen2-MoE experts.
    "qwen3_next": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", q_mult=2,
                    mixer=QWEN_NEXT_MIXER, mixers={"gdn": lambda d, n: gdn_part(d, n)},
                    moe=ExpertTraits(shared=_width("shared_expert_intermediate_size"), shared_gate=True, sparse=qwen_sparse)),
    "qwen3_5_text": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", q_mult=2,
                      mixer=QWEN_NEXT_MIXER, mixers={"gdn": lambda d, n: gdn_part(d, n, split=True)}),
    "qwen3_5_moe_text": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", q_mult=2,
                          mixer=QWEN_NEXT_MIXER, mixers={"gdn": lambda d, n: gdn_part(d, n, split=True)},
                          moe=ExpertTraits(shared=_width("shared_expert_intermediate_size"), shared_gate=True)),
    "minimax": DecoderTraits(mixer=_types_mixer("lightning", lambda j: "full_attention" if (j + 1) % 2 else "linear_attention"),
    mixers={"lightning": _lightning}, moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size")),
    "lara_mini": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", tie=True,
                        mixer=_types_mixer("gdn"),
                        mixers={"gdn": lambda d, n: gdn_part(d, n, split=True)},
                        moe=ExpertTraits(shared=_width("shared_expert_intermediate_size"))),
    "kimi_linear": DecoderTraits(aliases=CTX, never_tie=True, mla=True, attn=_kimi_mla, mixer=_types_mixer("kda"),
                          mixers={"kda": lambda d, n: _kda(d, n, low_rank=True)}, moe=KIMI_MOE),
    "bailing_hybrid": DecoderTraits(aliases=CTX, never_tie=True, mla=True, attn=_bailing_mla, mixer=_types_mixer("kda"),
                             mixers={"kda": lambda d, n: _kda(d, n, low_rank=False)}, moe=KIMI_MOE),
    "olmo_hybrid": DecoderTraits(norms=("post_attn", "post_mlp"), qkv_bias="attention_bias", o_bias="attention_bias",
                          qk_norm="flat", mixer=_types_mixer("gdn"), mixers={"gdn": _olmo_gdn}),
}
