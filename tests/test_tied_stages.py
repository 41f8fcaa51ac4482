"""A tied embedding split over pipeline stages: the last stage keeps its own copy of the output layer.

Source: Megatron-LM's LanguageModule.setup_embeddings_and_output_layer (the last stage holds the shared
embedding's copy as its output layer and all-reduces its gradient with the first stage's) and DeepSpeed's
TiedLayerSpec (a tied module is built on every stage that uses it); vLLM's last pipeline rank loads its own
lm_head. One card holds the one weight, so a single card's figures do not move.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.parallel import Setup, per_gpu
from generator.estimator.memory.pipeline import stage_rows
from generator.estimator.memory.profile import serve_profile, train_profile
from generator.estimator.memory.splits import best_cut, engine_cut
from generator.estimator.normalise import normalise
from generator.estimator.setups import model_shape, training_job
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings

S = load_settings().assumptions
TIED, UNTIED = "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B"


def _model(mid: str):
    a = normalise(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), mid)
    return a, build_graph(a)


def _profiles(a, g):
    return {"full": train_profile(a, g, S, 1024, "full", S.lora_rank),
            "lora": train_profile(a, g, S, 1024, "lora", S.lora_rank), "serve": serve_profile(a, g, S, 1024)}


def test_the_tied_model_is_tied_and_its_copy_is_its_embedding() -> None:
    a, g = _model(TIED)
    assert g.spec.tied and g.spec.vocab == 151_936 and a.hidden == 1024  # Qwen3-0.6B's config.json
    weight = 151_936 * 1024  # the embedding: 155,582,464 params
    p = _profiles(a, g)
    # full AMP: fp32 master + two fp32 Adam states (12 B) held, + gradient and foreach temporary (20 B) at the step
    assert p["full"].tied_copy == (12 * weight, 20 * weight, 16 * weight)
    assert p["lora"].tied_copy == (2 * weight, 2 * weight, 0)  # the frozen bf16 copy
    assert p["serve"].tied_copy == (2 * weight, 0, 0)


@pytest.mark.parametrize("method", ["full", "lora", "serve"])
def test_the_second_stage_holds_the_copy_and_one_card_does_not(method: str) -> None:
    a, g = _model(TIED)
    p = _profiles(a, g)[method]
    bare = dataclasses.replace(p, tied_copy=(0, 0, 0))
    assert p.total(1) == bare.total(1) and p.max_batch(40 * 2**30) == bare.max_batch(40 * 2**30)
    n = p.layers
    for k in (1, n // 2, n - 1):
        assert p.stage(1, 0, k, True, False) == bare.stage(1, 0, k, True, False)
        assert p.stage(1, k, n, False, True) - bare.stage(1, k, n, False, True) >= p.tied_copy[0] > 0
    if method == "serve":  # vLLM's cut, whatever its stages hold (splits.engine_cut): the layers halved
        assert engine_cut(p).layers == n // 2
        return
    cut = best_cut(p)  # the split's running sums agree with the stages they stand for
    assert (cut.first, cut.second) == (p.stage(1, 0, cut.layers, True, False), p.stage(1, cut.layers, n, False, True))


def test_the_split_of_the_tied_model_moves_toward_its_head() -> None:
    a, g = _model(TIED)
    p = _profiles(a, g)["full"]
    cut, bare = best_cut(p), best_cut(dataclasses.replace(p, tied_copy=(0, 0, 0)))
    # Qwen3-0.6B's 28 layers: the head's stage now carries 1.9 GB more, so the cut gives it fewer layers
    assert cut.layers > bare.layers and cut.second > bare.second


def test_an_untied_model_has_no_copy() -> None:
    a, g = _model(UNTIED)
    assert not g.spec.tied and all(p.tied_copy == (0, 0, 0) for p in _profiles(a, g).values())
    assert model_shape(a, g).tied_head_params == 0


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_pipelines_last_stage_holds_the_copy(method: str) -> None:
    a, g = _model(TIED)
    shape = model_shape(a, g)
    assert shape.tied_head_params == 151_936 * 1024
    job = training_job(a, g, S, Job(method=method, tokens=1024), shape)
    bare = dataclasses.replace(job, tied_head_params=0)
    for gpus in (2, 4):
        tied, untied = per_gpu(job, Setup("pp", gpus)), per_gpu(bare, Setup("pp", gpus))
        # the copy rebalances the cut: the last stage gives up layers, and the largest stage grows
        assert tied.stage_layers[-1] <= untied.stage_layers[-1] and sum(tied.stage_layers) == len(g.spec.blocks) == 28
        assert tied.per_gpu_peak_bytes > untied.per_gpu_peak_bytes
    one = per_gpu(job, Setup("single", 1))
    assert one.per_gpu_peak_bytes == per_gpu(bare, Setup("single", 1)).per_gpu_peak_bytes


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_a_frozen_models_ends_are_16_bit_weights_on_their_stages(method: str) -> None:
    """A frozen base's embedding and head are bf16 however the layers are stored (bitsandbytes leaves them
    unquantised): the first and last stages hold them at 2 B a parameter, the tied copy too, and the stages' weights
    add up to the job's plus that copy."""
    a, g = _model(TIED)
    job = training_job(a, g, S, Job(method=method, tokens=1024), model_shape(a, g), both=False)
    first, last, tied = job.first_stage_params, job.last_stage_params, job.tied_head_params
    assert (first, tied) == (151_936 * 1024, 151_936 * 1024) and last == 1024  # embedding; the final norm
    counts, rows = stage_rows(job, job.phases, 2)
    assert len(counts) == 2 and sum(counts) == 28
    by_phase: dict[str, list[int]] = {}
    for name, parts in rows:
        by_phase.setdefault(name, []).append(parts[0])
    for ph in job.phases:
        layer_bytes = (ph.weights - 2 * (first + last)) / 28
        stage_one, stage_two = by_phase[ph.name]
        assert abs(stage_one - (2 * first + counts[0] * layer_bytes)) <= 1
        assert abs(stage_two - (2 * (last + tied) + counts[1] * layer_bytes)) <= 1
        assert abs(stage_one + stage_two - (ph.weights + 2 * tied)) <= 2
