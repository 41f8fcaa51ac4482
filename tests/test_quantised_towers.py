"""A bitsandbytes base quantises a vision-language model's towers too (FINDINGS.md F69), a perceiver resampler among
them (F71), and a gated tower counts its MLP's three matrices among its matmul weights. Reference values: the Linear
weights of Qwen2.5-VL-7B's vision tower and merger on the meta device (transformers 5.24), and the CPU-simulated
QLoRA steps of Qwen2.5-VL-7B and gemma-3-27b (cpu-sim-extra.jsonl; +28.7% and +11.2% before)."""

from __future__ import annotations

import dataclasses

import pytest

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.storage import QUANTS, quantised_tower_params, weight_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows, snapshot_model

S = load_settings().assumptions
QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"


# The towers' and projectors' nn.Linear weights of each snapshot VLM, counted on the meta device
# (AutoModelForImageTextToText.from_config, transformers 5.24), which a bitsandbytes base packs.
TOWER_LINEARS = {QWEN_VL: 674_529_280, "Qwen/Qwen3.5-27B": 455_897_088, "llava-hf/llava-1.5-7b-hf": 322_961_408,
                 "meta-llama/Llama-3.2-11B-Vision": 817_889_280, "mistralai/Magistral-Small-2509": 438_304_768,
                 "google/gemma-3-27b-it": 411_070_464, "google/gemma-4-26B-A4B": 549_070_848}
# Where the count differs, and why: gemma-3's projector weight is an nn.Parameter (mm_input_projection_weight, not
# a Linear, left unpacked); gemma-4's patch embedding is a Linear (3 x 16 x 16 x 1,152) the tower's matmul omits.
TOWER_OFF_BY = {"google/gemma-3-27b-it": 6_193_152, "google/gemma-4-26B-A4B": -884_736}


@pytest.mark.parametrize("repo", sorted(TOWER_LINEARS))
def test_the_towers_matmul_weights_are_their_linears(repo):
    """Qwen2.5-VL's 32 vision blocks (fused qkv, proj, gate, up, down) and its merger: 674,529,280 (489,881,600
    before the gated MLP's third matrix was counted); Pixtral's (Magistral) and Gemma-4's gated towers too; the
    others exactly, but the two named differences."""
    _, g = snapshot_model(repo)
    assert g.towers_matmul - TOWER_LINEARS[repo] == TOWER_OFF_BY.get(repo, 0)


def test_only_a_bitsandbytes_base_packs_the_towers():
    """transformers' conversion (quantizers/base.py get_keys_to_not_convert) spares only the output embedding, tied
    weights and the last parameter: the towers' Linears are packed as the layers' are, 0.5 B and an fp32 absmax
    per 64 weights in nf4. A pre-quantised checkpoint's storage is what its file holds."""
    _, g = snapshot_model(QWEN_VL)
    assert QUANTS["nf4"].method == QUANTS["int8"].method == "bitsandbytes"
    assert quantised_tower_params(g, "nf4") == quantised_tower_params(g, "int8") == g.towers_matmul
    assert quantised_tower_params(g, "bf16") == quantised_tower_params(g, "gptq-int4") == 0
    towers = g.towers_matmul
    # the layers alone packed (the towers 16-bit): the towers' share of the saving is 2 B per weight less 0.5 B
    # and 4 B of absmax per 64
    layers_only = weight_bytes(dataclasses.replace(g, towers_matmul=0), "nf4")
    assert abs(layers_only - weight_bytes(g, "nf4") - (2 - 0.5 - 4 / 64) * towers) < 1


def test_the_simulated_qlora_steps_of_two_vlms():
    """TRL's QLoRA (nf4, double quantisation, the kbit upcast, checkpointing, dropout 0.05), text only: within 1%."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "qlora"
            and r["model"] in (QWEN_VL, "google/gemma-3-27b-it") and r["setup"]["images"] == 0]
    assert len(rows) == 2
    for row in rows:
        est, measured = estimate_bytes(row, S), row["measured"]["peak_bytes"]
        assert est is not None
        assert abs(est - measured) < 0.01 * measured, (row["model"], est / measured - 1)


def test_a_perceiver_resampler_is_a_tower():
    """F71: IDEFICS2's perceiver resampler (651,468,800 weights in its class defaults, as on the meta device) runs
    only on an image and bitsandbytes packs its Linears: it counts among the towers; its QLoRA step, +93.5% before,
    and twelve other VLM families' within 1%."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"].startswith("data/measurements/configs/")
            and r["setup"]["method"] == "qlora" and r["config"].get("vision_config")]
    assert len(rows) == 13
    for row in rows:
        est, measured = estimate_bytes(row, S), row["measured"]["peak_bytes"]
        assert est is not None
        assert abs(est - measured) < 0.01 * measured, (row["model_type"], est / measured - 1)
    idefics2 = next(r for r in rows if r["model_type"] == "idefics2")
    g = build_graph(normalise(idefics2["config"], "idefics2"))
    resampler = next(p for p in g.spec.embed if p.name == "Resampler")
    assert resampler.params == 651_468_800
    assert g.params_towers == sum(p.params for p in g.spec.embed if p.name.startswith(("Vision", "Projector",
                                                                                           "Resampler")))
