"""What transformers' torch paths of recurrent mixers keep. RecurrentGemma's RG-LRU has no other (rglru_bytes,
everywhere). A Mamba mixer's runs where mamba-ssm and causal-conv1d are not installed (Job.scan "torch") and
always on the CPU; so do the delta rules' (delta_rule_bytes, kda_bytes) without flash-linear-attention and RWKV's
(wkv_bytes) without its compiled CUDA kernel. Mamba-1's sequential selective scan
(modeling_mamba.mamba_selective_scan's recurrent loop) and Mamba-2's chunked scan (modeling_mamba2.mamba2_chunk_scan,
chunk_scan_bytes). The fused kernels they fall back from keep what graph's mamba_part and mamba2_part price.

Mamba-1's loop (transformers 5.24 modeling_mamba.py, "Recurrent iteration"), per token and inner x state element:
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

from ..config.arch import Arch
from ..graph.parts import Block, Part
from .activations import Regime
from .experts import cast_matmul


def regime_key(r: Regime) -> tuple[bool, bool, int]:
    """(autocast, trained, compute bytes): the key of the per-regime tables below (autocast computes in bf16)."""
    return r.amp, r.trained, 2 if r.amp else r.compute_bytes


def priced_bytes(p: Part, r: Regime) -> int:
    """Per token, what the part's own `act` and `act32` price already (frozen: `act_frozen`), which the torch
    paths' totals below are counted beyond."""
    return r.compute_bytes * (p.act if r.trained else p.frozen_act) + 4 * p.act32


def scan_dims(p: Part) -> tuple[int, int, int] | None:
    """(inner, state, heads) of a Mamba-1 mixer (graph mamba_part's `scan`), else None."""
    return (p.scan[1], p.scan[2], p.scan[3]) if p.scan and p.scan[0] == 1 else None


def torch_scan_bytes(b: Block, r: Regime, tokens: int) -> int:
    """Per token of a `tokens`-long sequence, what the torch scan of a layer's Mamba mixers keeps beyond the parts'
    priced `act`: a Mamba-2 mixer's chunk_scan_bytes; a Mamba-1 mixer's (module docstring): 12 B per inner x state
    element (discrete_A, discrete_B, the step's state, fp32) plus the state's cast to the compute dtype where that is
    narrower; per inner channel 8 B of fp32 (x.float(), scan + x D) and 6
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
    for p in b.parts:
        if p.scan and p.scan[0] in CHUNKED_SCANS:
            out += CHUNKED_SCANS[p.scan[0]](p, r, tokens)
        elif p.scan and p.scan[0] == 6:
            out += wkv_bytes(p, r)
    return out


def scan_backward_bytes(b: Block) -> int:
    """Per token, what a layer's scan backward holds beside its saved tensors: for discrete_A and deltaB_u each, the
    accumulated fp32 gradient and one step's zero-filled select gradient (module docstring); Zamba's heads run
    their scans one after the other (ZambaMambaMixer's loop over heads), so one head's at a time."""
    return max((16 * dims[0] // dims[2] * dims[1] for p in b.parts if (dims := scan_dims(p)) is not None), default=0)


def chunk_scan_moments(b: Block, r: Regime, tokens: int) -> tuple[int, int]:
    """(forward, backward): bytes a layer's Mamba-2 torch path holds beyond its saved tensors (chunk_scan_bytes) at
    its two moments, read off the live tensors of CPU-simulated steps (FINDINGS.md F21). Forward, once Y_diag +
    Y_off is made (a checkpointed layer's recomputation too): the second padded copy of B or C and B x decay (fp32),
    x dt, the padded x, Y_off, their sum and its contiguous copy, the second Y einsum's output, the conv's silu
    output, the chunk states' recurrence; under autocast also M = G L in fp32, which without autocast is saved
    anyway; the gated norm and the D residual's sum are not made yet. Backward: under autocast the diagonal block's
    fp32 gradients of M (two), of G (upcast) and of B's terms, less what the layer's later backward freed (the
    norm, the casts of M, B, C and x, the padded copy, the chunk states); without autocast the gated norm's
    backward (five fp32 tensors of the inner width, beside every saved one) holds more."""
    fwd = bwd = 0
    for p in b.parts:
        if p.scan and p.scan[0] == 4:  # KDA's chunk loop indexes its decay mask chunk by chunk (kda_bytes)
            bwd += kda_backward_bytes(p, tokens)
        if not p.scan or p.scan[0] != 2:
            continue
        _, inner, state, heads, groups, chunk, _ = p.scan
        chunks = -(-tokens // chunk)
        padded = chunks * chunk
        hpn = inner * state
        silu = 2 * (inner + 2 * groups * state) * tokens if r.compute_bytes == 2 else 0
        norm = 20 * inner * tokens
        if r.amp:
            fwd += (padded * (4 * heads * chunk + 8 * heads * state + 14 * inner) - 8 * inner * tokens + silu
                    + 2 * hpn * (chunks + 2))
            bwd += max(norm, padded * (12 * heads * chunk - 6 * inner - 8 * heads) - 6 * inner * tokens
                       - 2 * hpn * (2 * chunks + 1))
        else:
            fwd += padded * (8 * heads * state + 16 * inner) - 8 * inner * tokens + silu + 4 * hpn * (chunks + 2)
            bwd += norm
    return fwd, bwd


def mixer_tail(b: Block) -> Block:
    """The parts of a layer after its (last) recurrent mixer: their backward runs before the mixer's, which frees
    what they saved and makes their gradients."""
    last = max((i for i, p in enumerate(b.parts) if p.scan), default=len(b.parts) - 1)
    return Block(b.index, b.kind, b.parts[last + 1:], b.stack)


def scan_backward_terms(a: Arch, b: Block) -> tuple[int, int, int]:
    """(scan_backward_bytes, the parameters whose gradients exist by then, the autocast-copied matmul parameters
    among them: no grouped experts', experts.cast_matmul): the backward of the mixer's out_proj and of every part
    after the mixer (mixer_tail) ran first (a full fine-tune's gradients made, their autocast copies freed)."""
    mixer = next((p for p in reversed(b.parts) if p.scan), None)
    if mixer is None:
        return 0, 0, 0
    after = mixer_tail(b)
    out_proj = mixer.linears[-1][0] * mixer.linears[-1][1]
    return scan_backward_bytes(b), after.params + out_proj, cast_matmul(a, after) + out_proj


def chunk_scan_bytes(p: Part, r: Regime, tokens: int) -> int:
    """Per token (rounded up), what a Mamba-2 mixer's torch path keeps beyond the part's priced `act` and `act32`:
    transformers' mamba2_chunk_scan (modeling_mamba2.py, the SSD algorithm of Dao & Gu 2024, arXiv:2405.21060) pads
    the sequence to whole chunks and keeps, per padded token, chunk x heads scores three times (L = exp(segsum),
    fp32; G = C B^T and M = G L, bf16 under autocast, fp32 without: the einsums' operands), heads x state copies of
    B and C (repeated per head from their groups, padded, and cast for each einsum), and head_dim x heads tensors
    (the padded x, the D residual's sum, the einsum casts); per real token the projection (its views feed the conv),
    x.float(), the gated norm's fp32 input, silu and product, dt in fp32 and softplus; per chunk the chunk states
    and their recurrence. Read off the CPU simulation's live tensors per regime (FINDINGS.md F21): bf16 autocast
    with frozen or trained weights, and no autocast in bf16 or fp32."""
    _, inner, state, heads, groups, chunk, kernel = p.scan
    c = r.compute_bytes
    conv = inner + 2 * groups * state
    proj = 2 * inner + conv + heads
    chunks = -(-tokens // chunk)
    padded = chunks * chunk
    hpn = inner * state  # heads x head_dim x state: one chunk's state
    if r.amp:
        per_token = (22 * inner + 12 * heads + 2 * conv) if r.trained else (2 * proj + 16 * inner + 8 * heads)
        per_padded = 8 * heads * chunk + 12 * heads * state + (14 if r.trained else 10) * inner + 8 * heads
        per_chunks = 2 * hpn * (2 * chunks + 1) + 6 * heads * (chunks + 1) ** 2
    else:
        per_token = (4 * proj + 4 * conv + 8 * inner + 12 * heads) if c == 4 else (c * proj + 16 * inner + 8 * heads)
        per_token += (2 * c * inner + 4 * heads) if r.trained else 0
        per_padded = 12 * heads * chunk + 20 * heads * state + (20 if r.trained else 16) * inner + 8 * heads
        per_chunks = 4 * hpn * (2 * chunks + 1) + 4 * heads * (chunks + 1) ** 2
    total = (tokens * per_token + (2 if c == 2 else 4) * conv * (tokens + kernel - 1) + padded * per_padded
             + per_chunks + 2 * chunk * chunk + 2 * (chunks + 1) ** 2 + 4 * heads)
    priced = tokens * priced_bytes(p, r)
    return max(0, -(-(total - priced) // tokens))


# Per regime (autocast, trained, compute bytes): bytes per real token of each of nv x d_k, nv x d_v, nk x d_k and
# nv; of the conv's (kernel - 1) padding columns; and per value head (delta_rule_bytes).
DELTA_RULE_TOKEN = {
    (True, False, 2): (8, 18, 8, 18, 2, 4), (True, True, 2): (8, 24, 8, 22, 2, 8),
    (False, False, 2): (8, 18, 8, 18, 2, 4), (False, True, 2): (8, 22, 8, 22, 2, 8),
    (False, False, 4): (8, 24, 16, 20, 4, 4), (False, True, 4): (8, 32, 16, 24, 4, 8),
}


def delta_rule_bytes(p: Part, r: Regime, tokens: int) -> int:
    """Per token (rounded up), what a Gated DeltaNet mixer's torch path keeps beyond the part's priced `act` and
    `act32`: transformers' torch_chunk_gated_delta_rule (modeling_qwen3_next.py and its copies; the chunked
    algorithm of Yang et al. 2024, arXiv:2412.06464), which runs where flash-linear-attention's chunk kernel is
    not installed and always on the CPU. It casts q, k, v, beta and g to fp32 (q and k repeated to the value
    heads), pads to whole chunks of 64 and keeps, per padded token and value head: chunk-wide fp32 scores (the
    pairwise decay, the UT system, the intra-chunk attention; under autocast their matmul outputs and the
    intra-chunk attention's bf16 casts, without autocast their fp32 matmul operands), the padded q, k, v, k x beta,
    the solved values and decayed keys (fp32), the decayed q and k; per chunk the fp32 recurrent state (heads x d_k
    x d_v) and under autocast its two bf16 casts; per real token the conv's input and output, the fp32 q and k the
    L2 norm reads, the gated norm's fp32 input and silu(z). Read off the saved tensors of the CPU-simulated mixer
    per regime, exactly (FINDINGS.md F23); with one chunk, or unpadded in fp32, some operands are views."""
    _, nk, nv, dk, dv, chunk, kernel = p.scan
    c = r.compute_bytes
    conv = 2 * nk * dk + nv * dv
    chunks = -(-tokens // chunk)
    padded = chunks * chunk
    t_vk, t_vv, t_kk, t_v, conv_pad, heads = DELTA_RULE_TOKEN[regime_key(r)]
    total = tokens * (t_vk * nv * dk + t_vv * nv * dv + t_kk * nk * dk + t_v * nv) + conv_pad * conv * (kernel - 1)
    total += chunk * chunk + heads * nv + 4 * chunks * nv  # the causal mask; A and dt_bias; each chunk's decay
    if r.amp:
        total += (padded * nv * (14 * chunk + 16 + 30 * dk + 12 * dv) + 8 * chunks * nv * dk * dv
                  - 4 * nv * dk * dv - 6 * chunk * nv * dk - 2 * chunk * nv * dv)
    else:
        total += padded * nv * (20 * chunk + 16 + 24 * dk + 12 * dv) + 4 * chunks * nv * dk * dv
        total -= 8 * chunk * nv * dk if chunks == 1 else 0
        total += 16 * tokens * nv * dk if c == 4 and chunks > 1 and padded == tokens else 0
    priced = tokens * priced_bytes(p, r)
    return max(0, -(-(total - priced) // tokens))


# Per (low-rank gates, autocast, trained, compute bytes): bytes per real token of each of heads x head_dim,
# head_dim and heads, and per head (kda_bytes). kimi_linear's gates are low-rank (f_a/f_b, g_a/g_b: their
# head_dim-wide middles are saved when they train); bailing_hybrid's are full-rank. The fp32 rows are the nearest
# fit (some fp32 operands are views of one another, within 0.2% of the mixer's bytes); the others are exact.
KDA_TOKEN = {
    (True, True, False, 2): (41, 0, 14, 0), (True, True, True, 2): (51, 4, 14, 8),
    (True, False, False, 2): (41, 0, 14, 0), (True, False, True, 2): (51, 4, 14, 8),
    (True, False, False, 4): (53, 0, 13, 0), (True, False, True, 4): (65, 8, 13, 8),
    (False, True, False, 2): (36, 0, 14, 0), (False, True, True, 2): (46, 0, 14, 4),
    (False, False, False, 2): (36, 0, 14, 0), (False, False, True, 2): (46, 0, 14, 2),
    (False, False, False, 4): (48, 0, 13, 0), (False, False, True, 4): (60, 0, 13, 4),
}


def kda_bytes(p: Part, r: Regime, tokens: int) -> int:
    """Per token (rounded up), what a Kimi Delta Attention mixer's torch path keeps beyond the part's priced `act`
    and `act32`: transformers' chunk_kimi_delta_attention (modeling_kimi_linear.py, modeling_bailing_hybrid.py),
    which runs where flash-linear-attention's chunk_kda is not installed and always on the CPU. Its decay is per
    key channel, so per padded token and head it keeps chunk x head_dim fp32 tensors (the decay mask, k x beta
    times k and its product with the mask; in the chunk loop each chunk's slice of the mask and q x k), and its
    in-place forward substitution (`attn[..., i, :i] = row + (row x sub).sum(-2)`, i = 1 .. chunk - 1) keeps
    each row's and each leading block's clone: 4 (chunk^2 - 1) / 3 B per padded token and head. Per chunk the
    fp32 state (heads x head_dim^2) and under autocast its two bf16 casts; per real token the conv's input and
    output, the fp32 q, k, v, g and beta, the gates and the gated norm's input. Read off the saved tensors of the
    CPU-simulated mixer per regime and fit on a basis of the dims (FINDINGS.md F24)."""
    _, heads, head_dim, chunk, kernel, low_rank = p.scan
    c = r.compute_bytes
    t_hd, t_d, t_h, per_head = KDA_TOKEN[(bool(low_rank),) + regime_key(r)]
    chunks = -(-tokens // chunk)
    padded = chunks * chunk
    hd = heads * head_dim
    clones = 4 * (chunk * chunk - 1) // 3
    total = tokens * (t_hd * hd + t_d * head_dim + t_h * heads) + per_head * heads + 3 * chunk * chunk
    total += (2 if c == 2 else 4) * 3 * hd * (kernel - 1) + 4 * chunks * hd  # conv padding; each chunk's decay
    if r.amp:
        total += (padded * (hd * (12 * chunk + 40) + heads * (clones + 6 * chunk + 4)) - 4 * chunk * hd
                  + (8 * chunks - 10) * hd * head_dim)
    else:
        total += (padded * (hd * (12 * chunk + 52) + heads * (clones + 8 * chunk + 4)) - 8 * chunk * hd
                  + 4 * chunks * hd * head_dim)
    priced = tokens * priced_bytes(p, r)
    return max(0, -(-(total - priced) // tokens))


def kda_backward_bytes(p: Part, tokens: int) -> int:
    """Bytes a KDA mixer's backward holds beside its saved tensors: the chunk loop reads each chunk's slice of the
    whole decay mask (padded tokens x heads x chunk x head_dim, fp32), so each slice's gradient is a zero-filled
    tensor of the whole mask, added into the one accumulated: three fp32 masks at once (read off the CPU
    simulation's live tensors at the backward's peak, FINDINGS.md F24; the pattern of a Mamba-1 scan's steps)."""
    _, heads, head_dim, chunk, _, _ = p.scan
    return 12 * -(-tokens // chunk) * chunk * heads * chunk * head_dim


# Per (autocast, trained, compute bytes): bytes per token and lru channel an RG-LRU block keeps beyond its part's
# `act` (8 x lru at the compute dtype), and the bytes of its two select-indexed inputs (the recurrent gate, the
# normalised input) per element (rglru_bytes, rglru_backward_bytes).
RGLRU_TOKEN = {
    (True, False, 2): (16, 2, 2), (True, True, 2): (26, 4, 2), (False, False, 2): (16, 2, 2),
    (False, True, 2): (20, 2, 2), (False, False, 4): (24, 4, 4), (False, True, 4): (32, 4, 4),
}


def rglru_bytes(b: Block, r: Regime) -> int:
    """Per token, what a RecurrentGemma recurrent block (modeling_recurrent_gemma.py, Griffin's RG-LRU: De et al.
    2024, arXiv:2402.19427) keeps beyond its part's `act`: RecurrentGemmaRglru._rnn_scan loops over the tokens in
    torch on every device, and each step keeps the fp32 state and the step's gate cast to fp32 for the next
    multiply; beside them the gates' sigmoids and exps, the gated and normalised inputs, the conv's input and output,
    gelu(y) and the two reset masks (bool). Read off the block's saved tensors per regime, exact for two heads or
    more (FINDINGS.md F25)."""
    out = 0
    for p in b.parts:
        if p.scan and p.scan[0] == 5:
            per_lru, _, _ = RGLRU_TOKEN[regime_key(r)]
            out += per_lru * p.scan[1] + 2
    return out


def rglru_kept_bytes(b: Block, r: Regime) -> int:
    """Per token, what a RecurrentGemma recurrent layer's checkpointed recomputation leaves alive until the next
    step's forward reaches that layer. RecurrentGemmaRglru.forward stores its final state on the module
    (`self.recurrent_states`, with use_cache off too), and a recomputation's graph holds the tensors it saved
    (torch/utils/checkpoint.py _recomputation_hook: pack_hook returns the tensor itself), so the stored state keeps
    the x branch's graph and the loop's tensors, the block's whole saved set (the part's `act` and rglru_bytes), and
    a trained linear_x's input: beside every lower layer's backward, the optimizer step, and the next forward's
    lower layers. Read off the live tensors at a lower layer's backward (FINDINGS.md F66)."""
    c = r.compute_bytes
    return rglru_bytes(b, r) + sum(c * p.act + (c * p.linears[1][0] if r.trained else 0)
                                   for p in b.parts if p.scan and p.scan[0] == 5)


def rglru_backward_bytes(b: Block, r: Regime) -> int:
    """Per token, what an RG-LRU block's backward holds beside its saved tensors: the loop indexes the recurrent
    gate and the normalised input step by step, so each select's gradient is a zero-filled tensor of the whole
    sequence added into the one accumulated, two of each (the gate fp32 where its parameter is, FINDINGS.md F25)."""
    out = 0
    for p in b.parts:
        if p.scan and p.scan[0] == 5:
            _, gate, inputs = RGLRU_TOKEN[regime_key(r)]
            out = max(out, 2 * (gate + inputs) * p.scan[1])
    return out


# Per (autocast, trained, compute bytes): bytes per token of an RWKV time-mix's torch loop per attention channel
# and per hidden channel (wkv_bytes).
WKV_TOKEN = {
    (True, False, 2): (54, 0), (True, True, 2): (56, 8), (False, False, 2): (54, 0), (False, True, 2): (56, 8),
    (False, False, 4): (60, 0), (False, True, 4): (64, 16),
}


def wkv_bytes(p: Part, r: Regime) -> int:
    """Per token, what an RWKV time-mix keeps beyond its part's `act` where transformers runs its torch loop
    (modeling_rwkv.rwkv_linear_attention_cpu: on the CPU, and on a GPU where the wkv CUDA kernel was not compiled;
    Peng et al. 2023, arXiv:2305.13048): each step's fp32 maxima, exponentials, numerator and denominator, and the
    fp32 key, twelve fp32 tensors of the attention width, beside the time-shifted mixes, k, v, r and sigmoid(r)
    (and, trained, the Linears' inputs). Read off the block's saved tensors per regime, exact (FINDINGS.md F26)."""
    per_a, per_h = WKV_TOKEN[regime_key(r)]
    hidden = p.linears[0][0]
    return max(0, per_a * p.scan[1] + per_h * hidden - priced_bytes(p, r))


def wkv_backward_bytes(b: Block, r: Regime) -> int:
    """Per token, what an RWKV time-mix's torch loop holds in its backward beside its saved tensors: it indexes the
    key and the value step by step, so each select's gradient is a zero-filled tensor of the whole sequence added
    into the one accumulated, two of each (FINDINGS.md F26; the pattern of F20's Mamba-1 steps)."""
    return max((2 * 2 * r.compute_bytes * p.scan[1] for p in b.parts if p.scan and p.scan[0] == 6), default=0)


# The chunked torch paths by Part.scan kind (families: mamba2_part 2, gdn_part 3, the KDA mixer 4), per token.
CHUNKED_SCANS = {2: chunk_scan_bytes, 3: delta_rule_bytes, 4: kda_bytes}
