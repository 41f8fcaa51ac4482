"""The accuracy page and each model page's accuracy line, read from data/measurements/accuracy.json.

The build only reads the committed table; `make accuracy` (generator/accuracy.py) is what recomputes it
from the measured runs. Nothing here imports torch or measures anything. The table is read into frozen
rows (generator.accuracy's own ErrorRow and FitRow), checked, and turned into strings by format.py; a
figure the table does not have (a method with no measured run) reads "no measured runs", never 0.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .. import accuracy as table_module
from .. import format as f
from ..accuracy import ErrorRow, FitRow
from ..accuracy_allocator import ALL_SETUPS, AllocatorRow, tight_cards
from ..estimator import ENGINE_DEFAULT_SHARE, Report

ACCURACY_JSON = table_module.OUTPUT  # tests point this elsewhere
METHODS = (("full", "full fine-tuning"), ("lora", "LoRA"), ("qlora", "QLoRA"), ("inference", "serving"))
NO_RUNS = "no measured runs"
# How each dataset file (data/measurements/<name>.jsonl) is named on the pages.
DATASET_NAMES = {"cpu-sim": "CPU-simulated runs", "cpu-sim-extra": "CPU-simulated runs of other setups",
                 "cpu-sim-allocator": "CPU-simulated whole models, replayed through the caching allocator",
                 "cpu-sim-matrix": "CPU-simulated setups matrix",
                 "cpu-sim-families": "CPU-simulated runs of other families",
                 "cpu-sim-qlora": "CPU-simulated QLoRA runs (bitsandbytes' own code)",
                 "cpu-sim-litgpt": "CPU-simulated runs of LitGPT's own model",
                 "cpu-sim-torchtune": "CPU-simulated runs of torchtune's own model", "public": "public GPU measurements"}


def dataset_name(name: str) -> str:
    """"cpu-sim" -> "CPU-simulated runs"; a harness file gpu-<x> -> "GPU runs (gpu-<x>)"; else the file's name."""
    return DATASET_NAMES.get(name) or (f"GPU runs ({name})" if name.startswith("gpu") else name)


@dataclass(frozen=True)
class Excluded:
    dataset: str
    reason: str
    rows: int


@dataclass(frozen=True)
class Accuracy:
    """accuracy.json as read: what the pages show, nothing recomputed."""

    estimator_version: str
    rows: tuple[tuple[str, int, int], ...]  # (dataset, rows, compared)
    errors: tuple[ErrorRow, ...]
    fits: tuple[FitRow, ...]
    definitions: tuple[tuple[str, str], ...]
    fitted_constants: tuple[str, ...]
    excluded: tuple[Excluded, ...] | None  # None: the table has no "excluded" list
    setups: tuple[ErrorRow, ...] = ()  # CPU-simulated rows by setup (method = the setup in words)
    families: tuple[ErrorRow, ...] = ()  # ... by family (dataset = model_type): leave-one-family-out
    misses: tuple[tuple[str, str, str, float, str], ...] = ()  # public rows over 10%: (id, model, method, %, cause)
    # public rows whose unit is not stated: (id, model, method, % if GB, % if GiB, cause)
    unit_ambiguous: tuple[tuple[str, str, str, float, float, str], ...] = ()
    # public runs out of memory where the estimate fits: (id, model, method, card, estimate bytes, budget bytes, cause)
    unflagged_oom: tuple[tuple[str, str, str, str, int, int, str], ...] = ()
    allocator: tuple[AllocatorRow, ...] = ()  # simulated steps replayed through the caching allocator, by setup
    least_card_over_pct: tuple[float, ...] = ()  # each one-length replayed step's least card over its live peak, %
    least_card_expandable_pct: tuple[float, ...] = ()  # ... with expandable segments, the steps replayed so
    # public runs whose length is a cap: (id, model, method, cap tokens, % error of the estimate at the cap, cause)
    capped: tuple[tuple[str, str, str, int, float, str], ...] = ()
    public_metrics: tuple[ErrorRow, ...] = ()  # public rows by what they measured (dataset = the metric)
    held_out: tuple[ErrorRow, ...] = ()  # a page's setups without one model's runs (dataset = that model)

    def datasets(self) -> list[str]:
        return [d for d, _, _ in self.rows]

    def error(self, dataset: str, method: str) -> ErrorRow | None:
        return next((e for e in self.errors if e.dataset == dataset and e.method == method), None)


def _bad(path: Path, key: str, value: Any, why: str) -> ValueError:
    return ValueError(f"{path}: key {key!r} = {str(value)[:80]!r}: {why} (rerun `make accuracy`)")


def _count(path: Path, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(path, key, value, "not a count")
    return value


def _pct(path: Path, key: str, value: Any) -> float | None:
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value != value):
        raise _bad(path, key, value, "not a percentage or null")
    return value


def parse(data: Any, path: Path) -> Accuracy:
    """accuracy.json's content as an Accuracy; a ValueError naming the file, key and value otherwise."""
    if not isinstance(data, dict):
        raise _bad(path, "(top level)", type(data).__name__, "not an object")
    try:
        errors = tuple(ErrorRow(**e) for e in data["errors"])
        fits = tuple(FitRow(**x) for x in data["fits"])
        rows = tuple((str(r["dataset"]), _count(path, "rows.rows", r["rows"]), _count(path, "rows.compared", r["compared"]))
                     for r in data["rows"])
        definitions = tuple((str(k), str(v)) for k, v in dict(data["definitions"]).items())
        fitted = tuple(str(x) for x in data.get("fitted_constants") or ())
        raw_excluded = data.get("excluded")
        excluded = None if raw_excluded is None else tuple(
            Excluded(str(x["dataset"]), str(x["reason"]),
                     len(x["rows"]) if isinstance(x["rows"], list) else _count(path, "excluded.rows", x["rows"]))
            for x in raw_excluded)
        setups = tuple(ErrorRow(**e) for e in data.get("setups") or ())
        families = tuple(ErrorRow(**e) for e in data.get("families") or ())
        misses = tuple((str(x["id"]), str(x["model"]), str(x["method"]), float(x["error_pct"]), str(x["cause"]))
                       for x in data.get("misses") or ())
        unit = tuple((str(x["id"]), str(x["model"]), str(x["method"]), float(x["error_pct_if_gb"]),
                      float(x["error_pct_if_gib"]), str(x["cause"])) for x in data.get("unit_ambiguous") or ())
        oom = tuple((str(x["id"]), str(x["model"]), str(x["method"]), str(x["card"]),
                     _count(path, "unflagged_oom.estimate_bytes", x["estimate_bytes"]),
                     _count(path, "unflagged_oom.budget_bytes", x["budget_bytes"]), str(x["cause"]))
                    for x in data.get("unflagged_oom") or ())
        allocator = tuple(AllocatorRow(**x) for x in data.get("allocator") or ())
        least_over = tuple(data.get("least_card_over_pct") or ())
        least_expandable = tuple(data.get("least_card_expandable_pct") or ())
        capped = tuple((str(x["id"]), str(x["model"]), str(x["method"]), _count(path, "capped.cap_tokens", x["cap_tokens"]),
                        float(x["error_pct"]), str(x["cause"])) for x in data.get("capped") or ())
        public_metrics = tuple(ErrorRow(**e) for e in data.get("public_metrics") or ())
        held_out = tuple(ErrorRow(**e) for e in data.get("held_out") or ())
    except KeyError as exc:
        raise _bad(path, str(exc.args[0]), "(missing)", "missing") from None
    except (TypeError, AttributeError) as exc:
        raise _bad(path, "(rows)", exc, "a row of the wrong shape") from None
    for e in errors + setups + families + public_metrics + held_out:
        _count(path, "errors.compared", e.compared)
        for key in ("median_abs_pct", "p90_abs_pct", "max_abs_pct", "mean_signed_pct"):
            if _pct(path, f"errors.{key}", getattr(e, key)) is None and e.compared:
                raise _bad(path, f"errors.{key}", None, f"null although {e.compared} rows were compared")
    for a in allocator:  # every count and percentage AllocatorRow declares
        for column in fields(AllocatorRow):
            key, value = f"allocator.{column.name}", getattr(a, column.name)
            if column.type == "int":
                _count(path, key, value)
            elif column.type == "float" and _pct(path, key, value) is None:
                raise _bad(path, key, None, "null")
            elif column.type == "float | None" and (_pct(path, key, value) is None) != (a.expandable_runs == 0):
                raise _bad(path, key, value, f"null is for a setup without expandable runs ({a.expandable_runs})")
    for x in fits:
        for key in ("budget_bytes", "jobs", "nonfit", "nonfit_flagged", "fit", "false_wont_fit", "fit_tight"):
            _count(path, f"fits.{key}", getattr(x, key))
    for key, values in (("least_card_over_pct", least_over), ("least_card_expandable_pct", least_expandable)):
        for value in values:  # a least card is never under the live peak
            if _pct(path, key, value) is None or value < 0:
                raise _bad(path, key, value, "not a percentage of 0 or more")
        if list(values) != sorted(values):
            raise _bad(path, key, values, "not smallest first")
    return Accuracy(str(data.get("estimator_version", "")), rows, errors, fits, definitions, fitted, excluded, setups,
                    families, misses, unit, oom, allocator, least_over, least_expandable, capped, public_metrics,
                    held_out)


@functools.lru_cache(maxsize=4)
def _read(path: str, stamp: tuple[int, int]) -> Accuracy | None:
    del stamp  # part of the cache key only: a rewritten file is read again
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _bad(Path(path), "(file)", exc, "not JSON") from None
    return parse(data, Path(path))


def load(path: Path | None = None) -> Accuracy | None:
    """The committed table, or None when there is none (a wheel installed without data/)."""
    p = Path(ACCURACY_JSON if path is None else path)
    try:
        st = os.stat(p)
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        return None
    return _read(str(p), stamp)


def source_bytes(path: Path | None = None) -> bytes:
    """The table's bytes, for the build manifest: a changed table re-renders every model page."""
    try:
        return Path(ACCURACY_JSON if path is None else path).read_bytes()
    except OSError:
        return b"(no accuracy.json)"


def replayed_all(table: Accuracy) -> AllocatorRow | None:
    """The allocator replay pooled over every setup, or None where the table has no replayed steps."""
    return next((a for a in table.allocator if a.setup == ALL_SETUPS), None)


# --- the accuracy page ---------------------------------------------------------------------------------------

def error_cells(e: ErrorRow | None) -> dict[str, Any]:
    if e is None or e.compared == 0:
        return {"compared": f.count(0 if e is None else e.compared), "none": NO_RUNS}
    figures = (e.median_abs_pct, e.p90_abs_pct, e.max_abs_pct, e.mean_signed_pct)
    assert None not in figures, "parse() refuses null figures with compared rows"
    median, p90, largest, mean = (float(x) for x in figures)  # type: ignore[arg-type]
    return {"compared": f.count(e.compared), "none": None, "median": f.error_pct(median), "p90": f.error_pct(p90),
            "max": f.error_pct(largest), "mean": f.signed_pct(mean)}


def _fit_row(card: str, budget: str, jobs: int, nonfit: int, flagged: int, fit: int, false_no: int,
             tight: int) -> dict[str, str]:
    return {"card": card, "budget": budget, "jobs": f.count(jobs), "flagged": f.share(flagged, nonfit),
            "false_no": f.share(false_no, fit), "tight": f.share(tight, fit)}


def page_context(table: Accuracy | None) -> dict[str, Any]:
    """Everything templates/accuracy.html shows, as strings."""
    if table is None:
        return {"table": None}
    datasets = []
    for name, rows, compared in table.rows:
        methods = []
        for method, label in METHODS:
            fits = [x for x in table.fits if x.dataset == name and x.method == method]
            cards = [_fit_row(x.card, f.gb(x.budget_bytes), x.jobs, x.nonfit, x.nonfit_flagged, x.fit,
                              x.false_wont_fit, x.fit_tight) for x in fits]
            total = None if not fits else _fit_row(
                "all cards", f.DASH, sum(x.jobs for x in fits), sum(x.nonfit for x in fits),
                sum(x.nonfit_flagged for x in fits), sum(x.fit for x in fits), sum(x.false_wont_fit for x in fits),
                sum(x.fit_tight for x in fits))
            methods.append({"label": label, "error": error_cells(table.error(name, method)), "cards": cards,
                            "total": total})
        datasets.append({"id": name, "name": dataset_name(name), "rows": f.count(rows), "compared": f.count(compared),
                         "methods": methods})
    return {
        "table": True,
        "version": table.estimator_version,
        "datasets": datasets,
        "definitions": [{"term": k, "text": v} for k, v in table.definitions],
        "fitted": list(table.fitted_constants),
        "excluded": None if not table.excluded else [
            {"dataset": dataset_name(x.dataset), "reason": x.reason, "rows": f.count(x.rows)} for x in table.excluded],
        "excluded_listed": table.excluded is not None,
        "setups": [{"setup": e.method, **error_cells(e)} for e in table.setups],
        "public_metrics": [{"metric": e.dataset, "method": dict(METHODS).get(e.method, e.method), **error_cells(e)}
                           for e in table.public_metrics],
        "families": [{"family": e.dataset, **error_cells(e)} for e in table.families],
        "misses": [{"id": i, "model": m, "method": k, "error": f.signed_pct(e), "cause": c}
                   for i, m, k, e, c in table.misses],
        "capped": [{"id": i, "model": m, "method": k, "cap": f.count(n), "error": f.signed_pct(e), "cause": c}
                   for i, m, k, n, e, c in table.capped],
        "unit_ambiguous": [{"id": i, "model": m, "method": k, "if_gb": f.signed_pct(gb), "if_gib": f.signed_pct(gib),
                            "cause": c} for i, m, k, gb, gib, c in table.unit_ambiguous],
        "unflagged_oom": [{"id": i, "model": m, "method": k, "card": card, "estimate": f.gb(e), "budget": f.gb(b),
                           "cause": c} for i, m, k, card, e, b, c in table.unflagged_oom],
        "allocator": [{"setup": a.setup, "runs": f.count(a.runs),
                       "reserved": f"{f.error_pct(a.reserved_over_median_pct)} ({f.error_pct(a.reserved_over_max_pct)})",
                       "least": f"{f.error_pct(a.least_card_over_median_pct)} ({f.error_pct(a.least_card_over_max_pct)})",
                       "reserved_error": f.error_pct(a.reserved_error_median_abs_pct),
                       "reserved_mean": f.signed_pct(a.reserved_error_mean_signed_pct),
                       "margin": f.signed_pct(a.headroom_margin_min_pct), "short": f.count(a.headroom_short),
                       "expandable": f.DASH if a.least_card_expandable_median_pct is None else
                       f"{f.error_pct(a.least_card_expandable_median_pct)} "
                       f"({f.error_pct(a.least_card_expandable_max_pct or 0)}) in {f.count(a.expandable_runs)}; "
                       f"{f.count(a.expandable_short)} short"}
                      for a in table.allocator],
        "no_runs": NO_RUNS,
    }


# The tight line's subject per method (accuracy_allocator.tight_cards)
TIGHT_METHODS = {"full": "The full fine-tune", "lora": "LoRA", "qlora": "QLoRA", "serve": "Serving"}


def tight_lines(report: Report, table: Accuracy | None) -> list[dict[str, Any]]:
    """Per method tight on its smallest holding card (accuracy_allocator.tight_cards): the margin that card leaves
    over batch 1, and how many of the allocator replay's one-length steps needed no more over their live peak
    (accuracy.json); serving, the gpu_memory_utilization it needs where vLLM's default does not do."""
    least_over = table.least_card_over_pct if table is not None else ()
    least_expandable = table.least_card_expandable_pct if table is not None else ()
    out = []
    for t in tight_cards(report.memory, least_over, least_expandable):
        # the replayed steps are training steps and HF generate: their odds are not a serving engine's, which sizes
        # its own KV pool (the site's serving job), so serving gets the margin alone
        odds, got = t.method != "serve", t.margin
        out.append({"method": TIGHT_METHODS[t.method], "card": t.card, "spare": f.error_pct(got.spare_pct),
                    "share": "" if t.engine_setting is None else f.decimal(t.engine_setting),
                    "whole": t.engine_setting == 1.0, "default_share": f.decimal(ENGINE_DEFAULT_SHARE),
                    "runs": f.count(got.runs) if got.of and odds else "", "of": f.count(got.of),
                    "expandable": f.count(got.expandable_runs) if got.expandable_of and odds else "",
                    "expandable_of": f.count(got.expandable_of)})
    return out
