"""The training forward's KV cache after prepare_model_for_kbit_training (FINDINGS.md F62): without checkpointing
use_cache stays on, and bitsandbytes' k_proj and v_proj return fp32, so the cache holds fp32 keys and values
beside the bf16 casts SDPA saves, alive to the loss."""

from __future__ import annotations

from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.activations import regime
from generator.estimator.memory.layer_terms import kept_cache_bytes
from generator.estimator.memory.job import job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.normalise import normalise
from tests.conftest import measured_rows, priced_errors

S = Assumptions()
# Llama-2-7B's shapes at four layers and its own 32,000-token vocabulary, as the simulated row runs them
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 4,
         "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
QLORA = dict(method="qlora", tokens=1024, lora_rank=16, lora_targets="q_proj,v_proj", double_quant=True,
             lora_dropout=0.05)


def _model(cfg=LLAMA):
    a = normalise(cfg, "m")
    return a, build_graph(a)


def test_the_upcast_cache_holds_fp32_keys_and_values():
    """Read off the listing at the simulated loss: two cat.default [1, 32, 1024, 128] fp32 per layer (the cache's
    keys and values) beside the three bf16 _to_copy SDPA saved."""
    a, g = _model()
    up = regime("qlora", "amp", upcast=True)
    assert kept_cache_bytes(a, g, up, False, upcast=True) == 4 * 2 * 4096 * 4
    assert kept_cache_bytes(a, g, up, True, upcast=True) == 0  # checkpointing turns the cache off
    assert kept_cache_bytes(a, g, regime("qlora", "amp"), False) == 0  # a bf16 stream: the cache is what SDPA saved
    a_off, g_off = _model({**LLAMA, "use_cache": False})
    assert kept_cache_bytes(a_off, g_off, up, False, upcast=True) == 0


def test_the_loss_holds_the_cache_where_the_upcast_made_it():
    a, g = _model()
    up = job_memory(a, g, S, Job(**QLORA, upcast_fp32=True))
    assert up.peak_phase == "loss (logits)"
    loss = next(p for p in job_phases(a, g, S, Job(**QLORA, upcast_fp32=True)) if p.name == "loss (logits)")
    merged = next(p for p in job_phases(a, g, S, Job(**QLORA, upcast_fp32=True))
                  if p.name == "backward (activations)")
    # the cache in, the logits' gradient (bf16, 2 B per logit) not yet made
    assert loss.activations - merged.activations == 1024 * kept_cache_bytes(a, g, regime("qlora", "amp", upcast=True),
                                                                             False, upcast=True)
    assert merged.logits - loss.logits == 1024 * 2 * 32000
    # no such phase where the stream is bf16, or with checkpointing
    assert "loss (logits)" not in [p.name for p in job_phases(a, g, S, Job(**QLORA))]
    ckpt = [p.name for p in job_phases(a, g, S, Job(**QLORA, upcast_fp32=True, grad_ckpt=True))]
    assert ckpt.count("loss (logits)") == 1


def test_the_simulated_step_reads_within_one_percent():
    """Llama-2-7B's four layers, QLoRA on q and v after the upcast, no checkpointing: -2.7% without the cache."""
    row = next(r for r in measured_rows("cpu-sim-extra") if r["model"] == "meta-llama/Llama-2-7b-hf"
               and r["setup"]["upcast_fp32"] and not r["setup"]["grad_ckpt"] and r["config"]["vocab_size"] == 32000)
    [(error, _)] = priced_errors([row])
    assert abs(error) < 0.01
