"""Chart geometry for inline SVG: every coordinate and label is computed here, the templates only place them.

Two charts, drawn at build time with no JavaScript:
- memory against tokens per sample, one line per method (full fine-tune, LoRA, serving) from the
  Report's `memory.curve`, with a horizontal line at each card's budget;
- the largest batch per card, one bar per method.

Both use log scales (memory spans megabytes to terabytes, batches 1 to 10^5), are styled by classes
whose colours come from the stylesheet's light and dark variables, tell the methods apart by dash
pattern as well as colour, and carry a <title>, a <desc> that says what the chart shows in words, and
(for the curve) a table of the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .. import format as f

WIDTH = 640
# A phone's chart: 380 units drawn across ~366 px keeps the 12-unit type at 11.5 px, where the wide
# chart would shrink it to about 7 px. Pages carry both; the stylesheet shows the one that fits.
NARROW_WIDTH = 380
SERIES = (("train_full_bytes", "full", "Full fine-tune"), ("train_lora_bytes", "lora", "LoRA"),
          ("serve_bytes", "serve", "Serving"))
BATCHES = (("train_full_max_batch", "full", "Full fine-tune"), ("train_lora_max_batch", "lora", "LoRA"),
           ("serve_max_batch", "serve", "Serving"))
LABEL_GAP = 13  # the least vertical distance between two right-hand labels (font size 12)
CHAR_WIDTH = 7.0  # the widest a digit or "K" of the 12-unit tick font is, to keep tick labels apart
TICK_PAD = 6.0  # the least space between two tick labels


def _thin(ticks: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """Ticks (x, label) whose labels would touch are dropped, keeping the first and the last (the
    model's context): 32K and 40K side by side read "32K40K"."""
    def room(a: tuple[float, str], b: tuple[float, str]) -> bool:
        return b[0] - a[0] >= (len(a[1]) + len(b[1])) / 2 * CHAR_WIDTH + TICK_PAD

    kept: list[tuple[float, str]] = []
    for tick in ticks:
        if not kept or room(kept[-1], tick):
            kept.append(tick)
    if ticks and kept[-1] != ticks[-1]:
        while kept and not room(kept[-1], ticks[-1]):
            kept.pop()
        kept.append(ticks[-1])
    return kept


def curve_points(memory: Mapping[str, Any] | None) -> list[dict[str, int]] | None:
    """`memory.curve` of a Report's JSON form when it is present and well formed, sorted by tokens."""
    curve = None if memory is None else memory.get("curve")
    if not isinstance(curve, list) or not curve:
        return None
    keys = ("tokens", *(k for k, _, _ in SERIES))
    out = []
    for point in curve:
        if not isinstance(point, Mapping):
            return None
        values: dict[str, Any] = {k: point.get(k) for k in keys}
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values.values()):
            return None
        out.append(values)
    return sorted(out, key=lambda p: int(p["tokens"]))


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks between lo and hi (both > 0); only powers of ten when the range is wide."""
    steps = (1, 2, 5) if math.log10(hi / lo) <= 2.5 else (1,) if math.log10(hi / lo) > 5 else (1, 3)
    ticks = []
    for exp in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for step in steps:
            value = step * 10.0**exp
            if lo <= value <= hi:
                ticks.append(value)
    return ticks


def _spread(wanted: list[float], low: float, high: float) -> list[float]:
    """Label positions (ascending screen y) moved apart by at least LABEL_GAP, kept within [low, high]."""
    out: list[float] = []
    for y in wanted:
        out.append(max(y, out[-1] + LABEL_GAP) if out else max(y, low))
    overflow = out[-1] - high if out else 0
    if overflow > 0:  # push the stack back up; the top one stops at `low`
        out = [y - overflow for y in out]
        for i in range(len(out)):
            out[i] = max(out[i], low if i == 0 else out[i - 1] + LABEL_GAP)
    return out


class _Scale:
    """A log scale from [lo, hi] (data) to [a, b] (screen)."""

    def __init__(self, lo: float, hi: float, a: float, b: float, base: float = 10.0) -> None:
        if hi <= lo:
            lo, hi = lo / base, hi * base
        self.lo, self.hi, self.a, self.b, self.base = math.log(lo, base), math.log(hi, base), a, b, base

    def __call__(self, value: float) -> float:
        t = (math.log(max(value, 1e-9), self.base) - self.lo) / (self.hi - self.lo)
        return self.a + t * (self.b - self.a)


def memory_chart(curve: list[dict[str, int]], cards: Sequence[Any], *, model: str,
                 narrow: bool = False) -> dict[str, Any]:
    """Memory against tokens per sample for each method, and each card's budget as a horizontal line.

    `curve` is curve_points()'s output; `cards` the Report's CardPlans (name, budget_bytes). narrow:
    the phone's layout, card names inside the plot above their lines instead of in a right margin."""
    width = NARROW_WIDTH if narrow else WIDTH
    left, right, top, bottom = (52, 8, 34, 44) if narrow else (64, 170, 34, 44)
    height = 300
    x0, x1, y0, y1 = left, width - right, top, height - bottom
    tokens = [p["tokens"] for p in curve]
    values = [p[k] for p in curve for k, _, _ in SERIES] + [c.budget_bytes for c in cards if c.budget_bytes > 0]
    lo, hi = min(values) / 1.3, max(values) * 1.3
    ys = _Scale(lo, hi, y1, y0)
    xs = _Scale(tokens[0], tokens[-1], x0, x1, base=2)
    y_ticks = [{"y": f.coord(ys(v)), "label": f.gb_tick(v)} for v in _log_ticks(lo, hi)]
    x_ticks = [{"x": f.coord(x), "label": label} for x, label in _thin([(xs(t), f.tokens_short(t)) for t in tokens])]
    series = [{"cls": cls, "label": label, "points": f.points([(xs(p["tokens"]), ys(p[key])) for p in curve])}
              for key, cls, label in SERIES]
    ordered = sorted(cards, key=lambda c: -c.budget_bytes)  # top of the chart first
    if narrow:  # the label sits just above its line, inside the plot
        label_ys = _spread([ys(c.budget_bytes) - 7 for c in ordered], y0 + 4, y1 - 7)
    else:
        label_ys = _spread([ys(c.budget_bytes) for c in ordered], y0 + 4, y1)
    card_lines = [{"y": f.coord(ys(c.budget_bytes)), "label": c.name, "label_y": f.coord(ly + 4)}
                  for c, ly in zip(ordered, label_ys, strict=True)]
    start, step, sample = (8, (width - 8) / 3, 20) if narrow else (x0, 150, 28)
    legend = [{"cls": cls, "label": label, "x1": f.coord(start + i * step), "x2": f.coord(start + i * step + sample),
               "tx": f.coord(start + i * step + sample + 6)} for i, (_, cls, label) in enumerate(SERIES)]
    first, last = curve[0], curve[-1]
    # a series whose peak does not move (t5-base's full fine-tune: its optimizer step) says so, not "from 4.46 GB
    # to 4.46 GB"
    grows = "; ".join(f"{label} from {f.gb(first[key])} at {f.count(first['tokens'])} tokens to "
                      f"{f.gb(last[key])} at {f.count(last['tokens'])}" if f.gb(first[key]) != f.gb(last[key])
                      else f"{label} {f.gb(first[key])} at every length" for key, _, label in SERIES)
    budgets = ", ".join(f"{c.name} {f.gb(c.budget_bytes)}" for c in cards)
    return {
        "id": "memory-chart-narrow" if narrow else "memory-chart",
        # the phone's drawing is named by the wide one's title and description (one copy of each per page;
        # aria-labelledby reads them even where the wide drawing is not displayed)
        "label_id": "memory-chart",
        "view_box": f"0 0 {width} {height}",
        "title": f"GPU memory of {model} at batch 1 against tokens per sample",
        "desc": f"Log scales. Memory grows with the tokens per sample: {grows}. "
                f"Horizontal lines are each card's budget: {budgets}.",
        "plot": {"x0": f.coord(x0), "x1": f.coord(x1), "y0": f.coord(y0), "y1": f.coord(y1)},
        "x_ticks": x_ticks, "x_tick_y": f.coord(y1 + 16),
        "x_title": {"x": f.coord((x0 + x1) / 2), "y": f.coord(height - 6),
                    "text": "tokens per sample (log, K = 1,024)" if narrow
                    else "tokens per sample (log scale, K = 1,024)"},
        "y_ticks": y_ticks, "y_tick_x": f.coord(x0 - 6),
        "legend": legend, "legend_y": f.coord(14), "legend_ty": f.coord(18),
        "series": series,
        "cards": card_lines, "card_label_x": f.coord(x0 + 4 if narrow else x1 + 6),
        "table": [{"tokens": f.count(p["tokens"]), **{cls: f.gb(p[key]) for key, cls, _ in SERIES}}
                  for p in curve],
    }


# A card whose GPUs vLLM does not serve the model on (its serving figure is 0: card_plans, vllm_support.serving_scale)
NOT_SERVED_LABEL = "not served"


def _none(card: Any, key: str) -> str:
    """What a bar with no batch says: the method does not fit, or vLLM does not serve the model on the card."""
    return NOT_SERVED_LABEL if key == "serve_max_batch" and not card.served else "does not fit"


def batch_chart(cards: Sequence[Any], *, model: str, serve_tokens: int, narrow: bool = False) -> dict[str, Any]:
    """The largest batch per card for each method as horizontal bars on a log scale (batch 1 is the
    shortest visible bar; a method that does not fit has no bar and says so). narrow: the phone's layout."""
    chart_width = NARROW_WIDTH if narrow else WIDTH
    left, right, top = (128, 40, 30) if narrow else (132, 58, 30)
    bar, gap, group_gap = 10, 2, 14
    group = 3 * bar + 2 * gap
    height = top + len(cards) * (group + group_gap) + 26
    x0, x1 = left, chart_width - right
    peak = max([getattr(c, key) for c in cards for key, _, _ in BATCHES] + [10])
    span = math.log10(peak)
    groups, axis_bottom = [], top + len(cards) * (group + group_gap) - group_gap + 4
    for i, card in enumerate(cards):
        gy = top + i * (group + group_gap)
        bars = []
        for j, (key, cls, label) in enumerate(BATCHES):
            value = getattr(card, key)
            y = gy + j * (bar + gap)
            width = 0.0 if value <= 0 else 3 + (x1 - x0 - 3) * math.log10(value) / span
            none = _none(card, key)
            bars.append({"cls": cls, "y": f.coord(y), "w": f.coord(width), "ty": f.coord(y + bar - 1),
                         "tx": f.coord(x0 + width + 4), "h": f.coord(bar),
                         "label": f.count(value) if value > 0 else none,
                         "title": f"{label}: " + (f.batch(value) if value > 0 else none)})
        groups.append({"name": card.name, "name_y": f.coord(gy + group / 2 + 4), "bars": bars})
    ticks = [{"x": f.coord(x0 + 3 + (x1 - x0 - 3) * math.log10(v) / span), "label": f.tick_count(int(v))}
             for v in _log_ticks(1, peak) if v == int(v) and str(int(v))[0] == "1"]
    start, step = (8, (chart_width - 8) / 3) if narrow else (x0, 130)
    legend = [{"cls": cls, "label": label, "x": f.coord(start + i * step), "tx": f.coord(start + i * step + 16)}
              for i, (_, cls, label) in enumerate(BATCHES)]
    said = "; ".join(f"{c.name}: " + ", ".join(f"{label} {f.count(getattr(c, key)) if getattr(c, key) else 'none'}"
                                               + (" (vLLM does not serve it here)" if _none(c, key) == NOT_SERVED_LABEL
                                                  else "") for key, _, label in BATCHES) for c in cards)
    return {
        "id": "batch-chart-narrow" if narrow else "batch-chart",
        "label_id": "batch-chart",
        "view_box": f"0 0 {chart_width} {height}",
        "title": f"Largest batch of {model} per card",
        "desc": f"Log scale. Largest batch that fits one card, training at the job's tokens per sample and "
                f"serving at {f.count(serve_tokens)} tokens per sequence. {said}. The table below gives "
                f"the same numbers with the two-card splits.",
        "x0": f.coord(x0), "x1": f.coord(x1), "axis_y": f.coord(axis_bottom), "grid_top": f.coord(top - 6), "tick_y": f.coord(axis_bottom + 14),
        "name_x": f.coord(x0 - 8), "ticks": ticks, "legend": legend, "legend_y": f.coord(8),
        "legend_ty": f.coord(17), "groups": groups,
    }
