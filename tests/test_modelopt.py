"""NVIDIA ModelOpt checkpoints whose config.json carries their quantization_config (quant_method "modelopt"): stored
as ModelOpt exports them, served where vLLM 0.19.1 takes their quant_algo (model_executor/layers/quantization/
modelopt.py). Before, the estimator read them as bf16, "quantization method 'modelopt' not modelled".

Reference values: Llama-3.1-8B's config.json (hidden 4,096, MLP 14,336, 32 layers, 32 query and 8 KV heads of 128,
vocabulary 128,256, untied head) with each Linear stored as the export writes it: NVFP4 two e2m1 weights a byte, an
e4m3 scale per 16 weights, weight_scale_2 and input_scale in fp32; FP8 a byte a weight and two fp32 scalars.
"""

from __future__ import annotations

import json

import pytest

from generator.estimator import estimate
from generator.format import serve_weights
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings
from generator.site.assumptions_context import assumptions_context

SETTINGS = load_settings()
S = SETTINGS.assumptions
LLAMA8 = "meta-llama/Llama-3.1-8B"
H, I, LAYERS, KV, VOCAB = 4096, 14336, 32, 8 * 128, 128_256
# each layer's Linears, (in, out): q, k, v, o, gate, up, down
MATS = ((H, H), (H, KV), (H, KV), (H, H), (H, I), (H, I), (I, H))
ALL_GPUS = {"T4", "L4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H200 SXM"}


def _report(quantization: object):
    cfg = {**json.loads(load_record(DEFAULT_SNAPSHOT_DIR, LLAMA8).config_json), "quantization_config": quantization}
    return estimate(cfg, model_id=LLAMA8, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)


def _served(r) -> set[str]:
    return {p.gpu_model for p in r.plans if p.method == "serve"}


def _unquantised_bytes() -> int:
    """The 16-bit rest: embedding and head, two RMSNorms a layer and the final one."""
    return 2 * (2 * VOCAB * H + (2 * LAYERS + 1) * H)


def test_nvfp4_weights_are_stored_as_the_export_writes_them() -> None:
    per_layer = sum(i * o // 2 + i * o // 16 + 8 for i, o in MATS)
    r = _report({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ["lm_head"]})
    assert r.memory.serve_weight_bytes == LAYERS * per_layer + _unquantised_bytes()  # 6.03 GB, against 16.06 in bf16
    assert dict(r.params.quantization or ())["describes"].startswith("ModelOpt NVFP4: 2 e2m1 weights per uint8")
    assert _served(r) == ALL_GPUS  # ModelOptNvFp4Config.get_min_capability: 75


def test_fp8_is_a_byte_a_weight_and_needs_compute_capability_8_9() -> None:
    per_layer = sum(i * o + 8 for i, o in MATS)
    r = _report({"quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"]})
    assert r.memory.serve_weight_bytes == LAYERS * per_layer + _unquantised_bytes()
    assert _served(r) == {"L4", "H100 SXM", "H200 SXM"}  # ModelOptFp8Config.get_min_capability: 89
    (warning,) = [x for x in r.findings if x.check == "quantised_serving"]
    assert "below compute capability 8.9 (the T4, A100 40GB SXM, A100 80GB SXM)" in warning.message


def test_an_ignored_attention_stays_in_16_bits_layer_by_layer() -> None:
    """ModelOpt's export writes one prefix a layer for what it leaves out ("model.layers.0.self_attn*",
    quant_utils._prefix_wildcard_summarize_exclude_modules): every layer's makes every attention bf16, layer 0's alone
    1 of the 32 (review: one layer's pattern had kept all 32 in 16 bits); one projection's, an MTP layer's or a
    tower's, nothing. hf_quant_config.json's exclude_modules is read as config.json's ignore."""
    attention = sum(i * o for i, o in MATS[:4])
    packed_attention = sum(i * o // 2 + i * o // 16 + 8 for i, o in MATS[:4])
    mlp = sum(i * o // 2 + i * o // 16 + 8 for i, o in MATS[4:])
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    every = _report({**nvfp4, "ignore": ["lm_head", *(f"model.layers.{n}.self_attn*" for n in range(LAYERS))]})
    assert every.memory.serve_weight_bytes == LAYERS * (2 * attention + mlp) + _unquantised_bytes()
    wildcard = _report({**nvfp4, "ignore": ["lm_head", "model.layers.*.self_attn*"]})
    assert wildcard.memory.serve_weight_bytes == every.memory.serve_weight_bytes
    first = _report({**nvfp4, "ignore": ["lm_head", "model.layers.0.self_attn*"]})
    assert first.memory.serve_weight_bytes == 2 * attention + (LAYERS - 1) * packed_attention + LAYERS * mlp \
        + _unquantised_bytes()
    none = _report({**nvfp4, "ignore": ["lm_head"]}).memory.serve_weight_bytes
    for ignore in (["model.layers.*.self_attn.o_proj"], ["mtp.layers.0.self_attn*"], ["model.visual.blocks.*"]):
        assert _report({**nvfp4, "ignore": ignore}).memory.serve_weight_bytes == none, ignore
    nested = _report({"quant_method": "modelopt", "quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None, "exclude_modules": ["*self_attn*"]}})
    assert nested.memory.serve_weight_bytes == every.memory.serve_weight_bytes


def _moe(mid: str, quantization: dict):
    cfg = {**json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), "quantization_config": quantization}
    return estimate(cfg, model_id=mid, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)


def test_mixed_precision_stores_each_kind_of_linear_in_its_own_format() -> None:
    """MIXED_PRECISION names each module's algorithm (quantized_layers) and leaves the others unquantised: Qwen3-30B-A3B
    with FP8 attention and NVFP4 experts, as NVIDIA's mixed releases store them, against its config's dimensions
    (hidden 2,048; 32 query and 4 KV heads of 128; 128 experts of 768; 48 layers; vocabulary 151,936, untied).
    Priced at its widest format before (review): 31.2 GB for 18.5."""
    h, e, inter, layers, vocab = 2048, 128, 768, 48, 151_936
    attention = ((h, 4096), (h, 512), (h, 512), (4096, h))
    per_layer = sum(i * o + 8 for i, o in attention) + e * (2 * (h * inter // 2 + h * inter // 16 + 8)
                                                             + inter * h // 2 + inter * h // 16 + 8)
    rest = 2 * (2 * vocab * h + layers * (2 * h + 2 * 128 + h * e) + h)  # embedding, head, norms, q/k norms, router
    layers_named = {f"model.layers.{n}.self_attn.{x}_proj": {"quant_algo": "FP8"} for n in range(layers)
                    for x in "qkvo"}
    layers_named.update({f"model.layers.{n}.mlp.experts.{k}.{x}_proj": {"quant_algo": "NVFP4"}
                         for n in range(layers) for k in range(e) for x in ("gate", "up", "down")})
    r = _moe("Qwen/Qwen3-30B-A3B", {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                                    "quantized_layers": layers_named})
    assert r.memory.serve_weight_bytes == layers * per_layer + rest
    quantization = dict(r.params.quantization or ())
    assert "MIXED_PRECISION by kind of Linear (attention FP8, experts NVFP4" in quantization["describes"]
    assert quantization["method"] == "modelopt_fp4"  # named by the experts' format, most of the weights


def test_shared_experts_an_ignore_list_names_stay_in_16_bits() -> None:
    """"*.mlp.shared_expert.*" (as in a real GLM-4.5 export's list) keeps every layer's shared expert unquantised:
    Qwen1.5-MoE's 5,632-wide shared expert (gate, up, down) in bf16 on each of its 24 layers."""
    q = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    plain = _moe("Qwen/Qwen1.5-MoE-A2.7B-Chat", {**q, "ignore": ["lm_head"]})
    kept = _moe("Qwen/Qwen1.5-MoE-A2.7B-Chat", {**q, "ignore": ["lm_head", "*.mlp.shared_expert.*"]})
    shared = ((2048, 5632), (2048, 5632), (5632, 2048))
    packed = sum(i * o // 2 + i * o // 16 + 8 for i, o in shared)
    assert kept.memory.serve_weight_bytes - plain.memory.serve_weight_bytes == \
        24 * (2 * sum(i * o for i, o in shared) - packed)


COMPLETE = {"group_size": 16, "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}


@pytest.mark.parametrize(("algo", "served", "why"), [
    ("NVFP4", ALL_GPUS, ""), ("FP8", {"L4", "H100 SXM", "H200 SXM"}, ""),
    ("FP8_PER_CHANNEL_PER_TOKEN", {"L4", "H100 SXM", "H200 SXM"}, ""),
    ("FP8_PB_WO", {"L4", "H100 SXM", "H200 SXM"}, ""), ("MXFP8", set(), "below compute capability 10.0"),
    ("W4A16_NVFP4", set(), "quant_algo W4A16_NVFP4, outside the")])
def test_vllm_takes_each_quant_algo_where_its_config_class_does(algo: str, served: set[str], why: str) -> None:
    """override_quantization_method picks the config class by quant_algo, hf_quant_config.json's nesting read too:
    FP8's three forms need 8.9 (ModelOptFp8Config), NVFP4 7.5, MXFP8 10.0 (no priced GPU); an algorithm outside
    QUANT_ALGOS is refused on every GPU, in its own words."""
    r = _report({"quant_method": "modelopt", "quantization": {"quant_algo": algo, **COMPLETE}})
    assert _served(r) == served, algo
    if why:
        (warning,) = [x for x in r.findings if x.check == "quantised_serving"]
        assert why in warning.message, warning.message


@pytest.mark.parametrize(("quantization", "why"), [
    ({"quant_algo": "MIXED_PRECISION"}, "names no quantized_layers"),
    ({"quant_algo": "NVFP4", "ignore": "lm_head"}, "an exclude list that is not a list"),
    ({"quantization": {"quant_algo": "NVFP4"}}, "lacks group_size, kv_cache_quant_algo, exclude_modules"),
    ({"quantization": {"quant_algo": "MXFP8", "group_size": 32}}, "lacks kv_cache_quant_algo, exclude_modules"),
    ({"quant_algo": "FP8", "kv_cache_quant_algo": 8}, "a kv_cache_quant_algo that is not a string"),
    ({"quant_algo": "NVFP4", "group_size": "sixteen"}, "a group_size that is not an integer"),
    ({"quantization": "NVFP4"}, "its quantization is not a mapping"),
])
def test_a_config_vllm_raises_on_is_served_nowhere(quantization: dict, why: str) -> None:
    """ModelOptQuantConfigBase.from_config and each class's _from_config raise ValueError at load (review of the
    first rules, which served these): the estimate prices no serving, and says why."""
    r = _report({"quant_method": "modelopt", **quantization})
    assert not _served(r) and r.plans
    (warning,) = [x for x in r.findings if x.check == "quantised_serving"]
    assert why in warning.message, warning.message


def test_llm_compressor_s_ignored_attention_stays_in_16_bits_too() -> None:
    """The same ignore list in a compressed-tensors config ("re:.*self_attn.*", llm-compressor's regex form): the
    attention's Linears leave the int4 packing, 2 B a weight instead of the packed int32s and fp16 scales."""
    group = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                                "symmetric": True}}
    q = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": group}}
    plain = _report({**q, "ignore": ["lm_head"]})
    kept = _report({**q, "ignore": ["lm_head", "re:.*self_attn.*"]})
    attention = sum(i * o for i, o in MATS[:4])
    # int32s of 8, a scale per 128, the weight_shape pair (two int64s)
    packed = sum(4 * (i * o // 8) + 2 * (i // 128) * o + 16 for i, o in MATS[:4])
    assert kept.memory.serve_weight_bytes - plain.memory.serve_weight_bytes == LAYERS * (2 * attention - packed)
    assert "attention kept in 16 bits" in dict(kept.params.quantization or ())["describes"]


FP8_GROUP = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
             "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}
KV_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


@pytest.mark.parametrize("kv", [{"kv_cache_quant_algo": "FP8"}, {"quantization": {"quant_algo": "FP8",
                                                                                  "kv_cache_quant_algo": "fp8"}},
                                {"kv_cache_scheme": KV_SCHEME}])
def test_a_modelopt_fp8_kv_cache_is_what_vllm_serves_with(kv: dict) -> None:
    """vLLM's cache_dtype "auto" takes the checkpoint's kv_cache_quant_algo FP8 or its static 8-bit float
    kv_cache_scheme (utils/torch_utils.py resolve_kv_cache_dtype_string): 1 B an element, Llama-3.1-8B's 64 KiB a
    token (32 layers x 2 x 8 heads x 128), half of bf16's, so the H100 holds about twice the sequences."""
    bf16_kv = _report({"quant_method": "modelopt", "quant_algo": "FP8"})
    fp8_kv = _report({"quant_method": "modelopt", "quant_algo": "FP8", **kv})
    assert fp8_kv.memory.kv_bytes_per_token == 32 * 2 * KV == bf16_kv.memory.kv_bytes_per_token // 2
    h100 = [next(c.serve_max_batch for c in r.memory.cards if c.name.startswith("A100 / H100")) for r in
            (bf16_kv, fp8_kv)]
    assert 1.9 * h100[0] <= h100[1] <= 2.1 * h100[0] + 1
    assert [x.check for x in fp8_kv.findings if x.check == "fp8_kv_cache"] == ["fp8_kv_cache"]
    assert not any(x.check == "fp8_kv_cache" for x in bf16_kv.findings)


def test_llm_compressor_s_kv_cache_scheme_is_fp8_to_vllm_and_a_recurrent_state_stays_in_bf16() -> None:
    """A compressed-tensors kv_cache_scheme of any kind has vLLM set cache_dtype fp8 (layers/attention/attention.py);
    a hybrid's recurrent state keeps the model's dtype (mamba_cache_dtype "auto"): on Nemotron-3-Nano the cache of
    its 6 attention layers halves, its 23 Mamba layers' state does not, and the page says the cache is FP8."""
    mid = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json)
    q = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": FP8_GROUP}}
    plain, fp8 = (estimate({**cfg, "quantization_config": x}, model_id=mid, assumptions=S, cards=SETTINGS.cards,
                           gpus=SETTINGS.gpus).memory for x in (q, {**q, "kv_cache_scheme": KV_SCHEME}))
    assert fp8.state_bytes_per_sequence == plain.state_bytes_per_sequence > 0
    assert fp8.kv_bytes_per_sequence - fp8.state_bytes_per_sequence == \
        (plain.kv_bytes_per_sequence - plain.state_bytes_per_sequence) // 2
    report = estimate({**cfg, "quantization_config": {**q, "kv_cache_scheme": KV_SCHEME}}, model_id=mid,
                      assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    words = assumptions_context(report, dict(report.memory.assumptions))["kv_note"]
    assert words == "in FP8, as the checkpoint's quantization_config has vLLM keep it; the recurrent layers' fixed " \
                    "state included"


@pytest.mark.parametrize("kv", [{"kv_cache_quant_algo": 5}, {"kv_cache_quant_algo": "NVFP4"},
                                {"kv_cache_scheme": {"num_bits": 4, "type": "float"}}, {"kv_cache_scheme": "x"}])
def test_a_kv_cache_format_vllm_does_not_take_leaves_the_cache_in_bf16(kv: dict) -> None:
    """vLLM falls back to "auto" (the model's dtype) for a ModelOpt KV format it does not map, or a scheme that is
    not static 8-bit floats; a number where a string belongs is read as none."""
    r = _report({"quant_method": "modelopt", "quant_algo": "FP8", **kv})
    assert r.memory.kv_bytes_per_token == 32 * 2 * KV * 2 and not any(x.check == "fp8_kv_cache" for x in r.findings)


@pytest.mark.parametrize("quantization", [
    {"quant_method": "modelopt"}, {"quant_method": "modelopt", "quant_algo": ["FP8"]},
    {"quant_method": "modelopt", "quant_algo": 8}, {"quant_method": "modelopt", "quantization": "FP8"},
    {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": ["x"]},
    {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": {"a": 1, "b": {"quant_algo": 4}}},
    {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": [3, None, {"x": 1}, "model.layers.x.self_attn*"]},
])
def test_a_malformed_modelopt_config_is_estimated_without_an_exception(quantization: dict) -> None:
    """Hostile ModelOpt configs: a missing or non-string quant_algo, or quantized_layers that name no format, are read
    as no format (bf16) and vLLM's refusal; entries of the wrong type in an ignore list are passed over."""
    r = _report(quantization)
    assert r.plans and r.memory.serve_weight_bytes > 0
    if quantization.get("quant_algo") != "NVFP4":
        assert not _served(r)


def test_a_hybrid_s_attention_layers_named_one_by_one_are_all_its_attention() -> None:
    """Qwen3-Next-80B has full attention on every 4th of its 48 layers (full_attention_interval 4: layers 3, 7, ...,
    47), Gated DeltaNet on the rest: its 12 attention layers named one prefix each, as ModelOpt writes them, keep
    every attention in 16 bits, as the wildcard does (review: the share was taken of all 48 layers, 25%)."""
    q = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    mid = "Qwen/Qwen3-Next-80B-A3B-Instruct"
    one_by_one = _moe(mid, {**q, "ignore": ["lm_head", *(f"model.layers.{n}.self_attn*" for n in range(3, 48, 4))]})
    wildcard = _moe(mid, {**q, "ignore": ["lm_head", "*self_attn*"]})
    plain = _moe(mid, {**q, "ignore": ["lm_head"]})
    assert one_by_one.memory.serve_weight_bytes == wildcard.memory.serve_weight_bytes > plain.memory.serve_weight_bytes


def test_regular_expressions_and_huge_numbers_in_an_ignore_list() -> None:
    """An escaped regular expression names its layer as a prefix does ("re:model\\.layers\\.0\\.self_attn.*"); a
    range or a digit wildcard is read as every layer (more memory, not less); a layer index or a number thousands of
    digits long is read as none, not raised on (review: Python refuses to read over 4,300 digits as an int)."""
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    prefix = _report({**nvfp4, "ignore": ["model.layers.0.self_attn*"]}).memory.serve_weight_bytes
    escaped = _report({**nvfp4, "ignore": [r"re:model\.layers\.0\.self_attn.*"]}).memory.serve_weight_bytes
    every = _report({**nvfp4, "ignore": ["*self_attn*"]}).memory.serve_weight_bytes
    ranged = _report({**nvfp4, "ignore": [r"re:.*layers\.[0-3]\.self_attn.*"]}).memory.serve_weight_bytes
    assert escaped == prefix < ranged == every
    huge = _report({**nvfp4, "ignore": ["model.layers." + "9" * 5000 + ".self_attn*"]})
    assert huge.memory.serve_weight_bytes == every
    group = {"targets": ["Linear"], "weights": {"num_bits": "4" * 5000, "group_size": "9" * 5000, "type": "int"}}
    assert _report({"quant_method": "compressed-tensors", "config_groups": {"g": group}}).plans


def test_compressed_tensors_storage_reads_the_group_size_as_its_capability_rules_do() -> None:
    """A group that gives group_size and no strategy is grouped (QuantizationArgs infers it): stored with a scale per
    128, as with strategy "group" said (review: storage had read it as one scale per channel)."""
    weights = {"num_bits": 4, "type": "int", "group_size": 128, "symmetric": True}
    q = {"quant_method": "compressed-tensors", "format": "pack-quantized"}
    inferred = _report({**q, "config_groups": {"g": {"targets": ["Linear"], "weights": weights}}})
    said = _report({**q, "config_groups": {"g": {"targets": ["Linear"], "weights": {**weights, "strategy": "group"}}}})
    assert inferred.memory.serve_weight_bytes == said.memory.serve_weight_bytes
    assert dict(inferred.params.quantization or ())["group_size"] == 128


def test_the_card_table_names_modelopt_s_format_as_nvidia_does() -> None:
    """The serving column's head and the page say "ModelOpt NVFP4", not the estimator's method name."""
    quantization = _report({"quant_method": "modelopt", "quant_algo": "NVFP4"}).params.quantization
    assert serve_weights(quantization) == "ModelOpt NVFP4"
    assert serve_weights((("method", "modelopt_fp8_block"), ("bits", 8))) == "ModelOpt FP8"
