"""NVIDIA ModelOpt's quantization_config (and any config's ignore list) read into how each kind of Linear is stored.

A ModelOpt export writes its settings into config.json as {"quant_method": "modelopt", "quant_algo": ...,
"ignore": [...]}, or as hf_quant_config.json's {"quantization": {"quant_algo": ..., "exclude_modules": [...]}}
(vLLM's model_executor/layers/quantization/modelopt.py from_config reads both, and nothing else of them). Its ignore
list names modules by prefix, one pattern a layer where it leaves a layer's attention out ("model.layers.0.self_attn*":
TensorRT-Model-Optimizer's export, quant_utils._prefix_wildcard_summarize_exclude_modules); llm-compressor's writes
regular expressions ("re:.*self_attn.*"). MIXED_PRECISION gives each module its own algorithm (quantized_layers),
and leaves the modules it does not name unquantised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .arch import Quant

# Each quant_algo as the export stores a Linear (vLLM's create_weights for it reads the same tensors): (Quant.method,
# bits, weights per stored element, group, scale bytes, words). memory/stored_formats.py prices each method.
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
# The kinds of Linear a module name says (memory/stored_formats.py gives each part's matrices one): attention, routed
# experts, shared experts, a dense MLP, anything else (a linear-attention or Mamba mixer's projections)
ROLES = (("self_attn", "attention"), ("shared_expert", "shared"), (".experts.", "experts"), (".mlp.", "mlp"))
EVERY_LAYER = -1  # Quant.attention_16bit: a pattern that leaves every layer's attention out
_LAYER = re.compile(r"layers\.(\d{1,6})\.self_attn")  # one layer's attention, its regex escapes taken off


# hf_quant_config.json names no quant_method: vLLM sets one where its producer is modelopt, from its algorithm
# ("modelopt" for these three, "modelopt_fp4" for NVFP4), and raises "Unknown ModelOpt quant algo" for any other
# (transformers_utils/model_arch_config_convertor.py _normalize_quantization_config)
PRODUCER_ALGOS = frozenset({"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4"})
# vLLM's names of ModelOpt's config classes (layers/quantization/__init__.py), each read here as "modelopt"
MODELOPT_METHODS = frozenset({"modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed"})


def _produced_fields(q: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """hf_quant_config.json's "quantization" where ModelOpt wrote the file ({"producer": {"name": "modelopt"},
    "quantization": {...}}), else None."""
    producer, inner = q.get("producer"), q.get("quantization")
    modelopt = isinstance(producer, Mapping) and producer.get("name") == "modelopt"
    return inner if modelopt and isinstance(inner, Mapping) else None


def produced_by_modelopt(q: Mapping[str, Any]) -> bool:
    """Whether this is hf_quant_config.json's form as ModelOpt writes it, naming its quant_algo: vLLM sets its
    quant_method whatever the file says."""
    inner = _produced_fields(q)
    return inner is not None and inner.get("quant_algo") is not None


def quant_method_of(q: Mapping[str, Any]) -> str:
    """The quant_method vLLM reads a quantization_config as, lower-cased, ModelOpt's classes all "modelopt"."""
    method = "modelopt" if produced_by_modelopt(q) else str(q.get("quant_method", "")).lower()[:40]
    return "modelopt" if method in MODELOPT_METHODS else method


def _mixed_without_layers(q: object) -> bool:
    # vLLM's test: quantization "modelopt_mixed" and no "quantized_layers" key at the config's top
    return isinstance(q, Mapping) and quant_method_of(q) == "modelopt" and modelopt_algo(q) == "MIXED_PRECISION" \
        and "quantized_layers" not in q


def wants_quant_file(cfg: Mapping[str, Any]) -> bool:
    """Whether vLLM 0.19.1 reads a repo's hf_quant_config.json beside this config.json: where config.json has no
    quantization_config (ModelOpt up to 0.29 writes its settings there alone: transformers_utils/config.py
    get_config), or a ModelOpt MIXED_PRECISION one without its quantized_layers (model_loader/weight_utils.py
    get_quant_config: "older ones keep it only in hf_quant_config.json")."""
    q = cfg.get("quantization_config")
    return q is None or _mixed_without_layers(q)


def merge_quant_file(cfg: Mapping[str, Any], quant: Mapping[str, Any]) -> dict[str, Any]:
    """cfg with hf_quant_config.json's object where vLLM takes it (wants_quant_file): as the quantization_config of a
    config.json that has none; for a MIXED_PRECISION one, the file's quantized_layers and excluded modules where the
    file is ModelOpt's with both (weight_utils.get_quant_config reads them from it and raises on any other file),
    beside config.json's own keys, its KV cache's among them (utils/torch_utils.py resolve_kv_cache_dtype_string
    reads config.json's)."""
    q = cfg.get("quantization_config")
    if q is None:
        return {**cfg, "quantization_config": dict(quant)}
    inner = _produced_fields(quant)
    if not _mixed_without_layers(q) or inner is None or not inner.get("quantized_layers"):
        return dict(cfg)  # vLLM fails on it: config.json's MIXED_PRECISION without layers is refused as it is
    return {**cfg, "quantization_config": {**q, "quantized_layers": inner["quantized_layers"],
                                           "ignore": inner.get("exclude_modules", [])}}


def modelopt_algo(q: Mapping[str, Any]) -> str:
    """A ModelOpt config's quant_algo, upper-cased: config.json's own, or hf_quant_config.json's under
    "quantization" (vLLM's ModelOptQuantConfigBase._extract_modelopt_quant_algo); "" where it names none."""
    algo = modelopt_fields(q).get("quant_algo")
    return algo.upper()[:40] if isinstance(algo, str) else ""


def modelopt_fields(q: Mapping[str, Any]) -> Mapping[str, Any]:
    """Where a ModelOpt config keeps its fields: under "quantization" (hf_quant_config.json's form) or at the top."""
    inner = q.get("quantization")
    return inner if isinstance(inner, Mapping) else q


def modelopt_ignore(q: Mapping[str, Any]) -> Any:
    """The modules a ModelOpt config leaves unquantised, as vLLM reads them: exclude_modules under "quantization",
    else ignore (modelopt.py from_config)."""
    fields = modelopt_fields(q)
    return fields.get("exclude_modules", []) if fields is not q else q.get("ignore", [])


def read_modelopt(q: Mapping[str, Any]) -> Quant | None:
    """A ModelOpt config as a Quant; None for an algorithm MODELOPT does not hold (read as bf16 by the caller)."""
    algo = modelopt_algo(q)
    roles: dict[str, str] = {}
    mixed = ""
    if algo == "MIXED_PRECISION":
        per_role = mixed_roles(modelopt_fields(q).get("quantized_layers"))
        if not per_role:
            return None
        # named by the format of the kind that holds most of an MoE's or a dense model's weights
        algo = per_role.get("experts") or per_role.get("mlp") or _most(list(per_role.values()))
        roles = {role: MODELOPT[a][0] for role, a in per_role.items()}
        roles.update({role: "bf16" for _, role in (*ROLES, ("", "other")) if role not in per_role})
        mixed = "ModelOpt MIXED_PRECISION by kind of Linear (" + ", ".join(
            f"{role} {a}" for role, a in sorted(per_role.items())) + "; the rest unquantised)"
    stored = MODELOPT.get(algo)
    if stored is None:
        return None
    attention, kept = ignored(modelopt_ignore(q))
    roles.update(kept)
    method, bits, pack, group, scale, words = stored
    return Quant(method, bits, pack, group, scale, (mixed or words) + ignored_words(attention, kept),
                 attention_16bit=attention, roles=tuple(sorted(roles.items())))


def stored_as(method: str) -> Quant | None:
    """The Quant of MODELOPT's format named `method` (a MIXED_PRECISION kind's own); None for another name."""
    row = next((r for r in MODELOPT.values() if r[0] == method), None)
    return None if row is None else Quant(*row)


def mixed_roles(layers: Any) -> dict[str, str]:
    """Per kind of Linear (ROLES, "other"), the algorithm most of MIXED_PRECISION's quantized_layers of that kind take
    (one MODELOPT holds); {} where it lists none."""
    seen: dict[str, list[str]] = {}
    for name, layer in (layers.items() if isinstance(layers, Mapping) else ()):
        algo = layer.get("quant_algo") if isinstance(layer, Mapping) else None
        if isinstance(name, str) and isinstance(algo, str) and algo.upper() in MODELOPT:
            seen.setdefault(next((r for key, r in ROLES if key in name), "other"), []).append(algo.upper())
    return {role: _most(algos) for role, algos in seen.items()}


def _most(values: list[str]) -> str:
    """The value `values` hold most often (the first of those tied)."""
    return max(dict.fromkeys(values), key=values.count)


def ignored(ignore: Any) -> tuple[tuple[int, ...], dict[str, str]]:
    """What an ignore list keeps in 16 bits: the layers whose whole self-attention it names (EVERY_LAYER for a
    pattern over all of them: "*self_attn*", "model.layers.*.self_attn*", "re:.*self_attn.*"), and {"shared": "bf16"}
    where it names every layer's shared experts. A pattern naming one projection, a tower's or an MTP layer's
    attention is left out: the kinds of Linear are priced per model, not per module."""
    layers: set[int] = set()
    kept: dict[str, str] = {}
    for x in ignore if isinstance(ignore, list) else ():
        if not isinstance(x, str) or re.search(r"mtp|visual|vision", x):
            continue
        whole = x.rstrip("*.$)")
        if whole.endswith("self_attn"):  # one layer's, or (a wildcard, a range: read as all) every layer's
            found = _LAYER.search(x.replace("\\", ""))
            layers.add(int(found.group(1)) if found else EVERY_LAYER)
        elif whole.rstrip("s").endswith("shared_expert") and not re.search(r"layers\.\d", x):
            kept["shared"] = "bf16"
    return tuple(sorted(layers)), kept


def ignored_words(attention: tuple[int, ...], roles: Mapping[str, str]) -> str:
    """The words Quant.describes adds for what the ignore list keeps in 16 bits."""
    words = ("; attention kept in 16 bits" if EVERY_LAYER in attention else
             f"; {len(attention)} layers' attention kept in 16 bits" if attention else "")
    return words + ("; shared experts kept in 16 bits" if roles.get("shared") == "bf16" else "")
