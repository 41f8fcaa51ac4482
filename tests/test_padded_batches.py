"""A batch padded to its longest sample (Job.padded, --padded; FINDINGS.md F72): transformers hands SDPA a [B, 1, T, T]
bool mask in every layer (masking_utils._ignore_causal_mask_sdpa keeps it where any token is padded), which torch
converts to the query's dtype per call and the kernel saves, and with a mask GQA's k and v are repeated to every head
(F11's terms, in every layer). Reference values: the CPU-simulated padded steps of cpu-sim-extra.jsonl (every sample
but the first padded on its last quarter); Mistral-7B's LoRA step on q and v read -4.5% priced unpadded."""

from __future__ import annotations

import dataclasses
import json

import pytest

from generator.cli import main
from generator.errors import JobError
from generator.estimator.memory.activations import regime
from generator.estimator.memory.attention import masked_sdpa_windows
from generator.estimator.memory.job import job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.recipes import RECIPES
from generator.settings import load_settings
from tests.conftest import measured_rows, priced_errors, snapshot_model

S = load_settings().assumptions
MISTRAL = "mistralai/Mistral-7B-v0.1"  # 32 heads, 8 KV heads of 128


def test_every_attention_layer_keeps_the_mask_and_the_repeated_kv():
    """Per layer: the converted mask, 2 B per token squared; k and v repeated to 24 more heads, 2 x 24 x 128 x 2 B per
    token. Unpadded, Mistral-7B hands SDPA no mask below its 4,096-token window."""
    a, g = snapshot_model(MISTRAL)
    block = g.spec.blocks[0]
    padded = regime("lora", "amp")._replace(padded=True)
    assert masked_sdpa_windows(a, block, padded) == ((1, 2 * 24 * 128 * 2, 2),)
    assert masked_sdpa_windows(a, block, regime("lora", "amp")) == ((4096, 2 * 24 * 128 * 2, 2),)


def test_a_padded_batch_adds_both_terms_to_each_layer():
    """Without checkpointing every layer holds them; one sample cannot be padded (transformers drops an all-ones
    mask); generate is refused."""
    a, g = snapshot_model(MISTRAL)
    job = Job(method="lora", batch=4, tokens=1024, lora_targets="q_proj,v_proj")

    def activations(j):
        return {p.name: p.activations for p in job_phases(a, g, S, j)}["backward (activations)"]

    per_layer = 4 * (1024 * 1024 * 2 + 1024 * 2 * 24 * 128 * 2)
    assert activations(dataclasses.replace(job, padded=True)) - activations(job) == 32 * per_layer
    one = Job(method="lora", batch=1, tokens=1024)
    assert job_memory(a, g, S, dataclasses.replace(one, padded=True)) == job_memory(a, g, S, one)
    with pytest.raises(JobError, match="padded"):
        job_memory(a, g, S, Job(method="inference", batch=4, tokens=512, new_tokens=4, padded=True))


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("grad_ckpt", [False, True])
def test_padding_never_lowers_the_peak(method, grad_ckpt):
    a, g = snapshot_model(MISTRAL)
    job = Job(method=method, batch=4, tokens=2048, grad_ckpt=grad_ckpt)
    assert job_memory(a, g, S, dataclasses.replace(job, padded=True)).peak_bytes >= job_memory(a, g, S, job).peak_bytes


def test_the_simulated_padded_steps():
    """Seven padded steps (Mistral-7B LoRA with and without checkpointing and its full fine-tune, Llama's class
    defaults, gemma-3-1b, Llama-3.2-1B's LoRA and TRL QLoRA): within 0.5%."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"].get("padded")]
    assert len(rows) == 7
    for error, row in priced_errors(rows):
        assert abs(error) < 0.005, (row["model"], row["setup"]["method"], error)


def test_cli_padded(capsys):
    code = main([MISTRAL, "--method", "lora", "--batch", "8", "--tokens", "2048", "--padded", "--json"])
    padded = json.loads(capsys.readouterr().out)["memory"]
    assert code == 0 and padded["job"]["padded"] is True
    code = main([MISTRAL, "--method", "lora", "--batch", "8", "--tokens", "2048", "--json"])
    plain = json.loads(capsys.readouterr().out)["memory"]
    assert code == 0 and plain["job"]["padded"] is False and padded["peak_bytes"] > plain["peak_bytes"]
    code = main([MISTRAL, "--method", "lora", "--batch", "8", "--tokens", "2048", "--padded"])
    assert code == 0 and "batch 8 x 2,048 tokens padded to its longest" in " ".join(capsys.readouterr().out.split())
    code = main([MISTRAL, "--method", "inference", "--padded"])
    err = capsys.readouterr().err
    assert code == 2 and "'padded'" in err and err.count("\n") == 1


def test_the_trl_recipes_pad_their_batches():
    """TRL's SFTTrainer leaves packing and padding_free off, so its collator pads each batch to its longest sample
    and passes the mask (recipes.TRL_PADS), as LLaMA-Factory's SFT collator (a DataCollatorForSeq2Seq) does: those
    recipes price a padded batch from batch 2; --no-padded takes it back; at batch 1 nothing is padded."""
    a, g = snapshot_model(MISTRAL)
    for recipe in ("trl-sft", "trl-sft-qlora", "llama-factory", "llama-factory-qlora", "ms-swift", "ms-swift-qlora"):
        padded = Job.from_options(recipe, batch=4, tokens=2048)
        assert padded.padded is True
        plain = Job.from_options(recipe, batch=4, tokens=2048, padded=False)
        # checkpointed: the recomputed layer holds them (the peak may stay at the loss's logits)
        recomputed = [{p.name: p.activations for p in job_phases(a, g, S, j)}[
            "backward (recomputing a checkpointed layer)"] for j in (padded, plain)]
        assert recomputed[0] > recomputed[1]
        assert job_memory(a, g, S, padded).peak_bytes >= job_memory(a, g, S, plain).peak_bytes
        one, one_plain = Job.from_options(recipe, tokens=2048), Job.from_options(recipe, tokens=2048, padded=False)
        assert job_memory(a, g, S, one) == job_memory(a, g, S, one_plain)
    assert Job.from_options("hf-trainer").padded is False


def test_every_recipe_says_why_it_pads_or_not():
    """A padded batch costs a mask and GQA's repeated k and v in every layer (F72), so each framework recipe cites the
    collator that decides it: padded with a mask (TRL, LLaMA-Factory, ms-swift), or no mask reaching SDPA (the
    Trainer's run_clm blocks, axolotl's packing, Unsloth's padding-free batches, LitGPT's and torchtune's collators,
    which pass no mask). A hand-written loop's batches are the user's."""
    padding = {"trl-sft", "trl-sft-qlora", "llama-factory", "llama-factory-qlora", "ms-swift", "ms-swift-qlora"}
    for name, r in RECIPES.items():
        assert dict(r.fields).get("padded", False) is (name in padding), name
        if name != "custom-loop":
            # a 4-bit variant's sources read "the rest as <its LoRA recipe>"
            base = RECIPES.get(name.removesuffix("-qlora"), r)
            assert any("pad" in source or "packing" in source for source in r.sources + base.sources), name
        assert "padded to their longest" not in r.summary or name in padding, name
