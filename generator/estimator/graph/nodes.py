"""Layer graph: Arch → ordered nodes with types, output shapes at the maximum context, and parameters.

The nodes come from the Arch's spec (graph/parts.py), which the family builders fill following the
transformers modeling files; here they are numbered, shaped and summed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from ..config.arch import Arch
from .parts import Block, Part, Spec


class Node(NamedTuple):
    index: int  # type: ignore[assignment]  # the field shadows tuple.index, as the table's column is named
    name: str
    type: str
    output_shape: tuple[int, ...]
    params: int
    layer: int | None = None  # 1-based layer of the stack, None outside it


@dataclass(frozen=True)
class Graph:
    """The layer graph's totals; its nodes (the structure table) are built only when read."""

    params_total: int
    params_embedding: int  # token (+ position) embeddings, counted once even when tied
    params_lm_head: int  # 0 when tied to the embedding
    params_per_layer: int  # the largest layer (every layer where all are alike)
    params_matmul: int  # weights that take part in a matmul per token (all Linears incl. the head)
    linears_per_layer: tuple[tuple[int, int], ...]  # (in, out) of each Linear of the first layer
    spec: Spec
    params_active: int = 0  # parameters used per token (MoE: routed top-k + shared); = total when dense
    active_matmul: int = 0  # matmul weights used per token
    # attention FLOPs per token per attended key, summed per (window, causal): cost.py's attention term
    attention_terms: tuple[tuple[int, bool, int], ...] = ()
    context: int = 0  # tokens the structure table's output shapes are given at (the config's maximum context)

    @functools.cached_property
    def nodes(self) -> tuple[Node, ...]:
        """Nodes in forward order, as the structure table shows them: a third of an estimate's time for a deep
        model, so built only where a page or the JSON twin asks for the table."""
        return structure_nodes(self.spec, self.context)


def _shape(p: Part, t: int, hidden: int) -> tuple[int, ...]:
    if p.width < 0:
        return (1, t)
    return (1, t, p.width or hidden)


def structure_nodes(spec: Spec, t: int) -> tuple[Node, ...]:
    """One node per part, output shapes at `t` tokens."""
    h = spec.hidden
    nodes: list[Node] = []
    new = tuple.__new__  # Node is a named tuple: built directly (a 405B model has 1,100 nodes)
    hidden = (1, t, h)
    for p in spec.embed:
        nodes.append(Node(len(nodes) + 1, p.name, p.type, _shape(p, t, h), p.params))
    for b in spec.blocks:
        for p in b.parts:
            nodes.append(new(Node, (len(nodes) + 1, p.name, p.type, hidden if p.width == 0 else _shape(p, t, h),
                                    p.params, b.index)))
    for p in spec.head:
        nodes.append(Node(len(nodes) + 1, p.name, p.type, _shape(p, t, h), p.params))
    return tuple(nodes)


def build_graph(a: Arch) -> Graph:
    """The totals of the model's graph (parameters, matmul weights, attention terms); nodes on demand."""
    spec = a.spec
    total = spec.params
    embedding = sum(p.params for p in spec.embed if p.type == "Embedding")
    head = sum(p.params for p in spec.head if p.name.startswith("LM_Head") or p.type == "LM Head")
    per_layer = max((b.params for b in spec.blocks), default=0)
    ends = [*spec.embed, *spec.head]
    matmul = sum(p.matmul for p in ends) + sum(b.matmul for b in spec.blocks)
    active = sum(p.active_params for p in ends) + sum(b.active for b in spec.blocks)
    active_mm = sum(p.active_matmul_params for p in ends) + sum(b.active_matmul for b in spec.blocks)
    first: Block | None = spec.blocks[0] if spec.blocks else None
    terms: dict[tuple[int, bool], int] = {}
    for b in spec.blocks:
        causal = spec.kind != "encoder" and b.stack != "encoder"
        for window, flops in b.attn:
            key = (max(window, 0), causal)
            terms[key] = terms.get(key, 0) + flops
    return Graph(total, embedding, head, per_layer, matmul, first.linears if first else (), spec,
                 active, active_mm, tuple((w, c, f) for (w, c), f in sorted(terms.items())), a.max_context)
