"""LoRA adapters: which nn.Linear of a layer plays which role (q, k, v, o, gate, up, down), which module names a
target list means for a model, and how many adapter parameters that makes (peft's LoraConfig target_modules)."""

from __future__ import annotations

from ...errors import JobError
from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block, Part

# LoRA target roles of a part's nn.Linears, in the order the builders list them (spec.py attention_part,
# mlp_part); a group is one input tensor that several adapters may share.
ROLE_GROUP = {"q": "attn_in", "k": "attn_in", "v": "attn_in", "qkv": "attn_in", "o": "attn_out",
              "gate": "mlp_in", "up": "mlp_in", "gate_up": "mlp_in", "down": "mlp_mid"}


def linear_roles(p: Part) -> tuple[str, ...]:
    """q, k, v, o / qkv, o for attention; gate, up, down / gate_up, down / up, down for MLPs; else 'linear'."""
    n = len(p.linears)
    if p.attn_flops and not p.type.startswith("MoE"):
        if n >= 4 and p.linears[0][0] == p.linears[1][0] == p.linears[2][0]:
            return ("q", "k", "v", "o") + ("linear",) * (n - 4)
        if n >= 2:
            return ("qkv", "o") + ("linear",) * (n - 2)
    if p.type in ("SwiGLU", "GeGLU", "GLU") and n in (2, 3):
        return ("gate_up", "down") if n == 2 else ("gate", "up", "down")
    if p.type == "MLP" and n == 2:
        return ("up", "down")
    return ("linear",) * n


def adapted_linears(b: Block, roles: frozenset[str] | None) -> list[tuple[int, int, str]]:
    """(in, out, input group) of each adapted Linear of a layer; roles None = every Linear (all-linear)."""
    out: list[tuple[int, int, str]] = []
    for k, p in enumerate(b.parts):
        for (i, o), role in zip(p.linears, linear_roles(p), strict=True):
            if roles is None or role in roles:
                out.append((i, o, ROLE_GROUP.get(role, f"{k}.{len(out)}")))
    return out


# Module names per LoRA role, as transformers' modeling files name them (peft matches target_modules by the
# last name component). Default: modeling_llama and its descendants; plain MLPs default to fc1/fc2.
NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "qkv": "qkv_proj", "gate": "gate_proj",
         "up": "up_proj", "down": "down_proj", "gate_up": "gate_up_proj"}


FAMILY_NAMES = {
    "gpt2": {"qkv": "c_attn", "o": "c_proj", "up": "c_fc", "down": "c_proj"},
    "gpt_bigcode": {"qkv": "c_attn", "o": "c_proj", "up": "c_fc", "down": "c_proj"},
    "starcoder2": {"up": "c_fc", "down": "c_proj"},
    "gpt_neox": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "falcon": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "bloom": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "opt": {"o": "out_proj", "up": "fc1", "down": "fc2"},
    "gptj": {"o": "out_proj", "up": "fc_in", "down": "fc_out"},
    "phi": {"o": "dense", "up": "fc1", "down": "fc2"},
}


MLP_ROLES = frozenset({"gate", "up", "down", "gate_up"})


def target_roles(a: Arch, g: Graph, targets: str, model: str) -> frozenset[str] | None:
    """The roles the comma list names (None: all-linear). `mlp` is torchtune's apply_lora_to_mlp (every MLP
    Linear). A name no Linear of this model carries is an error, never a silent default."""
    if targets == "all-linear":
        return None
    spec = g.spec
    present = {role for b in spec.blocks for p in b.parts for role in linear_roles(p)} - {"linear"}
    plain = any(p.type == "MLP" for b in spec.blocks for p in b.parts)
    names = {**NAMES, **({"up": "fc1", "down": "fc2"} if plain else {}), **FAMILY_NAMES.get(a.family, {})}
    roles: set[str] = set()
    for name in (t.strip() for t in targets.split(",")):
        hit: set[str] | frozenset[str]
        if name == "mlp":
            hit = MLP_ROLES & present
        elif name in ROLE_GROUP:  # a role by its own name (recipes: LitGPT's lora_query/lora_value = "q,v")
            hit = {name} & present or ({"qkv"} & present if name in ("q", "k", "v") else set())
        else:
            hit = {r for r in present if names.get(r) == name}
        if not hit:
            known = sorted({names[r] for r in present if r in names}) + ["mlp", "all-linear"]
            raise JobError(model, "lora_targets", name, f"no Linear of this {a.model_type} model is named so; "
                                                        f"its names: {', '.join(known)}")
        roles |= hit
    return frozenset(roles)


def lora_params(g: Graph, a: Arch, rank: int, roles: frozenset[str] | None = None) -> int:
    """LoRA A (r x in) and B (out x r) on every adapted nn.Linear of every layer; the head is left out."""
    if roles is None:
        return sum(rank * b.lora_io for b in g.spec.blocks)
    return sum(rank * (i + o) for b in g.spec.blocks for i, o, _ in adapted_linears(b, roles))


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
