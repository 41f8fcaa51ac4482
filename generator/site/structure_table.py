"""The model page's structure table: which rows it lists, and how it folds the layers that repeat.

A decoder repeats its layers: listing all of them makes a 126-layer model's table 762 rows. The page lists the
rows before the stack, the layers up to the end of the first repeated unit and the rows after the stack, and
folds the repeats into one line (their rows kept in a <details> element while the page holds at most
MAX_STRUCTURE_ROWS rows, else left to the JSON twin, which has every row). A unit is one layer in a uniform stack,
several in a stack whose layers alternate (Qwen3.5's three Gated DeltaNet layers and one attention layer), and
a stack may open with layers of another kind (DeepSeek-V3's three dense layers before its MoE layers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import format as f
from ..estimator import Report
from ..estimator.graph.structure import StructureTable

MIN_LAYERS_TO_FOLD = 3  # with 1 or 2 layers folding saves nothing (the reference page shows all rows)
# The most structure rows a page shows (a row is ~65 bytes; the page budget is 60 kB). A 126-layer model has 762
# rows: beyond this, the repeated layers or the middle rows are named, not listed, and the JSON twin beside the
# page has every row. At 200, a 32-layer decoder's 186 folded rows took 12 kB of its page and left 51 popular pages
# within 5 kB of the budget, too little for a 1M-token memory curve; 128 keeps every row of a stack up to ~20 layers.
MAX_STRUCTURE_ROWS = 128
TAIL_ROWS = 4  # rows kept after a cut in a stack that does not fold (the final norm and the head)


def find_repeat(layers: Sequence[Any]) -> tuple[int, int, int] | None:
    """(first layer, layers per unit, units) of the run of identical consecutive units that saves the most layers
    ((units - 1) x unit), positions from 0; the shortest unit, then the earliest run, on a tie; None where no
    layer repeats. `layers` holds one comparable key per layer: its rows' (type, shape, parameters), which the
    names leave out (Attention_1, Attention_2), so that folding says only what is true of every folded row."""
    n = len(layers)
    best: tuple[int, int, int] | None = None
    saved = 0
    for unit in range(1, n // 2 + 1):
        # same[i]: how many layers from i on equal the layer `unit` after them, counted from the end
        same = [0] * (n + 1)
        for i in range(n - unit - 1, -1, -1):
            same[i] = same[i + 1] + 1 if layers[i] == layers[i + unit] else 0
        for i in range(n - unit):
            units = same[i] // unit + 1
            if (units - 1) * unit > saved:
                best, saved = (i, unit, units), (units - 1) * unit
    return best


def _row(r: Any) -> dict[str, str]:
    return {"index": f.count(r.index), "name": r.name, "type": r.type, "shape": f.shape(r.output_shape),
            "params": f.count(r.params)}


def _layer_spans(report: Report) -> list[tuple[int, int, int]]:
    """(layer number, first row, end row) of each layer's rows in forward order, positions from 0; [] where the
    structure does not say which rows are whose (a table read back without its spec)."""
    table = report.structure
    if not isinstance(table, StructureTable):
        return []
    out = table.layer_spans()
    return out if out and out[-1][2] + len(table.spec.head) == len(table) else []


def folds(layers: Sequence[Any], lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
    """The repeats find_repeat finds in layers[lo:hi], then in the layers before and after each (an encoder's
    stack, then its decoder's), in forward order; only those that fold MIN_LAYERS_TO_FOLD - 1 layers or more."""
    hi = len(layers) if hi is None else hi
    found = find_repeat(layers[lo:hi])
    if found is None or (found[2] - 1) * found[1] < MIN_LAYERS_TO_FOLD - 1:
        return []
    first, unit, units = found[0] + lo, found[1], found[2]
    return [*folds(layers, lo, first), (first, unit, units), *folds(layers, first + units * unit, hi)]


def structure_context(report: Report) -> dict[str, Any]:
    """The structure table's context: `head` (the rows listed first), `folds` (each run of repeated layers: their
    first and last number, the unit they repeat, their rows where the page lists them, and the rows listed
    `after` it up to the next), `cut` (the middle rows of a stack with no repeat, past MAX_STRUCTURE_ROWS) and
    `tail`. Only the rows shown are formatted."""
    rows = report.structure
    first_shape = rows[0].output_shape if rows else ()
    context: dict[str, Any] = {
        "nodes": f.count(len(rows)),
        # The Input node's shape is (1, tokens): the context the shapes were propagated at.
        "tokens": f.count(first_shape[-1]) if first_shape else f.DASH,
        "train_tokens": f.count(report.memory.train_tokens),
        "same_as_train": bool(first_shape) and first_shape[-1] == report.memory.train_tokens,
        "head": [], "folds": [], "cut": None, "tail": [],
    }
    spans = _layer_spans(report)
    keys = [tuple((r.type, r.output_shape, r.params) for r in rows[a:b]) for _, a, b in spans]
    found = folds(keys) if len(spans) >= MIN_LAYERS_TO_FOLD else []
    # (first row folded, end row folded) per repeat: the rows of the layers after each repeat's first unit
    cuts = [(spans[first + unit][1], spans[first + units * unit - 1][2]) for first, unit, units in found]
    if found and len(rows) - sum(b - a for a, b in cuts) <= MAX_STRUCTURE_ROWS:
        shown = len(rows) <= MAX_STRUCTURE_ROWS
        ends = [a for a, _ in cuts[1:]] + [None]
        context["head"] = [_row(r) for r in rows[:cuts[0][0]]]
        for (first, unit, units), (a, b), end in zip(found, cuts, ends, strict=True):
            folded = rows[a:b]
            source = spans[first][0], spans[first + unit - 1][0]
            context["folds"].append({
                "first": f.count(spans[first + unit][0]), "last": f.count(spans[first + units * unit - 1][0]),
                "per_layer": f.count(spans[first + unit - 1][2] - spans[first][1]),
                "unit": f"layer {f.count(source[0])}" if unit == 1
                else f"layers {f.count(source[0])} to {f.count(source[1])}, repeated",
                "rows": [_row(r) for r in folded] if shown else None, "count": f.count(len(folded)),
                "from": f.count(folded[0].index), "to": f.count(folded[-1].index),
                "after": [_row(r) for r in rows[b:end]] if end is not None else []})
        context["tail"] = [_row(r) for r in rows[cuts[-1][1]:]]
        return context
    if len(rows) <= MAX_STRUCTURE_ROWS:
        context["head"] = [_row(r) for r in rows]
        return context
    keep = MAX_STRUCTURE_ROWS - TAIL_ROWS
    context["head"] = [_row(r) for r in rows[:keep]]
    context["cut"] = {"first": f.count(rows[keep].index), "last": f.count(rows[-TAIL_ROWS - 1].index),
                      "count": f.count(len(rows) - keep - TAIL_ROWS)}
    context["tail"] = [_row(r) for r in rows[-TAIL_ROWS:]]
    return context
