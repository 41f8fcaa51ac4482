"""Charts: SVG geometry computed in generator/site/charts.py, drawn inline at build time with no JS.

The memory chart draws the Report's `memory.curve` (estimator/curve.py): `[{"tokens",
"train_full_bytes", "train_lora_bytes", "serve_bytes"}]` for 512, 1024, ... up to the model's context.
`curve_for` makes a longer, synthetic curve (up to any context) for the geometry and budget tests."""

from __future__ import annotations

import dataclasses

import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import Any

import pytest

from generator import format as f
from generator.estimator.report import CurvePoint
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site import charts
from generator.site.render import render_model_page

SETTINGS = load_settings()
SVG = "{http://www.w3.org/2000/svg}"


def curve_for(report: Any, context: int) -> list[dict[str, int]]:
    """A made-up but plausible curve: memory grows with tokens from the Report's batch-1 figures."""
    m = report.memory
    out, tokens = [], 512
    while tokens <= context:
        k = tokens / m.train_tokens
        out.append({"tokens": tokens, "train_full_bytes": int(m.train_full_bytes_batch1 * (0.6 + 0.4 * k)),
                    "train_lora_bytes": int(m.train_lora_bytes_batch1 * (0.3 + 0.7 * k)),
                    "serve_bytes": int(m.serve_bytes_batch1 * (0.8 + 0.2 * k))})
        tokens *= 2
    return out


def with_curve(report: Any, curve: list[dict[str, int]]) -> Any:
    """The Report with its `memory.curve` replaced by `curve`."""
    return replace(report, memory=replace(report.memory, curve=tuple(CurvePoint(**p) for p in curve)))


def _report(model: str) -> tuple[Any, Any]:
    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    assert record is not None
    return report_for_record(record, SETTINGS), record


def _svg(html: str, chart_id: str) -> ET.Element:
    found = re.search(rf'<svg [^>]*id="{chart_id}".*?</svg>', html, re.S)
    assert found, chart_id
    return ET.fromstring(found.group(0).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text)]


def test_curve_points_takes_only_the_documented_shape() -> None:
    good = [{"tokens": 1024, "train_full_bytes": 3, "train_lora_bytes": 2, "serve_bytes": 1},
            {"tokens": 512, "train_full_bytes": 2, "train_lora_bytes": 1, "serve_bytes": 1}]
    assert [p["tokens"] for p in charts.curve_points({"curve": good})] == [512, 1024]
    assert charts.curve_points({}) is None and charts.curve_points(None) is None
    assert charts.curve_points({"curve": []}) is None
    for bad in ({"tokens": 512}, {**good[0], "serve_bytes": -1}, {**good[0], "tokens": "512"},
                {**good[0], "train_full_bytes": True}, "512"):
        assert charts.curve_points({"curve": [good[1], bad]}) is None, bad


def test_the_memory_chart_draws_the_reports_curve() -> None:
    report, record = _report("Qwen/Qwen3-0.6B")
    curve = report.memory.curve
    assert [p.tokens for p in curve] == [512, 1024, 2048, 4096, 8192, 16384, 32768, 40960]
    html = render_model_page(report, record, SETTINGS, standalone=False)
    assert html.index('id="memory-chart"') < html.index('id="batch-chart"') < html.index("Largest batch per card and")
    svg = _svg(html, "memory-chart")
    # Text alternatives: role img, labelled by its own title and desc, and a table of the numbers.
    assert svg.get("role") == "img"
    labelled = svg.get("aria-labelledby", "").split()
    assert [svg.find(f"{SVG}title").get("id"), svg.find(f"{SVG}desc").get("id")] == labelled  # type: ignore[union-attr]
    desc = svg.findtext(f"{SVG}desc") or ""
    first, last = curve[0], curve[-1]
    assert (f"Full fine-tune from {f.gb(first.train_full_bytes)} at 512 tokens to {f.gb(last.train_full_bytes)} "
            "at 40,960") in desc
    assert f"Serving from {f.gb(first.serve_bytes)} at 512 tokens to {f.gb(last.serve_bytes)} at 40,960" in desc
    assert "T4 16 GB " + f.gb(report.memory.cards[0].budget_bytes) in desc
    # One line per method, styled by the classes the light and dark colours are set on, one vertex per point.
    lines = svg.findall(f"{SVG}polyline")
    assert [x.get("class") for x in lines] == ["s full", "s lora", "s serve"]
    assert all(len((x.get("points") or "").split()) == len(curve) for x in lines)
    # The table under the chart holds the curve's own numbers, in the one format of the site.
    table = html.split("<caption>Memory at batch 1 by tokens per sample</caption>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr><th scope="row" class="num">([^<]*)</th><td class="num">([^<]*)</td>'
                      r'<td class="num">([^<]*)</td><td class="num">([^<]*)</td></tr>', table)
    assert rows == [(f.count(p.tokens), f.gb(p.train_full_bytes), f.gb(p.train_lora_bytes), f.gb(p.serve_bytes))
                    for p in curve]


def test_no_memory_chart_without_a_line_to_draw() -> None:
    report, record = _report("Qwen/Qwen3-0.6B")
    for curve in ((), report.memory.curve[:1]):
        bare = replace(report, memory=replace(report.memory, curve=curve))
        html = render_model_page(bare, record, SETTINGS, standalone=False)
        assert 'id="memory-chart"' not in html and 'id="batch-chart"' in html


def test_the_standalone_page_has_the_chart_too() -> None:
    report, _ = _report("openai-community/gpt2")
    html = render_model_page(report, None, SETTINGS, standalone=True)
    assert 'id="memory-chart"' in html and html.count('<th scope="row" class="num">') == len(report.memory.curve) == 4


def test_memory_chart_geometry() -> None:
    report, _ = _report("Qwen/Qwen3-0.6B")
    curve = curve_for(report, 131072)
    chart = charts.memory_chart(curve, report.memory.cards, model="m")
    width, height = _numbers(chart["view_box"])[2:]
    lines = [s["points"] for s in chart["series"]]
    assert [s["cls"] for s in chart["series"]] == ["full", "lora", "serve"]
    for points in lines:
        xy = [tuple(map(float, p.split(","))) for p in points.split()]
        assert len(xy) == len(curve) == 9
        assert all(0 <= x <= width and 0 <= y <= height for x, y in xy)
        assert [x for x, _ in xy] == sorted(x for x, _ in xy)
        assert all(b[1] <= a[1] for a, b in zip(xy, xy[1:]))  # memory grows: the line goes up the screen
    # Ticks: tokens as LLM people write them, bytes in decimal units, largest at the top.
    assert [t["label"] for t in chart["x_ticks"]] == ["512", "1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K"]
    ys = [float(t["y"]) for t in chart["y_ticks"]]
    assert ys == sorted(ys, reverse=True) and all(t["label"].endswith("B") for t in chart["y_ticks"])
    # Card labels never overlap, whatever the budgets.
    label_ys = [float(c["label_y"]) for c in chart["cards"]]
    assert all(b - a >= charts.LABEL_GAP - 0.11 for a, b in zip(label_ys, label_ys[1:]))
    assert [c["label"] for c in chart["cards"]] == [c.name for c in reversed(report.memory.cards)]


def test_labels_of_close_cards_are_spread_apart() -> None:
    assert charts._spread([10.0, 11.0, 12.0], 0, 100) == [10.0, 23.0, 36.0]
    assert charts._spread([90.0, 95.0, 99.0], 0, 100) == [74.0, 87.0, 100.0]


def test_the_batch_chart_draws_every_card_and_says_what_does_not_fit() -> None:
    report, record = _report("Qwen/Qwen3-0.6B")
    chart = charts.batch_chart(report.memory.cards, model="Qwen/Qwen3-0.6B", serve_tokens=4096)
    assert [g["name"] for g in chart["groups"]] == [c.name for c in report.memory.cards]
    t4 = chart["groups"][0]["bars"]
    assert report.memory.cards[0].train_full_max_batch == 0
    assert t4[0]["label"] == "does not fit" and float(t4[0]["w"]) == 0
    widths = [(getattr(c, "serve_max_batch"), float(g["bars"][2]["w"])) for c, g in
              zip(report.memory.cards, chart["groups"])]
    assert [w for _, w in sorted(widths)] == sorted(w for _, w in widths)  # longer bar, larger batch
    assert all(float(g["bars"][1]["w"]) >= 3 for g in chart["groups"])  # batch 1 still shows
    html = render_model_page(report, record, SETTINGS, standalone=False)
    svg = _svg(html, "batch-chart")
    assert svg.findtext(f"{SVG}title") == "Largest batch of Qwen/Qwen3-0.6B per card"
    assert "T4 16 GB: Full fine-tune none, LoRA " in (svg.findtext(f"{SVG}desc") or "")
    rects = svg.findall(f".//{SVG}rect")
    assert all(r.findtext(f"{SVG}title") for r in rects if r.get("class", "").startswith("b ") and r.find(f"{SVG}title") is not None)


@pytest.mark.parametrize("scheme_class", ["s full", "s lora", "s serve", "b full", "b lora", "b serve"])
def test_charts_are_styled_by_classes_the_stylesheet_colours(scheme_class: str) -> None:
    from generator.site.render import stylesheet

    css = stylesheet()
    kind, method = scheme_class.split()
    assert re.search(rf"figure\.chart \.{kind}\.{method} \{{[^}}]*var\(--c-{method}\)", css)
    assert f"--c-{method}:" in css.split("@media (prefers-color-scheme: dark)")[1]  # a dark-mode colour too


def test_a_chart_without_cards_is_not_drawn() -> None:
    report, record = _report("openai-community/gpt2")
    bare = replace(report, memory=replace(report.memory, cards=()))
    html = render_model_page(with_curve(bare, curve_for(report, 1024)), record, SETTINGS, standalone=False)
    assert "<svg" not in html


def test_tick_labels_that_would_touch_are_dropped() -> None:
    """Issue 16 item 15: a 40K context beside the 32K tick read "32K40K"; the context's own tick stays."""
    ticks = [(64.0, "512"), (128.2, "1K"), (192.4, "2K"), (385.1, "16K"), (449.3, "32K"), (470.0, "40K")]
    assert [label for _, label in charts._thin(ticks)] == ["512", "1K", "2K", "16K", "40K"]
    assert charts._thin([(0.0, "1K"), (5.0, "2K")]) == [(5.0, "2K")]
    assert charts._thin([]) == []
    report, _ = _report("Qwen/Qwen3-8B")  # a 40,960-token context: the Report's curve ends there
    curve = charts.curve_points({"curve": [dataclasses.asdict(p) for p in report.memory.curve]})
    assert curve is not None and curve[-1]["tokens"] == 40960
    chart = charts.memory_chart(curve, report.memory.cards, model="m")
    xs = [(float(t["x"]), t["label"]) for t in chart["x_ticks"]]
    assert xs[-1][1] == "40K" and "32K" not in [label for _, label in xs]
    assert all(b[0] - a[0] >= (len(a[1]) + len(b[1])) / 2 * charts.CHAR_WIDTH for a, b in zip(xs, xs[1:]))
