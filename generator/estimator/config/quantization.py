"""A quantised checkpoint's `quantization_config`, read into a Quant (how its weights are stored)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from .arch import Quant


def _num(q: Mapping[str, Any], key: str, default: float) -> float:
    v = q.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


# NVIDIA ModelOpt's formats (quant_algo), as its export stores a Linear (TensorRT-Model-Optimizer's unified HF
# checkpoint; vLLM's model_executor/layers/quantization/modelopt.py loads the same tensors): (Quant.method, bits,
# weights per stored element, group, scale bytes, words). storage.mat_elements prices each.
MODELOPT = {
    "FP8": ("modelopt_fp8", 8, 1, 0, 8.0, "ModelOpt FP8 (e4m3) weights, an fp32 weight and input scale per tensor"),
    "FP8_PER_CHANNEL_PER_TOKEN": ("modelopt_fp8_channel", 8, 1, 0, 4.0,
                                  "ModelOpt FP8 (e4m3) weights, an fp32 scale per output channel"),
    "FP8_PB_WO": ("modelopt_fp8_block", 8, 1, 128 * 128, 4.0, "ModelOpt FP8 (e4m3) weights, an fp32 scale per "
                                                              "128x128 block"),
    "NVFP4": ("modelopt_fp4", 4.5, 2, 16, 1.0, "ModelOpt NVFP4: 2 e2m1 weights per uint8, an e4m3 scale per 16 and "
                                               "two fp32 scales per tensor"),
    "W4A16_NVFP4": ("modelopt_fp4", 4.5, 2, 16, 1.0, "ModelOpt NVFP4 weights (W4A16): 2 e2m1 weights per uint8, an "
                                                     "e4m3 scale per 16 and two fp32 scales per tensor"),
    "MXFP8": ("modelopt_mxfp8", 8.25, 1, 32, 1.0, "ModelOpt MXFP8: e4m3 weights, an e8m0 scale per 32"),
}
_ATTENTION_WORDS = "; attention kept in 16 bits"


def modelopt_algo(q: Mapping[str, Any]) -> str:
    """A ModelOpt config's quant_algo, upper-cased: config.json's own, or hf_quant_config.json's under
    "quantization" (vLLM's ModelOptQuantConfigBase._extract_modelopt_quant_algo); "" where it names none."""
    inner = q.get("quantization")
    algo = inner.get("quant_algo") if isinstance(inner, Mapping) else q.get("quant_algo")
    return algo.upper()[:40] if isinstance(algo, str) else ""


def _mixed_fp8(q: Mapping[str, Any]) -> bool:
    """Whether a MIXED_PRECISION config's quantized_layers hold FP8 anywhere (priced at the wider format)."""
    inner = q.get("quantization")
    layers = (inner if isinstance(inner, Mapping) else q).get("quantized_layers")
    return not isinstance(layers, Mapping) or any(
        isinstance(v, Mapping) and str(v.get("quant_algo", "")).upper().startswith("FP8") for v in layers.values())


def _attention_ignored(ignore: Any) -> bool:
    """Whether an ignore list keeps every attention Linear unquantised: a pattern naming self_attn as a whole
    (ModelOpt's "model.layers.*.self_attn*", llm-compressor's "re:.*self_attn.*"), not one of its projections."""
    return isinstance(ignore, list) and any(
        isinstance(x, str) and x.rstrip("*.$").endswith("self_attn") for x in ignore)


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
        return Quant("fp8", 8, 1, group, 4.0, "FP8 (e4m3) weights" + (f", fp32 scale per {block[0]}x{block[1]} block"  # type: ignore[index]
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
        attention = _attention_ignored(q.get("ignore"))
        if kind == "float":
            return Quant("compressed-tensors", bits, 1, group, 4.0, f"compressed-tensors fp{int(bits)} weights"
                         + _ATTENTION_WORDS * attention, attention_16bit=attention)
        pack = int(32 // bits) if "pack" in fmt and bits in (2, 4, 8) else 1
        return Quant("compressed-tensors", bits, pack, group, 2.0,
                     f"compressed-tensors int{int(bits)} weights" + (f" packed {pack} per int32" if pack > 1 else "")
                     + _ATTENTION_WORDS * attention, attention_16bit=attention)
    if method == "modelopt":
        algo = modelopt_algo(q)
        stored = MODELOPT.get("FP8" if algo == "MIXED_PRECISION" and _mixed_fp8(q) else
                              "NVFP4" if algo == "MIXED_PRECISION" else algo)
        if stored is not None:
            attention = _attention_ignored(q.get("ignore", q.get("exclude_modules")))
            kind, bits, pack, group, scale, words = stored
            mixed = ", at its widest of the layers' formats (MIXED_PRECISION)" if algo == "MIXED_PRECISION" else ""
            return Quant(kind, bits, pack, group, scale, words + mixed + _ATTENTION_WORDS * attention,
                         attention_16bit=attention)
    return Quant(method or "unknown", 16, 1, 0, 0.0, f"quantization method {method!r} not modelled: read as bf16")
