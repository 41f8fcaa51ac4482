"""Models whose transformers classes cannot checkpoint their layers (supports_gradient_checkpointing False:
PreTrainedModel's gradient checkpointing raises ValueError, so neither the Trainer's gradient_checkpointing=True nor
peft's prepare_model_for_kbit_training runs on them). The CPU harness hit it on ctrl, openai-gpt and jetmoe: the
estimate had offered QLoRA "with gradient checkpointing" for JetMoE and priced `--grad-ckpt` on CTRL. No setup,
site job or recipe is priced checkpointed on them; asking for it is one clear error."""

from __future__ import annotations

import json

import pytest
import transformers
from transformers import CONFIG_MAPPING

from generator.cli import main
from generator.errors import JobError
from generator.estimator import estimate
from generator.estimator.config.transformers_defaults import NO_GRADIENT_CHECKPOINTING
from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job, checkpoints
from generator.estimator.memory.kinds import kinds
from generator.estimator.normalise import normalise
from generator.settings import load_settings

S = Assumptions()


def _config(model_type: str, **changes) -> dict:
    return {**CONFIG_MAPPING[model_type]().to_dict(), **changes}


def test_the_table_is_transformers_own() -> None:
    """Each type's classes refuse (the table is generated from them: tests/test_oracle_defaults.py holds it to the
    installed release); the common decoders and encoders checkpoint."""
    for name in ("CTRLLMHeadModel", "OpenAIGPTLMHeadModel", "JetMoeForCausalLM", "XLNetLMHeadModel"):
        assert not getattr(transformers, name).supports_gradient_checkpointing, name
    assert {"ctrl", "openai-gpt", "jetmoe", "xlnet", "albert"} <= NO_GRADIENT_CHECKPOINTING
    for name in ("LlamaForCausalLM", "GPT2LMHeadModel", "BertForMaskedLM", "MixtralForCausalLM"):
        assert getattr(transformers, name).supports_gradient_checkpointing, name
    assert not NO_GRADIENT_CHECKPOINTING & {"llama", "gpt2", "bert", "mixtral", "qwen3_moe", "t5"}


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_without_checkpointing_every_kind_runs_without_it(method: str) -> None:
    for offload in (False, True):
        got = kinds(method, offload=offload, checkpoints=False)
        assert got and not any(k.grad_ckpt for k in got)
        assert {k.strategy for k in got} == {k.strategy for k in kinds(method, offload=offload)}
        assert len(set(got)) == len(got)


def test_asking_for_it_is_one_error_naming_the_key() -> None:
    a = normalise(_config("ctrl", n_layer=2), "ctrl")
    g = build_graph(a)
    assert not checkpoints(a) and checkpoints(a, "litgpt-chunked")  # LitGPT's own blocks checkpoint
    with pytest.raises(JobError) as err:
        job_memory(a, g, S, Job(method="lora", grad_ckpt=True, tokens=256), "ctrl")
    assert (err.value.key, err.value.value) == ("grad_ckpt", True)
    assert "supports_gradient_checkpointing" in str(err.value)
    with pytest.raises(JobError) as err:
        job_memory(a, g, S, Job.from_options("trl-sft-qlora", tokens=256), "ctrl")
    assert "the trl-sft-qlora recipe turns it on: add --no-grad-ckpt" in str(err.value)
    assert job_memory(a, g, S, Job.from_options("trl-sft-qlora", tokens=256, grad_ckpt=False), "ctrl").peak_bytes > 0


def test_the_estimate_offers_no_checkpointed_setup() -> None:
    """JetMoE's class defaults: its QLoRA plan had read "1x H100 SXM with gradient checkpointing"; now every plan
    and floor runs without, the site's QLoRA job too, and the page says why."""
    st = load_settings()
    report = estimate(_config("jetmoe"), model_id="jetmoe", assumptions=st.assumptions, cards=st.cards,
                      gpus=st.gpus)
    assert report.plans and not any(p.grad_ckpt for p in report.plans)
    assert not any(f.grad_ckpt for f in report.plan_floors)
    assert {p.method for p in report.plans if p.fits} >= {"full", "lora", "qlora"}
    assert "cannot checkpoint" in {f.check: f.message for f in report.findings}["no_grad_ckpt"]
    llama = estimate({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
                     model_id="llama", assumptions=st.assumptions, cards=st.cards, gpus=st.gpus)
    assert any(p.grad_ckpt for p in llama.plans) and "no_grad_ckpt" not in {f.check for f in llama.findings}


def test_the_command_names_the_key(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config("ctrl", n_layer=2)))
    assert main([str(path), "--method", "lora", "--tokens", "256", "--grad-ckpt"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "key 'grad_ckpt' = True" in err
    assert main([str(path), "--method", "lora", "--tokens", "256"]) == 0
