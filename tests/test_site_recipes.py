"""Issue 13: "the site says which recipe each method prices". Each training method of a page is a recipe run with
the flags the page prints (recipes.SITE_RECIPES, recipe_words): the command given those flags prints the page's
figure, byte for byte, and the page says so."""

from __future__ import annotations

import json
import re

import pytest

from generator import recipe_words
from generator.cli import main
from generator.estimator.memory.job_options import Job, site_job
from generator.estimator.memory.recipes import RECIPES, SITE_RECIPES
from generator.settings import load_settings

SITE_FIGURE = {"full": "train_full_bytes_batch1", "lora": "train_lora_bytes_batch1",
               "qlora": "train_qlora_bytes_batch1"}
RANK = load_settings().assumptions.lora_rank


@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "google/gemma-2-9b-it", "Qwen/Qwen3-30B-A3B",
                                   "meta-llama/Llama-3.2-11B-Vision", "google-t5/t5-base", "openai-community/gpt2"])
def test_the_pages_flags_give_the_pages_figures(capsys, model):
    assert main([model, "--json"]) == 0
    site = json.loads(capsys.readouterr().out)["memory"]
    for method, key in SITE_FIGURE.items():
        flags = recipe_words.site_recipe_flags(method, RANK).split()
        assert main([model, "--json", *flags]) == 0, (model, flags)
        memory = json.loads(capsys.readouterr().out)["memory"]
        assert memory["job"]["recipe"] == SITE_RECIPES[method][0]
        assert memory["peak_bytes"] == site[key], (model, method)


def test_every_option_a_site_recipe_sets_is_a_flag_and_changes_its_recipe():
    """An option equal to the recipe's own would be no override: each one the table lists changes the job."""
    for method, (recipe, options) in SITE_RECIPES.items():
        assert recipe in RECIPES
        plain = Job.from_options(recipe, method=method, lora_rank=RANK)
        for key, value in options:
            assert key in recipe_words.FLAGS, key
            assert getattr(plain, key) != value, (method, key)
    # the jobs the site priced before its methods were recipes, field by field (all but the recipe's name): what
    # each recipe with its options must stay
    before = {"full": Job(lora_rank=RANK), "lora": Job(method="lora", lora_rank=RANK),
              "qlora": Job(method="qlora", weights="nf4", double_quant=True, optimizer="paged-adamw", grad_ckpt=True,
                           lora_rank=RANK)}
    for method, job in before.items():
        got = site_job(method, RANK)
        differ = {k: (getattr(got, k), getattr(job, k)) for k in Job.__dataclass_fields__
                  if k != "recipe" and getattr(got, k) != getattr(job, k)}
        # peft's default adapter dtype is fp32 under AMP: the recipes name it, the old jobs left it to the default
        assert differ in ({}, {"adapter_dtype": ("fp32", "")}), (method, differ)


def test_a_page_names_its_recipes_and_a_quantised_checkpoint_no_qlora(capsys, tmp_path):
    page = tmp_path / "page.html"
    assert main(["Qwen/Qwen3-0.6B", "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "Full fine-tune is transformers Trainer(bf16=True), run with PyTorch&#39;s foreach AdamW" in html
    assert "<code>--recipe hf-trainer --method lora --lora-rank 16 --lora-targets all-linear --optimizer adamw" \
           "</code>" in html
    assert "QLoRA is llama-factory with quantization_bit 4, run with paged AdamW 32-bit" in html
    assert "vision tower" not in html[html.index('<p id="recipes">'):]  # a text model has no tower to adapt
    assert main(["openai/gpt-oss-20b", "--html", str(page)]) == 0  # MXFP4: QLoRA does not apply
    html = page.read_text(encoding="utf-8")
    recipes = html[html.index('<p id="recipes">'):]
    assert "LoRA is transformers Trainer" in recipes and "QLoRA is" not in recipes[:recipes.index("</p>")]


def test_a_card_no_setup_holds_links_no_price_and_an_encoder_serves_by_forwards(capsys, tmp_path):
    """A page review found Llama-3.1-405B's batch table linking "more GPUs" and its cost table "priced on more
    GPUs" for cards the setups table says nothing holds up to 512 GPUs, and BERT's accuracy line naming a
    chunked-prefill server for an encoder."""
    page = tmp_path / "page.html"
    assert main(["meta-llama/Llama-3.1-405B", "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    batch = html[html.index("<caption>Largest batch"):]
    t4 = batch[batch.index("T4 16 GB"):batch.index("</tr>", batch.index("T4 16 GB"))]
    # full, LoRA, QLoRA; serving runs on the fewest T4s a setup holds it on
    assert t4.count("no setup up to 512 GPUs") == 3 and re.search(r"setups: \d+ GPUs</a>", t4)
    cost = html[html.index('data-label="Full fine-tune">does not fit one GPU'):]
    assert cost.startswith('data-label="Full fine-tune">does not fit one GPU<br><small><a href="#setups">no setup '
                           "up to 512 GPUs")
    assert main(["google-bert/bert-base-uncased", "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "serving: no measured runs of this setup (one forward over a batch, as an encoder serves)" in html
    line = html[html.index('id="accuracy-line"'):]
    assert "chunked-prefill server" not in line[:line.index("</p>")]


def test_a_sequence_cache_that_is_not_tokens_times_bytes_says_why(capsys, tmp_path):
    """A page review multiplied T5's 512 tokens by its 36,864 bytes per token (18.9 MB) against the 37.7 MB the
    JSON holds, and gpt-oss's 4,096 by 49,152 (201 MB) against 104 MB: the page now gives the sequence's cache
    and what makes it differ (profile.kv_bytes_per_sequence)."""
    page = tmp_path / "page.html"
    for model, said in (("google-t5/t5-base", "37.7 MB a sequence: the cross-attention&#39;s keys and values of the "
                                              "encoder&#39;s tokens included"),
                        ("openai/gpt-oss-20b", "104 MB a sequence: layers with a sliding window keep only their "
                                               "window"),
                        ("Qwen/Qwen3-0.6B", "(114,688 bytes per token, 470 MB a sequence; start vLLM with")):
        assert main([model, "--html", str(page)]) == 0
        assert said in page.read_text(encoding="utf-8"), model


def test_a_reading_that_leaves_a_tower_out_says_so_beside_the_headline(capsys, tmp_path):
    """A page review: Phi-3.5-vision's headline gave its figures with the missing CLIP tower said only among the
    findings at the bottom. A notice beside the headline says it; a model read whole has none."""
    page = tmp_path / "page.html"
    assert main(["microsoft/Phi-3.5-vision-instruct", "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert html.index('<aside id="left-out" class="notice"><strong class="tag">approximate</strong>') \
        < html.index('id="provenance"')
    assert "the CLIP vision tower and its projection are not counted" in html[html.index('id="left-out"'):]
    assert main(["Qwen/Qwen3-0.6B", "--html", str(page)]) == 0
    assert 'id="left-out"' not in page.read_text(encoding="utf-8")
