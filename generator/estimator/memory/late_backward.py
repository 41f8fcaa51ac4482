"""The late-backward moments: what one layer's own backward adds beside the tensors the layers saved, the head's
freed (eager attention's softmax, the torch scan's state, every expert's gradients, a shared layer's weights'
gradients); memory/job.py makes each a phase and keeps the largest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Spec
from .activations import Regime, block_activation_bytes
from .experts import every_expert_backward_terms
from .layer_terms import eager_backward_values, layer_index
from .recurrence import mixer_tail, rglru_backward_bytes, scan_backward_terms, wkv_backward_bytes

EAGER_PHASE = "backward (attention scores' gradients)"
SCAN_PHASE = "backward (the torch scan's state gradients)"
EXPERTS_PHASE = "backward (every expert's gradients)"
SHARED_PHASE = "backward (a shared layer's weight gradients)"


class Moment(NamedTuple):
    """One layer's late-backward moment: its phase's name, the distinct layer (Spec.distinct_layers' order), the
    bytes per sample beside what the layers saved (negative where the moment frees some of them), the gradients
    made by then (batch-free) and the autocast copies freed by then."""

    name: str
    layer: int
    per_sample: int
    made: int
    freed: int


def late_moments(a: Arch, g: Graph, r: Regime, rank: int, roles: frozenset[str] | None, memo: dict | None,
                 saves: bool, upcast: bool, T: int, param_bytes: int, attention: str, skip: Sequence[bool],
                 chunked: list[tuple[int, int]], layer: list[int]) -> list[Moment]:
    """Every moment of a training step without checkpointing (the caller drops SHARED_PHASE's with it): eager
    attention's softmax backward per attending layer (layer_terms.eager_backward_values), a recurrent layer's
    torch-scan backward (recurrence.scan_backward_terms), Llama 4's every-expert backward
    (experts.every_expert_backward_terms) and a shared layer's (shared_weight_gradient_bytes). `chunked`: each
    distinct layer's torch-scan chunk moments (recurrence.chunk_scan_moments); `layer`: its saved bytes per sample."""
    distinct = g.spec.distinct_layers
    late = [Moment(EAGER_PHASE, i, T * t.per_token + T * T * t.per_token_sq,
                   param_bytes * t.params_after if r.trained else 0, 2 * t.matmul_after if r.trained and r.amp else 0)
            for i, t in enumerate(eager_backward_values(a, g, r, rank, roles, memo, saves, upcast))
            if t.attends and not skip[i]] if attention == "eager" else []
    for i, (b, _) in enumerate(distinct):
        scan, params_after, matmul_after = scan_backward_terms(a, b)
        scan = (scan + wkv_backward_bytes(b, r) if r.torch_scan else 0) + rglru_backward_bytes(b, r)
        if scan or chunked[i][1] > 0:  # what the parts after the mixer saved is freed by then
            tail = T * block_activation_bytes(a, mixer_tail(b), r, rank, roles)
            late.append(Moment(SCAN_PHASE, i, T * scan + chunked[i][1] - tail,
                               param_bytes * params_after if r.trained else 0,
                               2 * matmul_after if r.trained and r.amp else 0))
        experts_bwd, experts_made = every_expert_backward_terms(b, r)  # Llama 4's MoE: every expert's gradients
        if experts_bwd:
            late.append(Moment(EXPERTS_PHASE, i, T * experts_bwd, param_bytes * experts_made,
                               2 * experts_made if r.amp else 0))
    shared = shared_weight_gradient_bytes(g.spec, r)
    if shared:  # at the second-last pass's backward, the last pass's saved tensors freed
        passes = shared_passes(g.spec)
        k = next(i for i in reversed(layer_index(g.spec, memo)) if i in passes)  # the last pass's distinct layer
        late.append(Moment(SHARED_PHASE, k, -layer[k], shared, 0))
    return late


def shared_passes(spec: Spec) -> list[int]:
    """The distinct layers (Spec.distinct_layers' order) that run another layer's weights again: parts holding no
    parameters whose matmuls still count (families/shared_layer_encoders.shared_pass)."""
    return [i for i, (b, _) in enumerate(spec.distinct_layers) if b.params == 0 and b.active_matmul > 0]


def shared_weight_gradient_bytes(spec: Spec, r: Regime) -> int:
    """Batch-free, what a full AMP step's backward holds for weights a stack runs more than once (ALBERT's shared
    layer, a loop's layers): autocast casts each weight to bf16 once (its cache), every pass's matmul reads that
    copy, and autograd sums the copy's gradient over the passes in a bf16 buffer per weight, from the last pass's
    backward to the first's, before the one cast's backward makes the fp32 gradient. At the second pass's sum of
    the largest weight, its newest contribution and the out-of-place sum are live beside the buffers: 2 B x the
    stack's matmul weights + 2 x 2 B x its largest Linear. Read off a CPU-simulated ALBERT-xxlarge step (12 passes
    of one layer, FINDINGS.md F104). 0 without autocast's cache (checkpointing's recomputation casts anew)."""
    passes = shared_passes(spec)
    if not (passes and r.trained and r.amp):
        return 0
    distinct = [b for b, _ in spec.distinct_layers]
    stacks = {distinct[i].stack for i in passes}
    held = [b for b in distinct if b.stack in stacks and b.params]
    largest = max((i * o for b in held for p in b.parts for i, o in p.linears), default=0)
    return 2 * sum(b.matmul for b in held) + 2 * 2 * largest
