"""A parallel MoE block's first layer under LoRA on its fused expert tensors (FINDINGS.md F67): attention and MoE read
one norm's output, so with a frozen embedding the MoE's input needs no gradient, and the router's and gate-up's
effective weights, read only for that gradient, are made and not saved. Reference: Cohere2-MoE's class-default step
(two layers, cpu-sim-extra.jsonl), +16.7% before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import regime
from generator.estimator.memory.experts import frozen_input_expert_bytes
from generator.estimator.memory.job import job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows
from tests.test_frozen_experts import MIXTRAL

S = load_settings().assumptions
CONFIG = Path(__file__).resolve().parent.parent / "data" / "measurements" / "configs" / "cohere2_moe.json"


def _cohere2_moe(**changes):
    cfg = {**json.loads(CONFIG.read_text(encoding="utf-8")), "num_hidden_layers": 2, "vocab_size": 8192, **changes}
    a = normalise(cfg, "cohere2_moe")
    return a, build_graph(a)


def test_the_first_layers_router_and_gate_up_are_spared():
    """8 experts x (2 x 22,528) x 8,192 bf16 for gate-up, 8 x 8,192 for the router; the down tensor stays (its
    input, the gate-up's output, needs a gradient); nothing for a full fine-tune or a sequential MoE (Mixtral:
    the MoE reads the attention's sum)."""
    a, g = _cohere2_moe()
    assert frozen_input_expert_bytes(a, g, None, regime("lora", "amp")) == 2 * (8 * 2 * 22528 * 8192 + 8 * 8192)
    assert frozen_input_expert_bytes(a, g, frozenset({"q", "v"}), regime("lora", "amp")) == 0
    assert frozen_input_expert_bytes(a, g, None, regime("full", "amp")) == 0
    m = normalise(MIXTRAL, "m")
    assert frozen_input_expert_bytes(m, build_graph(m), None, regime("lora", "amp")) == 0


def test_only_without_checkpointing_or_the_upcast():
    """Checkpointing and prepare_model_for_kbit_training make the embedding's output require grad
    (enable_input_require_grads): the first layer keeps its effective weights as every other does."""
    a, g = _cohere2_moe()
    spare = frozen_input_expert_bytes(a, g, None, regime("lora", "amp"))
    job = Job(method="lora", tokens=1024)

    def experts(j):
        return {p.name: p.expert_activations for p in job_phases(a, g, S, j)}

    plain, ckpt = experts(job), experts(dataclasses.replace(job, grad_ckpt=True))
    per_layer = ckpt["backward (recomputing a checkpointed layer)"]  # one layer's effective weights, bf16
    assert spare > 0
    assert plain["backward (activations)"] + spare == 2 * per_layer
    # the upcast's effective weights are fp32 (the base weight's dtype), both layers' kept
    upcast = experts(dataclasses.replace(job, method="qlora", weights="nf4", upcast_fp32=True))
    assert upcast["backward (activations)"] == 2 * 2 * per_layer


def test_the_simulated_step():
    """Cohere2-MoE's LoRA step on every Linear and expert tensor, without checkpointing: within 1%."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model_type"] == "cohere2_moe"]
    assert len(rows) == 1
    est, measured = estimate_bytes(rows[0], S), rows[0]["measured"]["peak_bytes"]
    assert est is not None
    assert abs(est - measured) < 0.01 * measured, (est, measured)
