"""Adapter jobs run on transformers 4 where that release built the routed experts as nn.Linear modules
(storage.LINEAR_EXPERTS_V4, read off transformers 4.57.3's modeling files). bitsandbytes quantised them and peft's
all-linear adapted each, where the estimator prices transformers 5's 3-D expert tensors (bf16 under bitsandbytes,
adapted through ParamWrapper): several times the weights and adapters such a run holds. `--transformers-version 4.x`
on such a job is one clear error naming the key and the value, never transformers 5's figure under 4.x's name."""

from __future__ import annotations

import pytest

from generator.cli import main
from generator.errors import JobError
from generator.estimator.config.transformers_defaults import TENSOR_EXPERTS
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job, linear_experts_refusal
from generator.estimator.memory.lora import EXPERT_NAMES, FUSED_EXPERTS
from generator.estimator.memory.storage import LINEAR_EXPERTS_V4
from tests.conftest import snapshot_model

S = Assumptions()
QWEN_MOE, MIXTRAL, GPT_OSS = "Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x22B-v0.1", "openai/gpt-oss-20b"
V4 = "4.57.3"


def test_the_table_is_of_models_whose_experts_transformers_5_holds_as_tensors() -> None:
    """Each type in the table is priced with transformers 5's experts: 3-D tensors bitsandbytes keeps in bf16, or
    tensors peft's conversion adapts (else 4.x and 5 agree and nothing is refused); where the conversion maps the v4
    names onto the fused tensors, the table's Linears are the names it maps (lora.EXPERT_NAMES)."""
    assert set(LINEAR_EXPERTS_V4) <= TENSOR_EXPERTS | set(FUSED_EXPERTS)
    for model_type, names in LINEAR_EXPERTS_V4.items():
        pattern = FUSED_EXPERTS.get(model_type)
        if pattern:
            assert set(names) == set(EXPERT_NAMES[pattern]) - {"gate"}, model_type


@pytest.mark.parametrize(("method", "targets"), [("qlora", "all-linear"), ("qlora", "q_proj,v_proj"),
                                                 ("lora", "all-linear"), ("lora", "q_proj,gate_proj,up_proj")])
def test_an_adapter_job_that_quantises_or_adapts_the_experts_on_4x_is_refused(method: str, targets: str) -> None:
    a, g = snapshot_model(QWEN_MOE)
    job = Job(method=method, lora_targets=targets, transformers_version=V4)
    with pytest.raises(JobError) as err:
        job_memory(a, g, S, job, QWEN_MOE)
    assert (err.value.key, err.value.value) == ("transformers_version", V4)
    text = str(err.value)
    assert "nn.Linear" in text and "128 routed experts" in text and "omit --transformers-version" in text
    assert ("bitsandbytes quantises" in text) == (method == "qlora")
    assert ("peft adapts" in text) == (targets != "q_proj,v_proj")
    # the same job on transformers 5 is priced
    assert job_memory(a, g, S, Job(method=method, lora_targets=targets, transformers_version="5.0.0"),
                      QWEN_MOE).peak_bytes > 0


def test_mixtral_names_its_expert_linears_w1_w2_w3() -> None:
    a, g = snapshot_model(MIXTRAL)
    for targets, refused in (("w1,w2,w3", True), ("q_proj,w2", True), ("q_proj,v_proj", False), ("gate", False)):
        job = Job(method="lora", lora_targets=targets, transformers_version="4.46.0")
        assert bool(linear_experts_refusal(a, job)) == refused, targets


@pytest.mark.parametrize(("repo", "job"), [
    (QWEN_MOE, Job(method="lora", lora_targets="q_proj,v_proj")),  # the experts frozen in bf16 either way
    (QWEN_MOE, Job(method="full")),
    (QWEN_MOE, Job(method="qlora", loss="litgpt-chunked")),  # LitGPT's own model: transformers builds nothing
    (GPT_OSS, Job(method="qlora")),  # 3-D experts in 4.57.3 too: bf16 under bitsandbytes on either release
    ("meta-llama/Llama-3.1-8B", Job(method="qlora")),  # no experts
])
def test_what_4x_prices_as_transformers_5(repo: str, job: Job) -> None:
    """Where 4.x and 5 build the same thing for the job, the version changes nothing."""
    a, g = snapshot_model(repo)
    old = Job(**{**job.__dict__, "transformers_version": V4})
    assert linear_experts_refusal(a, old) == ""
    assert job_memory(a, g, S, old, repo).peak_bytes == job_memory(a, g, S, job, repo).peak_bytes


def test_the_command_names_the_key_and_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([QWEN_MOE, "--method", "qlora", "--transformers-version", V4]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"{QWEN_MOE}: key 'transformers_version' = '{V4}'" in err and "bitsandbytes quantises" in err
    assert main([QWEN_MOE, "--method", "lora", "--lora-targets", "q_proj,v_proj", "--transformers-version", V4]) == 0
    assert "peaks at" in capsys.readouterr().out
