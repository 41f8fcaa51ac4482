"""Images per training sample of a vision-language model (Job.images, --images; FINDINGS.md F39): the vision
tower's saved tensors count once per image, and a text-only full fine-tune keeps no gradient, AdamW state or
autocast copy for the towers it never runs."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from generator.accuracy_rows import estimate_bytes
from generator.cli import main
from generator.estimator.memory.job import job_memory, job_phases, training_variants
from generator.estimator.memory.job_options import Job, job_regime
from generator.estimator.memory.tower_adapters import image_bytes, tower_adapted, tower_lora_params
from generator.settings import load_settings
from tests.conftest import measured_rows, snapshot_model

S = load_settings().assumptions
GEMMA3 = "google/gemma-3-27b-it"  # 256 soft tokens per image, a 27-layer SigLIP tower of width 1,152


def _text_only_rows():
    """The snapshot VLMs' text-only training steps (F71's class defaults: tests/test_quantised_towers.py)."""
    return [r for r in measured_rows("cpu-sim-extra") if r["setup"].get("images") == 0
            and r["setup"]["method"] != "inference" and r["config"].get("vision_config")
            and not r["model"].startswith("data/measurements/configs/")]


TEXT_ONLY_BOUND = {"google/gemma-4-26B-A4B": 0.01}


def test_text_only_steps_are_priced_without_the_tower():
    """The harness feeds text only: gemma-3's steps (QLoRA among them), Qwen2.5-VL's, LLaVA's, Magistral's, Qwen3.5's
    and Llama-3.2-Vision's (its cross-attention layers skipped, F70; +2.4% before), and the text-only steps beside
    F73's and F74's image steps (three of llava-1.5, three of gemma-3, one of Llama-3.2-Vision), and
    Llama-3.2-Vision's full fine-tune (its cross-attention layers' weights untrained: +9.1% before), within 0.6%,
    gemma-4's within 1% (F40). Priced with one image (the default), gemma-3's LoRA at 1,024 tokens reads 40% over."""
    rows = _text_only_rows()
    assert len(rows) == 23
    for row in rows:
        error = estimate_bytes(row, S) / row["measured"]["peak_bytes"] - 1
        assert abs(error) < TEXT_ONLY_BOUND.get(row["model"], 0.006), (row["model"], error)
    lora = next(r for r in rows if r["model"] == GEMMA3 and r["setup"]["method"] == "lora"
                and r["setup"]["tokens"] == 1024)
    one_image = estimate_bytes({**lora, "setup": {**lora["setup"], "images": None}}, S)
    assert one_image / lora["measured"]["peak_bytes"] - 1 > 0.3


def test_generate_on_a_vlm_fed_text():
    """F68's vision kind serves too: Qwen2.5-VL's and gemma-3's generate, the whole checkpoint's weights, within
    0.1%; so do Qwen3.5-27B's and -35B-A3B's fed text at four layers, their Gated DeltaNet on its torch path (F79)."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "inference"
            and r["config"].get("vision_config") and not r["setup"]["images"]]
    assert len(rows) == 4
    for row in rows:
        assert abs(estimate_bytes(row, S) / row["measured"]["peak_bytes"] - 1) < 0.001, row["model"]


def test_each_image_adds_the_towers_tensors():
    """Checkpointed, gemma-3's SigLIP layers keep their inputs alone (27 x 4,096 patches x 1,152, bf16); the first
    image also trains the towers' adapters: AdamW's two fp32 moments and autocast's bf16 copy, 10 B each."""
    a, g = snapshot_model(GEMMA3)
    peaks = [job_memory(a, g, S, Job(method="lora", grad_ckpt=True, tokens=2048, images=n), GEMMA3)
             for n in (0, 1, 2)]
    assert [p.peak_phase for p in peaks] == ["loss (logits)"] * 3
    per_image = 2 * 27 * 4096 * 1152
    towers = tower_lora_params(tower_adapted(g.spec, "all-linear", a.model_type), 16)
    assert peaks[2].peak_bytes - peaks[1].peak_bytes == per_image
    assert peaks[1].peak_bytes - peaks[0].peak_bytes == per_image + 10 * towers
    default = job_memory(a, g, S, Job(method="lora", grad_ckpt=True, tokens=2048), GEMMA3)
    assert default == peaks[1]  # one image per sample unless told


def test_a_text_only_full_fine_tune_keeps_no_state_for_the_towers():
    """AdamW (foreach) at its step holds 4 B of gradient, 8 B of state and a 4 B temporary per trained parameter:
    16 B fewer per tower parameter when no image runs; the fp32 weights stay."""
    a, g = snapshot_model(GEMMA3)
    assert g.params_towers > 400_000_000
    step = {n: next(ph for ph in job_phases(a, g, S, Job(tokens=512, images=n), GEMMA3)
                    if ph.name == "optimizer step") for n in (0, 1)}
    assert step[1].weights == step[0].weights
    assert (step[1].gradients + step[1].optimizer_state + step[1].overhead_step) \
        - (step[0].gradients + step[0].optimizer_state + step[0].overhead_step) == 16 * g.params_towers


@settings(max_examples=25, deadline=None)
@given(images=st.integers(0, 6), tokens=st.sampled_from([512, 1024, 4096]), method=st.sampled_from(["full", "lora"]))
def test_memory_never_falls_as_images_grow(images, tokens, method):
    a, g = snapshot_model(GEMMA3)
    assume((images + 1) * g.spec.image_tokens <= tokens)  # an image's 256 soft tokens are among the sample's

    def peak(n):
        return job_memory(a, g, S, Job(method=method, tokens=tokens, images=n), GEMMA3).peak_bytes
    assert peak(images + 1) >= peak(images)


def test_images_that_take_more_tokens_than_the_sample_has_are_an_error(capsys):
    """A review found llava-1.5-7b's LoRA priced at 100 tokens with 8 images, whose soft tokens (576 each) are
    among a sample's tokens: 4,608 of them cannot be in 100. One error names the key, the value and why."""
    code = main(["llava-hf/llava-1.5-7b-hf", "--method", "lora", "--images", "8", "--tokens", "100"])
    err = capsys.readouterr().err
    assert code == 2 and err == ("neurarch-trace: llava-hf/llava-1.5-7b-hf: key 'images' = 8: take 4,608 of a "
                                 "sample's tokens (576 an image), more than its 100 (--tokens)\n")
    assert main(["llava-hf/llava-1.5-7b-hf", "--method", "lora", "--images", "3", "--tokens", "2048"]) == 0


def test_cli_images(capsys):
    code = main([GEMMA3, "--method", "lora", "--images", "0", "--json"])
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert code == 0 and mem["job"]["images"] == 0
    code = main([GEMMA3, "--method", "lora", "--images", "0"])
    assert code == 0 and "text only" in " ".join(capsys.readouterr().out.split())
    code = main(["meta-llama/Llama-3.1-8B", "--images", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "'images' = 1" in err and "reads none" in err and err.count("\n") == 1
    code = main([GEMMA3, "--images", "-1"])
    err = capsys.readouterr().err
    assert code == 2 and "--images" in err and err.count("\n") == 1


MLLAMA = "meta-llama/Llama-3.2-11B-Vision"  # 8 cross-attention layers of 40; images add no tokens to the sequence


def test_mllama_reads_an_image_by_default_and_skips_its_cross_attention_without_one():
    """F70: mllama's tower runs on one image per sample by default, as the other VLMs' do, though its images add no
    tokens (the cross-attention layers read them); a text-only step skips the cross-attention layers
    (modeling_mllama.MllamaTextModel.forward), so their saved tensors are not there, and `--images 2` is taken."""
    a, g = snapshot_model(MLLAMA)
    assert g.spec.image_tokens == 0 < g.spec.vision_act
    peaks = {n: job_memory(a, g, S, Job(method="lora", tokens=1024, images=n), MLLAMA) for n in (0, 1, 2, None)}
    assert peaks[None] == peaks[1]
    # the tower's tensors and its adapters' (tower_adapters.image_bytes), a second time for the second image
    per_image = image_bytes(g.spec, tower_adapted(g.spec, "all-linear", a.model_type), 16, job_regime(Job("lora")),
                            a.model_type)[0]
    assert peaks[2].peak_bytes - peaks[1].peak_bytes == per_image > 2 * g.spec.vision_act
    cross = sum(n for b, n in g.spec.distinct_layers if any(p.type == "Cross Attn" for p in b.parts))
    assert cross == 8
    trained = 10 * tower_lora_params(tower_adapted(g.spec, "all-linear", a.model_type), 16)  # their state, copies
    one_layer = (peaks[1].peak_bytes - per_image - trained - peaks[0].peak_bytes) / cross
    assert one_layer > 1024 * 4096 * 2  # each skipped layer saved more than its bf16 input


def test_a_text_only_step_trains_no_skipped_layer():
    """A text-only mllama step skips its cross-attention layers (MllamaTextModel.forward), so their weights, and
    the adapters on them, get no gradient: AdamW keeps no state for them and autocast makes no copy. The simulated
    full fine-tune (four layers, one of them cross-attention) read +9.1% before; LoRA's adapters there stay weights."""
    a, g = snapshot_model(MLLAMA)
    cross = sum(n * b.params for b, n in g.spec.distinct_layers if any(p.type == "Cross Attn" for p in b.parts))
    runs = {n: training_variants(a, g, S, Job(tokens=1024, images=n), (False,))[1] for n in (0, 1)}
    assert runs[1] - runs[0] == g.params_towers + cross
    lora = {n: training_variants(a, g, S, Job(method="lora", tokens=1024, images=n), (False,)) for n in (0, 1)}
    assert lora[1][0][0][0].weights == lora[0][0][0][0].weights and lora[1][1] > lora[0][1]
    # MllamaForCausalLM, the text model alone, never has cross_attention_states: its cross-attention layers never run
    a, g = snapshot_model(MLLAMA, architectures=["MllamaForCausalLM"])
    assert not (g.spec.image_tokens or g.spec.vision_act)
    text_cross = sum(n * b.params for b, n in g.spec.distinct_layers if any(p.type == "Cross Attn" for p in b.parts))
    assert text_cross == cross
    assert training_variants(a, g, S, Job(tokens=1024), (False,))[1] == g.params_total - cross
    row = next(r for r in measured_rows("cpu-sim-extra") if r["model"] == MLLAMA and r["setup"]["method"] == "full")
    assert abs(estimate_bytes(row, S) / row["measured"]["peak_bytes"] - 1) < 0.005
