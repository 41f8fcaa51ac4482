"""The weights a server holds, against what real checkpoints store: each repository's byte total, summed from its
safetensors headers (data_offsets) or read off its model.safetensors.index.json total_size, as published in a
public measurement of quantised checkpoints' bits per parameter (bf16, FP8-dynamic, W4A16 and NVFP4 Llama
checkpoints; the figures below are its). The estimator reads only config.json: the snapshot's Llama configs with
the quantization_config each repository declares.
"""

from __future__ import annotations

import json

import pytest

from generator.estimator import estimate
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings

SETTINGS = load_settings()
LLAMA8, LLAMA70 = "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.3-70B-Instruct"
# RedHatAI's FP8-dynamic: FP8 weights with a scale per output channel, dynamic FP8 activations per token
FP8_DYNAMIC = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
               "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                   "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
                   "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                         "dynamic": True}}}}
# RedHatAI's W4A16: int4 in int32s of 8, a scale per 128 inputs, activation ordering by group (its g_idx)
W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
             "num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True,
             "dynamic": False, "actorder": "group"}, "input_activations": None}}}
NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ["lm_head"]}


def _served(mid: str, quantization: dict | None) -> int:
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json)
    cfg = {**cfg, "quantization_config": quantization} if quantization else cfg
    return estimate(cfg, model_id=mid, assumptions=SETTINGS.assumptions, cards=SETTINGS.cards, gpus=SETTINGS.gpus,
                    structure=False).memory.serve_weight_bytes


@pytest.mark.parametrize(("mid", "quantization", "checkpoint_bytes"), [
    (LLAMA8, None, 16_060_522_496),  # unsloth/Meta-Llama-3.1-8B-Instruct
    (LLAMA8, FP8_DYNAMIC, 9_083_953_152),  # RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic
    (LLAMA70, NVFP4, 42_709_045_632),  # nvidia/Llama-3.3-70B-Instruct-FP4
    (LLAMA70, W4A16, 39_525_311_232),  # RedHatAI/Llama-3.3-70B-Instruct-quantized.w4a16
])
def test_the_served_weights_are_the_checkpoint_s_bytes(mid: str, quantization: dict | None,
                                                       checkpoint_bytes: int) -> None:
    """To the byte. The W4A16 total holds each Linear's weight_shape (two int64s) and its group index (an int32 per
    input: actorder "group"), which vLLM's CompressedTensorsWNA16 loads beside the packed weights and scales; without
    them the estimate read 24.9 MB under."""
    assert _served(mid, quantization) == checkpoint_bytes


def test_asymmetric_groups_store_zero_points_packed_as_the_weights() -> None:
    """vLLM's CompressedTensorsWNA16.create_weights: an asymmetric group adds int32 zero points of [out / 8, in / 128]
    per Linear, 4 B for every 8 scales. Llama-3.1-8B's 32 layers of q, k, v, o, gate, up and down."""
    h, kv, inter = 4096, 1024, 14336
    scales = 32 * sum(o * (i // 128) for i, o in ((h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)))
    weights = W4A16["config_groups"]["group_0"]["weights"]
    asymmetric = {**W4A16, "config_groups": {"group_0": {"targets": ["Linear"],
                                                         "weights": {**weights, "symmetric": False}}}}
    assert _served(LLAMA8, asymmetric) - _served(LLAMA8, W4A16) == 4 * (scales // 8)
