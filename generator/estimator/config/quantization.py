"""A quantised checkpoint's `quantization_config`, read into a Quant (how its weights are stored)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from .arch import Quant
from .compressed_tensors import DEFAULT_ARGS, ct_groups
from .modelopt import ignored, ignored_words, quant_method_of, read_modelopt


def _num(q: Mapping[str, Any], key: str, default: float) -> float:
    v = q.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def quant_config(cfg: Mapping[str, Any], model: str) -> Mapping[str, Any] | None:
    """The quantization_config vLLM reads: the top-level config's, else a multimodal config's text_config's
    (transformers_utils/model_arch_config_convertor.py get_quantization_config); None where neither has one."""
    q = cfg.get("quantization_config")
    text = cfg.get("text_config")
    if q is None and isinstance(text, Mapping):
        q = text.get("quantization_config")
    if q is not None and not isinstance(q, Mapping):
        raise ConfigError(model, "quantization_config", q, "must be a JSON object")
    return q


def read_quant(cfg: Mapping[str, Any], model: str) -> Quant | None:
    """The checkpoint's storage format from `quantization_config` (None: plain bf16/fp16/fp32)."""
    q = quant_config(cfg, model)
    if q is None:
        return None
    method = quant_method_of(q)
    if method in ("gptq", "awq"):
        bits = _num(q, "bits", 4)
        if bits <= 0 or bits > 32:
            raise ConfigError(model, "quantization_config.bits", q.get("bits"), "must be a number of bits, 1 to 32")
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
        return Quant("fp8", 8, 1, group, 4.0, "FP8 (e4m3) weights" + (f", fp32 scale per {block[0]}x{block[1]} block"  # type: ignore[index]
                                                                     if group else ", fp32 scale per channel")
                     + ("; FP4 experts, 2 per byte, a 1-byte scale per 32" if fp4 else ""), fp4_experts=fp4)
    if method == "mxfp4":
        return Quant(method, 4.25, 2, 32, 1.0, "MXFP4 experts: 2 fp4 weights per uint8 + one uint8 scale per 32")
    if method == "compressed-tensors":  # the first group's weights (compressed_tensors.ct_groups)
        weights = next((w for w, _, _ in ct_groups(q) if w is not None), DEFAULT_ARGS)
        bits, kind = weights.num_bits, weights.type
        group = (weights.group_size or 0) if weights.strategy == "group" else 0
        attention, kept = ignored(q.get("ignore"))  # llm-compressor's regular expressions
        pack = int(32 // bits) if "pack" in str(q.get("format", "")) and bits in (2, 4, 8) and kind != "float" else 1
        words = f"compressed-tensors fp{int(bits)} weights" if kind == "float" else \
            f"compressed-tensors int{int(bits)} weights" + (f" packed {pack} per int32" if pack > 1 else "")
        return Quant("compressed-tensors", bits, pack, group, 4.0 if kind == "float" else 2.0,
                     words + ignored_words(attention, kept), attention_16bit=attention,
                     roles=tuple(sorted(kept.items())),
                     extras=(*(("zero_points",) if not weights.symmetric else ()),
                             *(("group_index",) if weights.actorder == "group" else ())))
    if method == "modelopt":
        found = read_modelopt(q)
        if found is not None:
            return found
    return Quant(method or "unknown", 16, 1, 0, 0.0, f"quantization method {method!r} not modelled: read as bf16")
