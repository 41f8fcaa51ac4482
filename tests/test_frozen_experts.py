"""Frozen routed experts (FINDINGS.md F61): LoRA or QLoRA on attention only leaves a top-k MoE's experts frozen.
The routed tokens' gathered input, weighted output and its reordering live at the experts' forward end (where a
checkpointed recomputation stops, or the last layer's forward without checkpointing); an MLP-wide MoE's product
backward is larger still. And the harness runs experts upcast to fp32 (prepare_model_for_kbit_training) as CUDA's
grouped matmul does, whose meta kernel takes bf16 only."""

from __future__ import annotations

import pytest

from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import recompute_transient_bytes, regime
from generator.estimator.memory.experts import held_transient_bytes, routed_transient_bytes
from generator.estimator.normalise import normalise
from tests.conftest import measured_rows, priced_errors

QV = frozenset({"q", "v"})
# Qwen3-30B-A3B's and Mixtral-8x7B's layer shapes, two layers, as the CPU-simulated rows run them
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
             "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 2, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 1024, "max_position_embeddings": 4096}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
           "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
           "vocab_size": 1024, "max_position_embeddings": 4096}


def _last_block(cfg):
    return build_graph(normalise(cfg, "m")).spec.blocks[-1]


def test_the_routed_tokens_copies_at_the_forward_end():
    """Qwen3-30B-A3B's listing at the simulated peak (q and v, checkpointed): index.Tensor, mul.Tensor and the
    incoming [1024, 8, 2048] gradient, each 8 x 2,048 bf16 per token beyond the saved tensors; fp32 under the
    upcast. Its product backward (3 x 8 x 768) is the smaller moment."""
    b = _last_block(QWEN3_MOE)
    assert routed_transient_bytes(b, regime("qlora", "amp"), QV) == 3 * 8 * 2048 * 2
    assert routed_transient_bytes(b, regime("qlora", "amp"), QV, backward=False) == 3 * 8 * 2048 * 2
    assert routed_transient_bytes(b, regime("qlora", "amp", upcast=True), QV) == 3 * 8 * 2048 * 4


def test_an_mlp_wide_moe_peaks_at_its_product_backward():
    """Mixtral-8x7B's listing (q and v, checkpointed): the two factors' gradients ([2048, 14336] twice) and the
    product's, the layer output's gradient, the routed outputs freed: larger than the forward end's copies."""
    b = _last_block(MIXTRAL)
    amp = regime("qlora", "amp")
    assert routed_transient_bytes(b, amp, QV) == 3 * 2 * 14336 * 2 + 4096 * 2 - 2 * 4096 * 2
    assert routed_transient_bytes(b, amp, QV, backward=False) == 3 * 2 * 4096 * 2


def test_only_frozen_routed_experts():
    """Adapted expert tensors keep F10's terms; a dense layer has no such moment; a full fine-tune's trained experts
    hold three k x hidden rows at their gathered input's gradient (F98); held adds it to the last Linear's (none
    here: an MoE layer's is only the upcast's shared norm input)."""
    b = _last_block(QWEN3_MOE)
    amp = regime("qlora", "amp")
    assert routed_transient_bytes(b, amp, frozenset({"q", "v", "experts_gate_up", "experts_down"})) == 0
    moe = next(p for p in b.parts if p.top_k)
    assert routed_transient_bytes(b, regime("full", "amp"), None) == 3 * moe.top_k * moe.mats[0][1] * 4
    dense = _last_block({**QWEN3_MOE, "model_type": "qwen3", "intermediate_size": 768})
    assert routed_transient_bytes(dense, amp, QV) == 0
    assert held_transient_bytes(b, amp, QV) == routed_transient_bytes(b, amp, QV)


def test_an_adapted_o_proj_is_a_moment_apart():
    """An MoE layer's last Linear is its attention's o_proj: where it carries an adapter, its forward's copies are
    made and freed before the experts run, so the layer holds the larger of the two moments, not their sum
    (GraniteMoE's all-linear LoRA, whose experts peft leaves frozen, read up to +1.0% with the sum, within 0.3%
    before)."""
    b = _last_block(QWEN3_MOE)
    amp, qvo = regime("lora", "amp"), frozenset({"q", "v", "o"})
    last = recompute_transient_bytes(b, amp, qvo)
    assert last > 0
    assert held_transient_bytes(b, amp, qvo) == max(last, routed_transient_bytes(b, amp, qvo))
    # under the upcast an MoE layer's own term is the shared norm input alone, negative: both moments count it
    up = regime("qlora", "amp", upcast=True)
    assert held_transient_bytes(b, up, QV, upcast=True) == routed_transient_bytes(b, up, QV) \
        + recompute_transient_bytes(b, up, QV, upcast=True) < routed_transient_bytes(b, up, QV)


@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral", "qwen2_moe", "gpt_oss"])
def test_the_simulated_steps_read_within_two_percent(model_type):
    """F61's CPU-simulated steps: QLoRA and LoRA on q and v over Qwen3-30B-A3B, Mixtral-8x7B, Qwen1.5-MoE-A2.7B and
    gpt-oss-20b, checkpointed and not, with and without prepare_model_for_kbit_training (its experts fp32) and LoRA
    dropout. They read -1.7% to -5.3% before."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model_type"] == model_type
            and r["setup"]["method"] in ("lora", "qlora") and r["setup"]["lora_targets"] == "q_proj,v_proj"]
    assert rows
    for error, row in priced_errors(rows):
        assert abs(error) < 0.02, (row["model"], row["setup"], error)


def test_the_harness_runs_fp32_experts_as_cuda_does():
    """prepare_model_for_kbit_training upcasts the experts bitsandbytes leaves in bf16; torch's grouped-matmul meta
    kernel refuses fp32, CUDA's kernel takes it (its fallback). The simulation makes the same allocations: the
    output, and per gradient asked for one tensor; a frozen weight's input is not kept."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from generator.measure.run import _GroupedMatmul

    with FakeTensorMode():
        a = torch.empty(64, 16, requires_grad=True)
        b = torch.empty(4, 16, 8)
        out = _GroupedMatmul.apply(a, b, torch.tensor([16, 32, 48, 64], dtype=torch.int32))
        assert out.shape == (64, 8) and out.dtype == torch.float32
        saved = out.grad_fn.saved_tensors
        assert saved[0] is None and saved[1] is b
        (grad_a,) = torch.autograd.grad(out.sum(), a)
        assert grad_a.shape == a.shape
