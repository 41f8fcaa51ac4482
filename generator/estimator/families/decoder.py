"""The generic decoder builder: traits (T) of a model_type + its config → the layer spec.

A decoder layer is norms + a mixer (attention, MLA, or a hybrid's SSM/linear-attention layer) + a
feed-forward (dense MLP or MoE). The traits say how a family lays these out and which config keys
switch biases, q/k norms and extras; the tables in llama_like.py, moe.py and hybrids.py list the
families. Every trait was read from transformers 5.24's `models/<type>/modeling_<type>.py`; the
oracle (tests/test_oracle_causal.py) builds each one on the meta device and compares counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, activation_name, architectures_of
from ..config.windows import Rule, layer_windows
from ..graph.layout import standard_parts
from ..graph.parts import (
    Block,
    Part,
    Spec,
    attention_part,
    attention_type,
    cross_attention_part,
    ffn_type,
    linear,
    lm_head_part,
    mlp_part,
    moe_part,
    norm_params,
    norm_part,
)
from ..graph.stacks import alike, copyable, numbered
from .assembly import mla_part


class Dims:
    """The standard dimensions of one config, read once, plus the reader for anything else."""

    def __init__(self, r: Reader, t: DecoderTraits) -> None:
        self.r = r
        self.hidden = r.int("hidden_size")
        self.layers = r.int("num_hidden_layers")
        self.heads = r.int("num_attention_heads")
        self.kv = t.kv_rule(self) if t.kv_rule else self.heads if t.mha else r.int("num_key_value_heads", self.heads)
        if self.heads % self.kv:
            raise ConfigError(r.model, "num_key_value_heads", self.kv, f"does not divide num_attention_heads {self.heads}")
        hd = r.opt_int("head_dim") if t.head_dim_key else None
        if hd is None:
            # transformers: head_dim = hidden_size // num_attention_heads (floored; checks.py notes a remainder)
            if self.hidden < self.heads:
                raise ConfigError(r.model, "num_attention_heads", self.heads, f"exceeds hidden_size {self.hidden}")
            hd = self.hidden // self.heads  # MLA's head dims are its own keys: build records them
            hd = hd if t.mla else r.derived("head_dim", hd, "hidden_size // num_attention_heads")
        self.hd = hd
        self.inter = 4 * self.hidden if t.inter_x4_always else (  # modeling_bloom.BloomMLP: 4 x hidden, no config key
            r.int(t.inter_key, 4 * self.hidden if t.inter_x4 else None, required=not t.moe) or 0) if t.inter_key else 0
        self.vocab = r.int("vocab_size")
        self.ctx = r.int("max_position_embeddings", t.default_context or None, required=False) or \
            r.derived("max_position_embeddings", 131072, "not in the config; assumed 131,072")
        # OPT's word_embed_proj_dim: embeddings narrower than the stack, projected in and out
        self.embed_dim = r.int(t.embed_proj_key, self.hidden) if t.embed_proj_key else self.hidden
        self.norms, self.parallel = t.layout(self) if t.layout else (t.norms, t.parallel)
        self.norm = t.norm_rule(self) if t.norm_rule else t.norm
        self.act = activation_name(r) or t.act_default
        # add_cross_attention (EncoderDecoderModel's and VisionEncoderDecoderModel's decoder), read only where the
        # family lays it out and recorded only when on
        self.cross = t.cross and r.on("add_cross_attention")

    def k(self, key: str, default: int | None = None, minimum: int = 1) -> Any:
        return self.r.int(key, default, minimum=minimum)

    def f(self, key: bool | str | None, default: bool = False) -> bool:
        return self.r.flag(key, default)


Count = Callable[[Dims], int]
Extra = Callable[[Dims], int | Part]  # extra parameters: a count, or a family's own Part (its activations too)
Linears = Callable[[Dims], tuple[tuple[int, int], ...]]


@dataclass(frozen=True)
class ExpertTraits:
    """MoE traits: the keys of the routed experts, the shared expert, and which layers are sparse."""

    experts: str = "num_experts"
    top_k: str = "num_experts_per_tok"
    inter: str = "moe_intermediate_size"
    shared: Count | None = None  # total shared-expert width (0 / None: none)
    shared_gate: bool = False  # sigmoid gate hidden -> 1 on the shared expert (qwen2_moe)
    router_bias: bool | str = False
    expert_bias: bool = False  # experts' gate_up/down biases (gpt_oss)
    score_bias: bool = False  # e_score_correction_bias stored as a parameter (not a buffer)
    shared_bias: bool | str = False  # the shared expert's Linears have biases (config key, usually mlp_bias)
    gated: bool = True
    sparse: Callable[[Dims, int], bool] | None = None  # layer i has experts (None: every layer)
    dense_inter: str = "intermediate_size"  # width of the dense layers' MLP
    extra: Count | None = None  # other per-MoE-layer parameters
    expert_extra: Count | None = None  # other parameters of each routed expert (ergo's post-expert norm)
    part: Callable[[Part, Dims], Part] | None = None  # the family's own saved tensors on the built MoE part


@dataclass(frozen=True)
class DecoderTraits:
    """Traits of one decoder family (defaults: llama)."""

    norm: str = "rmsnorm"
    norms: tuple[str, ...] = ("pre_attn", "pre_mlp")  # per-layer norms of hidden width, forward order
    final_norm: bool = True
    parallel: bool = False
    qkv_bias: bool | str = False
    kv_bias: bool | str | None = None  # when k/v bias differs from q's
    o_bias: bool | str = False
    mlp: str = "gated"  # "gated" or "plain"
    mlp_bias: bool | str = False
    qk_norm: str | None = None  # "head" (head_dim), "flat" (heads x head_dim), "per_head", "noscale" (no weight)
    qk_norm_key: str | None = None  # config key that switches it on
    qk_norm_kind: str | None = None
    tie: bool = False  # tie_word_embeddings default when the class has none
    head_bias: bool | str = False
    inter_key: str | None = "intermediate_size"
    inter_x4: bool = False
    head_dim_key: bool = True
    default_context: int = 0
    fused_qkv: bool = False
    fused_gate_up: bool = False
    attn_extra: Count | None = None  # extra attention parameters (sinks, lambdas, ...)
    attn_linears: Linears | None = None  # extra Linears inside attention (gates)
    mlp_extra: Count | None = None
    layer_extra: Extra | None = None
    top_extra: Count | None = None  # outside the layers (embedding norms, projections)
    embed_norm: bool = False
    q_mult: int = 1  # 2: q_proj also emits the output gate
    moe: ExpertTraits | None = None
    mla: bool = False
    window_rule: Rule | None = None
    text_config: bool = False  # the CausalLM reads config.text_config (emu3, ...)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    mixer: Callable[[Dims, int], str] | None = None  # per layer: "attention" or a hybrid mixer (hybrids.py)
    mixers: Mapping[str, Callable[[Dims, int], Part]] = field(default_factory=dict)  # hybrid mixer builders
    ffn: Callable[[Dims, int], str] | None = None  # per layer: "dense", "moe", "none"
    extra_head: Extra | None = None
    attn: Callable[[DecoderTraits, Dims, int, int], Part] | None = None  # custom attention (layer index from 1, window)
    attn_by_window: bool = False  # the custom attention depends on its layer only through the name and window
    never_tie: bool = False  # the class has no tied-weights map: tie_word_embeddings is ignored
    mha: bool = False  # every head has its own K/V whatever num_key_value_heads says
    act_default: str = "silu"  # the activation when neither the config nor its class names one
    # Positions: "rope"; "learned" (max_position_embeddings + position_offset rows; OPT's offset 2); "alibi" (BLOOM)
    position: str = "rope"
    position_offset: int = 0
    embed_proj_key: str | None = None  # config key of a narrower embedding width, projected in and out (OPT)
    inter_x4_always: bool = False  # the MLP is 4 x hidden whatever the config says (BLOOM)
    o_in_hidden: bool = False  # o_proj reads hidden_size features whatever heads x head_dim is (StableLM)
    defaults: Mapping[str, Any] = field(default_factory=dict)  # values the family's class documents elsewhere
    # Config-dependent quirks of a few families (gpt2_era: Falcon, GPT-NeoX, StableLM, OPT), each a rule over D:
    kv_rule: Callable[[Dims], int] | None = None  # K/V heads (Falcon's multi_query / num_kv_heads)
    layout: Callable[[Dims], tuple[tuple[str, ...], bool]] | None = None  # (norms, parallel) per config
    norm_rule: Callable[[Dims], str] | None = None  # the norm kind per config (OPT without affine weights)
    final_norm_rule: Callable[[Dims], bool] | None = None  # whether the final norm exists (OPT)
    rotary: Callable[[Dims], int] | None = None  # rotated dims per head (partial rotary); None: all of head_dim
    # add_cross_attention: each layer's cross-attention over the encoder output, with the self-attention's biases
    # (fused_qkv: q apart, K, V fused), a norm before the MLP (modeling_gpt2 GPT2Block.crossattention, ln_cross_attn)
    cross: bool = False
    streams: str | None = None  # config key of the hidden-width streams between layers (hyper-connections): Spec
    fp32_head: bool = False  # lm_head in the class's _keep_in_fp32_modules_strict: fp32 in any load (Part.params32)


def has_qk_norm(t: DecoderTraits, d: Dims) -> bool:
    return t.qk_norm is not None and not (t.qk_norm_key and not d.f(t.qk_norm_key))


class StackRule:
    """A per-layer rule (DecoderTraits.mixer, ExpertTraits.sparse) made from a rule listing every layer's answer, run
    once per config at the first layer's call (a rule reading the same keys for every layer reads and records them
    as at layer 0); _layers reads the whole list where every rule of the family is one."""

    def __init__(self, stack: Callable[[Dims], list[Any]]) -> None:
        self.stack = stack

    def __call__(self, d: Dims, i: int) -> Any:
        return self.answers(d)[i]

    def answers(self, d: Dims) -> list[Any]:
        return d.r.once(self, lambda: self.stack(d))


def partial_rotary(default: float, neox_key: bool = False) -> Callable[[Dims], int]:
    """Rotated dims per head: head_dim x partial_rotary_factor (in rope_parameters or at the top level; GPT-NeoX
    names it rotary_pct). modeling_phi.py 0.5, modeling_stablelm.py 0.25, modeling_gpt_neox.py 0.25."""
    def rule(d: Dims) -> int:
        rope = d.r.cfg.get("rope_parameters")
        fallback = rope.get("partial_rotary_factor", default) if isinstance(rope, dict) else default
        key = "rotary_pct" if neox_key and "rotary_pct" in d.r.cfg else "partial_rotary_factor"
        return int(d.hd * d.r.number(key, fallback))
    return rule


def qk_norm_params(t: DecoderTraits, d: Dims, norm: str) -> int:
    """q/k norms: one over head_dim shared by the heads ("head": qwen3, gemma3, phi), else over heads x head_dim
    ("flat": olmo2; "per_head": cohere, stablelm, one weight per head and dim)."""
    if not has_qk_norm(t, d):
        return 0
    kind = t.qk_norm_kind or norm
    if t.qk_norm == "head":
        return 2 * norm_params(kind, d.hd)
    return norm_params(kind, d.heads * d.hd) + norm_params(kind, d.kv * d.hd)


def attention(t: DecoderTraits, d: Dims, i: int, window: int, *, heads: int = 0, kv: int = 0, v_dim: int = 0,
              extra: int = 0, hd: int = 0) -> Part:
    """Attention of layer i (from 1); heads / kv heads / head_dim / v_dim override the config's (per-layer variants)."""
    heads, kv, hd = heads or d.heads, kv or d.kv, hd or d.hd
    extra += qk_norm_params(t, d, d.norm) + (t.attn_extra(d) if t.attn_extra else 0)
    lin = t.attn_linears(d) if t.attn_linears else ()
    extra += sum(a * b for a, b in lin)
    kvb = None if t.kv_bias is None else d.f(t.kv_bias)
    return attention_part(f"Attention_{i}", attention_type(heads, kv), d.hidden, heads, kv, hd,
                          qkv_bias=d.f(t.qkv_bias), kv_bias=kvb, o_bias=d.f(t.o_bias), extra=extra, q_mult=t.q_mult,
                          fused_qkv=t.fused_qkv, window=window, extra_linears=lin, v_dim=v_dim,
                          o_in=d.hidden if t.o_in_hidden else 0, rope=t.position == "rope")


def mlp(t: DecoderTraits, d: Dims, i: int, inter: int | None = None) -> Part:
    extra = t.mlp_extra(d) if t.mlp_extra else 0
    if not (inter or d.inter):
        raise ConfigError(d.r.model, t.inter_key, None, "required key is missing (a dense MLP layer needs it)")
    return mlp_part(f"FFN_{i}", ffn_type(t.mlp == "gated", d.act), d.hidden,
                    inter or d.inter, t.mlp == "gated", d.f(t.mlp_bias), fused=t.fused_gate_up, extra=extra)


def moe(t: DecoderTraits, d: Dims, i: int) -> Part:
    m = t.moe
    assert m is not None
    r = d.r
    experts = r.int(m.experts)
    per_layer = r.cfg.get(m.top_k)
    if isinstance(per_layer, list):  # per-layer top-k (modeling_hunyuan_v1_moe.py)
        k = r.list(m.top_k, int, d.layers)[i - 1]
    else:
        k = r.opt_int(m.top_k)
    if k is None:  # unknown top-k (DeepseekV2Config's default): count every expert as active
        k = r.derived(m.top_k, experts, m.experts)
    inter = r.int(m.inter)
    shared = m.shared(d) if m.shared else 0
    extra = (experts if m.score_bias else 0) + (m.extra(d) if m.extra else 0)
    if shared and d.f(m.shared_bias):
        extra += (2 if m.gated else 1) * shared + d.hidden
    part = moe_part(f"MoE_{i}", d.hidden, experts, k, inter, gated=m.gated, bias=m.expert_bias, shared=shared,
                    shared_gate=m.shared_gate, router_bias=d.f(m.router_bias), extra=extra,
                    expert_extra=m.expert_extra(d) if m.expert_extra else 0)
    part = part._replace(type=f"MoE ({experts} experts, top-{k})")
    return m.part(part, d) if m.part else part


def ffn_kind(t: DecoderTraits, d: Dims, i: int) -> str:
    if t.ffn is not None:
        return t.ffn(d, i)
    if t.moe is None:
        return "dense"
    return "moe" if t.moe.sparse is None or t.moe.sparse(d, i) else "dense"


def layer(t: DecoderTraits, d: Dims, i: int, window: int, kind: str, fk: str, mix: Part | None = None) -> Block:
    """Layer i (0-based) in forward order, of mixer `kind` (`mix`: already built) and feed-forward kind `fk`: norms
    around the mixer and the feed-forward."""
    n = i + 1
    if mix is None and kind == "attention":
        if t.attn:
            mix = t.attn(t, d, n, window)
        elif t.mla:
            mix = mla_part(f"Attention_{n}", d.r, d.hidden, d.heads, bias=d.f("attention_bias"), window=window)
        else:
            mix = attention(t, d, n, window)
    elif mix is None:
        mix = t.mixers[kind](d, n)
    ffn = moe(t, d, n) if fk == "moe" else mlp(t, d, n, d.k(t.moe.dense_inter) if t.moe else None) \
        if fk == "dense" else None
    cross = cross_attention_part(n, d.hidden, d.heads, d.hd, bias=d.f(t.qkv_bias), fused_kv=t.fused_qkv) \
        if d.cross else None
    parts = standard_parts(n, [], mix, ffn, d.norm, d.hidden, norms=d.norms, parallel=d.parallel, cross=cross)
    if t.layer_extra:
        parts.append(_extra(t.layer_extra(d), f"Extra_{n}"))
    bkind = kind if kind != "attention" else ("mla" if t.mla else "sliding" if window else "attention")
    return Block(n, bkind, tuple(parts))


def _extra(value: int | Part, name: str) -> Part:  # a trait's count, or a family's own Part (its activations)
    return value._replace(name=name) if isinstance(value, Part) else Part(name, "Parameters", value)


def _layers(t: DecoderTraits, d: Dims, windows: tuple[int, ...]) -> tuple[Block, ...]:
    """Every layer. A layer depends on its index only through its part names, its mixer kind, its window, its
    feed-forward kind (the hybrids' mixer builders read the index for the name alone) and a custom attention (not
    marked attn_by_window: its part, built per layer, is part of the key), unless a per-layer top-k reads it: each
    kind of layer is built once, in forward order, and numbered for the others (graph/stacks.py)."""
    if not d.layers:
        return ()
    reuse = not (t.moe and isinstance(d.r.cfg.get(t.moe.top_k), list))
    custom = reuse and t.attn is not None and not t.attn_by_window  # the attention part keys its layer
    sparse = t.moe.sparse if t.moe and t.ffn is None else None
    if not custom and (t.mixer is None or isinstance(t.mixer, StackRule)) and t.ffn is None and \
            (sparse is None or isinstance(sparse, StackRule)):
        # every per-layer rule lists the whole stack at its first call, mixer first (as layer 0 asks them): the
        # kinds of every layer first, then each kind built once (None: a layer built on its own)
        kinds = t.mixer.answers(d) if isinstance(t.mixer, StackRule) else ["attention"] * d.layers
        ffns = ["moe" if s else "dense" for s in sparse.answers(d)] if isinstance(sparse, StackRule) else \
            [ffn_kind(t, d, 0)] * d.layers
        reuse_attention = reuse and (t.attn is None or t.attn_by_window)
        if reuse_attention and t.mixer is None and sparse is None and windows.count(windows[0]) == d.layers:
            keys: list[tuple[str, int, str] | None] = []  # every layer alike
        else:
            keys = [(kinds[i], windows[i], ffns[i]) if (reuse_attention if kinds[i] == "attention" else reuse)
                    else None for i in range(d.layers)]
        return tuple(alike(range(1, d.layers + 1), lambda n: layer(t, d, n - 1, windows[n - 1], kinds[n - 1],
                                                                   ffns[n - 1]), keys))
    Key = tuple[str, int, str, tuple | None]
    sources: dict[Key, Block | None] = {}  # per kind of layer: its first, copyable (None: not numbered)
    later: dict[Key, list[int]] = {}  # per kind of layer: the numbers of its copies
    out: list[Block | None] = []
    attn = t.attn if custom else None
    for i in range(d.layers):  # in forward order: the per-layer rules and the builders read the config in turn
        kind = t.mixer(d, i) if t.mixer else "attention"
        fk = ffn_kind(t, d, i)
        mix = attn(t, d, i + 1, windows[i]) if attn and kind == "attention" else None
        key = (kind, windows[i], fk, mix[1:] if mix else None)
        if sources.get(key) is not None:
            later[key].append(i + 1)
            out.append(None)
            continue
        b = layer(t, d, i, windows[i], kind, fk, mix)
        out.append(b)
        if key not in sources and reuse:
            sources[key], later[key] = copyable(b), []
    for key, numbers in later.items():
        source = sources[key]
        if source is not None:
            for b in numbered(source, numbers):
                out[b.index - 1] = b
    return tuple(out)  # type: ignore[arg-type]  # every None replaced by its copy


def build(cfg: Mapping[str, Any], model: str, model_type: str, t: DecoderTraits, *, family: str | None = None) -> Arch:
    """Read the config under the family's traits and build the spec."""
    src = cfg
    if t.text_config:
        sub = cfg.get("text_config")
        src = sub if isinstance(sub, Mapping) else {}
    r = Reader(src, model, model_type, t.aliases, t.defaults)
    d = Dims(r, t)
    windows = layer_windows(src, model, model_type, d.layers, r.uses, t.window_rule, t.aliases, t.defaults)
    blocks = _layers(t, d, windows)
    tie = r.flag("tie_word_embeddings", t.tie) and not t.never_tie
    h, e = d.hidden, d.embed_dim
    norm_type = "RMSNorm" if d.norm == "rmsnorm" else "LayerNorm"
    embed: list[Part] = [Part("Input", "Input", width=-1),
                         Part("Embedding", "Embedding", d.vocab * e, width=e if t.embed_proj_key else 0)]
    if e != h:
        embed.append(Part("Project_In", "Linear", linear(e, h), matmul=e * h))
    if t.position == "learned":
        embed.append(Part("Position_Embedding", "Embedding", (d.ctx + t.position_offset) * h))
    else:
        embed.append(Part("ALiBi", "ALiBi") if t.position == "alibi" else Part("RoPE", "RoPE"))
    if t.embed_norm:
        embed.append(norm_part(f"Embedding_{norm_type}", d.norm, h))
    if t.top_extra:
        embed.append(Part("Extra", "Parameters", t.top_extra(d)))
    head: list[Part] = []
    if t.final_norm_rule(d) if t.final_norm_rule else t.final_norm:
        head.append(norm_part(f"Final_{norm_type}", d.norm, h))
    if t.extra_head:
        head.append(_extra(t.extra_head(d), "Head_Extra"))
    if e != h:
        head.append(Part("Project_Out", "Linear", linear(h, e), width=e, matmul=h * e))
    head += [lm_head_part(d.vocab, e, tie, d.f(t.head_bias), fp32=t.fp32_head), Part("Output", "Output", width=d.vocab)]
    spec = Spec("decoder", d.hidden, d.vocab, tuple(embed), blocks, tuple(head), d.vocab, tied=tie,
                streams=d.k(t.streams, 1) if t.streams else 1)
    m = t.moe
    # numbered copies name their parts as their source does: the layers the builder made answer for them
    has_moe = any(p.name.startswith("MoE_") for b in blocks if b.source is None for p in b.parts)
    experts = r.int(m.experts) if m and has_moe else 0
    head_dim = r.derived("head_dim", r.int("qk_nope_head_dim", minimum=0) + r.int("qk_rope_head_dim"),
                         "qk_nope_head_dim + qk_rope_head_dim (MLA: DeepseekV3Attention's K/V head)") if t.mla else d.hd
    rotary = (r.opt_int("qk_rope_head_dim") or d.hd) if t.mla else t.rotary(d) if t.rotary else partial_rotary(1.0)(d)
    return Arch(model_type=str(cfg.get("model_type")), family=family or model_type,
                architectures=architectures_of(cfg, model), custom_code="auto_map" in cfg, text_tower_only=False,
                hidden=d.hidden, layers=d.layers, heads=d.heads, kv_heads=d.kv, head_dim=head_dim,
                intermediate=d.inter, vocab=d.vocab, max_context=d.ctx, tie=tie, act=d.act,
                qk_norm=t.qk_norm if has_qk_norm(t, d) else None, position=t.position,
                embed_dim=e if e != h else 0, uses=tuple(r.uses), raw=src, rotary_dims=rotary if t.position == "rope" else 0,
                layer_windows=windows, spec=spec, experts=experts, experts_per_token=_top_k(r, m, experts) if m and experts else 0)


def _top_k(r: Reader, m: ExpertTraits, experts: int) -> int:
    v = r.cfg.get(m.top_k)
    if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
        return max(v)
    return r.opt_int(m.top_k) or experts
