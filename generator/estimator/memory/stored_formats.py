"""What a quantised checkpoint stores: each format's elements and bytes per matrix, the kind of Linear each matrix
is, and the element total the Hub's safetensors count (checkpoint.py compares it; serve_weights.py serves it)."""

from __future__ import annotations

import math
from dataclasses import replace

from ..config.arch import Arch, Quant
from ..config.modelopt import EVERY_LAYER, stored_as
from ..graph.parts import Part
from .activations import MLP_TYPES


def mat_elements(q: Quant, count: int, n_in: int, n_out: int) -> tuple[int, float]:
    """(stored elements, stored bytes) of `count` matrices in x out."""
    w = n_in * n_out
    groups = max(1, n_in // q.group_size) if q.group_size else 1
    nbytes: float  # whole bytes for most formats, a fractional bits x elements / 8 for some
    if q.method in ("gptq", "awq"):
        pack = max(q.packed_per_element, 1)
        elems = w // pack + groups * n_out // pack + groups * n_out + (n_in if q.method == "gptq" else 0)
        nbytes = 4 * (w // pack + groups * n_out // pack) + 2 * groups * n_out + (4 * n_in if q.method == "gptq" else 0)
    elif q.method == "bitsandbytes":
        if q.bits == 4:
            elems = w // 2 + max(1, w // 64)
            nbytes = w // 2 + 4 * max(1, w // 64)
        else:
            elems, nbytes = w + n_out, w + 4 * n_out
    elif q.method == "fp8":
        blocks = -(-w // q.group_size) if q.group_size else n_out
        if q.group_size:  # weight_block_size [b0, b1] on (out, in)
            side = int(q.group_size ** 0.5)
            blocks = -(-n_out // side) * -(-n_in // side)
        elems, nbytes = w + blocks, w + 4 * blocks
    elif q.method == "mxfp4":
        # 2 fp4 per uint8 byte + one uint8 scale per 32 weights; the Hub's safetensors total for gpt-oss
        # counts the blocks as 4-bit values (logical weights) plus the scales: gpt-oss-20b holds
        # 20,914,757,184 + 597,196,800 (= expert weights / 32).
        elems, nbytes = w + w // 32, w // 2 + w // 32
    elif q.method == "compressed-tensors":
        # pack-quantized (vLLM's CompressedTensorsWNA16.create_weights reads the same tensors): int32s of `pack`
        # weights, a 16-bit scale per group, the int64 weight_shape pair, int32 zero points packed as the weights
        # where asymmetric, an int32 group index per input where actorder is "group" (Quant.extras)
        pack = max(q.packed_per_element, 1)
        scales = groups * n_out if q.group_size else n_out
        zeros, index = (scales // pack if "zero_points" in q.extras else 0), (n_in if "group_index" in q.extras else 0)
        elems = w // pack + scales + (2 + zeros + index if pack > 1 else 0)
        nbytes = (4 * (w // pack) + 16 + 4 * (zeros + index) if pack > 1 else w * q.bits / 8) + 2 * scales
    elif q.method.startswith("modelopt"):  # config/modelopt.py MODELOPT
        elems, nbytes = _modelopt_elements(q, n_in, n_out)
    else:
        elems, nbytes = w, 2 * w
    return count * elems, count * nbytes


def _modelopt_elements(q: Quant, n_in: int, n_out: int) -> tuple[int, float]:
    """(stored elements, bytes) of one ModelOpt matrix, by its format's row of config/modelopt.py MODELOPT (a scale of
    scale_bytes per group_size weights): NVFP4 two weights a byte, an e4m3 scale per 16 and two fp32 scalars
    (weight_scale_2, input_scale); MXFP8 a byte a weight and an e8m0 scale per 32; FP8 a byte a weight and an fp32
    scale per 128x128 block, or per output channel, or two fp32 scalars a tensor (weight and input scale)."""
    w = n_in * n_out
    if q.method in ("modelopt_fp4", "modelopt_mxfp8"):
        scales = w // q.group_size
        packed, scalars = (w // 2, 2) if q.method == "modelopt_fp4" else (w, 0)
        return packed + scales + scalars, packed + q.scale_bytes * scales + 4 * scalars
    if q.method == "modelopt_fp8_block":
        side = math.isqrt(q.group_size)
        scales = -(-n_out // side) * -(-n_in // side)
    elif q.method == "modelopt_fp8_channel":
        scales = n_out
    else:  # per tensor: its weight and input scales, scale_bytes together
        return w + 2, w + q.scale_bytes
    return w + scales, w + q.scale_bytes * scales


def fp4_experts(a: Arch, p: Part) -> tuple[tuple[int, int, int], ...]:
    """The expert tensors of an MoE part stored as FP4 (Quant.fp4_experts), else ()."""
    return p.expert_mats if a.quant is not None and a.quant.fp4_experts else ()


def part_stored_delta(a: Arch, p: Part) -> tuple[int, float]:
    """(stored elements, stored bytes) of a part's quantised matrices minus their logical weights (elements)
    and minus their bytes at 2 B each: what quantisation adds to (or removes from) the part. Each matrix in the
    format its kind of Linear is stored in (Quant.roles: "bf16" adds nothing); a self-attention's in the share of
    layers the ignore list does not keep in 16 bits (Quant.attention_16bit)."""
    q = a.quant
    assert q is not None
    fp4 = fp4_experts(a, p)
    roles = dict(q.roles)
    elems, nbytes = 0.0, 0.0
    for j, (count, i, o) in enumerate(quantised_mats(a, p)):
        w = count * i * o
        role = mat_role(p, j)
        stored = roles.get(role, q.method)
        if stored == "bf16":
            continue
        if j < len(fp4):  # packed: the Hub's element total counts the bytes (w / 2) and the scales (w / 32)
            e, b = w // 2 + w // 32, float(w // 2 + w // 32)
        else:
            e, b = mat_elements(q if stored == q.method else stored_as(stored) or replace(q, method=stored),
                                count, i, o)
        quantised = 1.0 - attention_kept(a) if role == "attention" else 1.0
        elems += quantised * (e - w)
        nbytes += quantised * (b - 2 * w)
    return round(elems), nbytes


def mat_role(p: Part, j: int) -> str:
    """The kind of Linear (config/modelopt.py ROLES) a part's j-th quantised matrix is: an MoE's routed experts
    (its first two) or shared experts, a self-attention's projections (not a cross-attention, not a mixer run beside
    a Mamba one), a dense MLP, else "other"."""
    if p.top_k:
        return "experts" if j < 2 else "shared"
    if self_attention(p):
        return "attention"
    return "mlp" if p.type in MLP_TYPES else "other"


def self_attention(p: Part) -> bool:
    """A self-attention's projections: not a cross-attention, not a mixer run beside a Mamba one (falcon_h1's)."""
    return p.attends and "Cross" not in p.type and not p.scan


def attention_kept(a: Arch) -> float:
    """The share of the layers with a self-attention whose attention the ignore list keeps in 16 bits
    (Quant.attention_16bit): of a hybrid's, its attention layers alone."""
    kept = a.quant.attention_16bit if a.quant is not None else ()
    if not kept or EVERY_LAYER in kept:  # every quantised attention part asks: most keep none
        return 1.0 if kept else 0.0
    attending = {i for i, b in enumerate(a.spec.blocks) if any(map(self_attention, b.parts))}
    return len(attending & set(kept)) / max(1, len(attending))


def quantised_mats(a: Arch, p: Part) -> tuple[tuple[int, int, int], ...]:
    """The matrices this format quantises in a part: experts only for MXFP4 (gpt-oss), else every
    Linear inside the layers (embeddings, norms, routers and the LM head stay in 16 bits); part_stored_delta
    prices each in its kind's format."""
    if a.quant is not None and a.quant.method == "mxfp4":
        return p.expert_mats
    return p.weight_mats


def stored_elements(a: Arch) -> int | None:
    """Elements a quantised checkpoint stores (what safetensors totals count); None when unquantised."""
    if a.quant is None or a.quant.bits >= 16:
        return None
    total = a.spec.params
    extra: dict[tuple[object, ...], int] = {}  # per distinct part: the layers of a stack repeat a few parts
    for b, n in a.spec.distinct_layers:  # each distinct layer once, times the layers it stands for
        for p in b.parts:
            key = (p.type, p.mats, p.linears)
            if key not in extra:
                extra[key] = part_stored_delta(a, p)[0]
            total += n * extra[key]
    return total
