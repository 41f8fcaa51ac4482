"""Accuracy of the current estimator against the measured dataset: error per method, fit verdicts per card.

    python -m generator.accuracy            # print the table, write data/measurements/accuracy.json
    python -m generator.accuracy --check    # exit 1 if accuracy.json differs from a fresh computation

Inputs: data/measurements/*.jsonl (cpu-sim.jsonl, public.jsonl, and any gpu-*.jsonl the harness wrote),
recomputed against the estimator as it is now (never the estimate stored in a row). Nothing is fitted:
every figure compares the estimator's formulas, as shipped, with measured peaks.

Definitions (also in the table's `definitions`):
- compared rows: a measured peak (status ok/measured) whose exact setup estimator.job prices: public rows are
  mapped onto Job options (accuracy_rows' WEIGHTS, OPTIMIZERS, METRICS; flash_attention_2 read as sdpa). Rows
  left out are counted per reason in the table's `excluded`.
- tensor bytes of a row: the measured peak, compared with the estimate in the row's own metric (MemTracker,
  max_memory_allocated and torchtune's active peak: allocated; max_memory_reserved: reserved); a metric that
  includes the CUDA context (NVML "used", allocated + non-torch) has the estimator's cuda_context_bytes taken
  off both the measured peak and the nvidia-smi estimate.
- error: (estimate - tensor bytes) / tensor bytes, in %. Median and p90 of its absolute value per method.
- fits on a card: tensor bytes <= memory.budget_bytes(card) = (driver-reported memory - CUDA context) /
  headroom, the line every estimate is held against. The estimator "flags" a job on a card when its estimate
  is over that budget; it says "does not fit" when the estimate is over the capacity (driver-reported memory -
  CUDA context) too, and "tight" between the two (estimator.card_verdict). An OOM row (public) is a non-fitting job on every card no larger than the GPU it ran
  out of memory on. CPU-simulated rows are judged against every card.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Row-level helpers live in accuracy_rows.py; re-exported here for callers of generator.accuracy.
from .accuracy_allocator import AllocatorRow, allocator_rows, least_card_pcts, replay_groups
from .accuracy_capped import capped_rows
from .accuracy_rows import (  # noqa: F401 - _double_quant: tests reach it here
    MISS_PCT,
    _double_quant,
    estimate_bytes,
    estimate_or_reason,
    held_nccl_bytes,
    setup_and_reason,
    setup_of,
    tensor_bytes,
    unit_readings,
)
from .accuracy_text import render
from .accuracy_words import PAGE_SETUPS, SITE_SETUPS, miss_cause, setup_label  # noqa: F401 - SITE_SETUPS: the site reads it here
from .estimator.memory.frameworks import own_model

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "measurements"
METHOD_ORDER = ("full", "lora", "qlora", "inference")  # as the pages list the methods
OUTPUT = DATA_DIR / "accuracy.json"


@dataclass(frozen=True)
class ErrorRow:
    dataset: str
    method: str  # full, lora, inference
    compared: int
    median_abs_pct: float | None
    p90_abs_pct: float | None
    max_abs_pct: float | None
    mean_signed_pct: float | None  # > 0: the estimator says more than was measured


@dataclass(frozen=True)
class FitRow:
    dataset: str
    method: str
    card: str
    budget_bytes: int
    jobs: int  # rows judged on this card
    nonfit: int  # jobs that do not fit the budget (measured) or ran out of memory
    nonfit_flagged: int  # ... of which the estimator also says "does not fit"
    fit: int
    false_wont_fit: int  # fitting jobs the estimator says do not fit: the estimate is over the card's capacity
    fit_tight: int = 0  # fitting jobs the estimator calls tight: over the budget, within the capacity


@dataclass(frozen=True)
class AccuracyTable:
    estimator_version: str
    rows: tuple[tuple[str, int, int], ...]  # (dataset, rows, compared)
    errors: tuple[ErrorRow, ...]
    fits: tuple[FitRow, ...]
    definitions: tuple[tuple[str, str], ...]
    fitted_constants: tuple[str, ...] = ()  # none: nothing here is fitted to the measurements
    excluded: tuple[tuple[str, str, int], ...] = ()  # (dataset, reason, rows) not compared
    # CPU-simulated rows of every dataset, by setup (ErrorRow.method = setup_label) and by held-out family
    # (ErrorRow.dataset = model_type, method "training"): nothing is fitted, so each family's error is its
    # leave-one-family-out error.
    setups: tuple[ErrorRow, ...] = ()
    families: tuple[ErrorRow, ...] = ()
    # Public rows missed by more than MISS_PCT, each with its named cause (issue 13 item 6), not a silent exclusion:
    # (row id, model, method, signed error %, cause)
    misses: tuple[tuple[str, str, str, float, str], ...] = ()
    # Public rows whose source does not say GB or GiB, otherwise comparable: not in any figure above, but judged
    # both ways: (row id, model, method, signed error % if GB, if GiB, what differs as in `misses`)
    unit_ambiguous: tuple[tuple[str, str, str, float, float, str], ...] = ()
    # Public runs that ran out of memory on a card the estimate says they fit, named as the misses are (issue 13:
    # every OOM flagged): (row id, model, method, the card judged, estimate bytes, that card's budget bytes, cause)
    unflagged_oom: tuple[tuple[str, str, str, str, int, int, str], ...] = ()
    # CPU-simulated steps replayed through the CUDA caching allocator, by setup (accuracy_allocator)
    allocator: tuple[AllocatorRow, ...] = ()
    # every step of the allocator's ALL_SETUPS row: its least card over its live peak, %, smallest first
    least_card_over_pct: tuple[float, ...] = ()
    least_card_expandable_pct: tuple[float, ...] = ()  # the same steps with expandable segments, where replayed so
    # Public rows left out only because their length is a cap: the estimate at the cap bounds the run's peak, so a
    # run over it is under-estimated (accuracy_capped): (row id, model, method, cap tokens, signed error %, cause)
    capped: tuple[tuple[str, str, str, int, float, str], ...] = ()
    # Public rows by what their number measured (ErrorRow.dataset = the metric: allocated, reserved, nvidia-smi):
    # a page prices the allocated peak, and a model page's line gives those runs apart from the others
    public_metrics: tuple[ErrorRow, ...] = ()
    # The setups a model page quotes (page_setups), without one model's own runs (ErrorRow.dataset = that model):
    # a page's line is "the same setups on other models", so a model measured in its setup reads these
    held_out: tuple[ErrorRow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["excluded"] = [{"dataset": d, "reason": r, "rows": n} for d, r, n in self.excluded]
        out["rows"] = [{"dataset": d, "rows": n, "compared": c} for d, n, c in self.rows]
        out["definitions"] = dict(self.definitions)
        out["fitted_constants"] = list(self.fitted_constants)
        out["setups"] = [asdict(e) for e in self.setups]
        out["families"] = [asdict(e) for e in self.families]
        out["held_out"] = [asdict(e) for e in self.held_out]
        out["misses"] = [{"id": i, "model": m, "method": k, "error_pct": e, "cause": c} for i, m, k, e, c in self.misses]
        out["unit_ambiguous"] = [{"id": i, "model": m, "method": k, "error_pct_if_gb": gb, "error_pct_if_gib": gib,
                                  "cause": c} for i, m, k, gb, gib, c in self.unit_ambiguous]
        out["allocator"] = [asdict(a) for a in self.allocator]
        out["least_card_over_pct"] = list(self.least_card_over_pct)
        out["least_card_expandable_pct"] = list(self.least_card_expandable_pct)
        out["capped"] = [{"id": i, "model": m, "method": k, "cap_tokens": n, "error_pct": e, "cause": c}
                         for i, m, k, n, e, c in self.capped]
        out["unflagged_oom"] = [{"id": i, "model": m, "method": k, "card": card, "estimate_bytes": e,
                                 "budget_bytes": b, "cause": c} for i, m, k, card, e, b, c in self.unflagged_oom]
        return out




DEFINITIONS = (
    ("compared", "measured rows whose exact setup estimator.job prices (method, precision, base storage, optimizer, "
                 "checkpointing, attention, LoRA targets and rank, batch, tokens, metric); the rest are counted "
                 "under 'excluded' with the reason"),
    ("tensor_bytes", "the measured peak: metrics that include the CUDA context (nvidia-smi) lose the "
                     "estimator's cuda_context_bytes on both sides; reserved rows are compared with the reserved "
                     "estimate, allocated rows with the allocated one"),
    ("error_pct", "(estimate - tensor bytes) / tensor bytes x 100; median and p90 of the absolute value"),
    ("fits", "tensor bytes <= budget_bytes(card) = (driver-reported memory - CUDA context) / headroom; a run on "
             "several GPUs that measured a torch counter holds NCCL's buffers beside both figures (nccl_bytes_per_gpu)"),
    ("flagged", "the estimate is over the card's budget: the estimator says the job is tight on it, or does not fit"),
    ("tight", "the estimate is over the card's budget but within its capacity (driver-reported memory - CUDA "
              "context): whether the step runs depends on the allocator's fragmentation; a fitting job called tight "
              "is not a false \"won't fit\", which needs the estimate over the capacity"),
    ("oom_rows", "an OOM row is a non-fitting job on every card no larger than its GPU (an emulated card: "
                 "the allocator's limit); public 'fits' rows are not used (fitting a card is not fitting its budget)"),
    ("cpu_sim", "CPU-simulated rows are judged against every card"),
    ("unflagged_oom", "a public run that ran out of memory, whose estimate is within the budget of the largest card "
                      "it is judged on: listed with what differs from the run the estimator prices, as the misses "
                      "over 10% are"),
    ("capped", "a public run left out only because its token count is a cap (each batch padded to its longest "
               "sample, truncated at the cap): no step ran longer, so the estimate at the cap bounds its peak from "
               "above, and a negative error there is an under-estimate whatever lengths it ran"),
    ("least_card_over_pct", "each CPU-simulated step replayed through the allocator at one length: the least card it "
                            "runs in over its live peak, in %, smallest first; a card with x% more memory than a "
                            "job's live peak would have run the steps at or under x (what the CLI says of a tight card)"),
    ("least_card_expandable_pct", "least_card_over_pct with the allocator's expandable segments "
                                  "(generator/measure/expandable.py), for the steps replayed with them too"),
    ("allocator", "CPU-simulated steps replayed, allocation by allocation, through a model of PyTorch's CUDA caching "
                  "allocator (generator/measure/allocator.py): reserved is max_memory_reserved on a card with room; "
                  "the least card is the least memory the step runs in, the allocator freeing its cached segments "
                  "before it gives up; a run is short of headroom where estimate x headroom is under its least card"),
    ("fitted_constants", "none: every byte count is read off the tensors PyTorch keeps (FINDINGS.md) or a "
                         "library's source, so each family's error is already its leave-one-family-out error"),
    ("setup", "the options of a run in words (method, precision, an fp32 LoRA base, adapters' dtype, LoRA targets, "
              "LoRA dropout, checkpointing, attention, optimizer, outputs kept, gradient accumulation, LitGPT's or "
              "torchtune's own model code); ranks, batches, token counts and micro-batches per step are pooled"),
    ("public_metrics", "the public rows compared, by what their number measured: allocated (max_memory_allocated "
                       "or the allocator's active peak: what the pages price), reserved (max_memory_reserved: the "
                       "allocator's cached blocks too), nvidia-smi (the driver's count: the CUDA context as well); "
                       "each is compared with the estimate in its own metric"),
    ("cpu_kernels", "CPU-simulated rows are estimated with the CPU's kernels (estimator.job kernels='cpu'): dropout "
                    "masks in the input's dtype, not bool, layer_norm run in bf16 under autocast, and SDPA's math "
                    "kernel (fp32 scores kept) where the CPU's flash kernel refuses the call: attention dropout, "
                    "unequal q/k and v head dims (FINDINGS.md F15)"),
)


# --- pure functions ---------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def error_row(dataset: str, method: str, pairs: Sequence[tuple[int, int]]) -> ErrorRow:
    """pairs: (estimate, measured tensor bytes)."""
    errs = [(e - m) / m * 100 for e, m in pairs if m > 0]
    if not errs:
        return ErrorRow(dataset, method, 0, None, None, None, None)
    absolute = [abs(x) for x in errs]
    return ErrorRow(dataset, method, len(errs), round(percentile(absolute, 50), 2), round(percentile(absolute, 90), 2),
                    round(max(absolute), 2), round(sum(errs) / len(errs), 2))


def _oom_cards(row: Mapping[str, Any], cards, context_bytes: int) -> list:
    """Cards an out-of-memory row does not fit: those no larger than the GPU (public rows: its marketed GB;
    harness rows on CUDA: the allocator's limit, plus the context the card would also hold)."""
    gb = row.get("gpu_memory_gb")
    if gb:
        return [c for c in cards if c.memory_marketed_bytes <= gb * 10**9]
    limit = (row.get("device") or {}).get("limit_bytes")
    return [c for c in cards if c.memory_usable_bytes <= limit + context_bytes] if limit else []


def _largest_oom_card(row: Mapping[str, Any], budgets, context_bytes: int):
    """(card, budget) of the largest card an OOM row is judged on (its estimate must be over that budget for every
    card it is judged on to flag it), or (None, 0) where it is judged on none."""
    cards = _oom_cards(row, [c for c, _ in budgets], context_bytes)
    if not cards:
        return None, 0
    return max(((c, b) for c, b in budgets if c in cards), key=lambda cb: cb[1])


def compute(datasets: Mapping[str, Sequence[Mapping[str, Any]]], settings, estimator_version: str,
            estimate_fn: Callable[[Mapping[str, Any], Any], int | None] = estimate_bytes) -> AccuracyTable:
    """The table for {dataset name: rows}. `estimate_fn(row, assumptions)` defaults to the current estimator."""
    from .estimator.memory.profile import budget_bytes, capacity_bytes, card_verdict

    s = settings.assumptions
    budgets = [(c, budget_bytes(c, s)) for c in settings.cards]
    capacity = {c.name: capacity_bytes(c, s) for c in settings.cards}
    errors, fits, counts = [], [], []
    by_setup: dict[str, list[tuple[int, int]]] = {}
    by_model: dict[str, list[tuple[str, int, int]]] = {}  # a page's setup: (model, estimate, measured)
    by_family: dict[str, list[tuple[int, int]]] = {}
    by_metric: dict[tuple[str, str], list[tuple[int, int]]] = {}  # public rows: (metric, method)
    misses: list[tuple[str, str, str, float, str]] = []
    unit: list[tuple[str, str, str, float, float, str]] = []
    unflagged: list[tuple[str, str, str, str, int, int, str]] = []
    excluded: dict[tuple[str, str], int] = {}
    for name in sorted(datasets):
        rows = datasets[name]
        judged: list[tuple[str, int | None, int, Mapping]] = []  # (method, measured, estimate, row)
        for row in rows:
            setup, why = setup_and_reason(row)
            est = None if setup is None else estimate_fn(row, s)
            status = (row.get("measured") or {}).get("status")
            measured = tensor_bytes(row, s.cuda_context_bytes)
            if setup is not None and est is None:
                why = estimate_or_reason(row, s)[1] or "no estimate"
            elif setup is not None and measured is None and status != "oom":
                why = f"outcome {status!r} without a number (fitting a card is not fitting its budget)"
            if why:
                excluded[(name, why)] = excluded.get((name, why), 0) + 1
                both = unit_readings(row, s) if name == "public" else None
                if both is not None:
                    plain, e, gb, gib = both
                    unit.append((str(row.get("id")), str(row.get("model")), str(plain["setup"]["method"]),
                                 _signed(e, gb), _signed(e, gib), miss_cause(plain, setup_of(plain))))
                continue
            assert setup is not None and est is not None
            judged.append((setup.method, measured, est, row))
            if status == "oom" and measured is None and name == "public":
                card, budget = _largest_oom_card(row, budgets, s.cuda_context_bytes)
                if card is not None and est + held_nccl_bytes(row, s.nccl_bytes_per_gpu) <= budget:
                    unflagged.append((str(row.get("id")), str(row.get("model")), setup.method, card.name, est, budget,
                                      miss_cause(row, setup)))
            if measured and name == "public":
                by_metric.setdefault((setup.metric, setup.method), []).append((est, measured))
            if measured and name == "public" and abs(est - measured) / measured * 100 > MISS_PCT:
                misses.append((str(row.get("id")), str(row.get("model")), setup.method,
                               _signed(est, measured), miss_cause(row, setup)))
            if measured is not None and (row.get("device") or {}).get("kind") == "cpu-simulated":
                own = own_model(str((row.get("setup") or {}).get("loss")))  # LitGPT's or torchtune's: no family's
                label = setup_label(setup) + (f", {own}'s own model" if own else "")
                by_setup.setdefault(label, []).append((est, measured))
                if label in PAGE_SETUPS:
                    by_model.setdefault(label, []).append((str(row.get("model")), est, measured))
                if setup.method != "inference" and not own:
                    by_family.setdefault(str(row.get("model_type")), []).append((est, measured))
        counts.append((name, len(rows), sum(1 for j in judged if j[1] is not None)))
        for method in METHOD_ORDER:
            mine = [j for j in judged if j[0] == method]
            if not mine:
                continue
            errors.append(error_row(name, method, [(e, m) for _, m, e, _ in mine if m is not None]))
            for card, budget in budgets:
                jobs = nonfit = flagged = fit = false_no = tight = 0
                for _, m, e, row in mine:
                    held = held_nccl_bytes(row, s.nccl_bytes_per_gpu)  # a card holds NCCL's beside both
                    e += held
                    if m is None:  # an OOM row: judged only on cards no larger than its GPU
                        if card not in _oom_cards(row, settings.cards, s.cuda_context_bytes):
                            continue
                        does_fit = False
                    else:
                        does_fit = m + held <= budget
                    jobs += 1
                    if does_fit:
                        fit += 1
                        verdict = card_verdict(e, budget, capacity[card.name])
                        false_no += verdict == "does not fit"
                        tight += verdict == "tight"
                    else:
                        nonfit += 1
                        flagged += e > budget
                fits.append(FitRow(name, method, card.name, budget, jobs, nonfit, flagged, fit, false_no, tight))
    return AccuracyTable(estimator_version, tuple(counts), tuple(errors), tuple(fits), DEFINITIONS, (),
                         tuple((d, r, n) for (d, r), n in sorted(excluded.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1]))),
                         tuple(error_row("cpu-sim", k, v) for k, v in sorted(by_setup.items())),
                         tuple(error_row(k, "training", v) for k, v in sorted(by_family.items())), tuple(misses),
                         tuple(unit), tuple(unflagged), *_allocator(datasets, s, estimate_fn),
                         capped_rows(datasets.get("public", ()), s),
                         tuple(error_row(metric, method, by_metric[(metric, method)])
                               for metric, method in sorted(by_metric, key=lambda k: (k[0], METHOD_ORDER.index(k[1])))),
                         tuple(error_row(model, label, [(e, m) for other, e, m in runs if other != model])
                               for label, runs in sorted(by_model.items())
                               for model in sorted({model for model, _, _ in runs})))


def _allocator(datasets: Mapping[str, Sequence[Mapping[str, Any]]], s,
               estimate_fn) -> tuple[tuple[AllocatorRow, ...], tuple[float, ...], tuple[float, ...]]:
    """The replayed rows of every dataset, by setup, and the one-length steps' least cards over their live peaks,
    under the default allocator and under expandable segments."""
    def label(row: Mapping[str, Any]) -> str | None:
        setup = setup_of(row)
        return setup_label(setup) if setup is not None else None

    rows = [row for name in sorted(datasets) for row in datasets[name]]
    groups = replay_groups(rows, label, lambda row: estimate_fn(row, s))
    return allocator_rows(groups, s.headroom), least_card_pcts(groups), least_card_pcts(groups, expandable=True)


def _signed(estimate: int, measured: int) -> float:
    return round((estimate - measured) / measured * 100, 1)


# --- loader and command -----------------------------------------------------------------------------------

def load_datasets(data_dir: Path = DATA_DIR) -> dict[str, list[dict[str, Any]]]:
    """Every *.jsonl under data_dir, by file stem."""
    out = {}
    for path in sorted(Path(data_dir).glob("*.jsonl")):
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON line ({exc})") from None
        out[path.stem] = rows
    return out


def current_table(data_dir: Path = DATA_DIR) -> AccuracyTable:
    from . import __version__
    from .settings import load_settings

    return compute(load_datasets(data_dir), load_settings(), __version__)


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m generator.accuracy", description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA_DIR, help="folder of *.jsonl measurements")
    ap.add_argument("--out", type=Path, default=None, help="JSON to write (default: DATA/accuracy.json)")
    ap.add_argument("--check", action="store_true", help="compare with the JSON instead of writing it")
    args = ap.parse_args(list(argv) if argv is not None else None)
    table = current_table(args.data)
    out = args.out or args.data / "accuracy.json"
    text = json.dumps(table.to_dict(), indent=1, sort_keys=True) + "\n"
    print(render(table))
    if args.check:
        same = out.is_file() and json.loads(out.read_text(encoding="utf-8")) == json.loads(text)
        print(f"\n{out}: {'up to date' if same else 'DIFFERS (run python -m generator.accuracy)'}", file=sys.stderr)
        return 0 if same else 1
    out.write_text(text, encoding="utf-8")
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
