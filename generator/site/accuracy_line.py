"""Each model page's accuracy line: the error of the setups that page prices, on other models' measured runs.

It reads the table accuracy_page loads (accuracy.json) and measures nothing; format.py turns its numbers into text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import accuracy as table_module
from .. import format as f
from ..accuracy import ErrorRow
from . import pages
from .accuracy_page import METHODS, NO_RUNS, Accuracy, dataset_name, error_cells


def href(site: Mapping[str, Any], root: str | None, standalone: bool) -> str | None:
    """The accuracy page from a model page: relative on the site (root: the page's way back to the
    site root), absolute from a standalone file, and none where there is no site (no site.url)."""
    if standalone:
        url = pages.site_url(site)
        return url + pages.ACCURACY[: -len("index.html")] if url else None
    return None if root is None else root + pages.ACCURACY


# What a model page prices for the methods the CPU harness cannot run (bitsandbytes needs CUDA; the page's serving
# figure is a chunked-prefill server, the harness runs HF generate): named on the line, their runs shown as
# other setups' runs, never as this setup's.
PAGE_SETUPS = {"qlora": "nf4, double quant, paged AdamW, checkpointing", "inference": "a chunked-prefill server"}
# The harness's nearest setup to the page's serving figure (the same weights and KV cache terms).
NEAREST = {"inference": "serving, HF generate"}
# What the harness's runs of a page's setup run in place of the page's, and why (no comma: the line's separator)
SUBSTITUTED = {"qlora": "run with AdamW as paged AdamW needs CUDA: the page's figure counts only the state paged "
                        "AdamW leaves unpaged and these runs count AdamW's in both the estimate and the run"}


def model_line(table: Accuracy | None, href: str | None, attention: str = "sdpa", images: bool = False,
               model: str = "", qlora: bool = True, encoder: bool = False) -> dict[str, Any] | None:
    """Per method, the error of the setup this page prices (`attention`: the page's default, eager where the
    model class has no SDPA; `images`: one image per training sample, where the model reads images) on other
    models' runs (`model`'s own held out: Accuracy.held_out); where no run measured that setup, the line says so and
    gives the other setups' runs as such. `qlora`: the page prices QLoRA (not on a quantised checkpoint); `encoder`:
    its serving is one forward over a batch. None without a table."""
    if table is None:
        return None
    eager = ", eager" if attention == "eager" else ""
    methods = []
    for method, label in METHODS:
        if method == "qlora" and not qlora:
            continue
        setup = table_module.SITE_SETUPS.get(method)
        setup = setup + eager + (", images" if images else "") if setup else None
        held = next((e for e in table.held_out if setup and e.method == setup and e.dataset == model), None)
        mine = held if held is not None else next((e for e in table.setups if setup and e.method == setup), None)
        mine = mine if mine is not None and mine.compared > 0 else None
        if mine is not None:
            swap = f"; {SUBSTITUTED[method]}" if method in SUBSTITUTED else ""
            runs = [_line_run(mine, f"CPU-simulated {'run' if mine.compared == 1 else 'runs'} of this setup "
                                    f"({(setup or '').replace(', ', ' / ')}{swap})")]
            # the method's public GPU runs, of other setups: what a CPU run cannot show (FINDINGS.md F54), and
            # which way they miss (the mean signed error)
            gpu = _gpu_runs(table, method)
            methods.append({"label": label, "runs": runs, "setup": None, "others": [], "none": NO_RUNS, "gpu": gpu})
            continue
        nearest = next((e for e in table.setups if e.method == (NEAREST.get(method, "") + eager) and e.compared > 0),
                       None)
        others = [] if nearest is None else [
            _line_run(nearest, f"CPU-simulated runs ({nearest.method.replace(', ', ' / ')})")]
        others += [_line_run(e, dataset_name(e.dataset)) for e in (table.error(d, method) for d in table.datasets())
                   if e is not None and e.compared > 0 and not (nearest and e.dataset.startswith("cpu-sim"))]
        words = ("one forward over a batch, as an encoder serves" if encoder and method == "inference" else
                 PAGE_SETUPS.get(method)) or (setup or "").replace(", ", " / ")
        methods.append({"label": label, "runs": [], "setup": words, "others": others, "none": NO_RUNS, "gpu": None})
    return {"methods": methods, "href": href}


# What a public row's number counts beyond the allocated peak the pages price (accuracy.json public_metrics)
CACHED_METRICS = {"reserved": "reserved memory, the allocator's cached blocks too",
                  "nvidia-smi": "the driver's count, the CUDA context and the cache too"}


def _side(e: ErrorRow, many: str) -> str:
    """Which way the estimate misses `many` on average (of one run, it), in words: no negative number on a page."""
    mean = e.mean_signed_pct or 0.0
    side = f"the estimate {f.error_pct(abs(mean))} {'under' if mean < 0 else 'over'}"
    return f"{side} it" if e.compared == 1 else f"{side} {many} on average"


def _gpu_runs(table: Accuracy, method: str) -> dict[str, Any] | None:
    """The method's public GPU runs (of other setups, what a CPU run cannot show: FINDINGS.md F54): those that
    measured the allocated peak, as the page prices it, with their error and its direction, then how many measured
    more than that and which way the estimate misses them; all of them pooled where no row says which."""
    mine = next((e for e in table.public_metrics if e.dataset == "allocated" and e.method == method and e.compared),
                None)
    if mine is None:
        public = table.error("public", method)
        return None if public is None or not public.compared else {
            **_line_run(public, "public GPU runs of other setups", _side(public, "the run")), "cached": []}
    runs = "run" if mine.compared == 1 else "runs"
    return {**_line_run(mine, f"public GPU {runs} of other setups that measured the allocated peak this page gives",
                        _side(mine, "the run")),
            "cached": [{"compared": f.count(e.compared), "what": CACHED_METRICS.get(e.dataset, e.dataset),
                        "side": _side(e, "them")} for e in table.public_metrics
                       if e.method == method and e.dataset != "allocated" and e.compared]}


def _line_run(e: ErrorRow, name: str, side: str = "") -> dict[str, Any]:
    """Runs of the accuracy line: their median and p90 error (one run's, its own, which `side` says where given)."""
    cells = error_cells(e)
    figures = (side or f"error {cells['median']}") if e.compared == 1 else \
        f"median error {cells['median']}, p90 {cells['p90']}" + (f", {side}" if side else "")
    return {"compared": cells["compared"], "dataset": name, "figures": figures}
