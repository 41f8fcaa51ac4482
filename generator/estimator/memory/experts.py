"""What routed experts add to a layer's memory beyond their saved tensors: the effective weights and gradients of
peft's adapted expert tensors, what frozen routed experts hold at their forward's end and their backward, and the
gradients of an MoE that runs every expert on every token."""

from __future__ import annotations

from ..config.arch import Arch
from ..config.transformers_defaults import GROUPED_MM_EXPERTS
from ..graph.nodes import Graph
from ..graph.parts import Block, Part
from .activations import Regime, hyper_gradient_bytes, recompute_transient_bytes
from .ends import frozen_input
from .lora import FUSED_EXPERTS, all_linear_roles, expert_tensors


def expert_weight_bytes(b: Block, roles: frozenset[str] | None, r: Regime) -> int:
    """Per layer and step, batch-free: each adapted tensor's effective weight W + scaling x lhs @ rhs, made in the
    base weight's dtype (the residual stream's: bf16, or fp32 after prepare_model_for_kbit_training or under
    fp32) and kept by the grouped matmul (the router's F.linear) for its input's gradient (FINDINGS.md F10)."""
    return r.residual_bytes * sum(e * i * o for e, i, o, _, _ in expert_tensors(b, roles))


def frozen_input_expert_bytes(a: Arch, g: Graph, roles: frozenset[str] | None, r: Regime) -> int:
    """Batch-free, what expert_weight_bytes charges that the first layer of a parallel MoE block does not keep where
    the embedding is frozen (Cohere2-MoE: attention and MoE read one norm's output). That MoE's input then needs no
    gradient, so the effective weights that only its gradient reads, the router's and the gate-up tensor's, are made
    and not saved; the down tensor reads the gate-up's output, which needs one (FINDINGS.md F67). Callers leave it
    in when enable_input_require_grads runs (checkpointing, prepare_model_for_kbit_training)."""
    if not frozen_input(g, r):
        return 0
    parts = g.spec.blocks[0].parts
    moe = next((i for i, p in enumerate(parts) if p.type.startswith("MoE")), 0)
    if not any(p.attends for p in parts[:moe]) or any(p.type == "Add" for p in parts[:moe]):
        return 0
    tensors = expert_tensors(g.spec.blocks[0], all_linear_roles(a) if roles is None else roles)
    return r.residual_bytes * sum(e * i * o for e, i, o, m, _ in tensors if e == 1 or m == 2)


def expert_grad_transient(a: Arch, b: Block, roles: frozenset[str] | None, r: Regime) -> tuple[int, int]:
    """(batch-free bytes, bytes per token) the backward of an adapted down tensor holds at once (FINDINGS.md F10):
    the effective weight's gradient (experts x inter x hidden, the weight's dtype), the gradients of its input
    (k x inter) and of the routed outputs (k x hidden), and the residual stream's gradient (hidden).
    Experts that loop, indexing the effective tensors expert by expert (looped), hold more: each index's backward
    (select_backward) makes a full-size gradient of the tensor it indexed, which autograd sums into one gradient per
    effective tensor until every expert's backward has run. At the gate+up tensor's sum: the down tensor's summed
    gradient and three gate+up-sized tensors (the sum so far, the expert's select_backward and their out-of-place
    sum; the gate+up tensor's rows include LongCat-Flash's zero experts'). Read off a seeded real-tensor LongCat-Flash
    LoRA step (F100's listing: two select_backward gradients and an add.Tensor sum of [24, 4096, 6144] beside the
    down tensor's [16, 6144, 2048] sum; F101)."""
    tensors = expert_tensors(b, roles)
    down = [(e, i, o, k) for e, i, o, m, k in tensors if e > 1 and m == 1]
    if not down:
        return 0, 0
    e, i, o, k = max(down, key=lambda t: t[0] * t[1] * t[2])
    per_token = r.compute_bytes * (k * i + k * o + o)
    gate_up = max((e * i * o for e, i, o, m, _ in tensors if m == 2), default=0)
    if any(looped(a, p) for p in b.parts):
        return r.residual_bytes * (e * i * o + 3 * gate_up), per_token
    return r.residual_bytes * e * i * o, per_token


def runs_every_expert(p: Part) -> bool:
    """An MoE part whose experts all run on every token though fewer count as active (Part.top_k = the expert count,
    its active matmul weights the top-k's: Llama 4's Llama4TextMoe, families/every_expert_moe.py); not an MoE whose
    top-k is unknown and counted whole."""
    return p.type.startswith("MoE") and len(p.mats) >= 2 and p.top_k == p.mats[1][0] \
        and p.active_matmul_params < p.matmul


def grouped(a: Arch, p: Part) -> bool:
    """Routed experts run through transformers' grouped_mm (GROUPED_MM_EXPERTS, integrations/moe.py _grouped_mm):
    no autocast op, so the input is cast to the experts' dtype. Under AMP their saved tensors are in that dtype (fp32
    where the experts train or an fp32 base holds them) and autocast caches no copy of their weights."""
    return bool(p.top_k) and len(p.mats) >= 2 and a.model_type in GROUPED_MM_EXPERTS and not runs_every_expert(p)


def looped(a: Arch, p: Part) -> bool:
    """Routed experts peft adapts as fused tensors (lora.FUSED_EXPERTS) that run outside grouped_mm: the experts
    module's own loop indexes gate_up_proj[expert_idx] and down_proj[expert_idx] (modeling_longcat_flash.py
    LongcatFlashExperts.forward; integrations/moe.py's eager implementation alike)."""
    return bool(p.top_k) and len(p.mats) >= 2 and a.model_type in FUSED_EXPERTS and not grouped(a, p) \
        and not runs_every_expert(p)


def cast_matmul(a: Arch, b: Block) -> int:
    """Of a layer's matmul weights, those autocast copies to the compute dtype: all but grouped experts' tensors."""
    return b.matmul - sum(c * i * o for p in b.parts if grouped(a, p) for c, i, o in p.expert_mats)


def cast_active_matmul(a: Arch, b: Block) -> int:
    """Of the matmul weights a layer runs per token (a shared pass's, whose weights an earlier layer holds), those
    autocast casts: all but the top-k grouped experts' (each gate-up, or gate and up, and down: a shared pass's
    `mats` keep no counts, and read as gated, as Inkling-2-Loop's, the one such layout, are)."""
    out = b.active_matmul
    for p in b.parts:
        if grouped(a, p):
            _, hidden, inter = p.mats[0]
            out -= p.top_k * hidden * inter * (3 if p.gated_experts else 2)
    return out


# Experts whose activation upcasts its inputs itself and keeps fp32 tensors of its own, priced in the part's act32
# (Inkling2SoftcappedSwiGLU: gate.float(), up.float(), F97): of their routed tensors only the gathered input, the
# down projection's input and the weighted output follow the experts' dtype.
OWN_FP32_ACTIVATION = frozenset({"inkling2", "inkling2_text", "inkling2_loop", "inkling2_loop_text"})


def grouped_dtype_bytes(a: Arch, b: Block, r: Regime, roles: frozenset[str] | None = None) -> int:
    """Per token, what a layer's grouped experts' saved tensors add where the experts are wider than the compute
    dtype (fp32 experts under AMP: a full fine-tune's, or an fp32 base's) and keep their tensors in fp32: the part's
    routed elements (moe_part: per routed token its gated product's tensors and the weighted output, and, where the
    experts train or peft's ParamWrapper adapts their tensors (`roles`, lora.expert_tensors), the gathered input
    and the down projection's input) at the residual stream's bytes, not the compute dtype's. Read off the live
    tensors of CPU-simulated OLMoE steps (FINDINGS.md F98). Frozen experts that prepare_model_for_kbit_training
    upcast are priced by layer_terms.layer_bytes (F59, Regime.kbit_upcast)."""
    extra = r.residual_bytes - r.compute_bytes
    if extra <= 0 or (r.kbit_upcast and not r.trained):
        return 0
    out, grads = 0, r.trained or bool(expert_tensors(b, roles))
    for p in b.parts:
        if grouped(a, p):
            _, hidden, inter = p.mats[0]
            gated = p.gated_experts
            if a.model_type in OWN_FP32_ACTIVATION:
                routed = 2 * hidden + inter if grads else hidden
            else:
                routed = 2 * hidden + inter * (4 if gated else 2) if grads else hidden + inter * (3 if gated else 1)
            out += p.top_k * routed
    return extra * out


def every_expert_backward_terms(b: Block, r: Regime) -> tuple[int, int]:
    """(bytes per token, parameters whose gradients are made by then) of the backward of experts that run on every token
    (runs_every_expert), beside the layer's saved tensors: the gradients of the gate-up product's two factors and of its result (3 x experts x inter
    in the compute dtype: the two mul.Tensor gradients and down's bmm input gradient) and two of the residual
    stream's (the layer output's and the MoE output's). Where the weights train, the shared expert's backward has run
    first and down's bmm has made the experts' down gradient (their parameters, returned: the caller adds their
    gradients and frees their autocast copies), and has freed the product it saved (one of the three). Read off the
    CPU-simulated peaks of Llama 4 steps, LoRA checkpointed and not and a full fine-tune (FINDINGS.md F42). (0, 0)
    where an MoE routes each token to top-k of its experts."""
    for p in b.parts:
        if runs_every_expert(p):
            experts, inter, hidden = p.mats[1]
            if not r.trained:
                return 3 * experts * inter * r.compute_bytes + 2 * hidden * r.residual_bytes, 0
            made = experts * inter * hidden + sum(i * o for i, o in p.linears)
            return 2 * experts * inter * r.compute_bytes + 2 * hidden * r.residual_bytes, made
    return 0, 0


def routed_transient_bytes(b: Block, r: Regime, roles: frozenset[str] | None, backward: bool = True) -> int:
    """Per token, what a layer's top-k MoE with frozen experts (none of its expert tensors adapted) holds beyond its
    saved tensors, at the larger of two moments, in the residual stream's dtype (bf16; fp32 after
    prepare_model_for_kbit_training, whose upcast reaches the experts bitsandbytes leaves unquantised):
    - the end of its forward (transformers 5.24 integrations/moe.py grouped_mm_experts_forward): the routed tokens'
      gathered input hidden_states[perm // k], their weighted output proj_out * sample_weights_g and its reordering
      weighted_out[inv_perm], three k x hidden tensors no backward saves (a frozen weight's grouped matmul keeps no
      input: GroupedMmBackward0 saves each operand only for the other's gradient). A checkpointed layer's
      recomputation stops there, at the last tensor it saves (torch/utils/checkpoint.py early stop), its frame's
      locals alive, or beside the incoming [tokens, k, hidden] gradient in place of the reordering; without
      checkpointing, the last layer's forward ends there (`backward` False);
    - the backward of the experts' gated product, as a frozen MLP's (activations.frozen_mlp_backward_bytes) over the
      k routed copies: the product's gradient and its two factors' (two for a plain MLP), and the layer output's,
      the routed outputs the routing weights' gradient read freed by then.
    Read off CPU-simulated QLoRA steps on q and v (FINDINGS.md F61): Qwen3-30B-A3B checkpointed and not, and under
    the upcast; Qwen1.5-MoE-A2.7B (its shared expert runs first); Mixtral-8x7B, whose MLP-wide product is the
    larger moment. Where the experts train, the gathered input is saved, so two at the forward's end; at the
    backward of the gathered rows, the weighted output's reordered gradient and the input's scattered gradient
    (zeros and index_put), three k x hidden, beside the saved tensors (read off a checkpointed OLMoE full
    fine-tune, F98). 0 for adapted experts (F10's terms) and an MoE that runs every expert
    (every_expert_backward_terms)."""
    if expert_tensors(b, roles):
        return 0
    part = next((p for p in b.parts if p.type.startswith("MoE") and len(p.mats) >= 2), None)
    if part is None or runs_every_expert(part):
        return 0
    _, inter, hidden = part.mats[1]
    k, x = part.top_k, r.residual_bytes
    if r.trained:
        return (3 if backward else 2) * k * hidden * x
    routed = 3 * k * hidden * x
    if not backward:
        return routed
    factors = 3 if part.gated_experts else 2
    return max(routed, factors * k * inter * x + hidden * r.residual_bytes - k * hidden * x)


def held_transient_bytes(b: Block, r: Regime, roles: frozenset[str] | None, saves: bool = False, upcast: bool = False,
                         a: Arch | None = None, backward: bool = True) -> int:
    """Per token, what a layer holds beyond its saved tensors at its recomputation's peak (`backward` False: at the
    end of a forward without checkpointing): the larger of its last Linear's moment, the adapter forward or frozen
    MLP backward (activations.recompute_transient_bytes: an MoE layer's last Linear is its attention's, o_proj,
    whose adapter forward runs before the experts) and a frozen routed MoE's (routed_transient_bytes). A negative
    first term is prepare_model_for_kbit_training's norm input counted twice, which holds for both."""
    last = recompute_transient_bytes(b, r, roles, saves, upcast, a, backward)
    routed = routed_transient_bytes(b, r, roles, backward)
    grad = hyper_gradient_bytes(b) if backward else 0  # beside either (HY-V4's fp32 stream gradient)
    return grad + (max(last, routed + min(last, 0)) if routed else last)
