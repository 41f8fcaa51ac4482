"""Where vLLM serves a model: the priced GPUs it refuses the model on, those it runs it in float32 on, and the warnings.

vLLM 0.19.1's own rules, each read off its source and cited where it is written: serving_scale tells the plan search
(estimate._setups) and the card table what each GPU serves, the checks below say why in the Report's findings.
"""

from __future__ import annotations

from collections.abc import Mapping

from .checks import Finding
from .config.arch import Arch
from .config.modelopt import (
    PRODUCER_ALGOS,
    modelopt_algo,
    modelopt_fields,
    modelopt_ignore,
    quant_method_of,
)
from .inputs import Gpu
from .quant_schemes import Capability, capability, serves, sparse24

# The reason a Report gives where vLLM refuses the model on every priced GPU (plans_unreachable), not memory
SERVED_NOWHERE = "vLLM serves it on none of the priced GPUs (the warnings say why)"

# vLLM refuses float16 for these model types, "Numerical instability. Please use bfloat16 or float32 instead."
# (vllm/config/model.py, _FLOAT16_NOT_SUPPORTED_MODELS), so a GPU without bf16 serves them in float32
VLLM_NO_FLOAT16 = frozenset({"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"})
# vLLM runs DeepSeek's sparse attention (a config with index_topk: model_executor/models/deepseek_v2.py is_v32) only
# with sparse MLA kernels: FlashMLA's on compute capability 9.x and 10.x, FlashInfer's on 10.x
# (v1/attention/backends/mla/flashmla_sparse.py, flashinfer_mla_sparse.py supports_compute_capability, v0.19.1)
SPARSE_MLA_CAPABILITY = 9.0
# vLLM refuses a quantised checkpoint on a GPU under its method's least compute capability ("The quantization method
# ... is not supported for the current GPU": config/vllm.py _get_quantization_config, v0.19.1), each method's
# get_min_capability (model_executor/layers/quantization/: gptq.py 60, bitsandbytes.py and compressed_tensors.py 70,
# awq.py and fp8.py 75, mxfp4.py, fbgemm_fp8.py and experts_int8.py 80, petit.py 90, mxfp8.py and fp_quant.py 100;
# gguf.py 60; modelopt.py's FP8 class 89), by the config's quant_method (fbgemm_fp8 is read as fp8's storage, not
# as its kernels; compressed-tensors' and ModelOpt's own, by scheme and quant_algo, in quant_capability). vLLM swaps
# awq and gptq for their Marlin kernels where it can (config/model.py _verify_quantization), which need 7.5 and take
# half and bf16: on the priced GPUs the same answer
VLLM_QUANT_CAPABILITY = {"gguf": 6.0, "gptq": 6.0, "bitsandbytes": 7.0, "compressed-tensors": 7.0, "awq": 7.5,
                         "fp8": 7.5, "mxfp4": 8.0, "fbgemm_fp8": 8.0, "experts_int8": 8.0, "petit_nvfp4": 9.0,
                         "mxfp8": 10.0, "fp_quant": 10.0, "modelopt": 8.9}
# ModelOpt's, by its quant_algo (modelopt.py: override_quantization_method picks ModelOptFp8Config for the FP8 ones,
# 89; ModelOptNvFp4Config, 75; ModelOptMxFp8Config, 100; ModelOptMixedPrecisionConfig, 89); an algorithm outside
# its QUANT_ALGOS (W4A16_NVFP4, say) it refuses on every GPU ("ModelOpt currently only supports ...")
MODELOPT_CAPABILITY = {"FP8": 8.9, "FP8_PER_CHANNEL_PER_TOKEN": 8.9, "FP8_PB_WO": 8.9, "NVFP4": 7.5, "MXFP8": 10.0,
                       "MIXED_PRECISION": 8.9}
# ... and where the activations' dtype is not one its method takes (the same function: get_supported_act_dtypes), as
# float32 on a GPU without bf16 for a model vLLM will not run in float16 (VLLM_NO_FLOAT16): only these take float32
VLLM_QUANT_FLOAT32 = frozenset({"bitsandbytes", "compressed-tensors", "torchao", "gguf"})


def quant_method(a: Arch) -> str:
    """The checkpoint's quant_method as vLLM reads it (config/model.py _verify_quantization: quant_cfg["quant_method"],
    set from a modelopt producer's algorithm where there is one), each of ModelOpt's classes "modelopt"
    (modelopt.quant_method_of); "" for a 16-bit checkpoint."""
    q = a.quant_config
    named = quant_method_of(q) if isinstance(q, Mapping) else ""
    return named or (a.quant.method if a.quant is not None else "")


def quant_capability(a: Arch) -> Capability:
    """The compute capability vLLM serves this checkpoint's quantisation on (VLLM_QUANT_CAPABILITY; a
    compressed-tensors checkpoint's by its schemes: quant_schemes.capability); 0 for a 16-bit checkpoint or a method
    not listed."""
    q = a.quant_config
    if quant_method(a) == "compressed-tensors" and isinstance(q, Mapping):
        return capability(q)
    if quant_method(a) == "modelopt" and isinstance(q, Mapping):
        return Capability(MODELOPT_CAPABILITY.get(modelopt_algo(q), VLLM_QUANT_CAPABILITY["modelopt"]))
    return Capability(VLLM_QUANT_CAPABILITY.get(quant_method(a), 0.0))


def refused_everywhere(a: Arch) -> str:
    """What vLLM 0.19.1 refuses this checkpoint for on every GPU ("" where it does not): 2:4 sparsity in
    compressed-tensors (quant_schemes.sparse24), a ModelOpt config its from_config raises on (modelopt_refusal)."""
    q = a.quant_config
    if not isinstance(q, Mapping):
        return ""
    if why := reader_refusal(q):
        return (f"fails to read this quantization_config: {why} (transformers_utils/model_arch_config_convertor.py "
                "_normalize_quantization_config)")
    if quant_method(a) == "compressed-tensors" and sparse24(q):
        return ("no longer serves 2:4-sparse compressed-tensors checkpoints (CompressedTensors24: \"Sparse24 models "
                "are no longer supported by vLLM\", quantization/compressed_tensors/)")
    why = modelopt_refusal(q) if quant_method(a) == "modelopt" else ""
    return f"refuses this ModelOpt checkpoint: {why} (quantization/modelopt.py)" if why else ""


def reader_refusal(q: Mapping) -> str:
    """Why vLLM's config reader fails on a quantization_config before any method sees it ("" where it does not): it
    reads q.get("producer", {}).get("name"), and for a modelopt producer q.get("quantization", {}).get("quant_algo"),
    whose algorithm must be FP8's three or NVFP4 (PRODUCER_ALGOS)."""
    producer = q.get("producer", {})
    if not isinstance(producer, Mapping):
        return "its producer is not a mapping"
    if producer.get("name") != "modelopt":
        return ""
    inner = q.get("quantization", {})
    if not isinstance(inner, Mapping):
        return "its quantization is not a mapping"
    algo = inner.get("quant_algo")
    if algo is not None and str(algo).upper() not in PRODUCER_ALGOS:
        return (f"quant_algo {str(algo)[:40]}, which a modelopt producer's config may not name (\"Unknown ModelOpt "
                "quant algo\")")
    return ""


def modelopt_refusal(q: Mapping) -> str:
    """Why vLLM's ModelOpt config classes raise ValueError on this config at load ("" where they do not):
    ModelOptQuantConfigBase.from_config's checks, each class's _from_config required fields."""
    if "quantization" in q and not isinstance(q["quantization"], Mapping):
        return "its quantization is not a mapping"
    fields, algo = modelopt_fields(q), modelopt_algo(q)
    if algo not in MODELOPT_CAPABILITY:
        return (f"quant_algo {algo or 'unnamed'}, outside the {', '.join(MODELOPT_CAPABILITY)} it takes "
                "(QUANT_ALGOS)")
    kv = fields.get("kv_cache_quant_algo")
    if kv is not None and not isinstance(kv, str):
        return "a kv_cache_quant_algo that is not a string"
    if not isinstance(modelopt_ignore(q), list):
        return "an exclude list that is not a list"
    group = fields.get("group_size")
    if group is not None and not isinstance(group, int) and not (isinstance(group, str) and group.isdigit()):
        return "a group_size that is not an integer"
    required = {"NVFP4": ("group_size", "kv_cache_quant_algo", "exclude_modules"),
                "MXFP8": ("kv_cache_quant_algo", "exclude_modules")}.get(algo, ())
    missing = [k for k in required if k not in fields] if "quantization" in q else []
    if missing:
        return f"its hf_quant_config.json form lacks {', '.join(missing)}, which {algo} requires"
    layers = fields.get("quantized_layers")
    if algo == "MIXED_PRECISION" and not layers:
        return "MIXED_PRECISION names no quantized_layers"
    if algo == "MIXED_PRECISION" and not (isinstance(layers, Mapping) and all(
            isinstance(v, Mapping) and isinstance(v.get("quant_algo", ""), str) for v in layers.values())):
        return "its quantized_layers are not modules, each with its quant_algo"
    return ""


def fp8_kv_cache(a: Arch) -> str:
    """Where this checkpoint's quantization_config has vLLM keep an FP8 KV cache by default (cache_dtype "auto"), the
    key that says so; "" where it does not. A compressed-tensors kv_cache_scheme of any kind (layers/attention/
    attention.py: "llm-compressor mdls need to set cache_dtype to fp8", which vLLM then does); ModelOpt's
    kv_cache_scheme of static 8-bit floats, or kv_cache_quant_algo FP8, its own or under "quantization"
    (utils/torch_utils.py get_kv_cache_quant_algo_string, resolve_kv_cache_dtype_string)."""
    q = a.quant_config
    if not isinstance(q, Mapping):
        return ""
    if quant_method(a) == "compressed-tensors":
        return "kv_cache_scheme" if q.get("kv_cache_scheme") is not None else ""
    if quant_method(a) != "modelopt":
        return ""
    inner = modelopt_fields(q)
    for key in ("kv_cache_scheme", "kv_cache_quant_algo"):
        value = inner.get(key) or q.get(key)
        if isinstance(value, Mapping):
            scheme = (value.get("dynamic"), value.get("num_bits"), value.get("type"))
            return key if scheme == (False, 8, "float") else ""
        if value:
            return key if isinstance(value, str) and value.lower() == "fp8" else ""
    return ""


def check_fp8_kv_cache(a: Arch) -> list[Finding]:
    """A checkpoint whose quantization_config has vLLM keep its KV cache in FP8 (fp8_kv_cache): the serving figures
    price the cache so."""
    key = fp8_kv_cache(a)
    return [Finding("fp8_kv_cache", "info",
                    f"the quantization_config's {key} has vLLM keep the KV cache in FP8 by default (1 B an element, "
                    "half of bf16's: vllm/utils/torch_utils.py, layers/attention/attention.py), as the serving "
                    "figures price it; recurrent state stays in the model's dtype.")] if key else []


def quant_unserved(a: Arch, gpus: Mapping[str, Gpu]) -> tuple[str, ...]:
    """The priced GPUs (by name) vLLM refuses this checkpoint's quantisation on: under quant_capability (not a GPU
    whose capability is not known), or where it would run float32 activations its method does not take."""
    if refused_everywhere(a):
        return tuple(g.name for g in gpus.values())
    below = quant_below(a, gpus)
    return (*below, *(n for n in quant_float32(a, gpus) if n not in below))


def quant_below(a: Arch, gpus: Mapping[str, Gpu]) -> tuple[str, ...]:
    """The priced GPUs whose compute capability quant_capability does not take (not a GPU whose capability is not
    known)."""
    needs = quant_capability(a)
    return tuple(g.name for g in gpus.values() if g.compute_capability is not None
                 and not serves(needs, g.compute_capability))


def quant_float32(a: Arch, gpus: Mapping[str, Gpu]) -> tuple[str, ...]:
    """The priced GPUs where vLLM would run this quantised checkpoint's activations in float32 (no bf16, a model it
    will not run in float16), which its method does not take (VLLM_QUANT_FLOAT32)."""
    method = quant_method(a)  # a method not listed is not judged here
    if method not in VLLM_QUANT_CAPABILITY or method in VLLM_QUANT_FLOAT32 or a.spec.kind == "encoder" \
            or a.model_type not in VLLM_NO_FLOAT16:
        return ()
    return tuple(g.name for g in gpus.values() if g.bf16_tflops is None)


def sparse_unserved(a: Arch, gpus: Mapping[str, Gpu]) -> tuple[str, ...]:
    """The priced GPUs (by name) without vLLM's sparse MLA kernels, for a sparse-attention model (index_topk)."""
    if a.spec.kind == "encoder" or "index_topk" not in a.raw:
        return ()
    return tuple(g.name for g in gpus.values()
                 if g.compute_capability is not None and g.compute_capability < SPARSE_MLA_CAPABILITY)


def serving_scale(a: Arch, gpus: Mapping[str, Gpu]) -> dict[str, int]:
    """Per priced GPU (by name), what each 16-bit serving byte of this model takes there: 1; 2 where vLLM serves it
    in float32 (a GPU without bf16, a model type in VLLM_NO_FLOAT16: the weights, the KV cache and the startup's
    forward double; its sampler's run is priced in float32 and halved before the search doubles it back:
    vllm_server.startup_in_16_bits);
    0 where vLLM has no attention kernel for it (a sparse-attention MLA model below SPARSE_MLA_CAPABILITY) or
    refuses its quantisation (quant_unserved): no serving plan, speed or card batch there."""
    fp32 = a.spec.kind != "encoder" and a.model_type in VLLM_NO_FLOAT16
    refused = {*quant_unserved(a, gpus), *sparse_unserved(a, gpus)}
    return {g.name: 0 if g.name in refused else 2 if fp32 and g.bf16_tflops is None else 1 for g in gpus.values()}


def check_half_precision_serving(a: Arch, fp32: tuple[str, ...]) -> list[Finding]:
    """A model vLLM will not serve in float16, on the priced GPUs without bf16 (`fp32`: vllm_support.serving_scale's 2):
    there vLLM runs float32, twice the weights, KV cache and startup forward of 16 bits (its sampler's logits in
    float32 with no fp32 copy to make: vllm_server.sampler_row_bytes), as those GPUs' serving figures
    are priced; their serving speed is not given, the priced TFLOPS being 16-bit."""
    if not fp32:
        return []
    gpus = ", ".join(fp32)
    return [Finding("half_precision_serving", "warning",
                    f"vLLM refuses float16 for {a.model_type} (numerical instability: vllm/config/model.py), and the "
                    f"{gpus} has no bf16, so vLLM serves it there in float32: the {gpus}'s serving figures are "
                    "priced so (twice the weights, KV cache and startup forward of 16 bits; the sampler's logits "
                    "in float32, with no fp32 copy to make), and no serving speed is "
                    "given for it.")]


def check_sparse_attention_serving(a: Arch, unserved: tuple[str, ...]) -> list[Finding]:
    """A model whose attention vLLM runs only with sparse MLA kernels, on the priced GPUs that have none
    (`unserved`: vllm_support.serving_scale's 0): no serving is priced there."""
    if not unserved or "index_topk" not in a.raw:
        return []
    return [Finding("sparse_attention_serving", "warning",
                    f"vLLM runs {a.model_type}'s sparse attention (the config's index_topk) only with sparse MLA "
                    "kernels, on compute capability 9.0 or more (Hopper, Blackwell: "
                    "v1/attention/backends/mla/flashmla_sparse.py): no serving is priced on the "
                    f"{', '.join(unserved)}.")]


# Quantisation methods vLLM 0.19.1 deprecates: it refuses them unless started with --allow-deprecated-quantization
# (config/model.py; model_executor/layers/quantization/__init__.py DEPRECATED_QUANTIZATION_METHODS)
VLLM_DEPRECATED_QUANT = frozenset({"tpu_int8", "fbgemm_fp8", "fp_quant", "experts_int8", "petit_nvfp4"})


def check_quantised_serving(a: Arch, method: str, needs: Capability, below: tuple[str, ...],
                            float32: tuple[str, ...], served: bool = True) -> list[Finding]:
    """A quantised checkpoint (`method`: its config's quant_method) vLLM refuses on some priced GPUs: those under
    the compute capability it `needs` (`below`: vllm_support.quant_below; an exact one: any other) and those where
    it would run float32 activations the method does not take (`float32`: vllm_support.quant_float32); no serving is
    priced there. And a method vLLM deprecates, which it serves only when told to (where it serves it at all:
    `served`). A checkpoint vLLM serves on no GPU (refused_everywhere: 2:4 sparsity, a ModelOpt config it raises
    on) in the refusal's own words."""
    nowhere = refused_everywhere(a)
    if nowhere:
        return [Finding("quantised_serving", "warning", f"vLLM 0.19.1 {nowhere}: no serving is priced.")]
    where = f"other than compute capability {needs.least:.1f}" if needs.exact else \
        f"below compute capability {needs.least:.1f}"
    why = [f"{where} (the {', '.join(below)})"] if below else []
    also = [g for g in float32 if g not in below]
    if also:
        why.append(f"with float32 activations, which vLLM runs {a.model_type} in on the {', '.join(also)} (no bf16; "
                   "float16 it refuses)")
    out = [Finding("quantised_serving", "warning",
                   f"vLLM refuses {method} checkpoints {' and '.join(why)} (config/vllm.py _get_quantization_config, "
                   "model_executor/layers/quantization/): no serving is priced there.")] if why else []
    if method in VLLM_DEPRECATED_QUANT and served:
        out.append(Finding("deprecated_quantisation", "warning",
                           f"vLLM 0.19.1 deprecates {method} checkpoints: it serves one only when started with "
                           "--allow-deprecated-quantization (config/model.py), as its serving is priced here."))
    return out
