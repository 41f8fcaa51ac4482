"""The generic model spec every family builder produces: parts (nodes) grouped into blocks (layers).

A Part is one node of the structure table with its parameters and, per token, what it adds to compute, to training
memory and to serving. The builders (families/) fill these; graph/nodes.py, memory/ and cost.py only read them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

# Parameters per width of each norm kind (torch.nn.LayerNorm: weight + bias; RMSNorm: weight).
NORM_PARAMS_PER_WIDTH = dict(rmsnorm=1, layernorm=2, layernorm_nobias=1, layernorm_noparams=0, rmsnorm_noparams=0)


class Part(NamedTuple):
    """One node: parameters, and per token its compute, saved activations, working set and cache."""

    name: str  # node name in the structure table (already numbered by the builder)
    type: str  # what the table shows as the node type
    params: int = 0
    width: int = 0  # last dim of the output shape; 0 = the model's hidden size
    active: int = -1  # parameters used per token (MoE: routed top-k + shared); -1 = all
    matmul: int = 0  # weights that take part in a matmul per token (all experts)
    active_matmul: int = -1  # of those, used per token; -1 = all
    linears: tuple[tuple[int, int], ...] = ()  # (in, out) of each nn.Linear a LoRA adapter wraps
    act: int = 0  # saved-for-backward elements per token at compute precision (bf16)
    act32: int = 0  # saved fp32 elements per token (softmax statistics)
    act_frozen: int = -1  # saved elements per token when the part's weights are frozen (LoRA); -1 = act
    norm_width: int = 0  # a norm: saves its input and output (+ a cast) of this width per token
    transient: int = 0  # serving: largest working set of the part per token, elements
    kv: int = 0  # serving: cached elements per token (K + V, or MLA's latent)
    window: int = 0  # cached tokens capped at this window; 0 = every token
    state: int = 0  # serving: fixed recurrent state per sequence, elements (SSM, linear attention)
    attn_flops: int = 0  # attention FLOPs per token per attended key (QK^T and AV)
    mats: tuple[tuple[int, int, int], ...] = ()  # (count, in, out) of every Linear and 3-D expert tensor; () = linears
    top_k: int = 0  # routed experts: the experts each token runs (their rows of the gathered input)
    scan: tuple[int, ...] = ()  # a recurrent mixer's dims for memory.recurrence (Mamba, Gated DeltaNet, KDA)
    params32: int = 0  # of params, those the class keeps in fp32 in any load dtype (_keep_in_fp32_modules_strict)
    heads: int = 0  # an attending part's query heads: its score matrices (act32 may hold more fp32 than their LSE)
    keys: int = 0  # a local attention's score elements per query and head at any length (blocks, globals); 0: T
    key_stride: int = 0  # a local attention's one more key per key_stride tokens (LongT5's transient global tokens)

    @property
    def weight_mats(self) -> tuple[tuple[int, int, int], ...]:
        return self.mats or tuple((1, i, o) for i, o in self.linears)

    @property
    def expert_mats(self) -> tuple[tuple[int, int, int], ...]:
        """The routed experts' weight tensors (gate+up, down: the first two of moe_part's `mats`); () elsewhere."""
        return self.mats[:2] if self.top_k else ()

    @property
    def gated_experts(self) -> bool:
        """Routed experts with a gate+up tensor: its rows (mats[0]) twice the down tensor's experts, or more where zero
        experts hold rows too (LongCat-Flash: n_routed_experts + zero_expert_num, families/latent_attention.py)."""
        return len(self.mats) >= 2 and self.mats[0][0] >= 2 * self.mats[1][0]

    @property
    def attends(self) -> bool:
        """An attention part with score matrices of its own (an MoE part's attn_flops are its experts' routing)."""
        return bool(self.attn_flops) and not self.type.startswith("MoE")

    @property
    def frozen_act(self) -> int:
        return self.act if self.act_frozen < 0 else self.act_frozen

    @property
    def readers(self) -> int:
        """How many input projections read this part's input (q, k, v: 3; gate, up: 2; fused: 1): under AMP
        autocast casts a norm's fp32 output once per Linear that reads it (FINDINGS.md F3)."""
        n = len(self.linears)
        return n - 1 if n >= 2 else (1 if self.active_matmul_params else 0)

    @property
    def active_params(self) -> int:
        return self.params if self.active < 0 else self.active

    @property
    def active_matmul_params(self) -> int:
        return self.matmul if self.active_matmul < 0 else self.active_matmul


@dataclass(frozen=True)
class Block:
    """One layer of a stack: its parts in forward order, with the per-token sums memory/profile.py and
    graph.py need computed once (a layer's activations are linear in its parts' fields)."""

    index: int  # 1-based within the model's layer sequence
    kind: str  # "attention", "sliding", "mla", "mamba", "mamba2", "linear", "recurrent", "encoder", "cross"...
    parts: tuple[Part, ...]
    stack: str = "decoder"  # "decoder", "encoder" (encoder-decoder models), "vision"
    params: int = field(init=False, repr=False, compare=False)
    active: int = field(init=False, repr=False, compare=False)  # parameters used per token
    matmul: int = field(init=False, repr=False, compare=False)
    active_matmul: int = field(init=False, repr=False, compare=False)
    norm_width: int = field(init=False, repr=False, compare=False)
    act: int = field(init=False, repr=False, compare=False)
    act32: int = field(init=False, repr=False, compare=False)
    act_frozen: int = field(init=False, repr=False, compare=False)  # act with the weights frozen (LoRA)
    # Norms (FINDINGS.md F3): widths of RMSNorms, per-token statistics bytes (RMS: fp32 rsqrt 4; LayerNorm:
    # fp32 mean + rstd 8), width x Linears reading each norm's output, and widths of norms some Linear reads.
    rms_width: int = field(init=False, repr=False, compare=False)
    norm_stats_bytes: int = field(init=False, repr=False, compare=False)
    norm_read: int = field(init=False, repr=False, compare=False)
    norm_fed: int = field(init=False, repr=False, compare=False)
    transient: int = field(init=False, repr=False, compare=False)  # the largest part's working set
    state: int = field(init=False, repr=False, compare=False)
    linears: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    lora_in: int = field(init=False, repr=False, compare=False)  # sum of the Linears' inputs
    lora_io: int = field(init=False, repr=False, compare=False)  # sum of in + out over the Linears
    kv: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)  # (window, kv) per cached part
    attn: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)  # (window, attn_flops)
    # what graph/stacks.numbered copied this from, bar its names' number (Spec.layer_groups); None: made or remade
    source: Block | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        params = active = matmul = active_mm = norm_w = act = act32 = transient = state = act_frozen = 0
        linears: list[tuple[int, int]] = []
        kv: list[tuple[int, int]] = []
        attn: list[tuple[int, int]] = []
        for p in self.parts:
            params += p.params
            active += p.params if p.active < 0 else p.active
            matmul += p.matmul
            active_mm += p.matmul if p.active_matmul < 0 else p.active_matmul
            norm_w += p.norm_width
            act += p.act
            act32 += p.act32
            act_frozen += p.act if p.act_frozen < 0 else p.act_frozen
            state += p.state
            transient = max(transient, p.transient)
            linears += p.linears
            kv += [(p.window, p.kv)] if p.kv else []
            attn += [(p.window or p.keys, p.attn_flops)] if p.attn_flops else []  # a local attention's keys
        rms, stats, read, fed = norm_sums(self.parts)
        self.__dict__.update(  # frozen: fields set once, here (what object.__setattr__ would do, field by field)
            act_frozen=act_frozen, rms_width=rms, norm_stats_bytes=stats, norm_read=read, norm_fed=fed, params=params,
            active=active, matmul=matmul, active_matmul=active_mm, norm_width=norm_w, act=act, act32=act32,
            transient=transient, state=state, linears=tuple(linears), lora_in=sum(i for i, _ in linears),
            lora_io=sum(i + o for i, o in linears), kv=tuple(kv), attn=tuple(attn), source=None)

    if not TYPE_CHECKING:  # to the type checker `parts` is the field; an unknown attribute stays an error
        def __getattr__(self, name: str) -> tuple[Part, ...]:
            """A numbered copy's parts (graph/stacks.py), made on first read: its source's, "_<source's index>" in the
            names made "_<index>"."""
            source = self.__dict__.get("source")
            if name != "parts" or source is None:
                raise AttributeError(name)
            was, tag, new = f"_{source.index}", f"_{self.index}", tuple.__new__  # a Part: a named tuple, name first
            parts = self.__dict__["parts"] = tuple([new(Part, (p[0].replace(was, tag, 1),) + p[1:]) for p in source.parts])
            return parts


@dataclass(frozen=True)
class Spec:
    """A whole model: what runs before the stack, the stack, and what runs after it."""

    kind: str  # "decoder", "encoder", "encoder-decoder"
    hidden: int
    vocab: int
    embed: tuple[Part, ...]  # token/position embeddings, vision tower and projector
    blocks: tuple[Block, ...]
    head: tuple[Part, ...]  # final norm(s), LM head (0 params when tied), output
    logits: int  # logit elements per token at the loss (vocab for LM heads)
    tied: bool = False
    image_tokens: int = 0  # text-sequence tokens one image (or audio clip) takes, from the vision/audio config
    vision_act: int = 0  # training: saved elements of the vision tower per image
    vision_transient: int = 0  # serving: vision tower working set per image, elements
    image_pixels: int = 0  # one image's pixels as its processor hands them over, elements (generate holds them)
    # the towers' and projector's nn.Linears (count, in, out, role, name, rows per image, checkpointed); None: none
    tower_linears: tuple[tuple[int, int, int, str, str, int, bool], ...] | None = None
    tower_layer_norm: bool = False  # the tower's layers normalise with LayerNorm (tower_linears.LAYER_NORM_TOWERS)
    # tokens the decoder's cross-attention reads when the encoder's input fixes them (one image's patches:
    # VisionEncoderDecoderModel); 0: an encoder-decoder's encoder runs at the job's tokens
    encoder_tokens: int = 0
    encoder_kept: bool = True  # that output stays through decoding (mllama caches K/V over it and drops it)
    streams: int = 1  # hidden-width streams a layer reads (Gemma-3n's AltUp: 4): a checkpointed layer's input
    input_rows: int = 0  # hidden-width rows the checkpointed layers keep as inputs beside their streams, all layers'
    notes: tuple[str, ...] = field(default_factory=tuple)  # formulas and semantics to show
    no_grad: frozenset[int] = frozenset()  # passes run under torch.no_grad in training (layer_terms.skipped_layers)

    @functools.cached_property
    def layer_groups(self) -> tuple[int, ...]:
        """Per layer, the index of the first layer equal to it but for its part names (Part.name is the one field
        left out of the key): the memory terms are computed once per distinct layer (layer_terms.per_distinct_layer),
        and this once per model, however many jobs and plans ask. The numbered copies of one layer (graph/stacks.py)
        (Block.source) are equal to it but for their names: its key is made once for all of them."""
        first: dict[tuple, int] = {}
        group_of: dict[tuple[int, bool], int] = {}  # (id of a layer the builder made, no_grad) -> its group
        groups = []
        for k, b in enumerate(self.blocks):
            made = b.source or b  # a copy stands as its source; a pass without gradients is not its twin's (no_grad)
            key = (id(made), k in self.no_grad)
            group = group_of.get(key)
            if group is None:
                group = group_of[key] = first.setdefault((_layer_key(made), key[1]), k)
            groups.append(group)
        return tuple(groups)

    @functools.cached_property
    def distinct_layers(self) -> tuple[tuple[Block, int], ...]:
        """Each distinct layer of the stack (layer_groups) as its first occurrence, with how many layers it stands
        for: a sum over the layers of a term that reads no part name is a sum over these, each times its count."""
        groups = self.layer_groups
        firsts = dict.fromkeys(groups)  # the groups, in forward order
        if len(firsts) <= 16:  # a few kinds of layer: each counted by a scan at C speed
            return tuple([(self.blocks[k], groups.count(k)) for k in firsts])
        counts: dict[int, int] = {}
        for group in groups:
            counts[group] = counts.get(group, 0) + 1
        return tuple((self.blocks[k], n) for k, n in counts.items())

    @property
    def params(self) -> int:
        return sum(p.params for p in (*self.embed, *self.head)) + sum(b.params * n for b, n in self.distinct_layers)

    @property
    def reads_images(self) -> bool:
        """A training step's images run its towers (mllama's add no text tokens, yet keep activations)."""
        return bool(self.image_tokens or self.vision_act)


def _layer_key(b: Block) -> tuple:
    """What Spec.layer_groups compares of a layer: kind, stack, parts but for their names (the first field)."""
    return b.kind, b.stack, tuple([p[1:] for p in b.parts])


def norm_sums(parts: tuple[Part, ...] | list[Part]) -> tuple[int, int, int, int]:
    """(RMSNorm widths, statistics bytes, sum of width x readers, widths read by some Linear) over the norms of a
    sequence of parts. A norm's readers are the input projections of the parts after it up to the next norm
    (Part.readers): one norm of a parallel block (gptj, phi, cohere) feeds attention and MLP. Read back to front."""
    rms = stats = read = fed = readers = 0
    for p in reversed(parts):
        width = p.norm_width
        if not width:
            readers += p.readers
            continue
        rms += width if p.type == "RMSNorm" else 0
        stats += 4 if p.type == "RMSNorm" else 8
        read += width * readers
        fed += width if readers else 0
        readers = 0
    return rms, stats, read, fed


def linear(n_in: int, n_out: int, bias: bool = False) -> int:
    return n_in * n_out + (n_out if bias else 0)


def norm_params(kind: str, width: int) -> int:
    return NORM_PARAMS_PER_WIDTH[kind] * width


def norm_part(name: str, kind: str, width: int, out: int = 0) -> Part:
    typ = "RMSNorm" if kind.startswith("rmsnorm") else "LayerNorm"
    return Part(name, typ, norm_params(kind, width), width=out, norm_width=width)


def add_part(name: str) -> Part:
    return Part(name, "Add")


def dense_linear_part(name: str, typ: str, n_in: int, n_out: int, bias: bool = False, *, lora: bool = True,
                      width: int = 0) -> Part:
    """A lone nn.Linear (projector, adapter, ...): saves its input for backward."""
    return Part(name, typ, linear(n_in, n_out, bias), width=width, matmul=n_in * n_out,
                linears=((n_in, n_out),) if lora else (), act=n_in, transient=n_in + n_out)


def attention_part(name: str, typ: str, hidden: int, heads: int, kv_heads: int, head_dim: int, *,
                   qkv_bias: bool = False, o_bias: bool = False, extra: int = 0, v_dim: int = 0, q_mult: int = 1,
                   fused_qkv: bool = False, o_in: int = 0, rope: bool = True, window: int = 0, kv_bias: bool | None = None,
                   extra_linears: tuple[tuple[int, int], ...] = (), cached: bool = True) -> Part:
    """Self-attention with q/k/v/o projections (modeling_llama.LlamaAttention and its descendants).

    kv: 2 x kv_heads x head_dim per token (K and V; GQA/MQA share K/V heads: Ainslie et al. 2023, arXiv:2305.13245).
    Saved per token (measured, data/measurements/FINDINGS.md F3/F4): the rope'd q and k once (RoPE's multiplies save
    only the shared cos/sin), v, the SDPA output (= o_proj's input; no score matrix with fused kernels) and the fp32
    log-sum-exp per head; the same with the weights frozen. `q_mult` 2 for gated attention (q_proj also emits the
    output gate, modeling_qwen3_next.py)."""
    v_dim = v_dim or head_dim
    q, k, v = heads * head_dim, kv_heads * head_dim, kv_heads * v_dim
    o_in = o_in or heads * v_dim
    kb = qkv_bias if kv_bias is None else kv_bias
    params = (linear(hidden, q * q_mult, qkv_bias) + linear(hidden, k, kb) + linear(hidden, v, kb)
              + linear(o_in, hidden, o_bias) + extra)
    mm = hidden * (q * q_mult + k + v) + o_in * hidden + sum(i * o for i, o in extra_linears)
    lin = ((hidden, q * q_mult + k + v),) if fused_qkv else ((hidden, q * q_mult), (hidden, k), (hidden, v))
    return Part(name, typ, params, matmul=mm, linears=lin + ((o_in, hidden),) + extra_linears,
                act=2 * q + k + v + (q if q_mult > 1 else 0), act32=heads, heads=heads,
                transient=q * q_mult + q + k + v, kv=(k + v) if cached else 0, window=window,
                attn_flops=2 * heads * (head_dim + v_dim))


def shared_kv_attention_part(name: str, hidden: int, heads: int, head_dim: int, *, bias: bool = False, extra: int = 0,
                             window: int = 0) -> Part:
    """Attention that reads an earlier layer's K/V (kv_sharing_modes "reuse"): q_proj and o_proj only, no K/V
    projections and no cache of its own (modeling_gemma3n.Gemma3nTextAttention, modeling_kolibri1_1.Kolibri1_1Attention
    in transformers 5.25); `extra`: its q norm."""
    q = heads * head_dim
    return Part(name, "Shared-KV Attn", linear(hidden, q, bias) + linear(q, hidden, bias) + extra, matmul=2 * hidden * q,
                linears=((hidden, q), (q, hidden)), act=5 * q, act32=heads, transient=2 * q, window=window,
                attn_flops=4 * heads * head_dim, heads=heads)


def cross_attention_part(n: int, hidden: int, heads: int, head_dim: int, *, bias: bool, fused_kv: bool = False) -> Part:
    """Layer n's cross-attention over the encoder's output (already at the decoder's width): q from the decoder's
    stream, k/v from the encoder's tokens, o back, every head its own K/V; its cache is K and V over the encoder's
    tokens (window -1), not over the generated ones. `fused_kv`: one projection emits K and V (GPT2Attention with
    is_cross_attention: q_attn hidden x hidden, c_attn hidden x 2 hidden, c_proj; GPTBigCodeAttention alike), else
    q/k/v/o apart (modeling_bert.BertLayer.crossattention, modeling_xglm.XGLMDecoderLayer.encoder_attn)."""
    p = attention_part(f"Cross_Attention_{n}", "Cross Attn", hidden, heads, heads, head_dim, qkv_bias=bias, o_bias=bias,
                       rope=False, window=-1)
    if fused_kv:
        q = heads * head_dim
        p = p._replace(linears=((hidden, q), (hidden, 2 * q), (q, hidden)))
    return p


def mlp_part(name: str, typ: str, hidden: int, inter: int, gated: bool, bias: bool = False, *,
             fused: bool = False, extra: int = 0, out: int = 0) -> Part:
    """Feed-forward: gated (gate, up, down: SwiGLU/GeGLU, Shazeer 2020) or plain (fc1, act, fc2).

    Saved per token: gate, act(gate), up, product (gated) or fc1 output and activation (plain). Frozen
    (LoRA): a frozen down_proj saves no input, so the product (or activation) is not kept (FINDINGS.md F4)."""
    out = out or hidden
    n_up = 2 if gated else 1
    params = n_up * linear(hidden, inter, bias) + linear(inter, out, bias) + extra
    if gated:
        lin = ((hidden, 2 * inter),) if fused else ((hidden, inter), (hidden, inter))
    else:
        lin = ((hidden, inter),)
    return Part(name, typ, params, matmul=(n_up * hidden + out) * inter, linears=lin + ((inter, out),),
                act=inter * (4 if gated else 2), act_frozen=inter * (3 if gated else 1),
                transient=inter * (3 if gated else 2))


def moe_part(name: str, hidden: int, experts: int, top_k: int, inter: int, *, gated: bool = True, bias: bool = False,
             shared: int = 0, shared_gate: bool = False, router_bias: bool = False, extra: int = 0,
             shared_lora: bool = True, expert_extra: int = 0, router_params: int | None = None) -> Part:
    """Routed experts (+ shared experts): every expert is held, top_k of them run per token.

    Parameters: router hidden x experts, experts x (gate/up/down), shared expert MLP of width `shared` (+ its sigmoid
    gate hidden -> 1, modeling_qwen2_moe.py). Active per token: the router, top_k experts and the shared expert.
    Saved per token: each chosen expert's gated MLP tensors (4 x inter), the shared expert's, the fp32 router logits;
    per routed token its gathered input (the experts' weight gradient) and its expert's output (the routing weight's
    gradient), as transformers keeps them (integrations/moe.py grouped_mm_experts_forward: hidden_states[perm // k],
    proj_out * sample_weights_g; the eager loop: hidden_states[token_idx], the weighted down output; FINDINGS.md F9);
    frozen experts keep no input. A sigmoid shared-expert gate keeps the shared output (Qwen2MoeSparseMoeBlock).
    `linears`: the shared experts' nn.Linears; `mats` (gate+up, down, 3-D: Part.gated_experts) and `top_k`: the
    tensors peft's ParamWrapper adapts for the types whose experts peft converts (memory/lora.py FUSED_EXPERTS)."""
    per_expert = (2 if gated else 1) * linear(hidden, inter, bias) + linear(inter, hidden, bias) + expert_extra
    router = linear(hidden, experts, router_bias) if router_params is None else router_params
    shared_p = (3 if gated else 2) * hidden * shared + (hidden if shared_gate else 0) if shared else 0
    params = router + experts * per_expert + shared_p + extra
    mm_e = (3 if gated else 2) * hidden * inter
    mm_s = (3 if gated else 2) * hidden * shared + (hidden if shared_gate else 0)
    lin = (((hidden, shared), (hidden, shared), (shared, hidden)) if gated else ((hidden, shared), (shared, hidden))) \
        if shared and shared_lora else ()
    k = min(top_k, experts)
    n_in, gate_out = (2 if gated else 1), (hidden if shared and shared_gate else 0)
    mats = ((experts * n_in, hidden, inter), (experts, inter, hidden)) + tuple((1, i, o) for i, o in lin)
    return Part(name, "MoE", params, mats=mats, active=router + k * per_expert + shared_p + extra,
                matmul=hidden * experts + experts * mm_e + mm_s, active_matmul=hidden * experts + k * mm_e + mm_s,
                linears=lin, top_k=k, act=(k * inter + shared) * (4 if gated else 2) + 2 * k * hidden + gate_out,
                act32=experts, act_frozen=(k * inter + shared) * (3 if gated else 1) + k * hidden + gate_out,
                transient=k * inter * (3 if gated else 2) + shared * 3 + hidden)


def combine(name: str, typ: str, *parts: Part) -> Part:
    """Parts that run side by side in one node (falcon_h1's attention + Mamba-2): sums, one window."""
    def total(attr: str) -> int:
        return sum(getattr(p, attr) for p in parts)
    return Part(name, typ, total("params"), active=sum(p.active_params for p in parts), matmul=total("matmul"),
                active_matmul=sum(p.active_matmul_params for p in parts), linears=tuple(x for p in parts for x in p.linears),
                act=total("act"), act32=total("act32"), act_frozen=sum(p.frozen_act for p in parts),
                transient=max(p.transient for p in parts), kv=total("kv"), params32=total("params32"),
                window=max(p.window for p in parts), state=total("state"), attn_flops=total("attn_flops"), heads=total("heads"),
                mats=tuple(x for p in parts for x in p.weight_mats), scan=next((p.scan for p in parts if p.scan), ()))


ATTENTION_TYPE = {"mha": "Multi-Head Attn", "gqa": "Grouped Query Attn", "mqa": "Multi-Query Attn"}  # table names
LINEAR_EXPERTS_PART = "MoE (nn.Linear experts)"  # a moe_part whose experts are nn.Linear modules (lora.linear_experts)


def attention_type(heads: int, kv_heads: int) -> str:
    return ATTENTION_TYPE["mha" if kv_heads == heads else "mqa" if kv_heads == 1 else "gqa"]


def ffn_type(gated: bool, act: str) -> str:
    return ("SwiGLU" if act in ("silu", "swish") else "GeGLU" if act.startswith("gelu") else "GLU") if gated else "MLP"


def lm_head_part(vocab: int, width: int, tied: bool, bias: bool = False, name: str = "LM_Head", fp32: bool = False
                 ) -> Part:
    """The output projection; a tied head shares the embedding's weight (counted there once); fp32: params32."""
    params = (0 if tied else vocab * width) + (vocab if bias else 0)
    return Part(name, "Linear", params, width=vocab, matmul=vocab * width, params32=params if fp32 else 0)
