"""QLoRA whose last Linear has no adapter, checkpointed (FINDINGS.md F59): bitsandbytes' 4-bit matmul keeps its
weight outside save_for_backward, so down_proj's backward runs before the recomputation, and its input gradient
lives while the recomputation dequantises gate/up. After prepare_model_for_kbit_training the MLP's gradients are
fp32. Double quantisation decodes an fp32 absmax per 64 weights beside the dequantised weight."""

from __future__ import annotations

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.activations import recompute_transient_bytes, regime
from generator.estimator.memory.job import job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.storage import beside_held, dequant_meeting_bytes, dequant_transient_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

S = Assumptions()
# Llama-2-7B's layer shapes, two layers and a 1,024-token vocabulary, as the CPU-simulated rows run them
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 2,
         "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 1024, "max_position_embeddings": 4096}
QV = frozenset({"q", "v"})


def _last_block(cfg=LLAMA):
    a = normalise(cfg, "m")
    return a, build_graph(a).spec.blocks[-1]


def test_what_meets_the_dequantised_weight():
    """Read off the listing at the simulated peak (Llama-2-7B, q and v, 2,048 tokens, measure --explain): beside
    the layer's saved tensors and up_proj's dequantised weight, down_proj's input gradient ([2048, 11008] bf16) and
    three hidden-wide bf16 tensors (the layer output's gradient, the post-attention residual, the MLP's input)."""
    a, b = _last_block()
    amp = regime("qlora", "amp")
    assert dequant_meeting_bytes(a, b, amp, QV) == 2 * 11008 + 3 * 2 * 4096
    # upcast: the gradient is fp32 but up_proj's output is not cast yet (net: bf16 wide); the stream is fp32 and
    # the first norm reads the checkpointed input itself
    up = regime("qlora", "amp", upcast=True)
    assert dequant_meeting_bytes(a, b, up, QV, upcast=True) == 2 * 11008 + 3 * 4 * 4096 - 4 * 4096
    # an adapted down_proj (every Linear: roles None, or named) runs its adapter's backward first: no such moment
    assert dequant_meeting_bytes(a, b, amp, None) == 0
    assert dequant_meeting_bytes(a, b, amp, frozenset({"q", "v", "down"})) == 0


def test_the_meeting_counts_only_beside_a_dequantised_weight():
    assert beside_held(0, 100, meeting=500) == 0  # a 16-bit base: nothing dequantised, nothing meets
    assert beside_held(300, 100) == 200  # an adapted last Linear: the larger of the two
    assert beside_held(300, 100, meeting=50) == 250
    assert beside_held(300, 100, meets=True, meeting=50) == 300  # torchtune: its own rule (F34)


def test_kbit_prep_makes_the_frozen_mlps_gradients_fp32():
    """bitsandbytes Linear4bit.forward returns its output in its input's dtype, fp32 after the upcast: the
    product's two gradients and down_proj's input gradient are [2048, 11008] fp32 at the simulated peak."""
    _, b = _last_block()
    plain = recompute_transient_bytes(b, regime("qlora", "amp"), QV)
    up = recompute_transient_bytes(b, regime("qlora", "amp", upcast=True), QV, upcast=True)
    assert plain == 3 * 2 * 11008 + 2 * 4096
    assert up == 3 * 4 * 11008 + 4 * 4096 - 4 * 4096


def test_double_quant_decodes_an_fp32_absmax_per_64_weights():
    """bitsandbytes/functional.py dequantize_4bit with a nested QuantState: the absmax decoded to fp32 (704,512 of
    them for up_proj's 45 M weights) lives beside the bf16 weight."""
    g = build_graph(normalise(LLAMA, "m"))
    plain = dequant_transient_bytes(g, "nf4", 2)
    assert plain == 2 * 11008 * 4096
    assert dequant_transient_bytes(g, "nf4", 2, nested=True) - plain == 704512 * 4
    assert dequant_transient_bytes(g, "int8", 1, nested=True) == 11008 * 4096  # nested is nf4's only


def test_the_step_grows_by_the_meeting():
    """The recomputed layer's phase holds the dequantised weight (and its absmax) with what meets it, beyond the
    frozen MLP's backward gradients it held before: dequant + T x meeting - T x held on top of the layer."""
    a = normalise(LLAMA, "m")
    g = build_graph(a)
    job = dict(method="qlora", tokens=2048, grad_ckpt=True, lora_rank=8, double_quant=True)
    qv = job_memory(a, g, S, Job(**job, lora_targets="q_proj,v_proj"))
    assert qv.peak_phase == "backward (recomputing a checkpointed layer)"
    phase = next(ph for ph in job_phases(a, g, S, Job(**job, lora_targets="q_proj,v_proj"))
                 if ph.name == qv.peak_phase)
    b, r = g.spec.blocks[-1], regime("qlora", "amp")
    expected = dequant_transient_bytes(g, "nf4", 2, nested=True) \
        + 2048 * (dequant_meeting_bytes(a, b, r, QV) - recompute_transient_bytes(b, r, QV))
    assert phase.overhead_fixed == expected > 0
    # without checkpointing nothing is recomputed: the moment does not exist
    plain = job_memory(a, g, S, Job(**{**job, "grad_ckpt": False}, lora_targets="q_proj,v_proj"))
    assert plain.peak_phase != "backward (recomputing a checkpointed layer)"


def test_the_simulated_steps_read_within_two_percent():
    """Every CPU-simulated checkpointed QLoRA step in cpu-sim-extra whose down projection has no adapter (F59's
    rows: Llama-2-7B, Mistral-7B, Qwen3-8B, Qwen2.5-7B, Gemma-7B, Phi-3-mini, Pythia-6.9B, OPT-125M; with and
    without prepare_model_for_kbit_training, LoRA dropout, pure bf16, 256 to 4,096 tokens). They read -4% to -19%
    before F59."""
    s = load_settings().assumptions
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "qlora"
            and r["setup"]["grad_ckpt"] and r["setup"]["lora_targets"] != "all-linear"
            and r["model_type"] not in ("falcon", "gpt2")]  # their own tests: test_bnb_unconverted (F60)
    assert len(rows) >= 20
    # read but not explained: BLOOM's step after prepare_model_for_kbit_training (-4.4%) and its eager step without
    # it (+6.3%); Aya-23-8B's parallel block after it (-3.3%, F63); GLM-4's after it (+3.1%, F64); named in the
    # closing notes
    unread = {("bloom", True), ("bloom", False), ("cohere", True), ("glm4", True)}
    for row in rows:
        error = estimate_bytes(row, s) / row["measured"]["peak_bytes"] - 1
        bound = 0.065 if (row["model_type"], row["setup"]["upcast_fp32"]) in unread else 0.03
        assert abs(error) < bound, (row["model"], row["setup"], error)


def test_a_dropout_after_the_mlp_runs_the_recomputation_through_down_proj():
    """StarCoder2's residual dropout saves its mask after down_proj (c_proj), so the recomputation runs on through
    it: under the upcast, c_proj's fp32 input (the activation's output) lives beside its bf16 copy. Read off the
    listing at the simulated peak (StarCoder2-7B, 2 layers, q and v): [1, 1024, 18432] fp32 (gelu) beside the
    [1, 1024, 18432] bf16 _to_copy and c_proj's dequantised weight. Without the dropout, or with relu (which saves
    its output anyway), nothing more."""
    cfg = {"model_type": "starcoder2", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 4096,
           "hidden_act": "gelu_pytorch_tanh", "residual_dropout": 0.1, "use_bias": True}
    up = regime("qlora", "amp", upcast=True)
    a, b = _last_block(cfg)
    a0, b0 = _last_block({**cfg, "residual_dropout": 0.0})
    assert dequant_meeting_bytes(a, b, up, QV, upcast=True) - dequant_meeting_bytes(a0, b0, up, QV, upcast=True) \
        == 4 * 1024
    # not without the upcast: down_proj's bf16 input is the one tensor, as F59's moment counts it
    amp = regime("qlora", "amp")
    assert dequant_meeting_bytes(a, b, amp, QV) == dequant_meeting_bytes(a0, b0, amp, QV)


def test_a_plain_mlp_meets_the_weight_before_its_activation():
    """GPT-J's MLP (fc_in, gelu_new, fc_out) without a dropout after it: the recomputation stops at fc_in's
    matmul, before gelu_new has made its three Python tensors, so they are not beside the dequantised weight (the
    step read +17.9% with them, +1.4% without). A gated MLP is at up_proj, after its activation: unchanged."""
    cfg = {"model_type": "gptj", "n_embd": 256, "n_inner": 1024, "n_layer": 2, "n_head": 4, "rotary_dim": 16,
           "vocab_size": 1024, "n_positions": 2048, "activation_function": "gelu_new", "resid_pdrop": 0.0,
           "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    amp = regime("qlora", "amp")
    a, b = _last_block(cfg)
    assert dequant_meeting_bytes(a, b, amp, QV) == 2 * 1024 + 3 * 2 * 256 - 3 * 2 * 1024
    a1, b1 = _last_block({**cfg, "activation_function": "gelu"})
    assert dequant_meeting_bytes(a1, b1, amp, QV) == 2 * 1024 + 3 * 2 * 256


def test_a_norm_after_the_mlp_runs_the_recomputation_through_down_proj():
    """OLMo-2's post_feedforward_layernorm saves its input after down_proj, as a dropout there saves its mask: under
    the upcast the product's fp32 tensor lives beside its bf16 copy at down_proj's matmul (OLMo-2-7B's step read
    -4.5% without it, +1.0% with it; Gemma-2-2B's, held out, +0.8%)."""
    cfg = {"model_type": "olmo2", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1024, "max_position_embeddings": 4096}
    up = regime("qlora", "amp", upcast=True)
    a, b = _last_block(cfg)
    a0, b0 = _last_block({**LLAMA, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
                          "num_key_value_heads": 4})
    assert dequant_meeting_bytes(a, b, up, QV, upcast=True) - dequant_meeting_bytes(a0, b0, up, QV, upcast=True) \
        == 4 * 1024
