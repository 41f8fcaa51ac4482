"""Spec.streams: the hidden-width streams a layer reads, which a checkpointed layer keeps as its input (job_options.
layer_input_bytes). Gemma-3n's AltUp carries altup_num_inputs of them (FINDINGS.md F41); DeepSeek-V4's and
Hunyuan-V4's hyper-connections hc_mult (modeling_deepseek_v4.DeepseekV4HyperConnection: "the shape of decoder layer
inputs changes from [batch_size, sequence_length, hidden_size] to [batch_size, sequence_length, hc_mult,
hidden_size]"); every other decoder one."""

from __future__ import annotations

import pytest

from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job
from generator.estimator.normalise import normalise
from tests.conftest import snapshot_configs

CONFIGS = {m: c for m, c, _ in snapshot_configs()}


@pytest.mark.parametrize("repo,streams", [("deepseek-ai/DeepSeek-V4-Flash", 4), ("meta-llama/Llama-3.1-8B", 1)])
def test_a_layer_reads_its_streams(repo, streams):
    assert normalise(CONFIGS[repo], repo).spec.streams == streams


def test_hyper_connection_streams_follow_hc_mult_and_cost_a_checkpointed_job():
    """Each checkpointed layer input holds hc_mult x hidden per token: going from 4 streams to 2 takes off
    2 x hidden x 2 B per token for every kept input, and nothing without checkpointing."""
    repo = "deepseek-ai/DeepSeek-V4-Flash"
    four, two = (normalise({**CONFIGS[repo], "hc_mult": n}, repo) for n in (4, 2))
    assert (four.spec.streams, two.spec.streams) == (4, 2)
    job = Job(method="lora", lora_targets="o_b_proj", grad_ckpt=True, tokens=4096)
    free = Job(method="lora", lora_targets="o_b_proj", tokens=4096)
    s = Assumptions()
    peaks = [job_memory(a, build_graph(a), s, j, repo).peak_bytes for a in (four, two) for j in (job, free)]
    assert peaks[0] - peaks[2] >= 2 * 4096 * four.hidden * 2 * (four.layers - 1)
    assert peaks[1] - peaks[3] < peaks[0] - peaks[2]
