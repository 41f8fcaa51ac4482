"""LoRA adapters: which nn.Linear of a layer plays which role (q, k, v, o, gate, up, down), which module names a
target list means for a model, which fused expert tensors peft adapts as parameters, and how many adapter
parameters that makes (peft's LoraConfig target_modules, and the target_parameters it derives for MoE models)."""

from __future__ import annotations

from ...errors import JobError
from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import LINEAR_EXPERTS_PART, Block, Part
from .target_names import FAMILY_NAMES, NAMES, PEFT_DEFAULT, PEFT_DEFAULT_TARGETS

# LoRA target roles of a part's nn.Linears, in the order the builders list them (spec.py attention_part,
# mlp_part); a group is one input tensor that several adapters may share.
ROLE_GROUP = {"q": "attn_in", "k": "attn_in", "v": "attn_in", "qkv": "attn_in", "o": "attn_out",
              "gate": "mlp_in", "up": "mlp_in", "gate_up": "mlp_in", "down": "mlp_mid",
              # MLA: q_a and kv_a read the normed hidden state; q_b and kv_b each read their own low-rank norm's output
              "q_a": "attn_in", "kv_a": "attn_in", "q_b": "mla_q", "kv_b": "mla_kv",
              # DeepSeek-V4: kv_proj reads the normed hidden state too; o_b_proj the grouped o_a_proj's output
              "kv": "attn_in", "o_b": "mla_o"}


# A Mamba mixer's nn.Linears in forward order (modeling_mamba.MambaMixer: in_proj, x_proj, dt_proj, out_proj;
# modeling_mamba2.Mamba2Mixer: in_proj, out_proj), as graph's mamba_part and mamba2_part list them.
SSM_ROLES = {"Mamba": ("ssm_in", "ssm_x", "ssm_dt", "ssm_out"), "Mamba-2": ("ssm_in", "ssm_out")}

# peft refuses LoRA on a Mamba mixer's out_proj and conv1d for these model types, "all-linear" included
# (peft/tuners/tuners_utils.py _check_lora_target_modules_mamba: the fused kernels read out_proj's weight
# directly): "all-linear" here prices every Linear peft accepts.
PEFT_MAMBA_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})


def linear_roles(p: Part) -> tuple[str, ...]:
    """q, k, v, o / qkv, o for attention; MLA's q_a, q_b (or q), kv_a, kv_b, o (DeepSeek-V4's q_a, q_b, kv, o_b);
    gate, up, down / gate_up, down / up, down for MLPs; an MoE part's shared-expert Linears 'shared'; else
    'linear'."""
    n = len(p.linears)
    if p.type.startswith("MoE"):
        return ("shared",) * n
    mla = _mla_roles(p) if p.type == "Multi-head Latent Attn" else None
    if mla:
        return mla
    if p.type in ("Compressed MQA", "Sliding MQA") and n == 4:  # DeepSeek-V4 (families/latent_attention._v4_part)
        return ("q_a", "q_b", "kv", "o_b")
    if p.attends:
        # falcon_h1's node runs attention and a Mamba-2 mixer side by side (graph combine): the mixer's Linears last
        ssm = SSM_ROLES["Mamba-2"] if p.scan and p.scan[0] == 2 else ()
        if n >= 4 + len(ssm) and p.linears[0][0] == p.linears[1][0] == p.linears[2][0]:
            return ("q", "k", "v", "o") + ("linear",) * (n - 4 - len(ssm)) + ssm
        if n >= 2:
            return ("qkv", "o") + ("linear",) * (n - 2)
    if p.type in ("SwiGLU", "GeGLU", "GLU") and n in (2, 3):
        return ("gate_up", "down") if n == 2 else ("gate", "up", "down")
    if p.type == "MLP" and n == 2:
        return ("up", "down")
    if p.type in SSM_ROLES and n == len(SSM_ROLES[p.type]):
        return SSM_ROLES[p.type]
    if p.scan and p.scan[0] == 1 and n == 2:  # Zamba's mixer: x_proj and dt_proj are per-head parameters, not nn.Linears
        return SSM_ROLES["Mamba-2"]
    return ("linear",) * n


def _mla_roles(p: Part) -> tuple[str, ...] | None:
    """The roles of an MLA part's Linears by their shapes, in the orders the builders list them: assembly.mla_part
    (modeling_deepseek_v3.DeepseekV3Attention: q_a_proj, q_b_proj or one q_proj, kv_a_proj_with_mqa, kv_b_proj,
    o_proj) and multimodal_moe's MistralLarge4 (q_proj, kv_b_proj, o_proj, then kv_a_proj_with_mqa where the layer
    makes its own latent KV). None for another layout."""
    lin, n = p.linears, len(p.linears)
    hidden = lin[0][0] if lin else 0
    if n == 5 and lin[1][0] == lin[0][1] and lin[2][0] == hidden:
        return ("q_a", "q_b", "kv_a", "kv_b", "o")
    if n == 4 and lin[1][0] == hidden:
        return ("q", "kv_a", "kv_b", "o")
    if n == 4 and lin[3][0] == hidden:
        return ("q", "kv_b", "o", "kv_a")
    if n == 3 and lin[2][1] == hidden:
        return ("q", "kv_b", "o")
    return None


def adapted_linears(b: Block, roles: frozenset[str] | None) -> list[tuple[int, int, str]]:
    """(in, out, input group) of each adapted Linear of a layer; roles None = every Linear (all-linear)."""
    out: list[tuple[int, int, str]] = []
    for k, p in enumerate(b.parts):
        last = len(p.linears) - 1
        for j, ((i, o), role) in enumerate(zip(p.linears, linear_roles(p), strict=True)):
            if roles is None or role in roles:
                out.append((i, o, ROLE_GROUP.get(role) or _input_group(k, j, i, role, last)))
    return out


def _input_group(k: int, j: int, width: int, role: str, last: int) -> str:
    """A Linear's input group where its role names none: a recurrent mixer's input projections ('linear': Gated
    DeltaNet's in_proj_qkv, _z, _b, _a; RG-LRU's linear_x and linear_y) read the part's one input, so those of a
    width share it; its last Linear (out_proj, linear_out) reads its own. Any other role: a group of its own."""
    if role == "linear" and j < last:
        return f"{k}.in{width}"
    return f"{k}.{j}"


MLP_ROLES = frozenset({"gate", "up", "down", "gate_up"})

# peft 0.21 on transformers 5 (peft/utils/transformers_weight_conversion.py convert_peft_config_for_transformers,
# _convert_peft_config_moe): for the model types of transformers' conversion_mapping._MODEL_TO_CONVERSION_PATTERN
# that follow the mixtral or qwen2_moe pattern (peft adds mixtral itself), the v4 names of the experts' Linears
# and the router, named in target_modules or reached by "all-linear" (_resolve_string_target_modules adds them),
# become target_parameters: the fused 3-D tensors gate_up_proj and down_proj and the router's gate.weight, each
# wrapped by lora.ParamWrapper (peft/tuners/lora/layer.py). qwen2_moe itself is no key there: its experts stay
# unadapted under all-linear.
FUSED_EXPERTS = {
    **dict.fromkeys(("mixtral", "minimax", "minimax_m2"), "mixtral"),
    **dict.fromkeys(("afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dots1",
                     "ernie4_5_moe", "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "glm4v_moe",
                     "glm_moe_dsa", "hunyuan_v1_moe", "longcat_flash", "mellum", "olmoe", "qwen3_moe", "qwen3_next",
                     "qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "sarvam_mla",
                     "solar_open"), "qwen2_moe"),
}

# The v4 module names each pattern maps onto the fused tensors (_MOE_TARGET_MODULE_MAPPING), as LoRA roles: the
# router, the gate+up tensor (rank and alpha doubled when both halves are named: _MOE_FUSED_TARGETS, naming one
# half alone is peft's ValueError), the down tensor. A name so mapped leaves target_modules, so under the qwen2_moe
# pattern no nn.Linear named gate_proj / up_proj / down_proj (dense MLPs, shared experts) is adapted.
EXPERT_NAMES = {
    "mixtral": {"gate": "router", "w1": "experts_gate_up", "w3": "experts_gate_up", "w2": "experts_down"},
    "qwen2_moe": {"gate": "router", "gate_proj": "experts_gate_up", "up_proj": "experts_gate_up",
                  "down_proj": "experts_down"},
}
EXPERT_ROLES = frozenset({"router", "experts_gate_up", "experts_down"})

# Roles whose nn.Linear the qwen2_moe pattern drops from target_modules (named gate_proj, up_proj, down_proj).
PATTERN_DROPS = {"mixtral": frozenset(), "qwen2_moe": frozenset({"gate", "up", "down", "shared"})}

# Every role a layer's Linears and tensors can play: "all-linear" of a FUSED_EXPERTS model is these less the drops.
ALL_ROLES = frozenset(ROLE_GROUP) | {"linear", "shared"} | EXPERT_ROLES | {r for v in SSM_ROLES.values() for r in v}


def all_linear_roles(a: Arch) -> frozenset[str] | None:
    """What "all-linear" adapts: None (every nn.Linear) but for FUSED_EXPERTS models, where peft's conversion
    adds the router and the expert tensors and drops the Linears named as the pattern's v4 expert names, and for
    PEFT_MAMBA_TYPES, whose out_proj peft refuses."""
    pattern = FUSED_EXPERTS.get(a.model_type)
    refused = frozenset({"ssm_out"}) if a.model_type in PEFT_MAMBA_TYPES else frozenset()
    if pattern is None:  # every nn.Linear peft accepts; no fused expert tensor (peft converts none here)
        return ALL_ROLES - EXPERT_ROLES - refused if refused else None
    return ALL_ROLES - PATTERN_DROPS[pattern] - refused


def expert_tensors(b: Block, roles: frozenset[str] | None) -> list[tuple[int, int, int, int, int]]:
    """(experts, in, out, rank multiple, top_k) of each parameter ParamWrapper adapts in this layer (roles from
    target_roles or all_linear_roles; None adapts none): the router's weight (experts x hidden, one matrix), the
    gate+up tensor (experts, 2 x inter, hidden) at twice the rank, the down tensor (experts, hidden, inter), as
    graph/parts.moe_part lays out a gated MoE's `mats`. peft's in/out: ParamWrapper._get_in_out_features."""
    if not roles or not roles & EXPERT_ROLES:
        return []
    out = []
    for p in b.parts:
        if not p.type.startswith("MoE") or not p.gated_experts:
            continue
        # the router scores, and the gate+up tensor holds, every expert: LongCat-Flash's zero experts too (its
        # gate+up rows, Part.gated_experts); the down tensor only the routed ones
        (rows, hidden, inter), experts = p.mats[0], p.mats[1][0]
        if "router" in roles:
            out.append((1, hidden, rows // 2, 1, 0))
        if "experts_gate_up" in roles:
            out.append((rows // 2, hidden, 2 * inter, 2, p.top_k))
        if "experts_down" in roles:
            out.append((experts, inter, hidden, 1, p.top_k))
    return out


def linear_experts(b: Block, roles: frozenset[str] | None) -> list[tuple[int, int, int, int]]:
    """(count, in, out, Linears of the count each token runs) of the adapted nn.Linears of a layer's
    LINEAR_EXPERTS_PART: every expert's up and down Linear (top_k of them per token) and, under all-linear, the
    router's classifier (every token). graph/parts.moe_part's `mats` hold their shapes. Those are the routed experts
    transformers 5 builds as nn.Linear modules, one pair per expert (Switch Transformers'
    SwitchTransformersDenseActDense wi and wo, NLLB-MoE's NllbMoeDenseActDense fc1 and fc2), routed by a Top-k
    router's classifier Linear: peft's all-linear adapts each as a plain Linear, and their names are the dense MLP's,
    so naming those (up, down) adapts the experts too."""
    out = []
    for p in b.parts:
        if p.type != LINEAR_EXPERTS_PART:
            continue
        (_, hidden, inter), experts = p.mats[0], p.mats[1][0]
        out += [(experts, hidden, inter, p.top_k)] if roles is None or "up" in roles else []
        out += [(experts, inter, hidden, p.top_k)] if roles is None or "down" in roles else []
        out += [(1, hidden, experts, 1)] if roles is None else []
    return out


def block_lora_params(b: Block, rank: int, roles: frozenset[str] | None) -> int:
    """LoRA parameters of one layer: A (r x in) and B (out x r) per adapted nn.Linear; per adapted tensor
    ParamWrapper's lora_A nn.Linear(in, r x experts) and lora_B nn.Linear(r x experts, out). A layer holding no
    parameters is a pass of an earlier one's weights (families/shared_layer_encoders.shared_pass): its adapters
    are that layer's, counted there."""
    if not b.params:
        return 0
    linear = rank * b.lora_io if roles is None else sum(rank * (i + o) for i, o, _ in adapted_linears(b, roles))
    linear += sum(n * rank * (i + o) for n, i, o, _ in linear_experts(b, roles))
    return linear + expert_lora_terms(b, rank, roles)[0]


# bitsandbytes pages a 32-bit optimizer's state (cudaMallocManaged, outside torch's allocator) only for a tensor of
# this many elements or more; a smaller one's state is torch.zeros_like on the GPU, which the allocator counts
# (bitsandbytes/optim/optimizer.py Optimizer8bit.get_state_buffer: `p.numel() < 1e5`)
PAGED_MIN_ELEMENTS = 100_000


def unpaged_elements(*sizes: int) -> int:
    """Of tensors of these element counts, the elements in those under PAGED_MIN_ELEMENTS."""
    return sum(n for n in sizes if n < PAGED_MIN_ELEMENTS)


def block_unpaged_lora_params(b: Block, rank: int, roles: frozenset[str] | None, fused_qkv: bool = False) -> int:
    """Of block_lora_params, those in tensors a paged optimizer does not page: lora_A's weight is rank x in, lora_B's
    out x rank, each its own tensor; an r=16 adapter on a 4,096-wide Linear is 65,536 elements, under the floor.
    `fused_qkv`: LitGPT's LoRAQKVLinear, one lora_A of (rank x the adapted of q, k, v) x in and one lora_B of their
    outputs x rank (litgpt/lora.py), for the Linears reading the attention's input."""
    if not b.params:  # a shared pass: its adapters are its first pass's (block_lora_params)
        return 0
    linears = adapted_linears(b, roles)
    fused = [(i, o) for i, o, group in linears if fused_qkv and group == "attn_in"]
    linear = unpaged_elements(rank * len(fused) * fused[0][0], rank * sum(o for _, o in fused)) if fused else 0
    linear += sum(unpaged_elements(rank * i, rank * o) for i, o, group in linears
                  if not (fused_qkv and group == "attn_in"))
    linear += sum(n * unpaged_elements(rank * i, rank * o) for n, i, o, _ in linear_experts(b, roles))
    return linear + sum(unpaged_elements(rank * m * e * i, rank * m * e * o)
                        for e, i, o, m, _ in expert_tensors(b, roles))


def expert_lora_terms(b: Block, rank: int, roles: frozenset[str] | None) -> tuple[int, int]:
    """The LoRA parameters ParamWrapper puts on a layer's expert tensors (expert_tensors), and the multiply-adds of
    their delta weights, B @ A for every expert: rank x in x out each (ParamWrapper.get_delta_weight)."""
    params = macs = 0
    for experts, i, o, multiple, _ in expert_tensors(b, roles):
        params += rank * multiple * experts * (i + o)
        macs += rank * multiple * experts * i * o
    return params, macs


def target_roles(a: Arch, g: Graph, targets: str, model: str) -> frozenset[str] | None:
    """The roles the comma list names (None: all-linear; peft-default: peft's own for the model type). `mlp` is
    torchtune's apply_lora_to_mlp: every MLP Linear, and in an MoE layer the shared expert and the expert tensors
    (torchtune/models/llama4/_component_builders.py lora_llama4_decoder: "this includes both vanilla MLP layers and
    MoE layers"; its LoRAGroupedExperts priced as peft's ParamWrapper, the router left alone). A name no Linear of
    this model carries is an error, never a silent default."""
    if targets == "all-linear":
        return all_linear_roles(a)
    if targets == PEFT_DEFAULT:
        if a.model_type not in PEFT_DEFAULT_TARGETS:
            raise JobError(model, "lora_targets", targets, f"peft has no default LoRA targets for a {a.model_type} "
                                                           "model (it asks for target_modules): name them with "
                                                           "--lora-targets")
        targets = PEFT_DEFAULT_TARGETS[a.model_type]
    spec = g.spec
    pattern = FUSED_EXPERTS.get(a.model_type, "")
    expert_names = EXPERT_NAMES.get(pattern, {})
    moe = any(p.type.startswith("MoE") for b in spec.blocks for p in b.parts)
    present = {role for b in spec.blocks for p in b.parts for role in linear_roles(p)} - {"linear"}
    plain = any(p.type == "MLP" for b in spec.blocks for p in b.parts)
    names = {**NAMES, **({"up": "fc1", "down": "fc2"} if plain else {}), **FAMILY_NAMES.get(a.family, {}),
             **FAMILY_NAMES.get(a.model_type, {})}
    if "gate" in present and names.get("gate") == "wi_0":  # a gated T5 feed-forward: wi_0 (the gate), wi_1, wo
        names["up"] = "wi_1"
    # torchtune's apply_lora_to_mlp adapts MoE layers too: their shared expert and expert tensors
    mlp = (MLP_ROLES | ({"shared"} if moe else set())) & present \
        | ({"experts_gate_up", "experts_down"} if moe and pattern else set())
    roles: set[str] = set()
    for name in (t.strip() for t in targets.split(",")):
        hit: set[str] | frozenset[str]
        if moe and name in expert_names:  # peft's conversion: a v4 expert name targets the fused tensor
            hit = {expert_names[name]}
        elif name == "mlp":
            hit = mlp
        elif name in ROLE_GROUP:  # a role by its own name (recipes: LitGPT's lora_query/lora_value = "q,v")
            hit = {name} & present or ({"qkv"} & present if name in ("q", "k", "v") else set())
        else:
            hit = {r for r in present if names.get(r) == name}
        if "ssm_out" in hit and a.model_type in PEFT_MAMBA_TYPES:
            raise JobError(model, "lora_targets", name, f"peft refuses LoRA on a Mamba mixer's out_proj in a "
                                                        f"{a.model_type} model (its fused kernels read the weight)")
        towers = {x[4] for x in spec.tower_linears or ()}
        if not hit and name in towers:  # a tower's or projector's Linear alone (tower_adapters.tower_adapted)
            continue
        if not hit:
            known = sorted({names[r] for r in present if r in names} | towers) + ["mlp"] * bool(mlp) + ["all-linear"]
            raise JobError(model, "lora_targets", name, f"no Linear of this {a.model_type} model is named so; "
                                                        f"its names: {', '.join(known)}")
        roles |= hit
    halves = [n for n, role in expert_names.items() if role == "experts_gate_up"]
    named = [n for n in halves if n in {t.strip() for t in targets.split(",")}]
    if moe and 0 < len(named) < len(halves):
        raise JobError(model, "lora_targets", targets, f"peft cannot target {named[0]} without "
                                                       f"{', '.join(n for n in halves if n not in named)}: they "
                                                       f"are fused into one gate_up_proj tensor")
    return frozenset(roles)


def lora_params(g: Graph, a: Arch, rank: int, roles: frozenset[str] | None = None) -> int:
    """block_lora_params over every layer (roles None: all-linear, all_linear_roles), once per distinct layer
    (Spec.distinct_layers); the head is left out."""
    roles = all_linear_roles(a) if roles is None else roles
    return sum(n * block_lora_params(b, rank, roles) for b, n in g.spec.distinct_layers)


def input_linear_params(b: Block) -> int:
    """Weights of the layer's Linears that read its (normed) input: q, k, v (or qkv) of a first attention part, a
    first mixer's in_proj. A frozen embedding's first layer runs them on an input that needs no gradient."""
    p = next((p for p in b.parts if p.linears), None)
    if p is None:
        return 0
    return sum(i * o for (i, o), role in zip(p.linears, linear_roles(p), strict=True)
               if ROLE_GROUP.get(role) == "attn_in" or role == "ssm_in")


def held_input_width(b: Block) -> int:
    """Width of every distinct tensor the layer's Linears read, the attention output included: what bitsandbytes'
    4-bit matmuls before 0.43.2 keep on their autograd context once the backward has freed the saved tensors."""
    return sum(distinct_inputs(b).values()) + sum(i for i, _, g in adapted_linears(b, None) if g == "attn_out")


def distinct_inputs(b: Block) -> dict[str, int]:
    """Width of each distinct tensor the layer's Linears read, by input group, less the attention output (SDPA
    saved it already): q/k/v share one input, gate/up another, and in a parallel block (gptj, phi, cohere,
    falcon: no norm between the attention and the MLP reading its input) attention and MLP share one."""
    inputs = {g: i for i, _, g in adapted_linears(b, None) if g != "attn_out"}
    after_attention = False
    for p in b.parts:
        if p.attn_flops:
            after_attention = True
        elif after_attention and p.norm_width:
            break
        elif after_attention and MLP_ROLES.intersection(linear_roles(p)):
            inputs.pop("mlp_in", None)
            break
    return inputs
