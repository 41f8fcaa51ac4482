"""KV-cache and recurrent-state bytes, per attention type, against hand computations from the modeling files.

Each case cites the transformers modeling file whose cache it follows. Bytes are at the default
kv_bytes (2, bf16). `kv_bytes_per_token` is every attention layer's cache per token at full length;
`kv_bytes_per_sequence` is one sequence's whole cache at `tokens` (windows capped, state included).
"""

from __future__ import annotations

import pytest

from generator.estimator import Assumptions
from generator.estimator.normalise import normalise
from generator.estimator.memory.profile import kv_bytes_per_sequence, kv_bytes_per_token, state_bytes_per_sequence
from tests.conftest import snapshot_configs

S = Assumptions()
SNAP = {repo_id: cfg for repo_id, cfg, _ in snapshot_configs()}


def arch(cfg: dict, name: str = "kv"):
    return normalise(cfg, name)


def test_gqa_llama_3_1_8b():
    # modeling_llama.LlamaAttention: k_proj and v_proj emit num_key_value_heads x head_dim (8 x 128), 32 layers.
    a = arch(SNAP["meta-llama/Llama-3.1-8B"])
    assert kv_bytes_per_token(a, S) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_bytes_per_sequence(a, S, 4096) == 4096 * 131_072


def test_mha_gpt2_has_no_sharing():
    # modeling_gpt2.GPT2Attention: c_attn emits 3 x n_embd; every head keeps its K and V (12 layers x 768).
    a = arch(SNAP["openai-community/gpt2"])
    assert kv_bytes_per_token(a, S) == 2 * 12 * 768 * 2


def test_mqa_falcon_one_kv_head():
    # modeling_falcon.FalconAttention: multi_query (the default without new_decoder_architecture) keeps one
    # K/V head of head_dim 64 for all 71 heads; 32 layers.
    cfg = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
           "vocab_size": 65024, "multi_query": True, "parallel_attn": True}
    assert kv_bytes_per_token(arch(cfg), S) == 2 * 32 * 1 * 64 * 2


def test_mqa_gpt_bigcode():
    # modeling_gpt_bigcode.py: multi_query -> c_attn emits q + one K and one V head.
    cfg = {"model_type": "gpt_bigcode", "n_embd": 2048, "n_head": 16, "n_layer": 24, "vocab_size": 49152,
           "n_positions": 8192, "multi_query": True}
    assert kv_bytes_per_token(arch(cfg), S) == 2 * 24 * 128 * 2


def test_sliding_window_caps_every_layer_mistral():
    # modeling_mistral.py: every layer attends to sliding_window (4096) tokens; the cache holds no more.
    a = arch(SNAP["mistralai/Mistral-7B-v0.1"])
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_bytes_per_token(a, S) == per_token  # per token at full attention
    assert kv_bytes_per_sequence(a, S, 8192) == 4096 * per_token  # capped at the window
    assert kv_bytes_per_sequence(a, S, 1000) == 1000 * per_token


def test_sliding_window_alternating_gemma2():
    # configuration_gemma2.py: layer_types alternate sliding (even index) / full; 42 layers, 8 KV heads of 256.
    a = arch(SNAP["google/gemma-2-9b-it"])
    layer = 2 * 8 * 256 * 2
    window = a.window
    assert window == 4096 and sum(1 for w in a.layer_windows if w) == 21
    assert kv_bytes_per_sequence(a, S, 8192) == 21 * layer * 8192 + 21 * layer * window


def test_gpt_oss_window_of_128_on_half_the_layers():
    # configuration_gpt_oss.py: sliding_window 128 on every other layer; 8 KV heads of 64, 24 layers.
    a = arch(SNAP["openai/gpt-oss-20b"])
    layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_sequence(a, S, 4096) == 12 * layer * 4096 + 12 * layer * 128


def test_mla_latent_cache_deepseek_v3():
    # modeling_deepseek_v3.DeepseekV3Attention: the compressed kv (kv_lora_rank 512) and the shared rotary
    # key (qk_rope_head_dim 64) per token per layer, 61 layers; full K/V would be 2 x 128 x 128 x 2 B.
    a = arch(SNAP["deepseek-ai/DeepSeek-V3"])
    assert kv_bytes_per_token(a, S) == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(a, S) * 56 < 61 * 2 * 128 * 128 * 2 * 2  # about 57x less than full K/V


def test_mamba_state_is_fixed_per_sequence():
    # modeling_mamba.MambaCache: conv_states (intermediate x conv_kernel) + ssm_states (intermediate x
    # state_size) per layer, whatever the length. state-spaces/mamba-130m-hf: hidden 768, 24 layers.
    cfg = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280,
           "state_size": 16, "expand": 2, "conv_kernel": 4}
    a = arch(cfg)
    state = 24 * (1536 * 4 + 1536 * 16) * 2
    assert kv_bytes_per_token(a, S) == 0
    assert state_bytes_per_sequence(a, S) == state
    assert kv_bytes_per_sequence(a, S, 100) == kv_bytes_per_sequence(a, S, 100_000) == state


def test_mamba2_state():
    # modeling_mamba2.Mamba2Cache: conv over intermediate + 2 x n_groups x state (kernel), ssm heads x
    # head_dim x state. Mamba2 defaults: hidden 4096, expand 2, 128 heads of 64, 8 groups, state 128.
    cfg = {"model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64, "vocab_size": 32768, "num_heads": 128,
           "head_dim": 64, "n_groups": 8, "state_size": 128, "expand": 2, "conv_kernel": 4}
    conv = 8192 + 2 * 8 * 128
    assert state_bytes_per_sequence(arch(cfg), S) == 64 * (conv * 4 + 128 * 64 * 128) * 2


def test_hybrid_gated_deltanet_and_attention_qwen3_next():
    # modeling_qwen3_next.py: 12 full-attention layers (2 KV heads of 256) cache K/V; 36 Gated DeltaNet
    # layers hold conv (2 x 16 x 128 + 32 x 128 channels x kernel 4) + 32 value heads x 128 x 128 state.
    a = arch(SNAP["Qwen/Qwen3-Next-80B-A3B-Instruct"])
    assert kv_bytes_per_token(a, S) == 12 * 2 * 2 * 256 * 2
    conv = 2 * 16 * 128 + 32 * 128
    assert state_bytes_per_sequence(a, S) == 36 * (conv * 4 + 32 * 128 * 128) * 2


def test_nemotron_h_mamba2_layers_carry_state_attention_layers_kv():
    # modeling_nemotron_h.py: layer kinds from hybrid_override_pattern; "*" layers cache K/V (2 KV heads of 128).
    cfg = SNAP["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"]
    a = arch(cfg)
    attention = cfg["hybrid_override_pattern"].count("*")
    assert kv_bytes_per_token(a, S) == attention * 2 * cfg["num_key_value_heads"] * 128 * 2
    assert state_bytes_per_sequence(a, S) > 0


def test_encoder_has_no_cache():
    a = arch(SNAP["google-bert/bert-base-uncased"])
    assert kv_bytes_per_token(a, S) == 0 and kv_bytes_per_sequence(a, S, 512) == 0


def test_encoder_decoder_self_and_cross_attention():
    # modeling_t5.py (EncoderDecoderCache): each decoder layer caches self-attention K/V per generated
    # token and cross-attention K/V over the encoder's tokens. t5-small: 6 decoder layers, 8 x 64.
    a = arch(SNAP["google-t5/t5-small"])
    layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_token(a, S) == 6 * layer
    assert kv_bytes_per_sequence(a, S, 512) == 6 * layer * 512 * 2  # self (512 tokens) + cross (512 encoder tokens)


@pytest.mark.parametrize("kv_bytes", [1, 2, 4])
def test_cache_scales_with_kv_bytes(kv_bytes):
    import dataclasses

    a = arch(SNAP["meta-llama/Llama-3.1-8B"])
    s = dataclasses.replace(S, kv_bytes=kv_bytes)
    assert kv_bytes_per_token(a, s) == 32 * 2 * 8 * 128 * kv_bytes


def test_gemma4_k_eq_v_layers_cache_keys_and_values_apart():
    # modeling_gemma4.Gemma4TextAttention: a global layer with attention_k_eq_v has no v_proj, but its values are
    # k_proj's output normed by v_norm without RoPE, its keys k_norm'd and rotated: cache.update keeps both tensors.
    # vLLM's Gemma4Attention builds a plain Attention of 2 KV heads x 512 (models/gemma4.py, v0.19.1): the same.
    # 25 sliding layers of 8 x 256 (window 1,024) and 5 global of 2 x 512, K and V each, at 2 B.
    a = arch(SNAP["google/gemma-4-26B-A4B"])
    assert kv_bytes_per_token(a, S) == 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2 == 225_280
    assert kv_bytes_per_sequence(a, S, 4096) == 25 * 1024 * 8_192 + 5 * 4096 * 4_096 == 293_601_280


def test_deepseek_v32_caches_its_indexers_keys_beside_the_latent():
    # modeling_deepseek_v32.DeepseekV32Indexer: cache.update_indexer keeps one index_head_dim (128) key a token
    # and layer in the compute dtype beside MLA's latent (512 + 64). vLLM keeps it in fp8 with a 4-byte scale,
    # 132 B (models/deepseek_v2.py): 78,324 B a token, which this 85,888 bounds from above.
    a = arch(SNAP["deepseek-ai/DeepSeek-V3.2"])
    assert kv_bytes_per_token(a, S) == 61 * (512 + 64 + 128) * 2 == 85_888
    assert kv_bytes_per_token(a, S) > 61 * (1_152 + 132)


@pytest.mark.parametrize("model, layers, conv, ssm", [
    # Qwen3.5-27B (mamba_ssm_dtype float32): 48 Gated DeltaNet layers, conv over 2 x 16 x 128 + 48 x 128 channels
    # x kernel 4, state 48 value heads x 128 x 128
    ("Qwen/Qwen3.5-27B", 48, (2 * 16 * 128 + 48 * 128) * 4, 48 * 128 * 128),
    # Nemotron-3-Nano (mamba_ssm_cache_dtype float32): 23 Mamba-2 layers, conv over 4,096 + 2 x 8 x 128 channels x
    # kernel 4, state 64 heads x 64 x 128
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 23, (4096 + 2 * 8 * 128) * 4, 64 * 64 * 128),
])
def test_a_recurrent_state_the_config_keeps_in_fp32_takes_4_bytes(model, layers, conv, ssm):
    # vLLM sizes the SSM / delta-rule state's page by the config's mamba_ssm_dtype or mamba_ssm_cache_dtype
    # (model_executor/models/config.py, v0.19.1); the conv state stays in the model's dtype. Its 3.21 MB a Qwen3.5
    # layer is this state, less a kernel column of conv state (vLLM keeps kernel - 1 of them, transformers kernel).
    a = arch(SNAP[model])
    assert state_bytes_per_sequence(a, S) == layers * (conv * 2 + ssm * 4)
