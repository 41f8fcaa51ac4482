"""Issue 13: the default attention per model class, recipes, and the terms each option adds (estimator.job)."""

from __future__ import annotations

import dataclasses

import pytest

from generator.errors import JobError
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.attention import default_attention
from generator.estimator.memory.job import Job, job_memory
from generator.estimator.memory.recipes import RECIPES
from generator.estimator.memory.sdpa_table import NO_SDPA
from generator.estimator.normalise import normalise
from generator.settings import load_settings

S = load_settings().assumptions
LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096}


def peak(config, **job):
    a = normalise(config, "m")
    return job_memory(a, build_graph(a), S, Job(**{"tokens": 512, **job}), "m").peak_bytes


def test_models_without_sdpa_default_to_eager_and_are_priced_so():
    assert {"gpt_neo", "xglm", "mpt", "vaultgemma", "granite_swa", "bloom", "gemma2"} <= set(NO_SDPA)
    gpt_neo = {"model_type": "gpt_neo", "hidden_size": 256, "num_heads": 4, "num_layers": 2, "vocab_size": 1000,
               "max_position_embeddings": 2048, "attention_types": [[["global", "local"], 1]], "window_size": 256}
    a = normalise(gpt_neo, "m")
    assert default_attention(a)[0] == "eager"
    assert peak(gpt_neo) == peak(gpt_neo, attention="eager") > peak(gpt_neo, attention="sdpa")
    assert default_attention(normalise(LLAMA, "m"))[0] == "sdpa"


def test_custom_code_of_an_unknown_type_keeps_its_scores():
    a = dataclasses.replace(normalise(LLAMA, "m"), model_type="my_own", custom_code=True)
    assert default_attention(a)[0] == "eager"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_prices_and_cites(name):
    r = RECIPES[name]
    assert r.sources and r.summary
    job = Job.from_options(name, tokens=512, method="lora" if name != "trl-sft-qlora" else "qlora")
    assert job.recipe == name
    a = normalise(LLAMA, "m")
    assert job_memory(a, build_graph(a), S, job, "m").peak_bytes > 0


def test_unknown_recipe_is_an_error():
    with pytest.raises(JobError):
        Job.from_options("no-such-recipe")


def test_outputs_kept_and_upcast_cost_more():
    assert peak(LLAMA, keep_outputs=True) > peak(LLAMA)
    base = dict(method="qlora", weights="nf4")
    assert peak(LLAMA, **base, upcast_fp32=True) > peak(LLAMA, **base)


def test_checkpointing_does_not_charge_every_layers_autocast_copies():
    deep = {**LLAMA, "num_hidden_layers": 8}
    a = normalise(deep, "m")
    mem = job_memory(a, build_graph(a), S, Job(tokens=64, grad_ckpt=True), "m")
    layer_matmul = max(b.matmul for b in build_graph(a).spec.blocks)
    assert dict(mem.breakdown)["overhead"] < 2 * 2 * layer_matmul + 2 * 1000 * 256 * 2 or \
        mem.peak_phase == "optimizer step"
