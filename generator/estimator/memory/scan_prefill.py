"""What the torch paths of recurrent mixers hold in a forward without gradients: HF generate's prefill of a Mamba,
Mamba-2, Gated DeltaNet or Kimi Delta Attention layer where mamba-ssm or flash-linear-attention is not installed, and
always on the CPU (Job.scan "torch"; job_options.runs_torch_scan), and of RG-LRU, which has no other path.
recurrence.py prices what the same code keeps for a backward.

Each was read off the live tensors at the prefill's peak of CPU-simulated generate runs (FINDINGS.md F79), with the
dimensions varied apart where the code allows so that every tensor's width is named, and counted from the code's locals:
a local stays alive until the function rebinds it or returns, so the widest moment holds every chunked tensor made
so far. Per sequence of `tokens`, padded to whole chunks (P), in bytes; fp32 unless said.

Mamba (modeling_mamba.MambaMixer.slow_forward; falcon_mamba's and jamba's mixers run the same loop): the whole
sequence's discrete A = exp(A dt), discrete B and deltaB_u (3 x tokens x inner x state), x and the D residual's sum
(2 x tokens x inner); in the compute dtype the in_proj output (2 inner), the conv's silu output, the gate, dt after
softplus, and every step's output beside their stack (7 x tokens x inner).

Mamba-2 (modeling_mamba2.mamba2_chunk_scan; the same code in bamba, falcon_h1, granitemoehybrid, nemotron_h and
zamba2): B and C repeated to the heads and padded (2 x P x heads x state), L = exp(segment_sum(A)), G = C B^T and
M = G L (3 x P x heads x chunk), B x decay (P x heads x state), D's residual and the padded x dt (2 x P x inner),
Y_diag (P x inner) and the chunk states with the initial one (heads x (chunks + 1) x head_dim x state). Then the
wider of two moments: the einsum of C with the states, which copies C (P x heads x state) and the states (heads x
chunks x head_dim x state) into its operands beside its output (P x inner); or the output's end, Y_off, its sum
with Y_diag and that sum's contiguous copy (4 x P x inner). dt, A and its cumulative sums: 3 x P x heads. The caller
holds the in_proj output (2 inner + 2 groups x state + heads wide) and the conv's silu output (inner + 2 groups x
state), in the compute dtype.

Gated DeltaNet (modeling_qwen3_5.torch_chunk_gated_delta_rule; the same in qwen3_next and olmo_hybrid): per padded
token and value head, q, k, v, k x beta, v x beta, the solved values and decayed keys, the intra-chunk attention,
the UT system and the pairwise decay (three chunk-wide), and either the decayed q beside the padded one (before k is
decayed: 6 d_k + 4 d_v) or, in the chunk loop, the decayed q and k with the output buffer's copy (5 d_k + 5 d_v);
beta, the decay and its cumulative sum; a chunk's corrected values and their product (2 x heads x chunk x d_v); the
recurrent state it updates is the cache's (kv_bytes_of_block). The caller holds the conv's silu output (2 n_k d_k +
n_v d_v) and z (n_v d_v), in the compute dtype.

Kimi Delta Attention (modeling_kimi_linear.chunk_kimi_delta_attention; the same in bailing_hybrid): its gate has a
value per key channel, so the intra-chunk decay mask is chunk x chunk x d per head, and the widest moment is the
product that builds the UT system from it: the mask, k x beta times k, and that times the mask (3 x P x heads x chunk
x d), beside the padded q, k, v, k x beta, v x beta and the gate's cumulative sum (6 x P x heads x d). The caller
holds the gate (tokens x heads x d, fp32) and the conv's silu output (3 heads x d, compute dtype).

RecurrentGemma's RG-LRU (modeling_recurrent_gemma.RecurrentGemmaRglru and its temporal block) has no other path, on a
GPU too: twelve LRU-wide tensors in the compute dtype (the y branch's GELU, the conv's output, a gate's
block-diagonal baddbmm and sigmoid, two exps, four products, a sum and the zeros the recurrence fills), read at an
LRU as wide as the hidden stream, the only shape transformers' cache runs (a narrower one fails its conv state's
concatenation).
"""

from __future__ import annotations

from ..graph.parts import Block, Part


def _padded(tokens: int, chunk: int) -> tuple[int, int]:
    """(chunks, padded tokens) of a sequence cut into whole chunks."""
    chunks = -(-tokens // chunk)
    return chunks, chunks * chunk


def mamba_prefill_bytes(p: Part, tokens: int, c: int) -> int:
    """A Mamba mixer's sequential scan at its end, in a forward without gradients (the module docstring)."""
    _, inner, state, _ = p.scan
    return tokens * (4 * (3 * inner * state + 2 * inner) + 7 * c * inner)


def mamba2_prefill_bytes(p: Part, tokens: int, c: int) -> int:
    """A Mamba-2 mixer's widest moment in a forward without gradients (the module docstring), per sequence."""
    _, inner, state, heads, groups, chunk, _ = p.scan
    chunks, padded = _padded(tokens, chunk)
    head_dim = inner // heads
    rows = padded * heads
    common = 3 * rows * state + 3 * rows * chunk + 3 * padded * inner + 3 * rows + heads * head_dim * state * (
        chunks + 1)
    einsum = rows * state + padded * inner + heads * head_dim * state * chunks  # C x states: its operands, output
    end = 4 * padded * inner  # Y_off, Y_diag + Y_off, its contiguous copy
    caller = tokens * c * (2 * inner + 2 * groups * state + heads + inner + 2 * groups * state)
    return 4 * (common + max(einsum, end)) + caller


def delta_rule_prefill_bytes(p: Part, tokens: int, c: int) -> int:
    """A Gated DeltaNet mixer's widest moment in a forward without gradients (the module docstring), per sequence."""
    _, nk, nv, dk, dv, chunk, _ = p.scan
    _, padded = _padded(tokens, chunk)
    per_head = 5 * dk + 4 * dv + max(dk, dv) + 3 * chunk + 3
    caller = tokens * c * (2 * nk * dk + 2 * nv * dv)
    return 4 * (padded * nv * per_head + 2 * nv * chunk * dv) + caller


def kda_prefill_bytes(p: Part, tokens: int, c: int) -> int:
    """A Kimi Delta Attention mixer's widest moment in a forward without gradients (the module docstring)."""
    _, heads, head_dim, chunk, _, _ = p.scan
    _, padded = _padded(tokens, chunk)
    return 4 * padded * heads * head_dim * (3 * chunk + 6) + tokens * heads * head_dim * (4 + 3 * c)


def rglru_prefill_bytes(p: Part, tokens: int, c: int) -> int:
    """An RG-LRU temporal block's widest moment in a forward without gradients (the module docstring)."""
    return 12 * tokens * c * p.scan[1]


# The torch paths by Part.scan kind (families: mamba_part 1, mamba2_part 2, gdn_part 3, the KDA mixer 4, gemma's
# _rglru 5), and the kinds that have no fused kernel to run instead
PREFILL_SCANS = {1: mamba_prefill_bytes, 2: mamba2_prefill_bytes, 3: delta_rule_prefill_bytes, 4: kda_prefill_bytes,
                 5: rglru_prefill_bytes}
TORCH_ONLY = frozenset({5})


def prefill_scan_bytes(b: Block, tokens: int, c: int, torch_path: bool = True) -> int:
    """Bytes a layer's recurrent mixer holds at its widest moment of a prefill of one sequence of `tokens` in compute
    dtype `c`, beside the residual stream, where it runs transformers' torch code (`torch_path`, or a kind with no
    other: TORCH_ONLY); 0 for a layer without one."""
    return max((PREFILL_SCANS[p.scan[0]](p, tokens, c) for p in b.parts if p.scan and p.scan[0] in PREFILL_SCANS
                and (torch_path or p.scan[0] in TORCH_ONLY)), default=0)
