"""Model types transformers 5.25.0 added (ergo, kolibri1_1, minicpm5_moe), read while the project pins 5.24.

The pinned transformers cannot build these classes, so the oracle sweep cannot see them: each count below was
taken once under transformers 5.25.0 (torch 2.13.0, CPU), building `AutoModelForCausalLM.from_config(
AutoConfig.for_model(model_type, **keys))` on the meta device and summing `p.numel()` over `model.parameters()`.
These tests only call the estimator, so they run under the pinned 5.24.
"""

from __future__ import annotations

import pytest

from generator.estimator import estimate
from generator.estimator.normalise import normalise

SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
ERGO = {**SMALL, "first_dense_intermediate_size": 128, "moe_intermediate_size": 32, "shared_intermediate_size": 48,
        "num_experts": 8, "num_experts_per_tok": 2}
KOLIBRI = {**SMALL, "head_dim": 16, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
           "num_experts_per_tok": 2, "index_num_heads": 2}
MINICPM = {**SMALL, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts_per_tok": 2}

# (model_type, config keys beyond the class defaults, transformers 5.25.0's count); the comment names the class
CASES = [
    # modeling_ergo.ErgoForCausalLM: ErgoConfig() as it stands
    ("ergo", {}, 1_105_550_917_632),
    # ErgoForCausalLM, 2 layers (layer 0 dense, layer 1 MoE), small width
    ("ergo", {**ERGO, "num_hidden_layers": 2}, 209_856),
    # ErgoForCausalLM, no dense layer, the checkpoints' local_attention_window name, tie_word_embeddings ignored
    ("ergo", {**ERGO, "num_hidden_layers": 3, "num_dense_blocks": 0, "local_attention_window": 64,
              "tie_word_embeddings": True}, 286_176),
    # modeling_kolibri1_1.Kolibri1_1ForCausalLM: Kolibri1_1Config() (50 layers, 10 indexed, 5 reading another's K/V)
    ("kolibri1_1", {}, 75_112_646_912),
    # Kolibri1_1ForCausalLM, 2 layers (both dense: mlp_only_layers defaults to the first two), small width
    ("kolibri1_1", {**KOLIBRI, "num_hidden_layers": 2, "num_experts": 8, "mlp_only_intermediate_size": 128}, 202_368),
    # Kolibri1_1ForCausalLM, 10 layers: layer 9 (indexed) reads layer 4's K/V by the default kv_source_layers
    ("kolibri1_1", {**KOLIBRI, "num_hidden_layers": 10, "num_experts": 8, "mlp_only_intermediate_size": 128}, 769_904),
    # Kolibri1_1ForCausalLM, explicit layer types and K/V sources, no dense layer, num_local_experts (attribute_map)
    ("kolibri1_1", {**KOLIBRI, "num_hidden_layers": 3, "num_local_experts": 6, "mlp_only_layers": [],
                    "layer_types": ["sliding_attention", "indexed_attention", "indexed_attention"],
                    "kv_source_layers": [0, 1, 1], "index_layers": [1]}, 301_072),
    # modeling_minicpm5_moe.MiniCPM5MoeForCausalLM: MiniCPM5MoeConfig() as it stands
    ("minicpm5_moe", {}, 15_002_552_320),
    # MiniCPM5MoeForCausalLM, 2 layers (layer 0 dense), small width
    ("minicpm5_moe", {**MINICPM, "num_hidden_layers": 2, "head_dim": 16, "n_routed_experts": 8}, 241_472),
    # MiniCPM5MoeForCausalLM, biases, first_k_dense_replace 2, two shared experts, head_dim / kv heads null (derived),
    # num_local_experts (attribute_map)
    ("minicpm5_moe", {**MINICPM, "num_hidden_layers": 3, "head_dim": None, "num_key_value_heads": None,
                      "num_local_experts": 8, "attention_bias": True, "first_k_dense_replace": 2,
                      "n_shared_experts": 2}, 301_952),
]


@pytest.mark.parametrize(("model_type", "keys", "expected"), CASES,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(CASES)])
def test_parameter_count_matches_transformers_5_25(settings, model_type, keys, expected):
    r = estimate({"model_type": model_type, **keys}, model_id=model_type, assumptions=settings.assumptions,
                 cards=settings.cards, gpus=settings.gpus)
    assert r.model.family == model_type and not r.model.approximate_reason
    assert r.params.graph == expected


def test_windows_follow_each_configuration_file():
    # ErgoConfig: every 4th layer full attention, the rest sliding_window (512); the checkpoints' name read too
    assert normalise({"model_type": "ergo", "num_hidden_layers": 4}, "e").layer_windows == (512, 512, 512, 0)
    assert normalise({"model_type": "ergo", "num_hidden_layers": 4, "local_attention_window": 64},
                     "e").layer_windows == (64, 64, 64, 0)
    # Kolibri1_1Config: every 5th layer indexed attention (whole context), the rest sliding_window (513)
    a = normalise({"model_type": "kolibri1_1", "num_hidden_layers": 10}, "k")
    assert a.layer_windows == (513,) * 4 + (0,) + (513,) * 4 + (0,)
    # layer 10 reads layer 5's K/V: no K/V projections and no cache of its own
    assert [b.parts[1].type for b in a.spec.blocks][4::5] == ["Grouped Query Attn", "Shared-KV Attn"]
