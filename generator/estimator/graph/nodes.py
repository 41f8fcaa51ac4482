"""Layer graph: Arch → the totals of its parts (parameters, matmul weights, attention terms).

The parts come from the Arch's spec (graph/parts.py), which the family builders fill following the
transformers modeling files; here they are summed. The structure table (one row per part, in forward order,
shaped at the maximum context) is the Report's, made from the same spec (graph/structure.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.arch import Arch
from .parts import Block, Part, Spec

# The embedding side's parts that read another modality (family builders name them so): the towers, their
# resamplers and projectors, which a text-only step never runs
TOWER_PREFIXES = ("Vision", "Projector", "Resampler", "Audio", "Protein")
# The LoRA role of a projector's Linears in Spec.tower_linears (families/tower_linears.py): they run after the tower's
PROJECTOR_ROLE = "projector"
# The roles of a tower layer's Linears there: what checkpointing recomputes (a patch embedding's, "linear", and a
# projector's run outside the layers)
LAYER_ROLES = frozenset({"q", "k", "v", "qkv", "o", "gate", "up", "down"})


@dataclass(frozen=True)
class Graph:
    """The layer graph's totals."""

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
    params_towers: int = 0  # of params_total, the TOWER_PREFIXES parts' (a VLM's vision tower, resampler and projector)
    towers_matmul: int = 0  # of params_matmul, theirs
    params_fp32: int = 0  # of params_total, those the class keeps in fp32 in any load dtype (Part.params32)

    @property
    def largest_layer(self) -> Block | None:
        """The distinct layer with the most parameters (the first of those that tie; None without layers): the unit
        ZeRO-3 and FSDP gather (setups.model_shape, storage.gathered_unit_bytes)."""
        distinct = self.spec.distinct_layers
        return max(distinct, key=lambda bn: bn[0].params)[0] if distinct else None


def tied_weight_params(a: Arch) -> int:
    """The weight an LM head tied to the embedding shares with it, vocab x the embedding's width (0 untied): counted
    once in the graph, it is the head's matmul, makes a second gradient (F6) and is copied to a pipeline's last
    stage. The width: OPT's projected embedding's, else the word embedding Part's own (ALBERT's embedding_size),
    else the hidden size."""
    word = next((p.width for p in a.spec.embed if p.type == "Embedding"), 0)
    return a.spec.vocab * (a.embed_dim or max(word, 0) or a.hidden) if a.spec.tied else 0


def build_graph(a: Arch) -> Graph:
    """The totals of the model's graph (parameters, matmul weights, attention terms): the stack's sums over its
    distinct layers (Spec.distinct_layers, which the memory terms read too), each times its count."""
    spec = a.spec
    embedding = sum(p.params for p in spec.embed if p.type == "Embedding")
    head = sum(p.params for p in spec.head if p.name.startswith("LM_Head") or p.type == "LM Head")
    ends = [*spec.embed, *spec.head]
    total = sum(p.params for p in ends)
    fp32 = sum(p.params32 for p in ends)
    matmul = sum(p.matmul for p in ends)
    active = sum(p.active_params for p in ends)
    active_mm = sum(p.active_matmul_params for p in ends)
    per_layer = 0
    terms: dict[tuple[int, bool], int] = {}
    for b, n in spec.distinct_layers:
        total += n * b.params
        matmul += n * b.matmul
        active += n * b.active
        active_mm += n * b.active_matmul
        per_layer = max(per_layer, b.params)
        fp32 += n * sum(p.params32 for p in b.parts)
        causal = spec.kind != "encoder" and b.stack != "encoder"
        for window, flops in b.attn:
            key = (max(window, 0), causal)
            terms[key] = terms.get(key, 0) + n * flops
    first: Block | None = spec.blocks[0] if spec.blocks else None
    towers = tower_parts(spec)
    return Graph(total, embedding, head, per_layer, matmul, first.linears if first else (), spec,
                 active, active_mm, tuple((w, c, f) for (w, c), f in sorted(terms.items())), a.max_context,
                 sum(p.params for p in towers), sum(p.matmul for p in towers), fp32)


def tower_parts(spec: Spec) -> list[Part]:
    """The embedding stage's TOWER_PREFIXES parts (a VLM's vision tower, resampler and projector, an audio tower):
    what a model holds beside its language model's token embeddings."""
    return [p for p in spec.embed if p.name.startswith(TOWER_PREFIXES)]
