"""A forward without checkpointing at its last frozen down projection, what a frozen first layer keeps, and Cohere's
Python LayerNorm (FINDINGS.md F63)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import (
    PYTHON_LAYER_NORM,
    block_activation_bytes,
    python_gelu_bytes,
    python_layer_norm_bytes,
    regime,
)
from generator.estimator.memory.ends import frozen_embedding_bytes, parallel_mlp
from generator.estimator.memory.storage import dequant_forward_bytes
from generator.estimator.normalise import normalise
from tests.conftest import measured_rows, priced_errors

QV = frozenset({"q", "v"})
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 2,
         "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 1024, "max_position_embeddings": 4096}
GPTJ = {"model_type": "gptj", "n_embd": 256, "n_inner": 1024, "n_layer": 2, "n_head": 4, "rotary_dim": 16,
        "vocab_size": 1024, "n_positions": 2048, "activation_function": "gelu_new", "resid_pdrop": 0.0,
        "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def llama_like(a):
    """The same Arch under a model type without a Python LayerNorm."""
    return dataclasses.replace(a, model_type="llama")


def _model(cfg):
    a = normalise(cfg, "m")
    return a, build_graph(a)


def test_what_the_last_down_projection_holds():
    """Llama-2-7B's listing at layers.1.mlp.down_proj's dequantised matmul (q and v): without the upcast its bf16
    product [1024, 11008], its output, the MLP's input, the post-attention residual and the model's two locals;
    after it, the fp32 product and its bf16 copy, the output and the fp32 MLP input (the rest are the norms' saved
    inputs)."""
    a, g = _model(LLAMA)
    b = g.spec.blocks[-1]
    assert dequant_forward_bytes(a, g, b, regime("qlora", "amp"), QV) == 2 * 11008 + 4096 * (2 + 2 + 2) + 2 * 2 * 4096
    up = regime("qlora", "amp", upcast=True)
    assert dequant_forward_bytes(a, g, b, up, QV, upcast=True) == 6 * 11008 + 4096 * (2 + 4)
    # an adapted down_proj (every Linear, or named) is F44's moment, not this one
    assert dequant_forward_bytes(a, g, b, regime("qlora", "amp"), None) == 0
    assert dequant_forward_bytes(a, g, b, regime("qlora", "amp"), QV | {"down"}) == 0


def test_a_parallel_blocks_first_mlp_keeps_nothing():
    """GPT-J's first MLP reads the layer's input, which a frozen embedding gives no gradient: with no adapter of its
    own it saves neither fc_in's output nor gelu_new's tensors; its attention's adapters saved the shared input."""
    a, g = _model(GPTJ)
    b = g.spec.blocks[0]
    mlp = parallel_mlp(b)
    assert mlp is not None and mlp.type == "MLP"
    assert parallel_mlp(_model(LLAMA)[1].spec.blocks[0]) is None  # sequential: an Add between attention and MLP
    r = regime("qlora", "amp", input_cast=False)  # peft's bitsandbytes layers under autocast: no cast
    spared = frozen_embedding_bytes(a, g, r, QV) - frozen_embedding_bytes(a, g, r)
    assert spared == 2 * mlp.frozen_act + python_gelu_bytes(b, 2) > 0
    assert frozen_embedding_bytes(a, g, r, QV | {"up", "down"}) == frozen_embedding_bytes(a, g, r)  # adapted: kept
    # the shared input is not counted twice at the last layer's fc_out
    last = g.spec.blocks[-1]
    assert dequant_forward_bytes(a, g, last, r, QV) == 2 * 1024 + 256 * 2 + 256 * 2 + 2 * 2 * 256


def test_the_first_layers_adapter_dropouts_keep_no_mask():
    a, g = _model(LLAMA)
    cpu = regime("qlora", "amp", lora_dropout=True, cpu=True, input_cast=False)
    no_dropout = regime("qlora", "amp", cpu=True, input_cast=False)
    assert frozen_embedding_bytes(a, g, cpu, QV) - frozen_embedding_bytes(a, g, no_dropout, QV) \
        == 2 * 4096 * 2  # q's and v's masks, bf16 on the CPU
    cuda = regime("qlora", "amp", lora_dropout=True, input_cast=False)
    assert frozen_embedding_bytes(a, g, cuda, QV) - frozen_embedding_bytes(a, g, regime("qlora", "amp"), QV) \
        == 2 * 4096  # bool on CUDA


def test_cohere_layer_norm_keeps_two_centred_copies():
    """Aya-23-8B's listing: two sub.Tensor [1, 1024, 4096] fp32 per layer norm, where native layer_norm keeps its
    input and two statistics."""
    a, g = _model({"model_type": "cohere", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 2,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 1024})
    b = g.spec.blocks[0]
    cpu = regime("qlora", "amp", cpu=True)
    assert python_layer_norm_bytes(a, b.parts, cpu) == 8 * 4096 + 4 - (2 * 4096 + 8)
    cuda = regime("lora", "amp")
    assert python_layer_norm_bytes(a, b.parts, cuda) == 8 * 4096 + 4 - (4 * 4096 + 8)
    full = regime("full", "amp")
    assert python_layer_norm_bytes(a, b.parts, full) == 12 * 4096 + 4 - (4 * 4096 + 8)
    llama_a, llama_g = _model(LLAMA)
    assert python_layer_norm_bytes(llama_a, llama_g.spec.blocks[0].parts, cuda) == 0
    # the layer's saved bytes carry it
    assert block_activation_bytes(a, b, cuda) - block_activation_bytes(llama_like(a), b, cuda) \
        == python_layer_norm_bytes(a, b.parts, cuda)


@pytest.mark.parametrize("model_type", sorted(PYTHON_LAYER_NORM))
def test_the_python_layer_norms_are_transformers_own(model_type):
    """Each named class is in the installed transformers and computes the centred input twice."""
    transformers = pytest.importorskip("transformers")
    module_name, cls_name = PYTHON_LAYER_NORM[model_type].split(".")
    package = module_name.removeprefix("modeling_")
    module = __import__(f"transformers.models.{package}.{module_name}", fromlist=[cls_name])
    source = inspect.getsource(getattr(module, cls_name).forward)
    assert source.count("hidden_states - mean") == 2, (transformers.__version__, model_type)


def test_the_simulated_steps_read_within_a_percent_and_a_half():
    """F63's unchecked QLoRA steps on q and v at a 1,024-token vocabulary: they read -11.1% to +11.3% before.
    Aya-23-8B's after the upcast (-3.1%, -16.4% before) has an unread remainder."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "qlora" and not r["setup"]["grad_ckpt"]
            and r["setup"]["lora_targets"] == "q_proj,v_proj" and (r.get("config_changes") or {}).get("vocab_size")
            and r["model_type"] in ("llama", "mistral", "gemma", "qwen2", "gptj", "opt", "cohere")]
    assert len(rows) >= 13
    for error, row in priced_errors(rows):
        bound = 0.035 if (row["model_type"], row["setup"]["upcast_fp32"]) == ("cohere", True) else 0.015
        assert abs(error) < bound, (row["model"], row["setup"], error)
