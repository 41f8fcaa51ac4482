"""Decoders mixing attention with Mamba layers: Jamba, Bamba, Granite-4 hybrid, Falcon-H1, Nemotron-H, Zamba (transformers 5.24 modeling_<type>.py).

Attention layers cache K/V; Mamba/Mamba-2 layers hold conv + SSM state whatever the length."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import (
    Block,
    Part,
    add_part,
    attention_part,
    combine,
    linear,
    lm_head_part,
    mlp_part,
    moe_part,
    norm_part,
)
from .assembly import Builder, assemble
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule, attention, build
from .linear_attention import LEGACY, layer_types
from .mamba import mamba2_part, mamba_part, ssm_state_fp32
from .mixture_of_experts import _width


# --- Jamba (modeling_jamba.py): attention every attn_layer_period-th layer at attn_layer_offset,
# experts every expert_layer_period-th at expert_layer_offset; Mamba with dt/B/C RMSNorms.
def _jamba_mamba(d: Dims, n: int) -> Part:
    r = d.r
    inner = r.int("mamba_expand", 2) * d.hidden
    state, rank = r.int("mamba_d_state", 16), r.opt_int("mamba_dt_rank")
    rank = rank or -(-d.hidden // 16)
    return mamba_part(f"Mamba_{n}", d.hidden, inner, state, r.int("mamba_d_conv", 4), rank,
                      bias=r.flag("mamba_proj_bias", False), conv_bias=r.flag("mamba_conv_bias", True),
                      extra=rank + 2 * state)


def _periodic(key: str, offset: str, p: int, o: int) -> Callable[[Dims, int], bool]:
    return lambda d, i: i % d.k(key, p) == d.k(offset, o, minimum=0)


def mamba2_from(d: Dims, n: int, prefix: str = "mamba_", *, inner: int | None = None, norm: bool = True) -> Part:
    """Mamba-2 mixer with the hybrid families' mamba_* keys (bamba, granitemoehybrid, falcon_h1)."""
    r = d.r
    heads = r.int(prefix + "n_heads")
    inner = inner or r.int(prefix + "expand", 2) * d.hidden
    # configuration_bamba.py: mamba_d_head "auto" = mamba_expand x hidden // mamba_n_heads
    hd = r.derived(prefix + "d_head", inner // heads, "auto") if r.cfg.get(prefix + "d_head", "auto") == "auto" \
        else r.int(prefix + "d_head")
    return mamba2_part(f"Mamba2_{n}", d.hidden, inner, heads, hd, r.int(prefix + "n_groups", 1),
                       r.int(prefix + "d_state"), r.int(prefix + "d_conv", 4), bias=r.flag(prefix + "proj_bias", False),
                       conv_bias=r.flag(prefix + "conv_bias", True), norm=norm, chunk=r.int(prefix + "chunk_size", 256))


def _bamba_mixer(d: Dims, i: int) -> str:
    idx = d.r.list("attn_layer_indices", int) or []
    return "attention" if i in idx else "mamba2"


# granitemoehybrid: attention on "full_attention" layers (layer_types, default all Mamba-2), Mamba-2 elsewhere
_granite_hybrid_mixer = StackRule(lambda d: ["attention" if t == "full_attention" else "mamba2"
                                               for t in layer_types(d, lambda i: "linear_attention")])


# --- falcon_h1 (modeling_falcon_h1.py): every layer runs attention and a Mamba-2 mixer side by side.
def _falcon_h1_attn(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    r = d.r
    inner = r.opt_int("mamba_d_ssm") or r.int("mamba_expand", 2) * d.hidden
    m = mamba2_from(d, n, inner=inner, norm=r.flag("mamba_rms_norm", False))
    if r.flag("projectors_bias", False):
        m = m._replace(params=m.params + d.hidden)
    return combine(f"Attention_Mamba2_{n}", "Attention + Mamba-2", attention(t, d, n, window), m)


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
    return [str(LEGACY.get(t, t)) for t in types]


def _nemotron_mamba(d: Dims, n: int) -> Part:
    r = d.r
    heads, hd = r.int("mamba_num_heads"), r.int("mamba_head_dim")
    return mamba2_part(f"Mamba2_{n}", d.hidden, heads * hd, heads, hd, r.int("n_groups", 1), r.int("ssm_state_size"),
                       r.int("conv_kernel", 4), bias=r.flag("mamba_proj_bias", False),
                       conv_bias=r.flag("use_conv_bias", True),
                       chunk=r.int("mamba_chunk_size", r.int("chunk_size", 128)),
                       state_fp32=ssm_state_fp32(r, "mamba_ssm_cache_dtype"))


def _nemotron_mlp(d: Dims, n: int) -> Part:
    return mlp_part(f"FFN_{n}", "MLP (ReLU²)", d.hidden, d.inter, False, d.f("mlp_bias", False))


def _nemotron_moe(d: Dims, n: int) -> Part:
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
    traits = DecoderTraits(norms=("pre_attn",), never_tie=True,
          mixer=lambda d, i: kinds[types[i]], ffn=lambda d, i: "none",
          mixers={"mamba2": _nemotron_mamba, "mlp": _nemotron_mlp, "moe": _nemotron_moe},
          # the routed experts' keys: the Arch's experts and top-k (active parameters, expert parallel, the decode's
          # expert reads); the MoE layers themselves are _nemotron_moe's
          moe=ExpertTraits(experts="n_routed_experts"))
    src = {k: v for k, v in cfg.items() if k != "layer_types"}
    return build(dict(src, num_hidden_layers=len(types)), model, "nemotron_h", traits)


# Zamba's layers_block_type names (configuration_zamba*.py); its "hybrid" layers stay "hybrid" (shared attention
# beside Mamba), unlike the generic remap, where "hybrid" means full attention.
ZAMBA_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}


def _types(r: Reader, n: int, default: list[str]) -> list[str]:
    types = r.cfg.get("layers_block_type", r.cfg.get("layer_types"))
    if types is None:
        return default
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigError(r.model, "layers_block_type", types, "must be a list of layer kinds")
    return [str(ZAMBA_LAYER_TYPES.get(t, t)) for t in types]


def zamba_like(cfg: Mapping[str, Any], model: str, v2: bool) -> Arch:
    mt = "zamba2" if v2 else "zamba"
    r = Reader(cfg, model, mt)
    h, n, heads, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"), r.int("vocab_size")
    kv = r.int("num_key_value_heads", heads)
    inter = r.int("intermediate_size", 4 * h)
    ah = 2 * h
    hd = r.derived("attention_head_dim", ah // heads, "2 x hidden_size // num_attention_heads")
    expand, state, conv = r.int("mamba_expand", 2), r.int("mamba_d_state"), r.int("mamba_d_conv", 4)
    inner = expand * h
    if v2:
        period = ["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4 + \
            ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2
        types = _types(r, n, period)
        mheads = r.int("n_mamba_heads", 8)

        def mixer(i: int) -> Part:
            return mamba2_part(f"Mamba2_{i}", h, inner, mheads, inner // mheads, r.int("mamba_ngroups", 1), state, conv,
                               bias=r.flag("add_bias_linear", False), conv_bias=r.flag("use_conv_bias", True),
                               chunk=r.int("chunk_size", 256))
    else:
        p, o = r.int("attn_layer_period", 6), r.int("attn_layer_offset", 4, minimum=0)
        types = _types(r, n, ["linear_attention", "linear_attention", "hybrid"] +
                       ["hybrid" if i % p == o else "linear_attention" for i in range(n - 3)])
        dt = r.cfg.get("mamba_dt_rank")
        rank = -(-h // 16) if dt in (None, "auto") else r.int("mamba_dt_rank")

        def mixer(i: int) -> Part:
            return mamba_part(f"Mamba_{i}", h, inner, state, conv, rank, bias=r.flag("mamba_proj_bias", False),
                              conv_bias=r.flag("mamba_conv_bias", True), heads=r.int("n_mamba_heads", 2))
    hybrids = [i for i, t in enumerate(types) if t == "hybrid"]
    mem = r.int("num_mem_blocks", 1) if v2 else 1
    rank_a = r.int("adapter_rank", 128) if v2 else 0
    qkv_adapters = v2 and r.flag("use_shared_attention_adapter", False)
    bias = r.flag("add_bias_linear", False) if v2 else False
    # One shared transformer block: input norm over 2h, q/k/v from 2h, o_proj to h, pre-FF norm, MLP.
    shared_once = 2 * h if not v2 else 2 * h
    shared = shared_once + ah * heads * hd + 2 * ah * kv * hd + heads * hd * h + h + (3 * h * inter) + \
        (2 * inter if v2 and bias else 0) + (h if v2 and bias else 0)
    per_use_adapter = (rank_a * h + rank_a * 2 * inter) + (3 * (ah * rank_a + rank_a * ah) if qkv_adapters else 0)
    # tie_word_embeddings false disables every weight tie of the class, the shared blocks' too: each
    # hybrid layer then builds its own copy (transformers' _tied_weights_keys).
    tie = r.flag("tie_word_embeddings", True)
    blocks = []
    used = 0
    for i, t in enumerate(types, 1):
        parts: list[Part] = []
        if t == "hybrid":
            first = used < mem or not tie
            block_id = used % mem
            used += 1
            attn = attention_part(f"Attention_{i}", "Shared Attn", ah, heads, kv, hd,
                                  rope=v2 and r.flag("use_mem_rope", False), o_in=heads * hd)
            # attention_part assumed out == in (ah); the block projects back to h: fix params and matmul.
            attn = attn._replace(params=0, matmul=ah * heads * hd + 2 * ah * kv * hd + heads * hd * h)
            ffn = mlp_part(f"FFN_{i}", "SwiGLU", h, inter, True, bias, fused=v2)
            ffn = ffn._replace(params=0)
            # a block's adapters: one per hybrid use i with i % num_mem_blocks == block_id (modeling_zamba2.py)
            adapters = sum(1 for j in range(len(hybrids)) if j % mem == block_id) * per_use_adapter if v2 else 0
            block_params = ((shared + adapters) if first else 0) + h * h
            parts += [Part(f"Shared_Block_{i}", "Shared transformer (counted once)" if first else "Shared transformer",
                           block_params, matmul=h * h, linears=((h, h),)),
                      norm_part(f"RMSNorm_{i}_0", "layernorm_noparams", ah),
                      attn, add_part(f"Add_{i}_attn"), ffn]
        parts += [norm_part(f"RMSNorm_{i}_1", "rmsnorm", h), mixer(i), add_part(f"Add_{i}")]
        blocks.append(Block(i, "hybrid" if t == "hybrid" else ("mamba2" if v2 else "mamba"), tuple(parts)))
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=kv, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=r.int("max_position_embeddings", 4096), tie=tie, embed=embed, blocks=blocks,
                    head=head, position="none")


def zamba(cfg: Mapping[str, Any], model: str) -> Arch:
    return zamba_like(cfg, model, False)


def zamba2(cfg: Mapping[str, Any], model: str) -> Arch:
    return zamba_like(cfg, model, True)


TRAITS: dict[str, DecoderTraits] = {
    "jamba": DecoderTraits(mixer=lambda d, i: "attention" if _periodic("attn_layer_period", "attn_layer_offset", 8, 4)(d, i)
                    else "mamba", mixers={"mamba": _jamba_mamba},
                    moe=ExpertTraits(inter="intermediate_size", sparse=_periodic("expert_layer_period", "expert_layer_offset",
                                                                        2, 1))),
    "bamba": DecoderTraits(mixer=_bamba_mixer, mixers={"mamba2": lambda d, n: mamba2_from(d, n)}, mlp_bias="mlp_bias",
                    qkv_bias="attention_bias", o_bias="attention_bias"),
    "granitemoehybrid": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mixer=_granite_hybrid_mixer,
                               mixers={"mamba2": lambda d, n: mamba2_from(d, n)},
                               moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size",
                                     shared=_width("shared_intermediate_size"),
                                     sparse=lambda d, i: d.k("num_local_experts", 0, minimum=0) > 0)),
    "falcon_h1": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", attn=_falcon_h1_attn),
}

BUILDERS: dict[str, Builder] = {
    "nemotron_h": nemotron_h,
    "zamba": zamba,
    "zamba2": zamba2,
}
