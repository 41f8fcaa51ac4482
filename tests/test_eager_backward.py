"""Eager attention's scores and their backward: what each family's eager code keeps per score element (the softmax
in its own dtype, a sink, a dropout mask) and the moment its softmax runs its backward, when the gradients of the
probabilities and of the scores live beside the layer's saved softmax (FINDINGS.md F17). Reference values:
CPU-simulated steps of transformers' class-default configs (data/measurements/cpu-sim-extra.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import regime
from generator.estimator.memory.attention import eager_backward_bytes, score_bytes
from generator.estimator.memory.job import job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.profile import train_profile
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements"
S = load_settings().assumptions
LATE = "backward (attention scores' gradients)"


def _model(name: str, **changes):
    path = DATA / "configs" / f"{name}.json"
    if not path.exists():
        path = DATA / "configs" / "families" / f"{name}.json"
    arch = normalise({**json.loads(path.read_text(encoding="utf-8")), "num_hidden_layers": 2, **changes}, name)
    return arch, build_graph(arch)


LORA_CUDA, LORA_CPU = regime("lora", "amp"), regime("lora", "amp", cpu=True)
FULL_CUDA, LORA_BF16 = regime("full", "amp"), regime("lora", "bf16")


@pytest.mark.parametrize("name, changes, r, expected", [
    # transformers' eager_attention_forward: fp32 softmax (4) and its bf16 cast for the AV matmul (2)
    ("llama", {}, LORA_CUDA, 6),
    # attention dropout: its mask (bool on CUDA, the input's bf16 on the CPU) and the dropped probabilities in
    # place of the cast ones
    ("llama", {"attention_dropout": 0.1}, LORA_CUDA, 4 + 1 + 2),
    ("llama", {"attention_dropout": 0.1}, LORA_CPU, 4 + 2 + 2),
    # modeling_gpt_oss.eager_attention_forward: softmax(dtype=combined_logits.dtype) over the scores and the sinks
    # (the frozen base's bf16; a full fine-tune's fp32 sinks promote the cat to fp32, then cast to bf16)
    ("gpt_oss", {}, LORA_CUDA, 2),
    ("gpt_oss", {}, LORA_BF16, 2),
    ("gpt_oss", {}, FULL_CUDA, 4 + 2),
    # modeling_hy_v4 keeps its sinks in fp32 (_keep_in_fp32_modules_strict): an fp32 concatenation, softmax and cast
    ("hy_v4", {}, LORA_CUDA, 4 + 2),
    # modeling_gpt_neo: fp32 q and k, a softmax naming no dtype: fp32 under CUDA autocast (softmax is on its fp32
    # list) and cast to bf16; bf16 under CPU autocast, whose cast to the value's dtype is a no-op
    ("gpt_neo", {}, LORA_CUDA, 4 + 2),
    ("gpt_neo", {}, LORA_CPU, 2),
])
def test_bytes_kept_per_score(name, changes, r, expected):
    a, _ = _model(name, **changes)
    assert score_bytes(a, r.compute_bytes, r) == expected


@pytest.mark.parametrize("name, changes, r, per_score", [
    # the fp32 gradients of the probabilities and of the scores beside the saved fp32 softmax; the bf16
    # probabilities (and a dropout's mask) freed: 4 + 4 - 2 (- 1)
    ("llama", {}, LORA_CUDA, 6),
    ("llama", {"attention_dropout": 0.1}, LORA_CUDA, 5),
    # a softmax in bf16 with no cast: two bf16 gradients
    ("gpt_oss", {}, LORA_CUDA, 4),
    # never under one compute-dtype gradient (the AV matmul's backward), as xglm's bf16 CPU softmax with dropout
    ("xglm", {}, LORA_CPU, 2),
])
def test_softmax_backward_bytes_per_score(name, changes, r, per_score):
    a, g = _model(name, **changes)
    block = g.spec.blocks[0]
    heads = max(p.act32 for p in block.parts if p.attn_flops)
    assert eager_backward_bytes(a, block, r) == (0, heads * per_score)


def test_the_phase_exists_for_eager_attention_only():
    a, g = _model("llama")
    eager = {ph.name for ph in job_phases(a, g, S, Job(method="lora", tokens=1024, attention="eager"))}
    sdpa = {ph.name for ph in job_phases(a, g, S, Job(method="lora", tokens=1024, attention="sdpa"))}
    assert LATE in eager and LATE not in sdpa
    # checkpointed: the recomputed layer's softmax backward is the peak of a long sequence
    ckpt = job_memory(a, g, S, Job(method="lora", tokens=4096, attention="eager", grad_ckpt=True))
    assert ckpt.peak_phase == LATE


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss", "phi", "xglm"])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_site_profiles_of_eager_models_equal_their_jobs_at_any_tokens_and_batch(name, method):
    # classes without SDPA run eager by default; the profile's branches must give the job's peak everywhere,
    # including short sequences where the freed MLP tensors outweigh the score gradients
    a, g = _model(name)
    for tokens in (64, 512, 2048, 8192):
        profile = train_profile(a, g, S, tokens, method, 16)
        for batch in (1, 3):
            job = job_memory(a, g, S, Job(method=method, tokens=tokens, batch=batch))
            assert job.peak_bytes == profile.total(batch), (tokens, batch)
            assert (job.peak_phase == LATE) == (profile.peak_phase(batch) == LATE), (tokens, batch)
        base = train_profile(a, g, S, 512, method, 16)
        assert base.total_at(tokens, 2) == profile.total(2)


@hsettings(max_examples=30, deadline=None)
@given(tokens=st.integers(16, 4096), batch=st.integers(1, 8), ckpt=st.booleans(), full=st.booleans())
def test_memory_never_falls_as_batch_or_sequence_grows(tokens, batch, ckpt, full):
    a, g = _model("llama")
    job = Job(method="full" if full else "lora", tokens=tokens, batch=batch, attention="eager", grad_ckpt=ckpt)
    peak = job_memory(a, g, S, job).peak_bytes
    assert job_memory(a, g, S, Job(**{**vars(job), "tokens": tokens + 1})).peak_bytes >= peak
    assert job_memory(a, g, S, Job(**{**vars(job), "batch": batch + 1})).peak_bytes >= peak


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_largest_batch_is_held_against_every_branch(batch):
    a, g = _model("llama", vocab_size=1024)
    profile = train_profile(a, g, S, 2048, "lora", 16)
    budget = profile.total(batch)
    fits = profile.max_batch(budget)
    assert fits >= batch and profile.total(fits) <= budget < profile.total(fits + 1)


# F17's runs: the eager models' checkpointed LoRA, long sequences, full fine-tunes, pure bf16, attention dropout,
# sinks and CPU autocast's bf16 softmax, each measured in cpu-sim-extra.jsonl
F17 = {"llama", "mistral", "diffllama", "phi", "xglm", "gpt_oss", "granite_swa", "mpt", "vaultgemma", "gemma2",
       "gpt_neo", "bloom", "mimo_v2_flash", "flint"}


def test_eager_runs_are_priced_within_five_percent():
    rows = [r for r in measured_rows("cpu-sim-extra")
            if Path(r["model"]).stem in F17 and r["setup"]["attention"] == "eager"
            and r["measured"]["status"] == "ok" and r["setup"]["tokens"] >= 2048]
    assert len(rows) >= 24
    errors = {}
    for row in rows:
        estimate = estimate_bytes(row, S)  # the row-to-job mapping /accuracy/ uses
        assert estimate is not None, row["setup"]
        measured = row["measured"]["peak_bytes"]
        errors[(Path(row["model"]).stem, row["setup"]["method"], row["setup"]["grad_ckpt"],
                row["setup"]["tokens"])] = (estimate - measured) / measured
    for key, error in errors.items():  # bloom's checkpointed forward, left by F17, priced since F57
        assert abs(error) < 0.05, (key, error)


def test_gpt_neox_japanese_scores_take_the_residual_dtype():
    """modeling_gpt_neox_japanese._attn: baddbmm into zeros of the query's dtype, the mask added, a softmax naming
    no dtype. Under CPU autocast a LoRA step's scores and softmax are bf16 and its dropout mask too; a full
    fine-tune's are fp32 (the rotary embedding follows the fp32 embedding output). At 2,048 tokens the peak is the
    forward of the last attention (the zeros and the masked scores beside the softmax), F22's left part, priced
    since F57 (attention.eager_forward_excess): every row within 3%."""
    rows = {(r["setup"]["method"], r["setup"]["precision"], r["setup"]["tokens"]): r
            for r in measured_rows("cpu-sim-extra") if r["model_type"] == "gpt_neox_japanese"
            and r["setup"]["method"] != "inference"}  # F81's generate row: test_memory_setups
    assert set(rows) == {("lora", "amp", 512), ("lora", "amp", 1024), ("lora", "amp", 2048), ("lora", "bf16", 2048),
                         ("full", "amp", 512), ("full", "amp", 2048)}
    errors = {k: (estimate_bytes(r, S) - r["measured"]["peak_bytes"]) / r["measured"]["peak_bytes"]
              for k, r in rows.items()}
    assert all(abs(e) < 0.03 for e in errors.values()), errors
    a, _ = _model("gpt_neox_japanese")
    assert score_bytes(a, 2, LORA_CPU) == 2 + 2 + 2  # bf16 softmax, bf16 mask, the dropped probabilities
    assert score_bytes(a, 2, LORA_CUDA) == 4 + 1 + 2  # fp32 softmax (autocast), bool mask, their bf16 cast
    # without autocast the softmax keeps its input's dtype on CUDA too: pure bf16, and serving (no regime)
    assert score_bytes(a, 2, regime("lora", "bf16")) == 2 + 1 + 2
    assert score_bytes(a, 2) == 2
