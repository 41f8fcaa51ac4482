"""HF generate fed images (FINDINGS.md F78): the prefill runs the vision tower over every prompt's images first, a
phase of its own (memory/generate.tower_phase, families/tower_inference.py); the CPU-simulated prefills fed images
priced within 1%; memory never falls as images or the batch grow; the command line prices what it is asked."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.cli import main
from generator.estimator.memory.generate import generate_phases
from generator.estimator.memory.job_options import Job
from generator.settings import load_settings
from tests.conftest import snapshot_model

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
S = load_settings().assumptions
VLMS = ["google/gemma-3-27b-it", "mistralai/Magistral-Small-2509", "google/gemma-4-26B-A4B",
        "meta-llama/Llama-3.2-11B-Vision", "llava-hf/llava-1.5-7b-hf", "Qwen/Qwen2.5-VL-7B-Instruct"]


def _phases(model: str, **job) -> dict[str, int]:
    a, g = snapshot_model(model)
    return {p.name: p.total_bytes for p in generate_phases(a, g, S, Job(method="inference", **job))}


def test_the_simulated_prefills_fed_images_are_priced_within_1pct() -> None:
    """17 prefills of seven towers (cpu-sim-extra.jsonl): the first of each of six towers' is the one its rate was
    read off, the other eleven are held out: other batches, image counts and depths (two where the text layers'
    prefill peaks), and Qwen3.5's tower, priced by the Qwen-VL code it shares.
    Before F78 the tower was not priced: gemma-3's four prompts of four images read -14.4%, Magistral's four images
    -33.1%, Llama-3.2-Vision's two -16.4%."""
    from generator.accuracy import estimate_bytes, tensor_bytes

    rows = [json.loads(line) for line in (DATA / "cpu-sim-extra.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["setup"]["method"] == "inference" and r["setup"].get("images")]
    assert len(rows) == 17 and len({r["model"] for r in rows}) == 7
    for r in rows:
        measured = tensor_bytes(r, S.cuda_context_bytes)
        assert abs(estimate_bytes(r, S) / measured - 1) < 0.01, (r["model"], r["setup"])


def test_the_tower_runs_before_the_text_layers_over_all_the_prompts_images() -> None:
    """gemma-3's SigLIP: 4,096 patches an image, 4 hidden + 2 MLP widths each at the MLP's moment, beside the pixels
    and the prompts' token embeddings; two prompts of sixteen images peak in the tower (the 62 text layers' cache
    and prefill hold less), a text-only prompt has no tower phase."""
    a, g = snapshot_model("google/gemma-3-27b-it")
    phases = {p.name: p for p in generate_phases(a, g, S, Job(method="inference", batch=2, tokens=4200, images=16))}
    tower = phases["prefill (vision tower)"]
    pixels = 3 * 896 * 896
    assert g.spec.vision_transient == 4096 * (4 * 1152 + 2 * 4304) + pixels and g.spec.image_pixels == pixels
    assert tower.activations == 2 * (32 * g.spec.vision_transient + 2 * 4200 * 5376)
    assert tower.total_bytes == max(p.total_bytes for p in phases.values())
    assert "prefill (vision tower)" not in _phases("google/gemma-3-27b-it", batch=2, tokens=4200, images=0)


def test_pixtrals_mask_spans_the_steps_images_at_inference_too() -> None:
    """Magistral: one block-diagonal mask over all the images of the step, (images x 5,476)^2 bf16 elements, whether
    the images come as one prompt's or as a batch's."""
    one, many = (_phases("mistralai/Magistral-Small-2509", batch=b, tokens=6000, images=n)["prefill (vision tower)"]
                 for b, n in ((1, 1), (1, 4)))
    _, g = snapshot_model("mistralai/Magistral-Small-2509")
    embeds = 2 * 6000 * 5120
    assert many - one == 2 * (3 * g.spec.vision_transient + (16 - 4) * 5476 ** 2)
    batch = _phases("mistralai/Magistral-Small-2509", batch=4, tokens=6000, images=1)["prefill (vision tower)"]
    assert batch - many == 3 * embeds  # the same images, four prompts' embeddings


@hsettings(max_examples=25, deadline=None)
@given(st.sampled_from(VLMS), st.integers(1, 4), st.integers(0, 6), st.integers(0, 3), st.integers(0, 3))
def test_generate_memory_never_falls_as_images_or_the_batch_grow(model, batch, images, more_images, more_batch):
    a, g = snapshot_model(model)
    tokens = g.spec.image_tokens * (images + more_images) + 64

    def peak(b: int, n: int) -> int:
        return max(p.total_bytes for p in generate_phases(a, g, S, Job(method="inference", batch=b, tokens=tokens,
                                                                 images=n)))

    assert peak(batch, images) <= peak(batch, images + more_images) <= peak(batch + more_batch, images + more_images)


def test_the_command_line_prices_the_images_it_is_given(capsys) -> None:
    """`--method inference --images N` had been accepted and echoed, and priced as text: now the tower phase."""
    args = ["google/gemma-3-27b-it", "--method", "inference", "--batch", "2", "--tokens", "4200", "--json"]
    peaks = []
    for n in ("0", "16"):
        assert main([*args, "--images", n]) == 0
        memory = json.loads(capsys.readouterr().out)["memory"]
        peaks.append((memory["peak_bytes"], memory["peak_phase"]))
    assert peaks[0][1] == "prefill" and peaks[1][1] == "prefill (vision tower)"
    assert peaks[1][0] > peaks[0][0] + 5 * 10**8
    assert main(args[:-1] + ["--images", "16"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "16 images per prompt" in text and "during prefill (vision tower)" in text


def test_an_audio_language_model_runs_its_audio_tower_first() -> None:
    """Voxtral (transformers' class defaults): its audio clip's tower runs before the text layers the same way, and the
    phase says which tower it is."""
    from generator.estimator.graph.nodes import build_graph
    from generator.estimator.normalise import normalise

    a = normalise({"model_type": "voxtral"}, "voxtral")
    names = [p.name for p in generate_phases(a, build_graph(a), S, Job(method="inference"))]
    assert names == ["prefill (audio tower)", "prefill", "decode"]
