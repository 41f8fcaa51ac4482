"""`neurarch-trace MODEL --html FILE`: one self-contained page (CSS inlined, Report embedded), and the
pieces of a model page that depend on the Report: headline, splits, custom code, folded layers."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site.build import render_model_page
from generator.site.structure_table import find_repeat

SETTINGS = load_settings()


def _report(model: str):
    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    assert record is not None
    return report_for_record(record, SETTINGS), record


def test_standalone_page_is_one_file_with_the_report_inside() -> None:
    report, _ = _report("trl-internal-testing/tiny-RemoteForCausalLM")
    html = render_model_page(report, None, SETTINGS, standalone=True)
    assert "<style>" in html and 'rel="stylesheet"' not in html and 'rel="alternate"' not in html
    hrefs = re.findall(r'(?:href|src)="([^"]*)"', html)
    assert hrefs and all(h.startswith(("#", "https://")) for h in hrefs)  # nothing relative to resolve
    assert "Reconstructed from a local config.json" in html and 'id="custom-code"' in html
    embedded = re.search(r'<script type="application/json" id="report">(.*?)</script>', html, re.S)
    assert embedded and json.loads(embedded.group(1)) == json.loads(json.dumps(report.to_dict()))


def test_a_site_page_needs_its_record() -> None:
    report, _ = _report("openai-community/gpt2")
    with pytest.raises(ValueError):
        render_model_page(report, None, SETTINGS, standalone=False)


def test_headline_reads_like_the_reference_page() -> None:
    report, record = _report("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5")
    html = render_model_page(report, record, SETTINGS, standalone=False)
    text = re.sub(r"<[^>]+>", "", html)
    assert ("Fine-tuning tiny-Qwen2ForCausalLM-2.5 at batch 1 and 2,048 tokens takes about 3.77 GB of GPU memory "
            "for a full fine-tune (fits one T4 16 GB), and 3.74 GB with LoRA r=16 on a bf16 base (fits one T4 16 GB). "
            "Estimated from the model's structure, not measured.") in text
    assert "graph 2,435,016 vs checkpoint not known" in text
    for phrase in ("1.15x headroom", "537 MB CUDA context", "12 bytes: the fp32 log-softmax",
                   "torch.cuda.max_memory_allocated()", "have not been measured",
                   "No finding on the reconstructed graph.",
                   "neurarch-trace trl-internal-testing/tiny-Qwen2ForCausalLM-2.5 --plan",
                   "fp16 (no bf16)"):
        assert phrase in text, phrase


def test_no_single_card_and_the_two_card_split() -> None:
    report, record = _report("Qwen/Qwen3-0.6B")
    mem = report.memory
    none_fit = replace(mem, smallest_card_full=None, smallest_card_lora=None)
    html = render_model_page(replace(report, memory=none_fit), record, SETTINGS, standalone=False)
    assert html.count("fits no single card listed; see the setups below") == 2
    # The T4 cannot hold a full fine-tune at batch 1: the cell shows the split from cards[].split.
    split = mem.cards[0].split[0]
    assert mem.cards[0].train_full_max_batch == 0 and split.method == "train_full"
    assert f"cut after layer {split.cut_after_layer}: 9.25 GB + 9.43 GB at batch 1; batch 1" in html
    # the T4 cost row: one T4 holds batch 1 only with checkpointing and without accumulating gradients; the
    # job's batch of 32 on one GPU accumulates them, every one held (14.1 GB over its 13.1 GB budget), so the
    # cost table says one GPU does not run it and links the setups, whose T4 plan shares it out over two
    t4 = next(p for p in report.plans if p.method == "full" and p.gpu_model == "T4")
    assert (t4.gpus, t4.fits) == (2, True)
    assert 'data-label="Full fine-tune">does not fit one GPU<br><small><a href="#setups">priced on more GPUs' in html


def test_repeated_layers_are_folded_but_kept() -> None:
    report, record = _report("meta-llama/Llama-3.2-1B")  # 16 layers: 102 rows, within MAX_STRUCTURE_ROWS
    html = render_model_page(report, record, SETTINGS, standalone=False)
    assert "<details><summary>Layers 2 to 16: the same 6 rows as layer 1 (90 rows)</summary>" in html
    for row in report.structure:  # every node is still on the page
        assert f"<td>{row.name}<td>" in html
    assert find_repeat(["a"] * 28) == (0, 1, 28)
    assert find_repeat(["a", "b", "c"]) is None

def test_a_vision_page_says_its_jobs_read_an_image_and_what_its_cache_holds() -> None:
    """A review found Llama-3.2-11B-Vision's page silent on the one image each training sample and served sequence
    reads, and its sequence's cache explained as "the recurrent layers' fixed state" (mllama has none: it is the
    cross-attention's keys and values over the image, 4 tiles x 1,025 patches in 8 layers)."""
    report, record = _report("meta-llama/Llama-3.2-11B-Vision")
    assert report.memory.state_bytes_per_sequence == 0
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", render_model_page(report, record, SETTINGS, standalone=False)))
    assert "serving at 4,096 tokens per sequence, each with one image." in text
    assert "671 MB a sequence: the cross-attention&#39;s keys and values over its image included" in text
    assert "recurrent" not in text
    report, record = _report("Qwen/Qwen3-0.6B")
    assert "each with one image" not in render_model_page(report, record, SETTINGS, standalone=False)


def test_a_serving_page_names_the_context_vllm_must_be_started_with() -> None:
    """A review found Llama-3.1-70B served on two 80 GB cards at 3 sequences of 4,096 tokens, where `vllm serve`
    by default sizes max_model_len at the config's 131,072 and refuses to start without room for one sequence that
    long: the page names the flag its figures take."""
    report, record = _report("meta-llama/Llama-3.1-70B")
    html = render_model_page(report, record, SETTINGS, standalone=False)
    assert report.memory.serve_tokens == 4096
    assert "start vLLM with <code>--max-model-len 4096</code>, as by default it wants room for one sequence" in html
