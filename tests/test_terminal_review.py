"""The terminal summary as a user's review of it asked: every --plan cell explained, recipes and overhead named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from generator import format as fmt
from generator.errors import ConfigError
from generator.estimator.config.reader import model_type_of
from generator.estimator.memory.recipes import RECIPES
from tests.conftest import ROOT, tiny_qwen2
from tests.test_cli_setups import run, words

LLAMA8 = "meta-llama/Llama-3.1-8B"
LLAMA405 = "meta-llama/Llama-3.1-405B"




def report_of(capsys, model: str) -> dict:
    code, out, _ = run(capsys, model, "--json")
    assert code == 0
    return json.loads(out)


def card_rows(out: str) -> dict[str, list[str]]:
    """The per-card table's rows, card name -> its cells (a wide console: one line per row)."""
    table = out[out.index("Largest batch per card"):]
    table = table[:table.index("└")]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def test_the_card_table_says_qlora_is_checkpointed_and_the_others_not(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, LLAMA8, "--plan")
    head = next(line for line in out.splitlines() if "Budget" in line and "Card" in line)
    assert code == 0 and "QLoRA (checkpointed)" in head
    assert ("In this table the full fine-tune and LoRA run without gradient checkpointing, QLoRA (NF4 base, double "
            "quantisation, paged AdamW) with it") in words(out)


def test_the_card_table_gives_the_two_card_splits_and_no_bare_dash(capsys, monkeypatch):
    report = report_of(capsys, LLAMA8)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, LLAMA8, "--plan")
    rows = card_rows(out)
    column = {"train_full": 1, "train_lora": 2, "train_qlora": 3, "serve": 4}  # after the budget
    labels = {"train_full": "Full fine-tune", "train_lora": "LoRA r=16", "serve": "Serve bf16"}
    shown = 0
    for card in report["memory"]["cards"]:
        for split in card["split"] or ():
            if split["max_batch"] > 0 and card[f"{split['method']}_max_batch"] == 0:
                assert rows[card["name"]][column[split["method"]]] == (f"{split['cards']} cards: "
                                                                       f"{fmt.batch(split['max_batch'])}")
                stages = " + ".join(fmt.gb(b) for b in split["stage_bytes_batch1"])
                assert (f"{card['name']}, {labels[split['method']]}: {split['cards']} cards, cut after layer "
                        f"{split['cut_after_layer']}: {stages} at batch 1; {fmt.batch(split['max_batch'])}.") \
                    in words(out)
                shown += 1
    assert code == 0 and shown >= 2  # the L4's LoRA and the T4's serving, at least
    assert "2 cards: batch" in rows["T4 16 GB"][4] and "2 cards: batch" in rows["L4 24 GB"][2]
    assert all(cell != fmt.DASH for cells in rows.values() for cell in cells)


def test_a_card_no_setup_holds_says_so_in_the_setups_words(capsys, monkeypatch):
    report = report_of(capsys, LLAMA405)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, LLAMA405, "--plan")
    rows = card_rows(out)
    assert code == 0 and all(cell != fmt.DASH for cells in rows.values() for cell in cells)
    plans = [p for p in report["plans"] if p["method"] == "full" and p["gpu"] == "T4 16 GB"]
    assert plans and not any(p["fits"] for p in plans)  # nothing up to the search's limit holds it
    tried = max(p["gpus"] for p in plans)
    # as the page's batch table says it (setups_text.card_setups); the setups table says it of its own row
    assert rows["T4 16 GB"][1] == f"no setup up to {fmt.gpu_count(tried)}"
    assert f"does not fit on {fmt.gpu_count(tried)}" in out
    fitting = min(p["gpus"] for p in report["plans"] if p["method"] == "full" and p["gpu"] == "H200 141 GB"
                  and p["fits"])
    assert rows["H200 141 GB"][1] == f"setups: {fmt.gpu_count(fitting)}"  # as the page says it


def test_a_recipe_is_named_with_its_summary_and_sources(capsys):
    code, out, err = run(capsys, LLAMA8, "--recipe", "trl-sft")
    text = words(out)
    recipe = RECIPES["trl-sft"]
    assert code == 0 and err == ""
    assert words(f"Recipe trl-sft: {recipe.summary}. Read from: {'; '.join(recipe.sources)}.") in text
    job = text[text.index("This job ("):]
    job = job[:job.index(") peaks at")]
    assert "dropout 0.05" in job and "trl-chunked loss" in job


def test_the_default_job_line_keeps_its_words_and_names_no_recipe(capsys):
    code, out, _ = run(capsys, LLAMA8)
    assert code == 0 and "This job (full, amp, adamw, sdpa, batch 1 x 2,048 tokens) peaks at" in words(out)
    assert "Recipe" not in out and "dropout" not in out and " loss," not in out


def test_overhead_is_said_where_the_breakdown_has_it(capsys):
    code, out, _ = run(capsys, LLAMA8)
    assert code == 0 and ", overhead " in words(out)
    assert ("Overhead: autocast's bf16 copies of the weights, the optimizer step's temporaries (torch.optim's "
            "foreach)") in words(out)
    code, out, _ = run(capsys, LLAMA8, "--method", "inference")  # serving a bf16 model: no overhead
    assert code == 0 and "overhead" not in out.lower()


def test_piped_plan_tables_lose_no_text():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.run([sys.executable, "-m", "generator.cli", LLAMA8, "--plan"], capture_output=True, text=True,
                          cwd=ROOT, env=env)
    assert proc.returncode == 0 and "\u2026" not in proc.stdout
    report = json.loads(subprocess.run([sys.executable, "-m", "generator.cli", LLAMA8, "--json"], capture_output=True,
                                       text=True, cwd=ROOT, env=env).stdout)
    for p in report["plans"]:  # every price whole on its row, as the long ones were not ("$8.416…")
        assert fmt.usd_per_hour(p["usd_per_hour"]) in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("\u2502")]
    assert any("smallest" in line for line in rows) and any("cheapest" in line for line in rows)


@pytest.mark.parametrize("columns", ["80", "60"])
def test_a_narrow_console_folds_cells_rather_than_cutting_them(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run(capsys, LLAMA8, "--plan")
    assert code == 0 and "\u2026" not in out
    assert max(len(line) for line in out.splitlines()) <= int(columns)  # a terminal's width is kept


def test_a_null_key_is_called_null_not_missing(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_qwen2(hidden_size=None)), encoding="utf-8")
    code, out, err = run(capsys, str(folder))
    assert code == 2 and "key 'hidden_size' = None: is null, where a value is required" in err and "missing" not in err
    with pytest.raises(ConfigError, match="is null, where a value is required"):
        model_type_of({"model_type": None}, "m")
    with pytest.raises(ConfigError, match="required key is missing"):
        model_type_of({}, "m")


def test_a_snapshot_folder_that_does_not_exist_is_named(tmp_path, capsys):
    code, out, err = run(capsys, LLAMA8, "--snapshot", str(tmp_path / "nowhere"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "snapshot folder does not exist" in err and str(tmp_path / "nowhere") in err and "Hub" not in err
    afile = tmp_path / "file"
    afile.write_text("x")
    code, _, err = run(capsys, LLAMA8, "--snapshot", str(afile))
    assert code == 2 and "is not a folder" in err
    code, out, _ = run(capsys, LLAMA8, "--snapshot", str(ROOT / "snapshot"))
    assert code == 0 and LLAMA8 in out


def test_one_image_is_singular(capsys):
    args = ["google/gemma-3-27b-it", "--method", "inference", "--tokens", "4200"]
    code, out, _ = run(capsys, *args, "--images", "1")
    assert code == 0 and "1 image per prompt" in words(out) and "image(s)" not in out
    code, out, _ = run(capsys, *args, "--images", "2")
    assert code == 0 and "2 images per prompt" in words(out)


def test_the_serving_table_says_which_engine_its_sequences_are(capsys):
    """A user ran --method inference --batch 153 after --plan said 153 sequences, and got a prefill over the card:
    the table's figure is a chunked-prefill server's, and the line under it says so and what the flag prices."""
    code, out, _ = run(capsys, "Qwen/Qwen3-0.6B", "--plan")
    assert code == 0 and "Sequences: the KV caches of 4,096 tokens a chunked-prefill server (vLLM's scheduler)" \
        in " ".join(out.split())
    assert "--method inference --batch N prices HF generate instead" in " ".join(out.split())


def test_a_recipe_line_says_which_of_its_options_the_flags_replaced(capsys):
    """The recipe's summary gives its own options (torchtune's r=64); the job line what is priced (r=16): a
    reviewer read them as a contradiction. The line now names what the flags replaced, and nothing where none did."""
    code, out, _ = run(capsys, LLAMA8, "--recipe", "torchtune", "--lora-rank", "16", "--lora-dropout", "0.1")
    text = words(out)
    assert code == 0 and "r=16 on q,v,o,mlp" in text and "LoRA r=64 on q, v" in text
    assert "The flags given replace lora_rank 16 (the recipe's: 64), lora_dropout 0.1 (the recipe's: 0.0)." in text
    for name in RECIPES:
        code, out, _ = run(capsys, LLAMA8, "--recipe", name)
        assert code == 0 and "The flags given replace" not in out, name


def test_a_setup_that_does_not_fit_has_no_price(capsys, monkeypatch):
    """A reviewer found the setups table pricing 512 T4s an hour for a setup that does not fit: no price where
    nothing runs."""
    monkeypatch.setenv("COLUMNS", "220")
    code, out, _ = run(capsys, "meta-llama/Llama-3.1-70B", "--plan")
    rows = [line for line in out.splitlines() if "does not fit on 512 GPUs" in line or "tight: 512×" in line]
    assert code == 0 and rows
    assert all("$" not in line for line in rows), rows


def test_a_setup_over_the_budget_that_the_memory_holds_reads_tight(capsys, monkeypatch):
    """Llama-2-70B's full fine-tune keeps 14.1 GB per T4 on 512 of them, NCCL's buffers included: over the T4's
    13.1 GB budget, within its 15.1 GB less the CUDA context. The floor sentence called such a setup tight while the
    row and the card cell said it does not fit; the card cell now says "tight on 512 GPUs" and the row "tight: " with
    its setup. Llama-3.2-11B-Vision's full fine-tune (15.9 GB, once tight at 14.3 GB before NCCL's buffers were
    counted) and its LoRA (16.9 GB), over the memory, read "does not fit", as does Llama-3.1-70B's full fine-tune."""
    monkeypatch.setenv("COLUMNS", "220")
    code, out, _ = run(capsys, "meta-llama/Llama-2-70b-hf", "--plan")
    t4 = [line for line in out.splitlines() if "T4 16 GB" in line]
    assert code == 0 and "│ tight on 512 GPUs │ setups: 48 GPUs " in t4[0]
    full = next(line for line in t4 if "Full fine-tune" in line)
    assert "tight: 512× T4 with ZeRO-3, gradient checkpointing and CPU param offload" in full and "14.1 GB" in full \
        and "$" not in full
    assert "(15.1 GB) holds it: tight." in out and "NCCL's buffers 1.56 GB" in " ".join(out.split())
    code, out, _ = run(capsys, "meta-llama/Llama-3.2-11B-Vision", "--plan")
    t4 = [line for line in out.splitlines() if "T4 16 GB" in line]
    assert code == 0 and "│ no setup up to 512 GPUs │ no setup up to 512 GPUs " in t4[0]
    for method, held in (("Full fine-tune", "15.9 GB"), ("LoRA", "16.9 GB")):
        row = next(line for line in t4 if method in line)
        assert "does not fit on 512 GPUs" in row and held in row, method
    code, out, _ = run(capsys, "meta-llama/Llama-3.1-70B", "--plan")
    row = next(line for line in out.splitlines() if "Full fine-tune" in line and "T4 16 GB" in line)
    assert code == 0 and "does not fit on 512 GPUs" in row and "16.8 GB" in row


def test_a_two_card_split_cell_names_one_gpu_where_a_setup_holds_it_on_one(capsys, monkeypatch):
    """A review found Mixtral's LoRA on an H200 as "2 cards: batch 2" in the card table while the setups table holds
    it on one H200 with gradient checkpointing: the cell now names both, as the page does."""
    mixtral = "mistralai/Mixtral-8x7B-v0.1"
    report = report_of(capsys, mixtral)
    one = [p for p in report["plans"] if p["method"] == "lora" and p["gpu"] == "H200 141 GB" and p["fits"]
           and p["gpus"] == 1]
    assert one and one[0]["grad_ckpt"]
    monkeypatch.setenv("COLUMNS", "220")
    code, out, _ = run(capsys, mixtral, "--plan")
    assert code == 0 and card_rows(out)["H200 141 GB"][2] == "2 cards: batch 2; setups: 1 GPU"


def test_an_nvidia_smi_peak_meets_the_budget_with_its_cuda_context_counted_once(capsys):
    """A review found Qwen3-0.6B at 1,024 tokens 'fits' a T4 with --metric reserved (12.9 GB) and 'tight' with
    --metric nvidia-smi (13.4 GB): the nvidia-smi peak adds the 537 MB CUDA context, which the budget takes off the
    card already. The verdict now holds the peak less the context, and says so."""
    verdicts = {}
    for metric in ("reserved", "nvidia-smi"):
        code, out, _ = run(capsys, "Qwen/Qwen3-0.6B", "--tokens", "1024", "--metric", metric)
        text = " ".join(out.split())
        assert code == 0
        verdicts[metric] = text[text.index("Per card"):].split("; ")[0]
    assert verdicts["reserved"] == "Per card: T4 16 GB fits (budget 13.1 GB)"
    assert verdicts["nvidia-smi"] == ("Per card (the peak less its 537 MB of CUDA context, which each budget leaves "
                                      "out already): T4 16 GB fits (budget 13.1 GB)")


def test_the_summary_promises_setups_only_where_one_holds_the_method(capsys):
    """A review found Llama-3.1-8B at 131,072 tokens said to fit no single card "; the setups below spread it over
    several" while the setups below said none holds it on 512 GPUs: the summary now says which."""
    code, out, _ = run(capsys, "meta-llama/Llama-3.1-8B", "--tokens", "131072")
    text = " ".join(out.split())
    assert code == 0 and "spread it over several" not in text
    assert text.count("(fits no single card listed; nor does any setup below)") == 2
    code, out, _ = run(capsys, "meta-llama/Llama-3.1-70B")
    assert "fits no single card listed; the setups below spread it over several" in " ".join(out.split())


def test_the_summary_says_serving_and_qlora_tight_as_the_page_does(capsys):
    """A review found the CLI explaining a serving-only tight card with the training allocator's replay, leaving out
    the gpu_memory_utilization the page gives, and naming no card QLoRA is tight on. Each now has its own line; the
    setting is said only where vLLM's 0.9 would not hold it, as on the page (accuracy_page.tight_lines)."""
    code, out, _ = run(capsys, "google/gemma-2-9b")
    text = words(out)
    assert code == 0
    assert "QLoRA (14.6 GB at batch 1) is tight on one T4 16 GB: 3.1% of room over its peak, enough for" in text
    assert ("Serving is tight on one L4 24 GB: 3.2% of room over its 22.4 GB there (vLLM's defaults on it); a vLLM "
            "server needs gpu_memory_utilization 0.97 or more (0.9 by default).") in text
    code, out, _ = run(capsys, "Qwen/Qwen3-32B-FP8")
    text = words(out)
    assert "Serving is tight on one A100 40 GB: 13.5% of room over its 36.9 GB there (vLLM's defaults on it)." \
        in text and "gpu_memory_utilization" not in text


def test_float32_is_said_only_where_vllm_serves_so(capsys):
    """A review found "in float32 there" beside an encoder's T4 serving (no speed row, as no encoder has one) and a
    float32 figure under "Serving bf16 weights" with no mark."""
    code, out, _ = run(capsys, "BAAI/bge-reranker-large")
    assert code == 0 and "float32" not in out and "Serving: 1× T4, its speed not priced." in words(out)
    code, out, _ = run(capsys, "google/gemma-3-1b-it")
    text = words(out)
    assert "starts at 6.48 GB (in float32 there, as vLLM serves it on that card; fits one T4 16 GB)" in text
    assert "Serving: 1× T4, in float32 there, its speed not priced" in text
