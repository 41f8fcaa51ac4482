"""The weights a server holds and a decode step reads: bf16, or a quantised checkpoint's stored matrices as it
stores them (stored_formats.py), and the routed experts' share of them apart."""

from __future__ import annotations

from collections.abc import Callable

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Part
from ..inputs import Assumptions
from .stored_formats import fp4_experts, mat_elements, part_stored_delta, quantised_mats


def serve_weight_bytes(a: Arch, s: Assumptions, float32: bool = False) -> Callable[[list[Part] | tuple[Part, ...]],
                                                                                    int]:
    """Bytes of a group of parts' weights when served: bf16, or the checkpoint's quantised storage. `float32`: on a
    GPU that serves the model in float32, in the 16-bit bytes the plans search in (_part_serve_bytes)."""
    part_bytes = _part_serve_bytes(a, s, float32)

    def weights(parts: list[Part] | tuple[Part, ...]) -> int:
        return int(sum(part_bytes(p) for p in parts))
    return weights


def _part_serve_bytes(a: Arch, s: Assumptions, float32: bool = False) -> Callable[[Part], float]:
    """The bytes of one part's weights when served: serve_weight_bytes a parameter, 4 for those the class keeps in
    fp32 (Part.params32), and a quantised checkpoint's stored matrices as it stores them. `float32`: where vLLM
    serves the model in float32 (vllm_support.serving_scale 2), whose every byte the plans double, the bytes that do
    not double are halved here: the fp32 parameters, 4 B either way, and the quantised matrices, stored packed
    whatever the activations' dtype (a bitsandbytes Gemma on a T4: its 16-bit parameters in float32, its 4-bit ones
    as they are)."""
    def part_bytes(p: Part) -> float:
        key = (p.params, p.type, p.mats, p.linears, p.params32)
        nbytes = seen.get(key)
        if nbytes is None:
            nbytes = float(s.serve_weight_bytes * p.params + (4 - s.serve_weight_bytes) * p.params32)
            stored = 0.0  # the quantised matrices' bytes as stored
            if a.quant is not None and a.quant.bits < 16:
                w = sum(count * i * o for count, i, o in quantised_mats(a, p))
                delta = part_stored_delta(a, p)[1]
                nbytes += delta + (2 - s.serve_weight_bytes) * w
                stored = delta + 2 * w
            if float32:
                nbytes -= 2 * p.params32 + stored / 2
            seen[key] = nbytes
        return nbytes

    # Bytes per distinct part (what part_bytes reads of it), for this model and job only: the
    # layers of a stack repeat a few parts, and memory/profile.py asks per layer, then estimate.py for all.
    seen: dict[tuple[object, ...], float] = {}
    return part_bytes


def model_serve_weight_bytes(a: Arch, g: Graph, s: Assumptions, float32: bool = False) -> int:
    """serve_weight_bytes of every part of the model; unquantised, straight from the graph's parameter counts (the
    sums of the same parts' params and params32); quantised, each distinct layer's once, times the layers it stands
    for (whole and fractional-eighth bytes: the float sums are exact in any order). `float32`: _part_serve_bytes'."""
    spec = a.spec
    if a.quant is None or a.quant.bits >= 16:
        return int(s.serve_weight_bytes * g.params_total + (4 - s.serve_weight_bytes) * g.params_fp32
                   - (2 * g.params_fp32 if float32 else 0))
    part_bytes = _part_serve_bytes(a, s, float32)
    total = 0.0
    for p in spec.embed:
        total += part_bytes(p)
    for b, n in spec.distinct_layers:
        total += n * sum(part_bytes(p) for p in b.parts)
    for p in spec.head:
        total += part_bytes(p)
    return int(total)


def routed_expert_serve(a: Arch, g: Graph, s: Assumptions) -> tuple[int, float]:
    """(params, served bytes) of the routed experts' matrices (Part.expert_mats), each distinct layer's once times
    the layers it stands for: at serve_weight_bytes each unquantised, else as the checkpoint stores them (a format's
    FP4 experts, Quant.fp4_experts: 2 weights a byte and a scale per 32; the formats' own: mat_elements, MXFP4's
    alike). A decode step reads them
    apart from the dense weights (serving_speed), so a checkpoint that quantises its experts alone (gpt-oss) has two
    costs per parameter, not their average."""
    params, nbytes = 0, 0.0
    for b, n in g.spec.distinct_layers:
        for p in b.parts:
            fp4 = fp4_experts(a, p)
            for count, i, o in p.expert_mats:
                w = count * i * o
                params += n * w
                if fp4:
                    nbytes += n * (w // 2 + w // 32)
                elif a.quant is not None and a.quant.bits < 16:
                    nbytes += n * mat_elements(a.quant, count, i, o)[1]
                else:
                    nbytes += n * s.serve_weight_bytes * w
    return params, nbytes
