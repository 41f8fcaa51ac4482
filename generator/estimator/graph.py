"""Layer graph: Arch → ordered nodes with types, output shapes at the maximum context, and parameters.

Parameter formulas follow the transformers modeling files named in families.py: a Linear(in, out)
holds in*out weights (+out bias); RMSNorm w, LayerNorm 2w (weight, bias); Embedding rows*width.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import Arch
from .families import ATTENTION_TYPE, NORM_PARAMS_PER_WIDTH


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    type: str
    output_shape: tuple[int, ...]
    params: int
    layer: int | None = None  # 1-based decoder layer, None outside the stack


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    params_total: int
    params_embedding: int  # token (+ position) embeddings, counted once even when tied
    params_lm_head: int  # 0 when tied to the embedding
    params_per_layer: int
    params_matmul: int  # weights that take part in a matmul per token (all Linears incl. the head)
    linears_per_layer: tuple[tuple[int, int], ...]  # (in, out) of each Linear a LoRA adapter may wrap


def linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def norm_params(kind: str, width: int) -> int:
    return NORM_PARAMS_PER_WIDTH[kind] * width


def attention_params(a: Arch) -> int:
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    # stablelm's o_proj is Linear(hidden, hidden) whatever heads*head_dim is (modeling_stablelm.py).
    o_in = a.hidden if a.family == "stablelm" else q
    total = linear(a.hidden, q, a.qkv_bias) + 2 * linear(a.hidden, kv, a.qkv_bias) + linear(o_in, a.hidden, a.o_bias)
    if a.qk_norm == "head":  # one norm over head_dim, shared by all heads (qwen3, gemma3, phi)
        total += 2 * norm_params(a.qk_norm_kind, a.head_dim)
    elif a.qk_norm in ("flat", "head_per_head"):  # olmo2 norms heads*head_dim; cohere/stablelm per head
        total += norm_params(a.qk_norm_kind, q) + norm_params(a.qk_norm_kind, kv)
    return total


def mlp_params(a: Arch) -> int:
    if a.mlp == "gated":
        return 2 * linear(a.hidden, a.intermediate, a.mlp_bias) + linear(a.intermediate, a.hidden, a.mlp_bias)
    return linear(a.hidden, a.intermediate, a.mlp_bias) + linear(a.intermediate, a.hidden, a.mlp_bias)


def layer_linears(a: Arch) -> tuple[tuple[int, int], ...]:
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    attn = [(a.hidden, q + 2 * kv)] if a.fused_qkv else [(a.hidden, q), (a.hidden, kv), (a.hidden, kv)]
    attn.append((a.hidden if a.family == "stablelm" else q, a.hidden))
    if a.mlp == "gated":
        mlp = [(a.hidden, 2 * a.intermediate)] if a.fused_gate_up else [(a.hidden, a.intermediate)] * 2
        mlp.append((a.intermediate, a.hidden))
    else:
        mlp = [(a.hidden, a.intermediate), (a.intermediate, a.hidden)]
    return tuple(attn + mlp)


def attention_type(a: Arch) -> str:
    if a.kv_heads == a.heads:
        return ATTENTION_TYPE["mha"]
    return ATTENTION_TYPE["mqa"] if a.kv_heads == 1 else ATTENTION_TYPE["gqa"]


def ffn_type(a: Arch) -> str:
    if a.mlp == "gated":
        return "SwiGLU" if a.act in ("silu", "swish") else "GeGLU" if a.act.startswith("gelu") else "GLU"
    return "MLP"


def build_graph(a: Arch) -> Graph:
    """Nodes in forward order, as the structure table shows them."""
    t, h = a.max_context, a.hidden
    seq, hid = (1, t), (1, t, h)
    norm_type = "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm"
    nodes: list[tuple[str, str, tuple[int, ...], int, int | None]] = []

    def add(name: str, typ: str, shape: tuple[int, ...], params: int = 0, layer: int | None = None) -> None:
        nodes.append((name, typ, shape, params, layer))

    add("Input", "Input", seq)
    embed = a.vocab * a.embed_dim
    add("Embedding", "Embedding", (1, t, a.embed_dim), embed)
    if a.embed_dim != h:
        add("Project_In", "Linear", hid, linear(a.embed_dim, h, False))
    if a.position == "learned":
        add("Position_Embedding", "Embedding", hid, a.learned_positions * h)
    elif a.position == "rope":
        add("RoPE", "RoPE", hid)
    else:
        add("ALiBi", "ALiBi", hid)
    if a.embed_norm:
        add(f"Embedding_{norm_type}", norm_type, hid, norm_params(a.norm, h))

    attn_p, mlp_p, norm_p = attention_params(a), mlp_params(a), norm_params(a.norm, h)
    attn_t, ffn_t = attention_type(a), ffn_type(a)
    for i in range(1, a.layers + 1):
        k = 0

        def norm() -> None:
            nonlocal k
            k += 1
            add(f"{norm_type}_{i}_{k}", norm_type, hid, norm_p, i)

        if a.parallel:
            for _ in a.layer_norms:
                norm()
            add(f"Attention_{i}", attn_t, hid, attn_p, i)
            add(f"FFN_{i}", ffn_t, hid, mlp_p, i)
            add(f"Add_{i}", "Add", hid, 0, i)
            continue
        if "pre_attn" in a.layer_norms:
            norm()
        add(f"Attention_{i}", attn_t, hid, attn_p, i)
        if "post_attn" in a.layer_norms:
            norm()
        add(f"Add_{i}_attn", "Add", hid, 0, i)
        if "pre_mlp" in a.layer_norms:
            norm()
        add(f"FFN_{i}", ffn_t, hid, mlp_p, i)
        if "post_mlp" in a.layer_norms:
            norm()
        add(f"Add_{i}_ffn", "Add", hid, 0, i)

    final_p = norm_params(a.norm, h) if a.final_norm else 0
    if a.final_norm:
        add(f"Final_{norm_type}", norm_type, hid, final_p)
    if a.embed_dim != h:
        add("Project_Out", "Linear", (1, t, a.embed_dim), linear(h, a.embed_dim, False))
    head = (0 if a.tie else a.vocab * a.embed_dim) + (a.vocab if a.lm_head_bias else 0)
    add("LM_Head", "Linear", (1, t, a.vocab), head)
    add("Output", "Output", (1, t, a.vocab))

    built = tuple(Node(i, name, typ, shape, p, layer) for i, (name, typ, shape, p, layer) in enumerate(nodes, 1))
    total = sum(n.params for n in built)
    per_layer = attn_p + mlp_p + norm_p * len(a.layer_norms)
    linears = layer_linears(a)
    proj = linear(a.embed_dim, h, False) * 2 if a.embed_dim != h else 0
    matmul = a.layers * sum(i * o for i, o in linears) + a.vocab * a.embed_dim + proj
    positions = a.learned_positions * h
    return Graph(built, total, embed + positions, head, per_layer, matmul, linears)
