"""compressed-tensors checkpoints as vLLM 0.19.1 takes them: the compute capability its schemes need, and 2:4 sparsity.

compressed-tensors picks a scheme per layer from the config's groups (model_executor/layers/quantization/
compressed_tensors/compressed_tensors.py _get_scheme_from_parts) and refuses one under its get_min_capability
(_check_scheme_supported, schemes/*.py). Each group's weights and input_activations are read as compressed-tensors'
QuantizationArgs reads them (quantization/quant_args.py, 0.20: num_bits 8, type int, symmetric, not dynamic by
default; a strategy left out is inferred from group_size). What that gives on each GPU:
- MXFP4 weights (4-bit floats in symmetric groups of 32: _is_mxfp4) take CompressedTensorsW4A16Mxfp4: 8.0;
- 4-bit weights in symmetric groups with dynamic 8-bit activations per token (_is_fp8_w4a8) take
  CompressedTensorsW4A8Fp8 on compute capability 9.0 exactly (_is_fp8_w4a8_sm90); elsewhere a format that quantises
  activations (compressed_tensors/utils.py is_activation_quantization_format) gives CompressedTensorsW4A8Int, any
  other (pack-quantized) no scheme ("No compressed-tensors compatible scheme was found");
- the rest need 7.5 at most, the method's 7.0 on the priced GPUs (W8A8-FP8 falls back to W8A16-FP8's Marlin kernel
  under 8.9; NVFP4 is emulated from 7.5; WNA16 7.5).
A 2:4-sparse checkpoint (supports_cutlass_24: sparsity_config's structure "2:4" in a dense or sparse-24-bitmask
format, over its targets less its ignored layers) whose targeted layers carry no quantisation, or 8-bit weights per
tensor or channel beside 8-bit activations per tensor or token, takes CompressedTensors24, whose get_min_capability
raises "Sparse24 models are no longer supported by vLLM": refused on every GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .config.compressed_tensors import Args, ct_groups, text

METHOD_CAPABILITY = 7.0  # CompressedTensorsConfig.get_min_capability
MXFP4_CAPABILITY = 8.0  # CompressedTensorsW4A16Mxfp4.get_min_capability
W4A8_FP8_CAPABILITY = 9.0  # CompressedTensorsW4A8Fp8, on that capability alone
ACTIVATION_FORMATS = frozenset({"naive-quantized", "int-quantized", "float-quantized", "nvfp4-pack-quantized"})
SPARSE24_FORMATS = frozenset({"dense", "sparse-24-bitmask"})


class Capability(NamedTuple):
    """The compute capability a checkpoint's schemes need: the least, or (exact) that one alone."""

    least: float
    exact: bool = False


def capability(q: Mapping[str, Any]) -> Capability:
    """What a compressed-tensors quantization_config's groups need (the module docstring's rules)."""
    fmt = text(q.get("format"))
    needs = Capability(METHOD_CAPABILITY)
    for weights, inputs, own in ct_groups(q):
        if weights is not None and _mxfp4(weights):
            needs = Capability(max(needs.least, MXFP4_CAPABILITY), needs.exact)
        elif weights is not None and inputs is not None and _w4a8(weights, inputs) \
                and (own or fmt) not in ACTIVATION_FORMATS:
            needs = Capability(W4A8_FP8_CAPABILITY, True)
    return needs


def serves(needs: Capability, gpu_capability: float) -> bool:
    """Whether a GPU of `gpu_capability` takes the schemes `needs` says."""
    return gpu_capability == needs.least if needs.exact else gpu_capability >= needs.least


def sparse24(q: Mapping[str, Any]) -> bool:
    """A 2:4-sparse checkpoint vLLM no longer serves on any GPU (the module docstring's rule). A layer the quantisation
    ignores but the sparsity targets is unquantised: a name in the quantisation's ignore list and not the sparsity's
    is read as such a layer."""
    sparsity = q.get("sparsity_config")
    if not isinstance(sparsity, Mapping) or text(sparsity.get("sparsity_structure")) != "2:4" \
            or text(sparsity.get("format")) not in SPARSE24_FORMATS:
        return False
    targets, skipped = _names(sparsity.get("targets")), _names(sparsity.get("ignore"))
    if not targets - skipped:  # no layer is sparse to vLLM (_parse_sparsity_config: targets or [])
        return False
    groups = ct_groups(q)
    unquantised = not groups or bool(_names(q.get("ignore")) - skipped)
    return unquantised or any(
        weights is None and inputs is None or weights is not None and inputs is not None
        and weights.num_bits == inputs.num_bits == 8 and weights.strategy in ("tensor", "channel")
        and inputs.strategy in ("tensor", "token") for weights, inputs, _ in groups)


def _mxfp4(w: Args) -> bool:
    """compressed_tensors.py _is_mxfp4."""
    return (w.num_bits, w.type, w.strategy, w.group_size, w.symmetric) == (4, "float", "group", 32, True)


def _w4a8(w: Args, i: Args) -> bool:
    """compressed_tensors.py _is_fp8_w4a8."""
    return (w.num_bits == 4 and i.num_bits == 8 and w.strategy == "group" and i.strategy == "token"
            and w.symmetric and i.symmetric and not w.dynamic and i.dynamic)


def _names(x: Any) -> set[str]:
    return {v for v in x if isinstance(v, str)} if isinstance(x, list) else set()
