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
from generator.site.assumptions_context import assumptions_context
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings

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


def test_an_ignored_attention_stays_in_16_bits() -> None:
    """ModelOpt's exports of MoE models often leave attention out ("model.layers.*.self_attn*"): its four Linears
    are stored in bf16, the MLP's in NVFP4."""
    attention = sum(i * o for i, o in MATS[:4])
    mlp = sum(i * o // 2 + i * o // 16 + 8 for i, o in MATS[4:])
    r = _report({"quant_method": "modelopt", "quant_algo": "NVFP4",
                 "ignore": ["lm_head", "model.layers.*.self_attn*"]})
    assert r.memory.serve_weight_bytes == LAYERS * (2 * attention + mlp) + _unquantised_bytes()
    one_projection = _report({"quant_method": "modelopt", "quant_algo": "NVFP4",
                              "ignore": ["lm_head", "model.layers.*.self_attn.o_proj"]})
    assert one_projection.memory.serve_weight_bytes < r.memory.serve_weight_bytes  # a projection alone: not priced


@pytest.mark.parametrize(("algo", "served"), [("NVFP4", ALL_GPUS), ("FP8_PB_WO", {"L4", "H100 SXM", "H200 SXM"}),
                                              ("MXFP8", set()), ("W4A16_NVFP4", set())])
def test_vllm_takes_each_quant_algo_where_its_config_class_does(algo: str, served: set[str]) -> None:
    """override_quantization_method picks the config class by quant_algo, hf_quant_config.json's nesting read too:
    MXFP8 needs 10.0 (no priced GPU); an algorithm outside QUANT_ALGOS is refused everywhere, with its own words."""
    r = _report({"quant_method": "modelopt", "quantization": {"quant_algo": algo}})
    assert _served(r) == served, algo
    if algo == "W4A16_NVFP4":
        (warning,) = [x for x in r.findings if x.check == "quantised_serving"]
        assert "does not serve ModelOpt's W4A16_NVFP4 quant_algo" in warning.message


@pytest.mark.parametrize("quantization", [
    {"quant_method": "modelopt"}, {"quant_method": "modelopt", "quant_algo": ["FP8"]},
    {"quant_method": "modelopt", "quant_algo": 8}, {"quant_method": "modelopt", "quantization": "FP8"},
    {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": ["x"]},
    {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": "self_attn"},
])
def test_a_malformed_modelopt_config_is_estimated_without_an_exception(quantization: dict) -> None:
    """Hostile ModelOpt configs: a missing or non-string quant_algo is read as no format (bf16, and a refusal to
    serve it), a list where a mapping belongs as nothing; the estimate goes on."""
    assert _report(quantization).plans


def test_llm_compressor_s_ignored_attention_stays_in_16_bits_too() -> None:
    """The same ignore list in a compressed-tensors config ("re:.*self_attn.*", llm-compressor's regex form): the
    attention's Linears leave the int4 packing, 2 B a weight instead of the packed int32s and fp16 scales."""
    group = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                                "symmetric": True}}
    q = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": group}}
    plain = _report({**q, "ignore": ["lm_head"]})
    kept = _report({**q, "ignore": ["lm_head", "re:.*self_attn.*"]})
    attention = sum(i * o for i, o in MATS[:4])
    packed = sum(4 * (i * o // 8) + 2 * (i // 128) * o for i, o in MATS[:4])  # int32s of 8 and a scale per 128
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
