"""What transformers' torch path of a Mamba mixer keeps: the sequential selective scan that runs where mamba-ssm
and causal-conv1d are not installed, and always on the CPU (modeling_mamba.mamba_selective_scan's recurrent loop;
the fused kernels it falls back from keep what graph's mamba_part prices).

The loop (transformers 5.24 modeling_mamba.py, "Recurrent iteration"), per token and inner x state element:
discrete_A = exp(A x dt) is fp32 and kept by exp for its backward; discrete_B = dt x B.float() fp32, kept by the
mul that makes deltaB_u; each step's state = discrete_A[:, :, i] x state + deltaB_u[:, :, i] is fp32 and kept by
the next step's mul; its cast to the input dtype is kept by the matmul with C. Per inner channel, beside the
projections the fused path keeps: x.float() (fp32, kept by deltaB_u's mul), scan + x x D (fp32, kept by the gate's
mul), dt + bias and softplus(dt), silu(gate) and the conv output that silu reads (compute dtype); and B.float().
Its backward indexes discrete_A and deltaB_u one step at a time: each select's gradient is a zero-filled tensor of
the whole [inner, tokens, state] that autograd adds into the gradient it accumulates, so a layer's scan backward
holds two fp32 tensors of that size for each of the two (read off the CPU simulation's live tensors at the peak,
FINDINGS.md F20).
"""

from __future__ import annotations

from ..graph.parts import Block, Part
from .activations import Regime


def scan_dims(p: Part) -> tuple[int, int, int] | None:
    """(inner, state, heads) of a Mamba-1 mixer (graph mamba_part's `scan`), else None."""
    return (p.scan[0], p.scan[1], p.scan[2]) if p.scan else None


def torch_scan_bytes(b: Block, r: Regime) -> int:
    """Per token, what the torch scan of a layer's Mamba-1 mixers keeps beyond the part's priced `act` (module
    docstring): 12 B per inner x state element (discrete_A, discrete_B, the step's state, fp32) plus the state's
    cast to the compute dtype where that is narrower; per inner channel 8 B of fp32 (x.float(), scan + x D) and 6
    compute-dtype tensors (the projection's x and gate halves, the conv output, dt + bias, softplus(dt), silu(gate))
    where `act` priced 7; per state element B.float(). A full fine-tune's D and dt_proj train, so x D and the dt
    matmul keep their inputs too: the silu output x and the low-rank dt, in the compute dtype."""
    c = r.compute_bytes
    out = 0
    for p in b.parts:
        dims = scan_dims(p)
        if dims is None:
            continue
        inner, state, _ = dims
        out += inner * state * (12 + (c if c < 4 else 0)) + inner * (8 - c) + 4 * state
        if r.trained:
            out += c * inner
    return out


def scan_backward_bytes(b: Block) -> int:
    """Per token, what a layer's scan backward holds beside its saved tensors: for discrete_A and deltaB_u each, the
    accumulated fp32 gradient and one step's zero-filled select gradient (module docstring); Zamba's heads run
    their scans one after the other (ZambaMambaMixer's loop over heads), so one head's at a time."""
    return max((16 * dims[0] // dims[2] * dims[1] for p in b.parts if (dims := scan_dims(p)) is not None), default=0)


def scan_backward_terms(b: Block) -> tuple[int, int, int]:
    """(scan_backward_bytes, the parameters whose gradients exist by then, the matmul parameters among them): the
    backward of the mixer's out_proj and of every part after the mixer ran first (a full fine-tune's gradients made,
    their autocast copies freed)."""
    last = max((i for i, p in enumerate(b.parts) if scan_dims(p) is not None), default=-1)
    if last < 0:
        return 0, 0, 0
    after = Block(b.index, b.kind, b.parts[last + 1:], b.stack)
    out_proj = b.parts[last].linears[-1][0] * b.parts[last].linears[-1][1]
    return scan_backward_bytes(b), after.params + out_proj, after.matmul + out_proj
