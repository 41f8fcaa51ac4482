"""Pipeline stages of layers that differ: each stage holds its own layers' share of the weights and the KV cache.

An MoE whose first layers are dense (DeepSeek-V2-Lite: first_k_dense_replace 1), a hybrid of Mamba, attention and MoE
layers (Nemotron-3-Nano), an encoder-decoder's two stacks: spread evenly over the layers, a stage of the large layers
was priced at the mean layer, under what it holds (3.7% on Nemotron-3-Nano's two-GPU serving stage). The card table's
split (stages.Profile, each layer's own) and the setups' stages (pipeline.stage_rows) now agree.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory import pipeline
from generator.estimator.memory.attention import default_attention
from generator.estimator.memory.job_options import Job, site_job
from generator.estimator.memory.parallel import PARTS
from generator.estimator.memory.pipeline import stage_rows
from generator.estimator.memory.profile import serve_profile, train_profile
from generator.estimator.memory.serve_weights import model_serve_weight_bytes
from generator.estimator.memory.splits import best_cut, engine_cut
from generator.estimator.memory.vllm_server import reference_server
from generator.estimator.normalise import normalise
from generator.estimator.setups import inference_job, model_shape, serving_jobs, training_job
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings

S = load_settings().assumptions
LITE, HYBRID = "deepseek-ai/DeepSeek-V2-Lite-Chat", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
GRIFFIN = "google/recurrentgemma-2b"
ROOT = Path(__file__).resolve().parents[1]


def _model(mid: str):
    a = normalise(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), mid)
    return a, build_graph(a)


def test_a_full_fine_tunes_stages_hold_their_own_layers_parameters() -> None:
    """DeepSeek-V2-Lite's first layer is dense (10,944-wide MLP), the other 26 MoE (64 experts): on 3 stages every
    stage's optimizer state is its layers' parameters (and its ends') at the phase's bytes per parameter; spread
    evenly, the first stage, the dense layer's, was priced at MoE layers' weight."""
    a, g = _model(LITE)
    shape = model_shape(a, g)
    assert len(shape.layer_params) == 27 and shape.layer_params[0] < shape.layer_params[1] / 5
    job = training_job(a, g, S, Job(method="full", tokens=1024), shape, both=False)
    counts, rows = stage_rows(job, job.phases, 3)
    state = PARTS.index("optimizer_state")
    step = next(ph for ph in job.phases if ph.name == "optimizer step")
    per_param = step.optimizer_state / shape.params_total
    starts = [sum(counts[:k]) for k in range(3)]
    got = [r[state] for name, r in rows if name == "optimizer step"]
    for k, (start, n) in enumerate(zip(starts, counts, strict=True)):
        ends = (shape.first_stage_params if k == 0 else 0) + \
            (shape.last_stage_params + shape.tied_head_params if k == 2 else 0)
        held = sum(shape.layer_params[start:start + n]) + ends
        assert abs(got[k] - per_param * held) <= 1 + per_param, k
    even = dataclasses.replace(job, layer_params=())
    _, old = stage_rows(even, even.phases, 3)
    assert max(r[state] for name, r in rows if name == "optimizer step") > max(
        r[state] for name, r in old if name == "optimizer step")


@pytest.mark.parametrize("mid", [HYBRID, LITE, "google/flan-t5-base", "google/gemma-3-27b-it"])
def test_the_setups_serving_stages_agree_with_the_card_tables_split(mid: str) -> None:
    """Two stages at vLLM's cut: the setups' (pipeline.stage_rows, each layer's parameters and caches) and the card
    table's (splits.engine_cut, each layer's own bytes) within 0.5% (the serving weights of a quantised or tied part
    against its parameters, an encoder's output spread with the caches); spread evenly they were 3.7% apart on
    Nemotron-3-Nano, 7% on flan-t5-base."""
    a, g = _model(mid)
    server, tokens = reference_server(S), min(S.serve_tokens, a.max_context)
    profile = serve_profile(a, g, S, tokens, server=server)
    serve = serving_jobs(g, S, profile, server, model_serve_weight_bytes(a, g, S), model_shape(a, g),
                         tokens)["serve"]
    assert len(serve.layer_kv) == serve.layers
    counts, rows = stage_rows(serve, serve.phases, 2)
    half = len(rows) // 2
    stages = (max(sum(r) for _, r in rows[:half]), max(sum(r) for _, r in rows[half:]))
    cut = engine_cut(profile)
    assert cut.layers == counts[0]
    for got, want in zip(stages, (cut.first, cut.second), strict=True):
        assert abs(got - want) <= 0.005 * want, (mid, stages, (cut.first, cut.second))


@pytest.mark.parametrize("method", ["full", "lora"])
def test_the_training_cut_balances_the_stages_own_bytes(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where layers differ, the training cut is found on each stage's own bytes: on 2 stages of Nemotron-3-Nano (23
    Mamba, 23 MoE and 6 attention layers) no other contiguous cut of its 52 layers holds a smaller largest stage, and
    on 3 to 8 its largest stage is no larger than at the cut found at the mean layer's bytes (within the rows'
    rounding up, a byte a part), and smaller on some (23% on 8 stages of the full fine-tune, 10% on 4 of LoRA)."""
    a, g = _model(HYBRID)
    job = training_job(a, g, S, Job(method=method, tokens=1024), model_shape(a, g), both=False)
    cut_at: list[int] = []
    # a job cut as vLLM would be, its cut forced to `cut_at`: stage_rows' bytes at any cut
    monkeypatch.setattr(pipeline, "vllm_stage_layers", lambda layers, stages: list(cut_at))
    forced = dataclasses.replace(job, engine_cut=True)  # a training job hands no buffer over: only the cut moves

    def largest(rows) -> int:
        return max(sum(r) for _, r in rows)

    def at(counts) -> int:
        cut_at[:] = counts
        return largest(stage_rows(forced, job.phases, len(counts))[1])
    best = largest(stage_rows(job, job.phases, 2)[1])
    assert all(best <= at((cut, 52 - cut)) for cut in range(1, 52))
    even = dataclasses.replace(job, layer_params=())
    gains = []
    for stages in range(3, 9):
        exact, mean = largest(stage_rows(job, job.phases, stages)[1]), at(stage_rows(even, even.phases, stages)[0])
        assert exact <= mean + 8, stages
        gains.append(mean / exact)
    assert max(gains) > 1.09


def test_generates_stages_hold_their_own_layers_caches() -> None:
    """transformers' generate over pipeline stages (--method inference --strategy pp): each stage's KV cache is its
    layers' own, as generate.py sizes them: gemma-3-1b's sliding layers hold 512 tokens of an 8,192-token decode
    and every sixth, global, layer all of it, so the stages' caches follow where the global layers fall."""
    a, g = _model("google/gemma-3-1b-it")
    job = inference_job(a, g, S, Job(method="inference", tokens=8000, new_tokens=192), model_shape(a, g))
    assert len(job.layer_kv) == 26 and max(job.layer_kv) == 16 * min(job.layer_kv)  # 8,192 / 512
    counts, rows = stage_rows(job, job.phases, 3)
    kv = PARTS.index("kv_cache")
    decode = max(job.phases, key=lambda ph: ph.kv_cache)
    starts = [sum(counts[:k]) for k in range(3)]
    got = [r[kv] for name, r in rows if name == decode.name]
    want = [decode.kv_cache * sum(job.layer_kv[s:s + n]) / sum(job.layer_kv)
            for s, n in zip(starts, counts, strict=True)]
    assert all(abs(x - y) <= 1 for x, y in zip(got, want, strict=True)) and len(set(got)) > 1


def _config(mid: str) -> dict:
    if mid == GRIFFIN:  # not in the snapshot: the measurement harness's RecurrentGemma config
        return json.loads((ROOT / "data" / "measurements" / "configs" / "families" / "recurrent_gemma.json").read_text())
    return json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json)


def _checkpointed(mid: str, layers: int | None = None, method: str = "lora", grad_ckpt: bool = True):
    cfg = _config(mid)
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    a = normalise(cfg, mid)
    g = build_graph(a)
    return training_job(a, g, S, Job(method=method, tokens=8192, grad_ckpt=grad_ckpt), model_shape(a, g), both=False)


@pytest.mark.parametrize("mid", ["meta-llama/Llama-3.1-8B", GRIFFIN])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_recomputed_layers_working_set_does_not_grow_with_the_stack(mid: str, method: str) -> None:
    """Phase.stage_whole is one layer's working set: the same on a stack twice as deep, where the rest of the
    phase's activations (the layers' kept inputs, RecurrentGemma's kept recomputation of every recurrent layer above,
    F66) grows with the layers."""
    short, deep = _checkpointed(mid, 12, method), _checkpointed(mid, 24, method)
    for one, two in zip(short.phases, deep.phases, strict=True):
        assert 0 <= one.stage_whole <= one.activations, one.name
        assert one.stage_whole == two.stage_whole, one.name
        if one.stage_whole and "first" not in one.name:  # (the first layer's recomputation: every other input freed)
            assert two.activations - two.stage_whole > one.activations - one.stage_whole, one.name


@pytest.mark.parametrize("mid", ["meta-llama/Llama-3.1-8B", HYBRID, GRIFFIN])
def test_every_checkpointed_stage_holds_one_recomputed_layer_whole(mid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under checkpointing each pipeline stage recomputes its own layers in the backward, so each holds one
    layer's working set whole beside its layers' kept inputs (Phase.stage_whole); spread over the layers, a stage of
    n of L held n / L of it (Llama-3.1-70B's LoRA at 8,192 tokens on 8 stages: 22.2 GB a GPU, now 26.3). On one
    stage the rows are the phases; at the same cut no stage holds less than spread evenly, and the stage of the
    recomputed phase holds its working set and its share of the rest."""
    job = _checkpointed(mid)
    act = PARTS.index("activations")
    recompute = next(ph for ph in job.phases if ph.name == "backward (recomputing a checkpointed layer)")
    plain = _checkpointed(mid, grad_ckpt=False)  # its one-layer transients (the forward's last layer, ...) too
    assert any(ph.stage_whole for ph in plain.phases)
    assert all(0 <= ph.stage_whole <= ph.activations for ph in (*plain.phases, *job.phases))
    for one_job in (job, plain):
        _, one = stage_rows(one_job, one_job.phases, 1)
        assert all(abs(r[act] - ph.activations) <= 1 for (_, r), ph in zip(one, one_job.phases, strict=True))
    assert 0 < recompute.stage_whole < recompute.activations
    cut_at: list[int] = []
    monkeypatch.setattr(pipeline, "vllm_stage_layers", lambda layers, stages: list(cut_at))
    for stages in (2, 4):
        for one_job in (plain, job):
            counts, rows = stage_rows(one_job, one_job.phases, stages)
            cut_at[:] = counts  # the same cut, the activations spread evenly as before
            spread = dataclasses.replace(one_job, engine_cut=True, phases=tuple(
                dataclasses.replace(ph, stage_whole=0) for ph in one_job.phases))
            _, old = stage_rows(spread, spread.phases, stages)
            assert all(new[1][act] >= was[1][act] - 1 for new, was in zip(rows, old, strict=True)), stages
        kept = recompute.activations - recompute.stage_whole
        held = [r[act] for name, r in rows if name == recompute.name]
        assert all(h >= recompute.stage_whole for h in held)
        assert max(held) >= recompute.stage_whole + min(counts) * kept / job.layers - 1, stages


@pytest.mark.parametrize("mid", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", HYBRID, LITE, "google/gemma-2-9b"])
@pytest.mark.parametrize("method", ["lora", "full"])
def test_the_setups_training_stages_agree_with_the_card_tables_split(mid: str, method: str) -> None:
    """The site's jobs at its length on two stages: the setups' (pipeline.stage_rows) and the card table's
    (splits.best_cut, each backward branch whole on each stage) within 0.2%. Each had left the setups' under:
    - a backward's one-layer transients spread over the layers: Llama-3.1-8B's LoRA 0.6% (17.40 GB against 17.51);
    - the embedding's and the head's activations spread, where they are the first and last stage's alone:
      gemma-2-9b's LoRA (eager) 1.6% (36.05 GB against 36.65);
    - the layers' activations spread evenly, where DeepSeek-V2-Lite's dense first layer keeps less than its MoE
      layers: its LoRA 1.7% (40.03 GB against 40.71, now 40.65)."""
    a, g = _model(mid)
    tokens = min(S.train_tokens, a.max_context)
    cut = best_cut(train_profile(a, g, S, tokens, method, S.lora_rank, {}))
    job = training_job(a, g, S, site_job(method, S.lora_rank, tokens=tokens, attention=default_attention(a)[0]),
                       model_shape(a, g))
    counts, rows = stage_rows(job, job.phases, 2)
    assert counts[0] == cut.layers
    got, want = max(sum(r) for _, r in rows), max(cut.first, cut.second)
    assert abs(got - want) <= 0.002 * want, (mid, got, want)


@pytest.mark.parametrize("grad_ckpt", [False, True])
def test_the_ends_activations_are_the_first_and_last_stages_alone(grad_ckpt: bool) -> None:
    """A full fine-tune's embedding output is the first stage's, the head's and the loss's the last stage's
    (Phase.embed_activations, head_activations); the layers between hold neither. On four stages of a model whose
    layers are alike, a middle stage holds what the first holds less the embedding's, and the last holds the head's
    on top of its layers' share."""
    job = _checkpointed("meta-llama/Llama-3.1-8B", method="full", grad_ckpt=grad_ckpt)
    loss = next(ph for ph in job.phases if ph.name.startswith("loss") or ph.name == "backward (activations)")
    assert loss.embed_activations > 0 and loss.head_activations > 0
    assert all(ph.embed_activations + ph.head_activations + ph.stage_whole <= ph.activations for ph in job.phases)
    act = PARTS.index("activations")
    even = dataclasses.replace(job, engine_cut=True)  # vLLM's cut: 8 of Llama-3.1-8B's 32 layers a stage
    counts, rows = stage_rows(even, (loss,), 4, ckpt=grad_ckpt)
    assert counts == (8, 8, 8, 8)  # the same layers on every stage: the ends alone differ
    first, middle, last = (r[act] for _, r in rows)
    assert first - middle == pytest.approx(loss.embed_activations, abs=2)
    assert last - middle == pytest.approx(loss.head_activations, abs=2)


def test_a_stages_activations_follow_its_own_layers() -> None:
    """Without checkpointing each layer keeps its own activations (SingleGpuJob.layer_activations): DeepSeek-V2-Lite's
    dense first layer keeps less than its MoE layers, so the stage holding it holds less than an even share; a
    checkpointed stage's layers keep their inputs alone, alike, and share evenly."""
    a, g = _model(LITE)
    job = training_job(a, g, S, site_job("lora", S.lora_rank, tokens=2048), model_shape(a, g))
    per = job.layer_activations
    assert len(per) == job.layers and per[0] < min(per[1:])
    act = PARTS.index("activations")
    loss = job.phases[0]
    rest = loss.activations - loss.stage_whole - loss.embed_activations - loss.head_activations
    counts, rows = stage_rows(job, (loss,), 2)
    first = rows[0][1][act] - loss.stage_whole - loss.embed_activations
    assert first == pytest.approx(rest * sum(per[:counts[0]]) / sum(per), rel=1e-6)
    assert first < rest * counts[0] / job.layers
    even = stage_rows(job, (loss,), 2, ckpt=True)[1][0][1][act] - loss.stage_whole - loss.embed_activations
    assert even == pytest.approx(rest * counts[0] / job.layers, rel=1e-6)


def test_every_stage_holds_its_own_last_frozen_mlps_backward() -> None:
    """LoRA on q and v leaves every down projection frozen: the backward's first layer holds its MLP's backward
    (F65) beside every layer's saved tensors, and so does each stage's last layer when its backward starts, so the
    final-norm phase's MLP part is whole on every stage (stage_whole) and only the final norm's excess over it is
    the last stage's. Left on the last stage alone, Mistral-7B's pipeline of 8 read 5.81 GB a GPU where each stage
    holds 6.19."""
    a, g = _model("mistralai/Mistral-7B-v0.1")
    job = training_job(a, g, S, Job(method="lora", lora_targets="q_proj,v_proj", tokens=4096), model_shape(a, g),
                       both=False)
    norm = next(ph for ph in job.phases if ph.name == "backward (the final norm)")
    assert norm.stage_whole > norm.head_activations > 0
    act = PARTS.index("activations")
    counts, rows = stage_rows(dataclasses.replace(job, engine_cut=True), (norm,), 8)
    assert counts == (4,) * 8
    rest = norm.activations - norm.stage_whole - norm.embed_activations - norm.head_activations
    first, middle, last = (r[act] for _, r in rows)
    assert middle == pytest.approx(norm.stage_whole + rest / 8, abs=2)
    assert first - middle == pytest.approx(norm.embed_activations, abs=2)
    assert last - middle == pytest.approx(norm.head_activations, abs=2)


def test_a_chunked_loss_transient_is_the_last_stages_alone() -> None:
    """TRL's chunked loss (its fp32 copy of the head's weight and a chunk's logits) runs where the head is: the last
    stage holds it (Phase.last_stage), the stages before it do not; on one GPU the peak is unchanged."""
    a, g = _model("meta-llama/Llama-3.1-8B")
    job = training_job(a, g, S, Job(method="lora", loss="trl-chunked", tokens=2048), model_shape(a, g), both=False)
    loss = job.phases[0]
    assert loss.last_stage > 0 and loss.overhead_fixed == 0
    over = PARTS.index("overhead")
    even = dataclasses.replace(job, engine_cut=True)
    _, rows = stage_rows(even, (loss,), 4)
    first, middle, last = (r[over] for _, r in rows)
    assert first == middle and last - middle >= loss.last_stage
    _, one = stage_rows(job, (loss,), 1)
    assert sum(one[0][1]) == pytest.approx(loss.total_bytes, abs=8)


@pytest.mark.parametrize(("mid", "tokens"), [("Qwen/Qwen-1_8B-Chat", 2048), ("Qwen/Qwen3-8B", 4096),
                                             ("HuggingFaceTB/SmolLM-135M-Instruct", 2048), ("Qwen/Qwen3-0.6B", 4096)])
def test_a_full_fine_tunes_autocast_copies_follow_the_matmul_weights(mid: str, tokens: int) -> None:
    """autocast caches a bf16 copy of each trained weight a matmul reads (F3): the embedding's lookup reads none,
    the head reads its whole (a tied one's too, on the last stage). Shared out by parameters, the setups' two
    stages read up to 1.4% under the card table's split (Qwen-1_8B-Chat 19.12 GB against 19.38) and 2.2% over
    (Qwen3-0.6B at 4,096 tokens); by matmul weights (SingleGpuJob.end_matmul, layer_matmul) they agree."""
    a, g = _model(mid)
    tokens = min(tokens, a.max_context)
    cut = best_cut(train_profile(a, g, S, tokens, "full", S.lora_rank, {}))
    job = training_job(a, g, S, site_job("full", S.lora_rank, tokens=tokens, attention=default_attention(a)[0]),
                       model_shape(a, g))
    counts, rows = stage_rows(job, job.phases, 2)
    assert counts[0] == cut.layers
    got, want = max(sum(r) for _, r in rows), max(cut.first, cut.second)
    assert abs(got - want) <= 0.001 * want, (mid, got, want)
