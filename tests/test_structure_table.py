"""The structure table's folds (site/structure_table.py): a uniform stack folds after layer 1, a stack that opens
with other layers folds after its first repeated one, an alternating stack folds whole periods, an encoder and
its decoder fold apart; the page names each fold by layer numbers that match the rows it lists."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site.build import render_model_page
from generator.site.structure_table import MAX_STRUCTURE_ROWS, find_repeat, folds, structure_context

SETTINGS = load_settings()


def _page(model: str) -> tuple[str, object]:
    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    assert record is not None
    report = report_for_record(record, SETTINGS)
    return render_model_page(report, record, SETTINGS, standalone=False), report


@pytest.mark.parametrize("layers, expected", [
    (["d", "d", "d"] + ["m"] * 58, (3, 1, 58)),  # DeepSeek-V3: three dense layers, then MoE
    (["x", "x", "x", "a"] * 10, (0, 4, 10)),  # Qwen3.5: three linear-attention layers and one attention layer
    (["s"] * 5 + ["g"], (0, 1, 5)),  # Gemma 3's first period: five sliding-window layers, one global
    (["a", "b", "a", "c"], None),
    (["a", "b"], None),
])
def test_the_repeat_that_saves_most(layers, expected) -> None:
    assert find_repeat(layers) == expected


def test_an_encoder_and_its_decoder_fold_apart() -> None:
    # T5: each stack's first layer holds the relative position bias, the others are alike
    layers = ["e1"] + ["e"] * 5 + ["d1"] + ["d"] * 5
    assert folds(layers) == [(1, 1, 5), (7, 1, 5)]


def test_the_encoder_final_norm_is_shown_where_it_runs() -> None:
    """t5-base's final encoder norm runs after its 12th layer (modeling_t5 T5Stack.final_layer_norm); the spec keeps
    it with the embedding stage, and the table had listed it fourth, before any layer."""
    report = report_for_record(load_record(DEFAULT_SNAPSHOT_DIR, "google-t5/t5-base"), load_settings())
    names = [r.name for r in report.structure]
    at = names.index("Encoder_Final_Norm")
    assert names[at - 1] == "Add_12_ffn" and names[at + 1] == "RMSNorm_13_1"
    assert [r.index for r in report.structure] == list(range(1, len(names) + 1))
    # each layer's rows as the table lays them out: the fold of layers 3 to 12 is rows 16 to 75, not 17 to 76
    # (a page review: the encoder's norm, moved after layer 12, had shifted the encoder's spans by one)
    spans = {layer: (first, end) for layer, first, end in report.structure.layer_spans()}
    assert names[spans[3][0]] == "RMSNorm_3_1" and names[spans[12][1] - 1] == "Add_12_ffn"
    assert names[spans[13][0]] == "RMSNorm_13_1" and spans[13][0] == spans[12][1] + 1
    fold = structure_context(report)["folds"][0]
    assert (fold["first"], fold["last"], fold["from"], fold["to"]) == ("3", "12", "16", "75")


@given(st.lists(st.sampled_from("abc"), max_size=40))
def test_folds_cover_only_layers_equal_to_their_unit(layers) -> None:
    """Every folded layer equals the layer of the unit it repeats, and folds never overlap."""
    end = 0
    for first, unit, units in folds(layers):
        assert first >= end and units >= 2
        for k in range(first + unit, first + units * unit):
            assert layers[k] == layers[first + (k - first) % unit]
        end = first + units * unit


@pytest.mark.parametrize("model, line", [
    ("deepseek-ai/DeepSeek-V3", "Layers 5 to 61: the same 6 rows as layer 4, with the layer's number in each name "
                                "(rows 28 to 369, 342 rows;"),
    ("Qwen/Qwen3.5-35B-A3B", "Layers 5 to 40: the same 24 rows as layers 1 to 4, repeated, with the layer's number "
                             "in each name (rows 30 to 245, 216 rows;"),
    ("google-t5/t5-large", "Layers 27 to 48: the same 9 rows as layer 26, with the layer's number in each name"),
])
def test_a_page_names_each_fold_by_the_layers_it_lists(model, line) -> None:
    html, report = _page(model)
    assert line in html
    listed = re.findall(r"<tr><td>([\d,]+)<td>", html[html.index('<section id="structure">'):])
    assert len(listed) <= MAX_STRUCTURE_ROWS and listed[-1] == f"{len(report.structure):,}"
    # the rows listed are the rows before each fold and after it, in order, with none folded twice
    numbers = [int(x.replace(",", "")) for x in listed]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_a_small_encoder_decoder_keeps_both_folds_on_the_page() -> None:
    html, report = _page("google-t5/t5-small")
    assert "<summary>Layers 3 to 6: the same 6 rows as layer 2 (24 rows)</summary>" in html
    assert "<summary>Layers 9 to 12: the same 9 rows as layer 8 (36 rows)</summary>" in html
    for row in report.structure:
        assert f"<td>{row.name}<td>" in html
