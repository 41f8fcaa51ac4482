"""A bitsandbytes base (QLoRA's NF4, LLM.int8) of a mixture of experts: transformers 5 converts nn.Linear and Conv1D
only (integrations/bitsandbytes.py replace_with_bnb_linear), and holds most routed experts as 3-D parameters of an
experts module, so those stay in the dtype the model loads in (bitsandbytes issue #1849); where they are nn.Linear
layers (switch_transformers, nllb-moe) they are quantised like any other."""

from __future__ import annotations

import dataclasses

import pytest

from generator.estimator.config.transformers_defaults import TENSOR_EXPERTS
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.storage import (
    bnb_keeps_experts,
    layer_mats,
    quantised_params,
    stored_mats,
    weight_bytes,
)
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import snapshot_configs

QWEN_MOE = "Qwen/Qwen3-30B-A3B"  # 48 MoE layers of 128 experts, gate+up (2 x 768 x 2048) and down (2048 x 768)
ROUTED = 48 * 128 * 3 * 2048 * 768


def _arch(model: str):
    cfg = next(c for m, c, _ in snapshot_configs() if m == model)
    arch = normalise(cfg, model)
    return arch, build_graph(arch)


def test_which_experts_bitsandbytes_keeps():
    assert {"qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss", "dbrx", "jetmoe", "llama4_text"} <= TENSOR_EXPERTS
    assert not {"switch_transformers", "nllb-moe", "llama"} & TENSOR_EXPERTS
    arch, _ = _arch(QWEN_MOE)
    assert bnb_keeps_experts(arch, "nf4") and bnb_keeps_experts(arch, "int8")
    assert not bnb_keeps_experts(arch, "gptq-int4") and not bnb_keeps_experts(arch, "bf16")
    assert not bnb_keeps_experts(_arch("meta-llama/Llama-3.1-8B")[0], "nf4")


def test_a_qlora_base_packs_everything_but_the_routed_experts():
    arch, g = _arch(QWEN_MOE)
    every, kept = layer_mats(g), stored_mats(arch, g, "nf4")
    assert quantised_params(every) - quantised_params(kept) == ROUTED
    # the experts at 2 bytes instead of NF4's 4 bits + an fp32 absmax per 64 weights (0.5625 B) and each expert
    # matrix's 64 B QuantState code
    difference = weight_bytes(g, "nf4", False, kept) - weight_bytes(g, "nf4", False, every)
    matrices = sum(times * count for (count, _, _), times in every.items()) - \
        sum(times * count for (count, _, _), times in kept.items())
    assert matrices > 0
    assert difference == pytest.approx(ROUTED * (2 - 0.5625) - 64 * matrices, rel=1e-9)


def test_prepare_model_for_kbit_training_upcasts_the_kept_experts_too():
    """peft's prepare_model_for_kbit_training casts every fp16/bf16 parameter to fp32 (peft/utils/other.py): the
    experts bitsandbytes left in bf16 become fp32, 2 more bytes each."""
    arch, g = _arch(QWEN_MOE)
    s = load_settings().assumptions
    plain = Job(method="qlora", weights="nf4", grad_ckpt=True, tokens=512)
    upcast = dataclasses.replace(plain, upcast_fp32=True)
    grow = dict(job_memory(arch, g, s, upcast, QWEN_MOE).breakdown)["weights"] - \
        dict(job_memory(arch, g, s, plain, QWEN_MOE).breakdown)["weights"]
    assert grow >= 2 * ROUTED
