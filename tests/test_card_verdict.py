"""A card that holds a job's peak but not its headroom is "tight", not "does not fit" (estimator.card_verdict):
the verdict's three states, the report's tight cards against their budget and capacity, what the CLI and a
model page say of them, with the allocator replay's measured figures (FINDINGS.md F49)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.accuracy_allocator import (
    ALL_SETUPS,
    allocator_rows,
    least_card_pcts,
    margin,
    replay_groups,
    runs_within,
)
from generator.cli import main
from generator.estimator import ENGINE_DEFAULT_SHARE, card_verdict, engine_share
from generator.estimator.memory.profile import budget_bytes, capacity_bytes
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site import accuracy_page, listing
from generator.site.build import render_model_page

SETTINGS = load_settings()
PHI = "microsoft/Phi-3.5-mini-instruct"  # full fine-tune 76.4 GB: over the 80 GB card's budget, within its capacity
LLAMA8 = "meta-llama/Llama-3.1-8B"
GB = 10**9


def _report(model: str):
    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    assert record is not None
    return report_for_record(record, SETTINGS), record


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), err


def test_the_three_states_at_their_edges() -> None:
    card = SETTINGS.cards[2]  # A100 40 GB: 42,405,855,232 B usable
    s = SETTINGS.assumptions
    budget, capacity = budget_bytes(card, s), capacity_bytes(card, s)
    assert capacity == card.memory_usable_bytes - s.cuda_context_bytes == 41_868_984_320
    assert budget == int(capacity / 1.15)
    assert card_verdict(budget, budget, capacity) == "fits"
    assert card_verdict(budget + 1, budget, capacity) == "tight"
    assert card_verdict(capacity, budget, capacity) == "tight"
    assert card_verdict(capacity + 1, budget, capacity) == "does not fit"


@given(st.integers(0, 400 * GB), st.integers(1, 200 * GB), st.floats(1.0, 2.0))
def test_a_larger_peak_never_gets_a_kinder_verdict(peak: int, capacity: int, headroom: float) -> None:
    budget = int(capacity / headroom)
    order = ("fits", "tight", "does not fit")
    here = order.index(card_verdict(peak, budget, capacity))
    assert here <= order.index(card_verdict(peak + GB, budget, capacity))
    assert (here == 0) == (peak <= budget) and (here == 2) == (peak > capacity)


@pytest.mark.parametrize("model", [PHI, LLAMA8, "Qwen/Qwen3-0.6B", "google-t5/t5-large", "meta-llama/Llama-3.1-70B",
                                   "Gensyn/Qwen2.5-0.5B-Instruct", "llava-hf/llava-1.5-7b-hf"])
def test_a_tight_card_holds_batch_1_within_its_capacity_and_no_smaller_card_fits(model: str) -> None:
    mem = _report(model)[0].memory
    by_budget = sorted(mem.cards, key=lambda c: c.budget_bytes)
    for key, batch1, smallest, tight in (
            ("train_full", mem.train_full_bytes_batch1, mem.smallest_card_full, mem.tight_card_full),
            ("train_lora", mem.train_lora_bytes_batch1, mem.smallest_card_lora, mem.tight_card_lora),
            ("serve", mem.serve_bytes_batch1, mem.smallest_card_serve, mem.tight_card_serve),
            ("train_qlora", mem.train_qlora_bytes_batch1,
             next((c.name for c in by_budget if c.train_qlora_max_batch >= 1), None), mem.tight_card_qlora)):
        verdicts = [card_verdict(batch1, c.budget_bytes, c.capacity_bytes) for c in by_budget]
        # the report's batches and the verdict agree on every card
        assert [v == "fits" for v in verdicts] == [getattr(c, f"{key}_max_batch") >= 1 for c in by_budget]
        first = next((i for i, v in enumerate(verdicts) if v != "does not fit"), None)
        expected = by_budget[first].name if first is not None and verdicts[first] == "tight" else None
        assert tight == expected, (model, key)
        if tight is not None:
            names = [c.name for c in by_budget]
            assert smallest is None or names.index(tight) < names.index(smallest)


def test_the_snapshot_has_tight_cards_where_the_band_says() -> None:
    mem = _report(PHI)[0].memory
    assert mem.tight_card_full == "A100 / H100 80 GB" and mem.smallest_card_full == "H200 141 GB"
    card = next(c for c in mem.cards if c.name == "A100 / H100 80 GB")
    assert card.budget_bytes < mem.train_full_bytes_batch1 <= card.capacity_bytes


# QLoRA at batch 1: 14.9 GB, over the T4's 13.1 GB budget, within its 15.1 GB (Qwen3-14B was, at 14.9 GB, until
# paged AdamW's unpaged adapter state took it to 15.2 GB)
TIGHT_QLORA = "microsoft/Phi-mini-MoE-instruct"


def test_qlora_tight_on_a_card_is_said_in_every_place_the_other_methods_are(capsys, monkeypatch) -> None:
    report, record = _report(TIGHT_QLORA)
    mem = report.memory
    t4 = next(c for c in mem.cards if c.name == "T4 16 GB")
    assert mem.tight_card_qlora == "T4 16 GB" and t4.train_qlora_max_batch == 0
    assert t4.budget_bytes < (mem.train_qlora_bytes_batch1 or 0) <= t4.capacity_bytes
    # its model page: the memory table's QLoRA cell, and the margin with the replay's odds
    page = render_model_page(report, record, SETTINGS, standalone=False)
    assert re.search(r'T4 16 GB</a></th>(?:<td[^>]*>.*?</td>\s*){3}<td class="num answer" data-label="QLoRA">tight<',
                     page, re.S)
    spare = (t4.capacity_bytes / mem.train_qlora_bytes_batch1 - 1) * 100
    least_over = accuracy_page.load().least_card_over_pct
    assert (f"QLoRA has room for {spare:.1f}% over its peak on one T4 16 GB, enough for "
            f"{sum(1 for x in least_over if x <= spare)} of the {len(least_over)} steps replayed") in re.sub(
                r"<[^>]+>", "", page)
    # the CLI's plan table
    monkeypatch.setenv("COLUMNS", "160")
    code, out = main([TIGHT_QLORA, "--plan"]), capsys.readouterr().out
    row = next(line for line in out.splitlines() if "T4 16 GB" in line and "13.1 GB" in line)
    assert code == 0 and [c.strip() for c in row.split("│")[1:-1]][4] == "tight"
    # the card page: "tight · " before the fewest T4s that hold it with the headroom
    entry = listing.entry_for(record, report, None)
    assert entry.tight_qlora == "T4 16 GB"
    t4_index = [c.name for c in mem.cards].index("T4 16 GB")
    (row,) = [r for part in listing.card_rows([entry], t4_index, "../", "T4 16 GB")["several"] for r in part]
    assert row["cells"][2] == "tight · 2 GPUs"


def test_qlora_has_no_batch_1_figure_where_it_does_not_apply() -> None:
    mem = _report("openai/gpt-oss-20b")[0].memory  # an MXFP4 checkpoint: QLoRA does not apply
    assert mem.train_qlora_bytes_batch1 is None and mem.tight_card_qlora is None


def test_the_cli_says_tight_per_card_with_the_measured_figures(capsys, tmp_path, monkeypatch) -> None:
    pooled = next(a for a in json.loads(accuracy_page.ACCURACY_JSON.read_text(encoding="utf-8"))["allocator"]
                  if a["setup"] == "every setup at one length")
    # LoRA at 2,500 tokens: 37.9 GB, over the A100 40 GB's 36.4 GB budget, within its 41.9 GB
    table = json.loads(accuracy_page.ACCURACY_JSON.read_text(encoding="utf-8"))
    least_over, expandable = table["least_card_over_pct"], table["least_card_expandable_pct"]
    code, text, err = run(capsys, LLAMA8, "--method", "lora", "--tokens", "2500")
    assert code == 0 and err == ""
    enough = sum(1 for x in least_over if x <= 10.5)  # the steps whose least card is within the margin
    assert (f"A100 40 GB is tight (41.9 GB for tensors: 10.5% over the peak, enough for {enough} of {len(least_over)} "
            f"replayed steps, {sum(1 for x in expandable if x <= 10.5)} of {len(expandable)} with expandable "
            "segments; budget 36.4 GB)") in text
    assert "L4 24 GB does not fit (budget 20.1 GB)" in text and "H200 141 GB fits (budget 131 GB)" in text
    assert "fits one A100 / H100 80 GB; tight on one A100 40 GB" in text
    assert (f"{pooled['runs']:,} steps replayed through it, each at one length, needed a median "
            f"{pooled['least_card_over_median_pct']:.1f}% (up to {pooled['least_card_over_max_pct']:.1f}%) over their "
            "live peak to run") in text
    assert text.index("Per card:") < text.index("Tight: the card holds the estimate but not its 1.15x headroom")
    code, text, _ = run(capsys, LLAMA8, "--method", "lora", "--tokens", "1024")  # fits or not: nothing tight
    assert code == 0 and "tight" not in text.lower()
    monkeypatch.setattr(accuracy_page, "ACCURACY_JSON", tmp_path / "missing.json")
    code, text, _ = run(capsys, LLAMA8, "--method", "lora", "--tokens", "2500")
    assert code == 0 and "A100 40 GB is tight (41.9 GB for tensors: 10.5% over the peak; budget 36.4 GB)" in text
    assert "replayed" not in text
    assert "expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) waste less." in text


def test_the_site_summary_names_the_tight_card(capsys, monkeypatch) -> None:
    code, text, _ = run(capsys, PHI)
    assert code == 0 and "76.4 GB for a full fine-tune (fits one H200 141 GB; tight on one A100 / H100 80 GB)" in text
    assert "Tight: the card holds the estimate" in text
    monkeypatch.setenv("COLUMNS", "160")
    code, out = main([PHI, "--plan"]), capsys.readouterr().out
    row = next(line for line in out.splitlines() if "A100 / H100 80 GB" in line and "73.4 GB" in line)
    assert code == 0 and [c.strip() for c in row.split("│")[1:-1]][:4] == ["A100 / H100 80 GB", "73.4 GB", "tight",
                                                                          "batch 6"]


def test_a_model_page_names_the_tight_card_and_says_what_it_means() -> None:
    report, record = _report(PHI)
    text = re.sub(r"<[^>]+>", "", render_model_page(report, record, SETTINGS, standalone=False))
    # the tight card's label reads less than the figure beside it may: what its driver reports is said there
    assert "for a full fine-tune (fits one H200 141 GB; tight on one A100 / H100 80 GB, which reports 85.0 GB)" in text
    least_over, expandable = accuracy_page.load().least_card_over_pct, accuracy_page.load().least_card_expandable_pct
    spare = (next(c for c in report.memory.cards if c.name == "A100 / H100 80 GB").capacity_bytes
             / report.memory.train_full_bytes_batch1 - 1) * 100
    assert ('"Tight": the card\'s memory less the CUDA context holds batch 1, not the 1.15x headroom kept for '
            "the caching allocator's fragmentation. The full fine-tune has room for "
            f"{spare:.1f}% over its peak on one A100 / H100 80 GB, enough for {sum(1 for x in least_over if x <= spare)} "
            f"of the {len(least_over)} steps replayed through the allocator, "
            f"{sum(1 for x in expandable if x <= spare)} of {len(expandable)} with expandable segments (measured).") in text
    # the memory table says tight in the card's cell, where "—" stood
    assert re.search(r"A100 / H100 80 GB</a></th><td[^>]*>[^<]*<br><small>[^<]*</small></td>\s*"
                     r'<td class="num answer" data-label="Full fine-tune">tight<br>',
                     render_model_page(report, record, SETTINGS, standalone=False))
    # serving's margin is given without the replay's odds: those steps are training steps and HF generate
    report, record = _report("meta-llama/Llama-3.1-70B")
    text = re.sub(r"<[^>]+>", "", render_model_page(report, record, SETTINGS, standalone=False))
    assert report.memory.tight_card_serve == "H200 141 GB"
    h200 = next(c for c in report.memory.cards if c.name == "H200 141 GB")
    # the H200's own serving figure, at vLLM's defaults there (8,192-token steps, 1,024 sequences), not the model's
    # (2,048 and 256): 147.6 GB, against 143.7
    assert h200.serve_bytes_batch1 > report.memory.serve_bytes_batch1
    share = engine_share(h200.serve_bytes_batch1, h200.usable_bytes, SETTINGS.assumptions.cuda_context_bytes)
    assert 0.98 < share <= 0.99  # 147.6 GB and the context of the H200's 151 GB
    assert re.search(r"Serving has room for 1\.8% over its peak on one H200 141 GB: a vLLM server needs "
                     r"gpu_memory_utilization 0\.99 or more there \(0\.9 by default\)\.", text)
    # vLLM's gpu_memory_utilization is a share of the card, 1.0 at most: starcoder2-7b's serving needs it all on a T4
    # with 192 sequences at once (a T4's vLLM default is 256, whose sampler leaves it no room)
    record = load_record(DEFAULT_SNAPSHOT_DIR, "bigcode/starcoder2-7b")
    short_step = dataclasses.replace(SETTINGS, assumptions=dataclasses.replace(SETTINGS.assumptions,
                                                                              serve_max_sequences=192))
    report = report_for_record(record, short_step)
    assert report.memory.tight_card_serve == "T4 16 GB"
    text = re.sub(r"<[^>]+>", "", render_model_page(report, record, short_step, standalone=False))
    assert "a vLLM server needs gpu_memory_utilization 1 there, the whole card (0.9 by default)" in text
    assert "1 or more" not in text
    report, record = _report("Qwen/Qwen3-0.6B")
    text = re.sub(r"<[^>]+>", "", render_model_page(report, record, SETTINGS, standalone=False))
    assert "tight" not in text.lower()


def test_the_replayed_least_cards_are_sorted_and_counted_against_a_margin() -> None:
    table = accuracy_page.load()
    least_over = table.least_card_over_pct
    assert len(least_over) == accuracy_page.replayed_all(table).runs and list(least_over) == sorted(least_over)
    assert least_over[-1] == accuracy_page.replayed_all(table).least_card_over_max_pct
    assert runs_within(least_over, -1) == 0 and runs_within(least_over, least_over[-1]) == len(least_over)
    with pytest.raises(ValueError, match="least_card_over_pct"):
        accuracy_page.parse(dict(json.loads(accuracy_page.ACCURACY_JSON.read_text(encoding="utf-8")),
                                 least_card_over_pct=[3.0, 1.0]), accuracy_page.ACCURACY_JSON)


@pytest.mark.parametrize("headroom, code", [(0.5, 2), (0.99, 2), (1, 0), (1.3, 0)])
def test_a_headroom_under_1_is_refused_naming_the_key(capsys, tmp_path, headroom, code) -> None:
    """Under 1 a card's budget would exceed its capacity: "fits" past the card's memory, and no job tight."""
    settings = tmp_path / "site_config.yaml"
    settings.write_text(f"job: {{headroom: {headroom}}}\n", encoding="utf-8")
    got, text, err = run(capsys, "Qwen/Qwen3-0.6B", "--config", str(settings))
    assert got == code
    if code:
        assert f"key 'headroom' = {headroom}: must be 1 or more" in err and text == ""


@pytest.mark.parametrize("setting, error", [
    ("headroom: .nan", "key 'headroom' = nan: must be a positive finite float"),
    ("mfu_full: .inf", "key 'mfu_full' = inf: must be a positive finite float"),
    ("mfu_lora: 5", "key 'mfu_lora' = 5: must be at most 1 (a share of the GPU's peak FLOPs)"),
    ("cuda_context_bytes: 99999999999999", "key 'cuda_context_bytes' = 99999999999999: must be under every card's "
                                           "usable memory (T4 16 GB: 15,633,612,800)"),
])
def test_a_setting_out_of_its_range_is_one_error_naming_the_file_and_key(capsys, tmp_path, setting, error) -> None:
    """A review found headroom .nan an internal error (exit 70), mfu .inf a cost of "—", a 100 TB CUDA context a
    negative budget and an MFU of 500% accepted: each is now one error naming the file, the key and the value."""
    settings = tmp_path / "site_config.yaml"
    settings.write_text(f"job: {{{setting}}}\n", encoding="utf-8")
    got, text, err = run(capsys, "Qwen/Qwen3-0.6B", "--config", str(settings))
    assert got == 2 and text == "" and err == f"neurarch-trace: {settings}: {error}\n"


def test_a_card_page_marks_a_tight_method_beside_its_gpu_count() -> None:
    """A card page's cell for a method batch 1 is tight on: "tight · " before the fewest GPUs that hold it with the
    headroom; on another card the same method shows the GPU count alone."""
    e = listing.Entry("org/m", "llama", "llama", 10**9, 100, "H200 141 GB", "T4 16 GB", None,
                      smallest_serve="T4 16 GB", batches=((0, 1, 3), (0, 2, 5)), qlora_batches=(2, 4),
                      gpus=((2, 1, 1, 1), (1, 1, 1, 1)), tight_full="T4 16 GB")
    (row,), _ = listing.card_rows([e], 0, "../", "T4 16 GB")["one"]
    assert row["cells"] == ["tight · 2 GPUs", "batch 1", "batch 2", "batch 3"]
    q = listing.Entry("org/q", "llama", "llama", 10**9, 100, "T4 16 GB", "T4 16 GB", None,
                      smallest_serve="T4 16 GB", batches=((1, 1, 3),), qlora_batches=(0,),
                      gpus=((1, 1, 2, 1),), tight_qlora="T4 16 GB")
    (row,), _ = listing.card_rows([q], 0, "../", "T4 16 GB")["one"]
    assert row["cells"] == ["batch 1", "batch 1", "tight · 2 GPUs", "batch 3"]
    assert listing.Entry.from_dict(q.to_dict()) == q
    (row,), _ = listing.card_rows([e], 1, "../", "L4 24 GB")["one"]
    assert row["cells"][0] == "1 GPU"
    assert listing.Entry.from_dict(e.to_dict()) == e  # the manifest keeps it


def test_a_card_cell_says_what_one_gpu_needs_where_the_card_alone_does_not_hold_batch_1() -> None:
    """Where a card's batch column reads no batch but its one-GPU plan fits, the cell names the plan's options:
    "tight · 1 GPU" alone reads as a contradiction. Read from a real Report: Qwen3-1.7B's LoRA on a T4 is tight
    without checkpointing and fits one T4 with it."""
    report, record = _report("Qwen/Qwen3-1.7B")
    e = listing.entry_for(record, report, None)
    t4 = [c.name for c in report.memory.cards].index("T4 16 GB")
    assert report.memory.tight_card_lora == "T4 16 GB" and report.memory.cards[t4].train_lora_max_batch == 0
    one = [p for p in report.plans if p.gpu == "T4 16 GB" and p.method == "lora" and p.fits and p.gpus == 1]
    assert one and one[0].grad_ckpt
    (row,), _ = listing.card_rows([e], t4, "../", "T4 16 GB")["one"]
    assert row["cells"][1] == "tight · 1 GPU, checkpointed"
    assert listing.Entry.from_dict(e.to_dict()) == e


def test_the_allocator_table_takes_expandable_segments_where_a_step_was_replayed_so() -> None:
    """accuracy_allocator: per setup, how many runs have the expandable replay, their least card over the live peak
    (median, max) and how many the headroom does not cover; the pooled list for the tight odds holds only them."""
    def row(live: int, least: int, expandable: int | None) -> dict:
        measured = {"peak_bytes": live, "reserved_bytes": least + 10, "minimum_capacity_bytes": least}
        if expandable is not None:
            measured["minimum_capacity_bytes_expandable"] = expandable
        return {"measured": measured, "est": live}

    rows = [row(100, 104, 101), row(100, 110, None), row(100, 120, 118)]
    groups = replay_groups(rows, lambda r: "setup", lambda r: r["est"])
    one, pooled = allocator_rows(groups, 1.15)
    assert pooled.setup == ALL_SETUPS and one.runs == 3 and one.expandable_runs == 2
    # 101 and 118 over 100: median 9.5%, max 18%; 100 x 1.15 is under 118
    assert (one.least_card_expandable_median_pct, one.least_card_expandable_max_pct, one.expandable_short) == (9.5, 18.0,
                                                                                                          1)
    assert least_card_pcts(groups, expandable=True) == (1.0, 18.0) and least_card_pcts(groups) == (4.0, 10.0, 20.0)
    none = allocator_rows(replay_groups(rows[1:2], lambda r: "setup", lambda r: r["est"]), 1.15)[0]
    assert none.expandable_runs == 0 and none.least_card_expandable_median_pct is None


def test_a_serving_engines_share_counts_the_context_against_the_whole_card() -> None:
    """vLLM's gpu_memory_utilization is a share of the card's total memory that must hold the tensors and the memory
    outside torch: (peak + context) / driver-reported total, against its default of 0.9."""
    assert ENGINE_DEFAULT_SHARE == 0.9
    assert engine_share(80 * GB, 100 * GB, 5 * GB) == 0.85
    assert engine_share(90 * GB, 100 * GB, 5 * GB) == 0.95


def test_a_margin_counts_the_replayed_steps_at_or_under_it() -> None:
    got = margin(110 * GB, 100 * GB, (5.0, 10.0, 10.5, 20.0), (1.0, 12.0))
    assert abs(got.spare_pct - 10.0) < 1e-9 and (got.runs, got.of, got.expandable_runs, got.expandable_of) == (2, 4, 1, 2)
    assert margin(110 * GB, 100 * GB, (), ()).of == 0
