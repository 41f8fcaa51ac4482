"""peft's all-linear adapts a vision-language model's tower and projector too (FINDINGS.md F73). Reference values: the
nn.Linears of each itemised model built on the meta device (AutoModelForImageTextToText.from_config, transformers
5.24), and the trainable parameters peft 0.21 gives it (get_peft_model, LoraConfig r 16)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from generator.errors import JobError
from generator.estimator.estimate import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job import job_memory, training_variants
from generator.estimator.memory.job_options import Job, job_regime
from generator.estimator.memory.layer_terms import all_linear_params
from generator.estimator.memory.tower_adapters import (
    image_bytes,
    tower_adapted,
    tower_adapter_bytes,
    tower_lora_params,
    tower_trained_params,
)
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import SNAPSHOT, measured_rows, priced_errors, snapshot_model

S = load_settings().assumptions
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs"
SNAPSHOT_VLMS = ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B", "google/gemma-3-27b-it",
                 "google/gemma-4-26B-A4B", "llava-hf/llava-1.5-7b-hf", "meta-llama/Llama-3.2-11B-Vision",
                 "mistralai/Magistral-Small-2509")
CLASS_DEFAULTS = ("idefics3", "internvl", "llava_next", "llava_onevision", "paligemma", "qwen2_vl", "qwen3_vl",
                  "qwen3_vl_moe", "smolvlm")
# the peft counts of two snapshot VLMs, all-linear r 16 on the meta device: text layers and towers
PEFT_ALL_LINEAR = {"Qwen/Qwen2.5-VL-7B-Instruct": (51_824_640, 11_454_464),
                   "llava-hf/llava-1.5-7b-hf": (47_267_840, 7_290_880)}
TEXT = ("language_model", "text_model", "lm_head")


def _snapshot_config(repo: str) -> dict:
    from generator.hub.snapshot import load_record

    record = load_record(SNAPSHOT, repo)
    assert record is not None
    return json.loads(record.config_json)


def _configs() -> list[tuple[str, dict]]:
    return [(repo, _snapshot_config(repo)) for repo in SNAPSHOT_VLMS] + [
        (stem, json.loads((CONFIGS / f"{stem}.json").read_text(encoding="utf-8"))) for stem in CLASS_DEFAULTS]


def _meta_model(cfg: dict):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**json.loads(json.dumps(cfg)))
    with torch.device("meta"):
        return transformers.AutoModelForImageTextToText.from_config(config)


@pytest.mark.parametrize(("name", "cfg"), _configs(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_towers_linears_are_the_models(name, cfg):
    """Every nn.Linear outside the language model, by (name, in, out) and count, is one the inventory lists."""
    import torch

    model = _meta_model(cfg)
    theirs = Counter((n.rsplit(".", 1)[-1], m.in_features, m.out_features) for n, m in model.named_modules()
                     if isinstance(m, torch.nn.Linear) and not any(t in n for t in TEXT))
    a = normalise(cfg, name)
    ours: Counter = Counter()
    for count, i, o, _, module, _, _ in build_graph(a).spec.tower_linears or ():
        ours[(module, i, o)] += count
    assert ours == theirs, name


@pytest.mark.parametrize("repo", sorted(PEFT_ALL_LINEAR))
def test_all_linear_counts_what_peft_adapts(repo):
    """The site's LoRA count (all_linear_params, the report's lora_adapter) is peft's, the towers' adapters in it."""
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_meta_model(_snapshot_config(repo)), peft.LoraConfig(r=16, target_modules="all-linear"))
    trained = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    towers = sum(v for n, v in trained.items() if not any(t in n for t in TEXT))
    assert (sum(trained.values()), towers) == PEFT_ALL_LINEAR[repo]
    a, g = snapshot_model(repo)
    assert all_linear_params(a, g, 16) == PEFT_ALL_LINEAR[repo][0]
    assert tower_lora_params(tower_adapted(g.spec, "all-linear", a.model_type), 16) == towers


def test_a_target_name_adapts_the_towers_linears_of_that_name():
    """peft matches a target by its module name's last component: q_proj and v_proj are the CLIP tower's too, not the
    projector's (linear_1, linear_2); gate_proj names no tower Linear of llava-1.5."""
    a, g = snapshot_model("llava-hf/llava-1.5-7b-hf")
    qv = tower_adapted(g.spec, "q_proj,v_proj", a.model_type)
    assert {x[4] for x in qv} == {"q_proj", "v_proj"} and tower_lora_params(qv, 16) == 24 * 2 * 16 * 2048
    assert tower_adapted(g.spec, "gate_proj,up_proj,down_proj", a.model_type) == ()
    assert tower_adapted(g.spec, "q,v", a.model_type) == ()  # LitGPT's roles: its own model code, no tower


def test_a_text_only_step_trains_no_tower_adapter():
    """peft makes the towers' adapters whatever the step feeds, so their weights count; only a step with an image
    gives them a gradient and AdamW state, but for the CLIP layer above the one llava's projector reads
    (vision_feature_layer -2: hidden_states[-2]), which runs in the forward only."""
    a, g = snapshot_model("llava-hf/llava-1.5-7b-hf")
    adapted = tower_adapted(g.spec, "all-linear", a.model_type)
    towers = tower_trained_params(adapted, 16)
    assert towers == tower_lora_params(adapted, 16) - 16 * (4 * 2048 + 2 * 5120)  # layer 24: q, k, v, o, fc1, fc2
    runs = [training_variants(a, g, S, Job(method="lora", tokens=1024, images=n), (False,)) for n in (0, 1)]
    assert runs[1][1] - runs[0][1] == towers
    assert runs[0][0][0][0].weights == runs[1][0][0][0].weights
    assert runs[1][0][0][0].optimizer_state - runs[0][0][0][0].optimizer_state == 8 * towers  # two fp32 moments


def test_a_tower_not_itemised_is_said_so():
    """BLIP-2's towers are not in families/tower_linears.py: the report says its LoRA leaves their adapters out;
    llava-1.5's are, and nothing is said."""
    pytest.importorskip("transformers")
    from tests.test_oracle_support import config_forms

    settings = load_settings()
    for cfg, said in ((config_forms("blip-2", None)["defaults"], ["tower_adapters"]),
                      (_snapshot_config("llava-hf/llava-1.5-7b-hf"), [])):
        assert isinstance(cfg, dict)
        report = estimate(cfg, model_id="m", assumptions=settings.assumptions, cards=settings.cards,
                          gpus=settings.gpus)
        assert [f.check for f in report.findings if f.check == "tower_adapters"] == said


# the one row over 1.3%, and why: its text layers' first attention has no adapter on a frozen input, so it keeps
# nothing, which the estimate prices for the first layer's norm alone (frozen_embedding_bytes)
MLP_ONLY = "gate_proj,up_proj,down_proj"


def test_the_simulated_llava_steps_with_images():
    """llava-1.5-7b, its 24-layer CLIP tower whole and two text layers, CPU-simulated with one or two synthetic
    images per sample (measure --images): LoRA on every Linear, on q and v, on the MLP alone, with dropout, bf16
    adapters, checkpointing; QLoRA; full fine-tunes. Priced within 1.3% (2.5% the MLP-only row), where they read
    -18.8% to +23.7% before the towers' adapters and a frozen or checkpointed tower were priced."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"] == "llava-hf/llava-1.5-7b-hf"
            and r["config"]["text_config"].get("num_hidden_layers") == 2 and r["setup"]["method"] != "inference"]
    assert len(rows) == 18 and sum(1 for r in rows if r["setup"]["images"]) == 15
    for error, row in priced_errors(rows):
        bound = 0.025 if row["setup"]["lora_targets"] == MLP_ONLY else 0.013
        assert abs(error) < bound, (row["setup"], error)


def test_frozen_towers_take_no_adapter_and_an_image_keeps_nothing():
    """--no-tower-adapters (LLaMA-Factory's freeze_vision_tower and freeze_multi_modal_projector, ms-swift's
    freeze_vit and freeze_aligner): LoRA on the text model's Linears alone. The tower and projector are then frozen
    and off the gradient's path, so an image adds nothing to the peak (the MLP-only llava step above measured 1 MB),
    and their recipes say so."""
    a, g = snapshot_model("llava-hf/llava-1.5-7b-hf")
    jobs = {(towers, n): job_memory(a, g, S, Job(method="lora", tokens=2048, images=n, tower_adapters=towers))
            for towers in (True, False) for n in (0, 1)}
    assert jobs[(False, 1)] == jobs[(False, 0)]
    assert jobs[(True, 1)].peak_bytes > jobs[(True, 0)].peak_bytes > jobs[(False, 0)].peak_bytes
    runs = {towers: training_variants(a, g, S, Job(method="lora", tokens=2048, tower_adapters=towers), (False,))[1]
            for towers in (True, False)}
    assert runs[True] - runs[False] == tower_trained_params(tower_adapted(g.spec, "all-linear", a.model_type), 16)
    for recipe in ("llama-factory", "llama-factory-qlora", "ms-swift", "ms-swift-qlora"):
        assert Job.from_options(recipe).tower_adapters is False
    assert Job.from_options("trl-sft-qlora").tower_adapters is True


def test_cli_tower_adapters(capsys):
    from generator.cli import main

    code = main(["llava-hf/llava-1.5-7b-hf", "--method", "lora", "--no-tower-adapters", "--json"])
    job = json.loads(capsys.readouterr().out)["memory"]["job"]
    assert code == 0 and job["tower_adapters"] is False
    code = main(["llava-hf/llava-1.5-7b-hf", "--method", "lora", "--no-tower-adapters"])
    assert code == 0 and "r=16 on all-linear of the text model" in " ".join(capsys.readouterr().out.split())


def test_the_towers_saved_tensors_per_image():
    """A ViT layer keeps 8 x hidden + 2 x MLP width per patch when it trains (its Linears' inputs, q, k, v, SDPA's
    output, two norms' inputs, the activation's input); CLIP's quick_gelu keeps its sigmoid too (+1 x MLP width).
    mllama's tower runs every tile's 1,025 patches padded to 1,032 through 32 + 8 layers and keeps the layers' shared
    [4,128 x 4,128] mask (it had been priced at 12 x hidden per patch for the whole tower: -44% on its image step).
    Frozen, the layers keep 2 x hidden + 1 x MLP width fewer: no Linear keeps its input (tower_adapters.image_bytes);
    on a GPU its LayerNorms keep their inputs in fp32, 2 x hidden more (F77)."""
    _, g = snapshot_model("llava-hf/llava-1.5-7b-hf")
    assert g.spec.vision_act == 576 * 24 * (8 * 1024 + 3 * 4096)
    a, g = snapshot_model("meta-llama/Llama-3.2-11B-Vision")
    assert g.spec.vision_act == 4128 * 40 * (8 * 1280 + 2 * 5120) + 4128 * 4128
    trained, frozen = (image_bytes(g.spec, (), 16, job_regime(Job(method=m)), a.model_type)[0]
                       for m in ("full", "lora"))
    adapted = tower_adapted(g.spec, "all-linear", a.model_type)
    lora = image_bytes(g.spec, adapted, 16, job_regime(Job(method="lora")), a.model_type)[0]
    assert trained == 2 * g.spec.vision_act and frozen == 0  # no adapter on a frozen tower: nothing kept
    assert lora - tower_adapter_bytes(adapted, 16, job_regime(Job(method="lora"))) \
        == 2 * g.spec.vision_act - 2 * 4128 * 40 * (2 * 1280 + 5120) + 2 * 4128 * 40 * 2 * 1280  # no projector input


def test_the_simulated_gemma_3_and_mllama_steps_with_an_image():
    """gemma-3-27b (two text layers, its SigLIP tower whole: 4,096 patches through 27 layers) and
    Llama-3.2-11B-Vision (four text layers, its 40-layer tower over four tiles; a full fine-tune too), one image,
    512 tokens: within 2%
    (gemma-3's LoRA read +10.5% before the frozen tower's Linears kept no input; mllama's -44% before its tower's
    layers were counted, and its TRL QLoRA -16% before its unchecked tower's stream and MLP activation were fp32
    after prepare_model_for_kbit_training)."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"] in ("google/gemma-3-27b-it", MLLAMA)
            and r["setup"]["tokens"] == 512 and r["setup"]["images"] == 1]
    assert len(rows) == 10 and sum(1 for r in rows if r["setup"]["upcast_fp32"]) == 2
    for error, row in priced_errors(rows):
        assert abs(error) < 0.02, (row["model"], row["setup"], error)


MLLAMA = "meta-llama/Llama-3.2-11B-Vision"


def test_a_target_naming_only_tower_linears_is_taken():
    """peft takes a name only the tower carries (llava's fc1 and fc2, CLIP's MLP): its adapters are the tower's
    alone; a name no Linear carries is refused, the towers' names among those listed."""
    a, g = snapshot_model("llava-hf/llava-1.5-7b-hf")
    trained = training_variants(a, g, S, Job(method="lora", tokens=1024, lora_targets="fc1,fc2"), (False,))[1]
    assert trained == 23 * 16 * 2 * (1024 + 4096)  # the 23 layers the projector reads
    with pytest.raises(JobError, match="its names: .*fc1.*linear_1"):
        training_variants(a, g, S, Job(method="lora", tokens=1024, lora_targets="nope"), (False,))


def test_gemma4_refuses_target_names_its_tower_wraps():
    """Gemma-4's tower holds each Linear in a Gemma4ClippableLinear named q_proj ... down_proj, which peft matches to
    a target name and refuses (the harness's own q_proj,v_proj step failed so, peft 0.21): a job naming one is
    refused naming it, unless the tower is left out; all-linear adapts the Linears inside, and peft's default for
    gemma4 is a pattern over the language model. gemma-3's SigLIP names its Linears q_proj ... itself: taken."""
    a, g = snapshot_model("google/gemma-4-26B-A4B")
    for targets in ("q_proj,v_proj", "up_proj"):
        with pytest.raises(JobError, match="peft cannot adapt gemma4's vision tower module of that name"):
            job_memory(a, g, S, Job(method="lora", tokens=1024, lora_targets=targets))
    assert job_memory(a, g, S, Job(method="qlora", tokens=1024, lora_targets="q_proj,v_proj", tower_adapters=False))
    assert job_memory(a, g, S, Job(method="lora", tokens=1024)) == job_memory(a, g, S, Job(method="lora", tokens=1024,
                                                                                           lora_targets="all-linear"))
    assert job_memory(a, g, S, Job(method="lora", tokens=1024, lora_targets="peft-default"))
    a, g = snapshot_model("google/gemma-3-27b-it")
    assert job_memory(a, g, S, Job(method="lora", tokens=1024, lora_targets="q_proj,v_proj"))


def test_gemma_3_with_its_text_layers_holding_most():
    """gemma-3-27b at six text layers (one global) and 2,048 tokens: the image's share is priced within 1%, with
    checkpointing and without, and under the site's QLoRA (its tower's own backward, not priced as a phase, peaks
    only where the text is small)."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"] == "google/gemma-3-27b-it"
            and r["setup"]["tokens"] == 2048 and r["setup"]["images"] is not None
            and r["config"]["text_config"]["num_hidden_layers"] == 6]
    assert len(rows) == 5
    for error, row in priced_errors(rows):
        assert abs(error) < 0.01, (row["setup"], error)
