"""The per-layer terms one estimate shares: each distinct layer's (Spec.distinct_layers) worked out once, kept in
the estimate's table (memoised) for its profiles and jobs, and laid out per layer where a profile needs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block, Spec
from ..inputs import Assumptions
from .activations import (
    PYTHON_GELU,
    Regime,
    block_activation_bytes,
    frozen_mlp_backward_bytes,
    last_linear_part,
    mlp_act,
    python_gelu_bytes,
)
from .attention import eager_backward_bytes, eager_layer_terms, masked_sdpa_terms, masked_sdpa_windows
from .ends import altup_end_bytes, embed_dropout_bytes, frozen_embedding_bytes, head_activation_bytes
from .experts import cast_matmul, expert_grad_transient, expert_weight_bytes, grouped_dtype_bytes
from .lora import (
    all_linear_roles,
    block_lora_params,
    block_unpaged_lora_params,
    distinct_inputs,
    expert_lora_terms,
    linear_roles,
)
from .math_sdpa import math_layer_terms, math_sdpa
from .recurrence import rglru_bytes, torch_scan_bytes
from .tower_adapters import tower_adapted, tower_lora_params

T = TypeVar("T")  # what a term is per layer (bytes, or a tuple of terms)

# The layers transformers runs only beside an image, per family: mllama's cross-attention layers
# (modeling_mllama.MllamaTextModel.forward: `if is_cross_attention_layer and cross_attention_states is None and
# is_cross_attention_cache_empty: continue`).
IMAGE_ONLY_MIXERS = {"mllama": "Cross Attn"}


def skipped_layers(a: Arch, spec: Spec, images: int = 1) -> tuple[bool, ...]:
    """Per distinct layer (Spec.distinct_layers' order), whether a training step keeps nothing of it: a pass run
    under torch.no_grad (Spec.no_grad), or, in a step without images, a layer that runs only beside one
    (image_only)."""
    if not spec.no_grad and images:
        return (False,) * len(spec.distinct_layers)
    no_grad = (k in spec.no_grad for k in dict.fromkeys(spec.layer_groups))  # each distinct layer's first
    return tuple(skip or (not images and image_only(a, b))
                 for (b, _), skip in zip(spec.distinct_layers, no_grad, strict=True))


def image_only(a: Arch, b: Block) -> bool:
    """Whether layer `b` runs only when the step carries an image (IMAGE_ONLY_MIXERS): a text-only step skips it."""
    kind = IMAGE_ONLY_MIXERS.get(a.family)
    return kind is not None and any(p.type == kind for p in b.parts)

# Attention classes whose fused projection's output stays alive through a view SDPA saves: q is a view of the fused
# qkv output (split, view, transpose, no rope to copy it), while a training forward's DynamicCache (use_cache from
# the config; None under gradient checkpointing) copies k and v (cache_utils.DynamicLayer.update: torch.cat), and
# SDPA saves those copies: the fused output's k and v slices are kept beside them.
FUSED_QKV_VIEW = {"gpt2": "modeling_gpt2.GPT2Attention", "gpt_bigcode": "modeling_gpt_bigcode.GPTBigCodeAttention"}


def fused_view_bytes(a: Arch, b: Block, r: Regime) -> int:
    """Per token of one layer: the k and v slices of the fused qkv output kept by q's view (FUSED_QKV_VIEW) where
    the training forward's DynamicCache copied them: use_cache on (the config's, default True); callers leave it
    out under gradient checkpointing (no cache)."""
    if a.model_type not in FUSED_QKV_VIEW or not a.raw.get("use_cache", True):
        return 0
    layers = sum(1 for p in b.parts if p.attn_flops and p.kv and p.window >= 0)
    return layers * r.compute_bytes * 2 * a.kv_heads * a.head_dim


def end_terms(a: Arch, g: Graph, s: Assumptions, r: Regime, memo: dict | None = None,
              roles: frozenset[str] | None = None) -> tuple[int, int, int]:
    """Per token under `r` (adapters on `roles`): what the embedding side keeps (the embedding dropout's mask,
    embed_dropout_bytes; Gemma-3n's AltUp before the layers, altup_end_bytes), what a frozen embedding does not
    keep (frozen_embedding_bytes) and the head's activations (head_activation_bytes; Gemma-3n's AltUp after the
    layers), once per estimate."""
    def make() -> tuple[int, int, int]:
        before, after = altup_end_bytes(g, r, roles)
        return (embed_dropout_bytes(a, g, r) + before, frozen_embedding_bytes(a, g, r, roles),
                head_activation_bytes(a, g, r, s) + after)
    return memoised(memo, ("ends", r, roles), make)


class RegimeTerms(NamedTuple):
    """Per distinct layer (distinct_values' order), the terms of one training regime with `rank` adapters on
    `roles` that its profile and its jobs read: saved bytes per token (activations.block_activation_bytes), the
    fused qkv output's slices a view keeps (fused_view_bytes), adapted expert tensors' effective weights
    (expert_weight_bytes) and their gradient's transient (expert_grad_transient), and SDPA's mask terms
    (masked_sdpa_windows)."""

    act: list[int]
    views: list[int]
    experts: list[int]
    grads: list[tuple[int, int]]
    windows: list[tuple[tuple[int, int, int], ...]]


def regime_terms(a: Arch, g: Graph, r: Regime, rank: int, roles: frozenset[str] | None,
                 memo: dict | None = None) -> RegimeTerms:
    """RegimeTerms of every distinct layer in one pass, once per estimate with `memo`. The expert tensors are
    adapted only where the base is frozen: those of `roles` (None: every Linear's, all-linear)."""
    def make() -> RegimeTerms:
        expert_roles = None if r.trained else (all_linear_roles(a) if roles is None else roles)
        terms = RegimeTerms([], [], [], [], [])
        for (b, _), skip in zip(g.spec.distinct_layers, skipped_layers(a, g.spec), strict=True):
            # a pass without gradients keeps nothing for a backward (Spec.no_grad; its cache: kept_cache_bytes)
            terms.act.append(0 if skip else block_activation_bytes(a, b, r, rank, roles)
                             + grouped_dtype_bytes(a, b, r, expert_roles))
            terms.views.append(0 if skip else fused_view_bytes(a, b, r))
            terms.experts.append(0 if skip else expert_weight_bytes(b, expert_roles, r))
            terms.grads.append((0, 0) if skip else expert_grad_transient(a, b, expert_roles, r))
            terms.windows.append(() if skip else masked_sdpa_windows(a, b, r))
        return terms
    return memoised(memo, ("regime", r, rank, roles), make)


def adapter_params(spec: Spec, rank: int, roles: frozenset[str] | None, memo: dict | None = None) -> list[int]:
    """LoRA parameters of each distinct layer (lora.block_lora_params; roles None: every Linear), once per
    estimate with `memo`: summed times their counts they are lora.lora_params."""
    return memoised(memo, ("adapters", rank, roles),
                    lambda: distinct_values(spec, lambda b: block_lora_params(b, rank, roles)))


def unpaged_adapter_params(spec: Spec, rank: int, roles: frozenset[str] | None, memo: dict | None = None,
                           fused_qkv: bool = False) -> list[int]:
    """Of adapter_params per distinct layer, those in tensors a paged optimizer leaves unpaged
    (lora.block_unpaged_lora_params; `fused_qkv`: LitGPT's), once per estimate with `memo`."""
    return memoised(memo, ("unpaged adapters", rank, roles, fused_qkv),
                    lambda: distinct_values(spec, lambda b: block_unpaged_lora_params(b, rank, roles, fused_qkv)))


def all_linear_params(a: Arch, g: Graph, rank: int, memo: dict | None = None) -> int:
    """lora.lora_params of all-linear adapters (the site's LoRA), from the estimate's table (adapter_params), and
    those peft puts on the towers' Linears (tower_adapters.py)."""
    spec = g.spec
    return sum(n * v for (_, n), v in zip(spec.distinct_layers, adapter_params(spec, rank, all_linear_roles(a), memo),
                                          strict=True)) + tower_lora_params(tower_adapted(spec, "all-linear",
                                                                                          a.model_type), rank)


def expert_adapters(a: Arch, g: Graph, rank: int) -> tuple[int, int]:
    """Of all_linear_params, the adapters on expert tensors and their delta weights' multiply-adds, over the model
    (lora.expert_lora_terms). Every forward makes each expert's B @ A, whichever experts the tokens route to
    (peft/tuners/lora/layer.py ParamWrapper.get_delta_weight's einsum under parametrize.cached), then the experts
    run on the merged tensor: their cost is per step, not per token."""
    roles = all_linear_roles(a)
    terms = [(n, expert_lora_terms(b, rank, roles)) for b, n in g.spec.distinct_layers]
    return sum(n * params for n, (params, _) in terms), sum(n * macs for n, (_, macs) in terms)


def layer_index(spec: Spec, memo: dict | None = None) -> tuple[int, ...]:
    """Per layer of the stack (Spec.layer_groups), the index of its distinct layer in distinct_values' order."""
    def make() -> tuple[int, ...]:
        groups = spec.layer_groups
        position = {k: i for i, k in enumerate(dict.fromkeys(groups))}
        return tuple(map(position.__getitem__, groups))
    return memoised(memo, ("layer_index",), make)


def layer_values(spec: Spec, values: list[T], memo: dict | None = None) -> tuple[T, ...]:
    """Per-distinct-layer values (distinct_values' order) laid out per layer of the stack (Spec.layer_groups)."""
    return tuple(map(values.__getitem__, layer_index(spec, memo)))


def per_distinct_layer(spec: Spec, bytes_of: Callable[[Block], T]) -> tuple[T, ...]:
    """bytes_of(b) for every layer of the stack, computed once per distinct layer (Spec.layer_groups): the layers
    of a stack repeat a few shapes, and only their part names differ."""
    return layer_values(spec, distinct_values(spec, bytes_of))


def distinct_values(spec: Spec, bytes_of: Callable[[Block], T]) -> list[T]:
    """bytes_of(b) of each distinct layer (Spec.distinct_layers, in its order): a sum over the layers of a term
    that reads no part name is the sum of these times the layers each stands for."""
    return [bytes_of(b) for b, _ in spec.distinct_layers]


def memoised(memo: dict | None, key: tuple, make: Callable[[], T]) -> T:
    """make() once per estimate under `key` in `memo` (one estimate()'s table of the per-layer terms its jobs and
    profiles share: the keys name everything the terms read besides the model); memo None: every time."""
    if memo is None:
        return make()
    got = memo.get(key)
    if got is None:
        got = memo[key] = make()
    return got


def layer_bytes(a: Arch, b: Block, r: Regime, attention: str, T: int, saves: bool, upcast: bool, base: int) -> int:
    """Saved bytes per token of one layer for a job: `base` (activations.block_activation_bytes) plus what eager
    attention and a bitsandbytes base add (`saves`: its matmul saves its input, storage.saves_matmul_input;
    `upcast`: prepare_model_for_kbit_training's fp32 non-quantised parameters)."""
    c = r.compute_bytes
    out = base
    if attention == "eager":  # eager keeps its scores
        linear, squared = eager_layer_terms(a, b, c, r.trained, r)
    elif math_sdpa(a, r.cpu, True, r.trained):  # so does SDPA's math kernel, in fp32
        linear, squared = math_layer_terms(a, b, r)
    else:  # SDPA handed a mask keeps it (F11)
        linear, squared = masked_sdpa_terms(a, b, T, r)
    out += linear + squared * T
    if r.torch_scan:  # transformers' torch code of a recurrent mixer (without its kernels, and always on the CPU)
        out += torch_scan_bytes(b, r, T)
    out += rglru_bytes(b, r)  # RecurrentGemma's loop, which has no kernel
    if saves:
        # A bitsandbytes matmul that saves its input (saves_matmul_input), where nn.Linear on a frozen weight would
        # save none: one copy of each distinct input not saved already (q/k/v and gate/up share theirs; o_proj
        # reads the SDPA output, which SDPA saved).
        out += c * sum(distinct_inputs(b).values())
    if upcast and not r.trained and r.amp:
        # prepare_model_for_kbit_training leaves fp32 norms and residual: bitsandbytes Linear4bit.forward returns
        # matmul_4bit(...).to(inp_dtype), fp32, so the MLP's gate, act and up (silu and mul are not autocast ops)
        # are saved in fp32, not bf16; so are a Python GELU's own tensors (tanh, mul, add: GPT-J's and GPT-2's
        # gelu_new, F59)
        out += (4 - c) * sum(p.act_frozen for p in b.parts if not p.attn_flops)
        out += python_gelu_bytes(b, 4) - python_gelu_bytes(b, c) if mlp_act(a) in PYTHON_GELU else 0
    return out


def eager_backward_terms(a: Arch, b: Block, r: Regime, rank: int, roles: frozenset[str] | None, saves: bool = False,
                         upcast: bool = False) -> EagerBackward:
    """What one layer holds at its eager attention's softmax backward beyond what it saved: the score gradients
    (attention.eager_backward_bytes), less what its parts after the attention saved (the MLP and the norm before it,
    with their adapters), which their backward has freed by then, as the CPU simulation's live tensors at that
    moment show; those parts' parameters have their gradients by then and their autocast copies are freed.
    Zeros for a layer without attention."""
    linear, squared = eager_backward_bytes(a, b, r)
    if not linear and not squared:
        return EagerBackward(0, 0, 0, 0)
    last = max(i for i, p in enumerate(b.parts) if p.attends)
    after = Block(b.index, b.kind, b.parts[last + 1:], b.stack)
    saved = layer_bytes(a, after, r, "eager", 0, saves, upcast, block_activation_bytes(a, after, r, rank, roles))
    return EagerBackward(linear - saved, squared, after.params, cast_matmul(a, after))


class EagerBackward(NamedTuple):
    """eager_backward_terms: bytes per token and per token squared, and the parameters (all, matmul) of the parts
    after the attention."""
    per_token: int
    per_token_sq: int
    params_after: int
    matmul_after: int

    @property
    def attends(self) -> bool:
        """The layer has attention (a full one's terms grow with T x T, a local one's with T alone)."""
        return any(self)


def eager_backward_values(a: Arch, g: Graph, r: Regime, rank: int, roles: frozenset[str] | None,
                          memo: dict | None = None, saves: bool = False, upcast: bool = False) -> list[EagerBackward]:
    """eager_backward_terms of each distinct layer (distinct_values' order), once per estimate: the site's profile
    and its jobs read the same."""
    return memoised(memo, ("eager backward", r, rank, roles, saves, upcast), lambda: distinct_values(
        g.spec, lambda b: eager_backward_terms(a, b, r, rank, roles, saves, upcast)))


def last_mlp_backward_bytes(a: Arch, b: Block, r: Regime, roles: frozenset[str] | None, upcast: bool = False) -> int:
    """Per token, what the last layer's MLP holds at its backward beside every layer's saved tensors in a step without
    checkpointing, the head's tensors freed, where its last Linear carries no adapter (0 otherwise): its down
    projection's input gradient and its activation's (activations.frozen_mlp_backward_bytes; fp32 after
    prepare_model_for_kbit_training). Phi's LoRA step on q and v at a 1,024-token vocabulary peaks there, gelu_new's
    three MLP-wide tensors beside its saved ones (F65: -9.7% without it)."""
    part = last_linear_part(b)
    if r.trained or part is None or roles is None or linear_roles(part)[-1] in roles:
        return 0
    return frozen_mlp_backward_bytes(part, r, mlp_act(a), 4 if upcast and r.amp else 0)


def kept_cache_bytes(a: Arch, g: Graph, r: Regime, grad_ckpt: bool, upcast: bool = False) -> int:
    """Per token: the DynamicCache a training forward builds (use_cache defaults to config.use_cache; gradient
    checkpointing turns it off). Under full AMP it holds each attention layer's rope'd keys in fp32 (rope's cos/sin
    take the hidden states' dtype, modeling_llama) where SDPA saved their bf16 cast, the values the tensors SDPA
    saved; after prepare_model_for_kbit_training (`upcast`) keys and values, rope or not (F62's listings). A pass
    run without gradients (Spec.no_grad: HRM-Text's early L cycles) saved nothing: its keys and values are all the
    cache's own (F95: the CPU simulation's forward peak, 6,144 B a token for each such layer of HRM-Text)."""
    if grad_ckpt or not a.raw.get("use_cache", True):
        return 0
    spec = g.spec
    own = sum(kv for k, b in enumerate(spec.blocks) if k in spec.no_grad for _, kv in b.kv) \
        * (r.residual_bytes + r.compute_bytes) // 2  # keys rope'd in the residual dtype, values in compute's
    if r.residual_bytes == r.compute_bytes:
        return own
    layers = sum(1 for k, b in enumerate(spec.blocks) if k not in spec.no_grad for p in b.parts if p.attends)
    return own + layers * r.residual_bytes * a.kv_heads * a.head_dim * (2 if upcast and not r.trained else 1)
