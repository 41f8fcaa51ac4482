"""bitsandbytes before 0.43.2 kept each 4-bit matmul's input on its autograd context, where the backward does not
free it (MatMul4Bit.forward, 0.42.0 bitsandbytes/autograd/_functions.py L522-525; #1270). A loop that keeps the
loss, and with it the graph, until the next step replaces it (LitGPT's fit(), a hand-written loop keeping its
output) holds the previous step's inputs of every quantised Linear through the next forward and loss
(FINDINGS.md F55).

The term is checked against simulated steps in tests/test_litgpt_model.py (tools/sim_litgpt.py --bnb 0.42.0:
LitGPT@2685705's GPT with the input kept and fit()'s loop, data/measurements/cpu-sim-litgpt.jsonl); these tests
hold its size and where it applies."""

from __future__ import annotations

import dataclasses

import pytest

from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job import job_phases
from generator.estimator.memory.job_options import Job
from generator.settings import load_settings
from tests.conftest import snapshot_arch

S = load_settings().assumptions
ARCH = snapshot_arch("meta-llama/Llama-3.2-1B")  # hidden 2,048, MLP 8,192, 16 layers, tied head
GRAPH = build_graph(ARCH)
T = 1024
H, I, L = 2048, 8192, 16


def _loss_phase(job: Job) -> int:
    """Activations at the loss: every layer's saved tensors, the logits, and what an earlier step left alive."""
    return job_phases(ARCH, GRAPH, S, job, "m")[0].activations


def _job(**options) -> Job:
    return dataclasses.replace(Job(method="qlora", weights="nf4", optimizer="paged-adamw", tokens=T), **options)


@pytest.mark.parametrize("loop", ["litgpt", "kept output"])
def test_old_inputs_outlive_the_step_where_the_loop_keeps_the_loss(loop):
    options = {"loss": "litgpt-chunked"} if loop == "litgpt" else {"keep_outputs": True}
    old, new = _job(bnb_version="0.42.0", **options), _job(bnb_version="0.43.2", **options)
    # this step's inputs (q/k/v's, gate/up's and down's; SDPA saves o_proj's) and the previous step's (o_proj's too,
    # LitGPT's quantised head's input under LitGPT)
    saved = T * 2 * L * (H + H + I)
    carried = T * 2 * (L * (3 * H + I) + (H if loop == "litgpt" else 0))
    assert _loss_phase(old) - _loss_phase(new) == saved + carried


def test_a_loop_that_drops_the_loss_carries_nothing():
    """HF Trainer's training_step returns loss.detach(): the graph goes with its frame, the inputs with it."""
    old, new = _job(bnb_version="0.42.0"), _job(bnb_version="0.43.2")
    assert _loss_phase(old) - _loss_phase(new) == T * 2 * L * (H + H + I)


def test_a_current_release_carries_nothing_whatever_the_loop():
    for options in ({"loss": "litgpt-chunked"}, {"keep_outputs": True}):
        assert _loss_phase(_job(bnb_version="0.43.2", **options)) == _loss_phase(_job(bnb_version="", **options))
