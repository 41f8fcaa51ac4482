"""A step without checkpointing whose last MLP carries no adapter peaks at that MLP's backward once the head's tensors
are freed, where the logits are small beside the MLP (FINDINGS.md F65): its down projection's input gradient and its
activation's, beside every layer's saved tensors."""

from __future__ import annotations

import json
from pathlib import Path

from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.activations import regime
from generator.estimator.memory.job import MLP_PHASE, job_memory
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.layer_terms import last_mlp_backward_bytes
from generator.estimator.normalise import normalise
from generator.measure.setup import shrink
from tests.conftest import measured_rows, priced_errors

FAMILIES = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs" / "families"
QV = frozenset({"q", "v"})


def _phi():
    cfg = shrink(json.loads((FAMILIES / "phi.json").read_text(encoding="utf-8")), 2, {"vocab_size": 1024})[0]
    a = normalise(cfg, "m")
    return a, build_graph(a)


def test_phis_last_mlp_at_its_backward():
    """Phi's listing at layers.1.mlp's backward (LoRA on q and v): fc2's input gradient and gelu_new's two products,
    [1, 1024, 8192] bf16 each, and the layer output's gradient."""
    a, g = _phi()
    b = g.spec.blocks[-1]
    assert last_mlp_backward_bytes(a, b, regime("lora", "amp"), QV) == 3 * 8192 * 2 + 2048 * 2
    assert last_mlp_backward_bytes(a, b, regime("lora", "amp"), QV | {"down"}) == 0  # adapted: no such moment
    assert last_mlp_backward_bytes(a, b, regime("lora", "amp"), None) == 0
    assert last_mlp_backward_bytes(a, b, regime("full", "amp"), None) == 0
    up = regime("qlora", "amp", upcast=True)
    assert last_mlp_backward_bytes(a, b, up, QV, upcast=True) == 3 * 8192 * 4 + 2048 * 4


def test_the_phase_is_the_peak_where_the_logits_are_small():
    a, g = _phi()
    job = Job(method="lora", tokens=1024, lora_rank=16, lora_targets="q_proj,v_proj")
    assert job_memory(a, g, Assumptions(), job).peak_phase == MLP_PHASE


def test_the_simulated_steps_read_within_two_percent():
    """Phi's, SmolLM3's and Persimmon's LoRA steps on q and v without checkpointing read -9.7%, -3.7% and -8.8%."""
    rows = [r for r in measured_rows("cpu-sim-extra") if "configs/families/" in r["model"]
            and r["model_type"] in ("phi", "smollm3", "persimmon") and r["setup"]["method"] == "lora"
            and not r["setup"]["grad_ckpt"] and r["setup"]["lora_targets"] != "all-linear"]
    assert len(rows) == 3
    for error, row in priced_errors(rows):
        assert abs(error) < 0.02, (row["model"], error)


def test_the_checkpointed_steps_over_the_same_families():
    """F65's checkpointed LoRA steps on q and v with dropout (fifteen families): within 1.5%, Persimmon's +2.3%."""
    rows = [r for r in measured_rows("cpu-sim-extra") if "configs/families/" in r["model"]
            and r["setup"]["method"] == "lora" and r["setup"]["grad_ckpt"] and r["setup"]["lora_dropout"]]
    assert len(rows) == 15
    for error, row in priced_errors(rows):
        assert abs(error) < (0.025 if row["model_type"] == "persimmon" else 0.015), (row["model"], error)
