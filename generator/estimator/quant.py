"""Quantised checkpoints (`quantization_config`): stored elements and serving bytes per weight matrix.

What each format writes for one nn.Linear(in, out) (element counts of the safetensors tensors):
- gptq (AutoGPTQ / gptqmodel): qweight int32 [in*bits/32, out], qzeros int32 [groups, out*bits/32],
  scales fp16 [groups, out], g_idx int32 [in]; groups = in / group_size (1 when group_size = -1).
- awq (AutoAWQ GEMM): qweight int32 [in, out*bits/32], qzeros int32 [groups, out*bits/32], scales
  fp16 [groups, out].
- bitsandbytes 4-bit: weight uint8 [in*out/2] + absmax fp32 per 64-block (uint8 + nested absmax under
  double quantisation); 8-bit: int8 weight [out, in] + SCB fp32 [out].
- fp8 (DeepSeek-V3 `weight_block_size`): fp8 weight [out, in] + fp32 weight_scale_inv per block; per
  tensor or per channel otherwise. DeepSeek-V4's `expert_dtype: fp4`: routed experts packed 2 per byte
  with a ue8m0 scale per 32 (the Hub total counts w / 2 + w / 32; DeepSeek-V4-Flash: 158,069,433,298).
- mxfp4 (gpt-oss): experts only, blocks uint8 [.., in/32, 16] (2 fp4 per byte) + scales uint8 per 32;
  the Hub's element total counts the blocks as 4-bit values, so stored = weights + weights / 32.
- compressed-tensors: pack-quantized int4/int8 packed in int32 (weight_packed) + weight_scale per
  group/channel (+ weight_shape); float-quantized fp8 weight + scale per channel/tensor.
Logical parameters are in*out; the stored elements are fewer (packed) or more (scales).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..errors import ConfigError
from .arch import Arch, Quant
from .inputs import Assumptions
from .spec import Part


def _num(q: Mapping[str, Any], key: str, default: float) -> float:
    v = q.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def read_quant(cfg: Mapping[str, Any], model: str) -> Quant | None:
    """The checkpoint's storage format from `quantization_config` (None: plain bf16/fp16/fp32)."""
    q = cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise ConfigError(model, "quantization_config", q, "must be a JSON object")
    method = str(q.get("quant_method", "")).lower()[:40]
    if method in ("gptq", "awq"):
        bits = _num(q, "bits", 4)
        group = int(_num(q, "group_size", 128))
        return Quant(method, bits, int(32 // bits) if bits in (2, 4, 8) else 1, group if group > 0 else 0, 2.0,
                     f"{method.upper()} int{int(bits)} weights packed {int(32 // bits)} per int32, fp16 scales "
                     f"per {group if group > 0 else 'channel'}")
    if method == "bitsandbytes":
        if q.get("load_in_4bit") or q.get("_load_in_4bit"):
            return Quant(method, 4, 2, 64, 4.0, "bitsandbytes 4-bit (NF4/FP4): 2 weights per uint8, fp32 absmax "
                                             "per 64 weights")
        return Quant(method, 8, 1, 0, 4.0, "bitsandbytes LLM.int8(): int8 weights, fp32 scale per row")
    if method in ("fp8", "fbgemm_fp8", "finegrained_fp8"):
        block = q.get("weight_block_size")
        group = block[0] * block[1] if isinstance(block, list) and len(block) == 2 and \
            all(isinstance(b, int) and b > 0 for b in block) else 0
        # DeepSeek-V4 writes expert_dtype "fp4" beside the fp8 quantization_config (configuration_deepseek_v4
        # moves it inside): its routed experts are FP4, two per byte, with a ue8m0 scale per 32 weights.
        fp4 = q.get("expert_dtype", cfg.get("expert_dtype")) == "fp4"
        return Quant("fp8", 8, 1, group, 4.0, "FP8 (e4m3) weights" + (f", fp32 scale per {block[0]}x{block[1]} block"
                                                                     if group else ", fp32 scale per channel")
                     + ("; FP4 experts, 2 per byte, a 1-byte scale per 32" if fp4 else ""), fp4_experts=fp4)
    if method == "mxfp4":
        return Quant(method, 4.25, 2, 32, 1.0, "MXFP4 experts: 2 fp4 weights per uint8 + one uint8 scale per 32")
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        weights: Mapping[str, Any] = {}
        if isinstance(groups, Mapping):
            for g in groups.values():
                if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping):
                    weights = g["weights"]
                    break
        bits = _num(weights, "num_bits", 8)
        kind = str(weights.get("type", "int"))
        group = int(_num(weights, "group_size", 0)) if weights.get("strategy") == "group" else 0
        fmt = str(q.get("format", ""))
        if kind == "float":
            return Quant("compressed-tensors", bits, 1, group, 4.0, f"compressed-tensors fp{int(bits)} weights")
        pack = int(32 // bits) if "pack" in fmt and bits in (2, 4, 8) else 1
        return Quant("compressed-tensors", bits, pack, group, 2.0,
                     f"compressed-tensors int{int(bits)} weights" + (f" packed {pack} per int32" if pack > 1 else ""))
    return Quant(method or "unknown", 16, 1, 0, 0.0, f"quantization method {method!r} not modelled: read as bf16")


def _mat_elements(q: Quant, count: int, n_in: int, n_out: int) -> tuple[int, float]:
    """(stored elements, stored bytes) of `count` matrices in x out."""
    w = n_in * n_out
    groups = max(1, n_in // q.group_size) if q.group_size else 1
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
        pack = max(q.packed_per_element, 1)
        scales = groups * n_out if q.group_size else n_out
        elems = w // pack + scales + (2 if pack > 1 else 0)
        nbytes = (4 * (w // pack) if pack > 1 else w * q.bits / 8) + 2 * scales
    else:
        elems, nbytes = w, 2 * w
    return count * elems, count * nbytes


def _fp4_experts(a: Arch, p: Part) -> tuple[tuple[int, int, int], ...]:
    """The expert tensors of an MoE part stored as FP4 (Quant.fp4_experts), else ()."""
    return p.weight_mats[:2] if a.quant is not None and a.quant.fp4_experts and p.type.startswith("MoE") else ()


def part_stored_delta(a: Arch, p: Part) -> tuple[int, float]:
    """(stored elements, stored bytes) of a part's quantised matrices minus their logical weights (elements)
    and minus their bytes at 2 B each: what quantisation adds to (or removes from) the part."""
    assert a.quant is not None
    fp4 = _fp4_experts(a, p)
    elems, nbytes = 0, 0.0
    for j, (count, i, o) in enumerate(quantised_mats(a, p)):
        w = count * i * o
        if j < len(fp4):  # packed: the Hub's element total counts the bytes (w / 2) and the scales (w / 32)
            e, b = w // 2 + w // 32, float(w // 2 + w // 32)
        else:
            e, b = _mat_elements(a.quant, count, i, o)
        elems += e - w
        nbytes += b - 2 * w
    return elems, nbytes


def quantised_mats(a: Arch, p: Part) -> tuple[tuple[int, int, int], ...]:
    """The matrices this format quantises in a part: experts only for MXFP4 (gpt-oss), else every
    Linear inside the layers (embeddings, norms, routers and the LM head stay in 16 bits)."""
    mats = p.weight_mats
    if a.quant is not None and a.quant.method == "mxfp4":
        return mats[:2] if p.type.startswith("MoE") else ()
    return mats


def stored_elements(a: Arch) -> int | None:
    """Elements a quantised checkpoint stores (what safetensors totals count); None when unquantised."""
    if a.quant is None or a.quant.bits >= 16:
        return None
    total = a.spec.params
    extra: dict[tuple[object, ...], int] = {}  # per distinct part: the layers of a stack repeat a few parts
    for b in a.spec.blocks:
        for p in b.parts:
            key = (p.type, p.mats, p.linears)
            if key not in extra:
                extra[key] = part_stored_delta(a, p)[0]
            total += extra[key]
    return total


def serve_weight_bytes(a: Arch, s: Assumptions) -> Callable[[list[Part] | tuple[Part, ...]], int]:
    """Bytes of a group of parts' weights when served: bf16, or the checkpoint's quantised storage."""
    def weights(parts: list[Part] | tuple[Part, ...]) -> int:
        if a.quant is None or a.quant.bits >= 16:
            return int(s.serve_weight_bytes * sum(p.params for p in parts))
        total = 0.0
        for p in parts:
            key = (p.params, p.type, p.mats, p.linears)
            nbytes = seen.get(key)
            if nbytes is None:
                nbytes = float(s.serve_weight_bytes * p.params)
                if a.quant is not None and a.quant.bits < 16:
                    w = sum(count * i * o for count, i, o in quantised_mats(a, p))
                    nbytes += part_stored_delta(a, p)[1] + (2 - s.serve_weight_bytes) * w
                seen[key] = nbytes
            total += nbytes
        return int(total)

    # Bytes per distinct part (what the loop above reads of it), for this model and job only: the
    # layers of a stack repeat a few parts, and memory.py asks per layer, then estimate.py for all.
    seen: dict[tuple[object, ...], float] = {}
    return weights
