"""Accuracy of the current estimator against the measured dataset: error per method, fit verdicts per card.

    python -m generator.accuracy            # print the table, write data/measurements/accuracy.json
    python -m generator.accuracy --check    # exit 1 if accuracy.json differs from a fresh computation

Inputs: data/measurements/*.jsonl (cpu-sim.jsonl, public.jsonl, and any gpu-*.jsonl the harness wrote),
recomputed against the estimator as it is now (never the estimate stored in a row). Nothing is fitted:
every figure compares the estimator's formulas, as shipped, with measured peaks.

Definitions (also in the table's `definitions`):
- compared rows: a measured peak (status ok/measured) whose exact setup estimator.job prices: public rows are
  mapped onto Job options (WEIGHTS, OPTIMIZERS, METRICS below; flash_attention_2 read as sdpa). Rows left out
  are counted per reason in the table's `excluded`.
- tensor bytes of a row: the measured peak, compared with the estimate in the row's own metric (MemTracker,
  max_memory_allocated and torchtune's active peak: allocated; max_memory_reserved: reserved); a metric that
  includes the CUDA context (NVML "used", allocated + non-torch) has the estimator's cuda_context_bytes taken
  off both the measured peak and the nvidia-smi estimate.
- error: (estimate - tensor bytes) / tensor bytes, in %. Median and p90 of its absolute value per method.
- fits on a card: tensor bytes <= memory.budget_bytes(card) = (driver-reported memory - CUDA context) /
  headroom, the line every estimate is held against. The estimator "flags" a job on a card when its estimate
  is over that budget. An OOM row (public) is a non-fitting job on every card no larger than the GPU it ran
  out of memory on. CPU-simulated rows are judged against every card.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "measurements"
OUTPUT = DATA_DIR / "accuracy.json"
CONTEXT_METRICS = ("nvml_used", "allocated_plus_non_torch")
MEASURED = ("ok", "measured")


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
    false_wont_fit: int  # fitting jobs the estimator says do not fit


@dataclass(frozen=True)
class AccuracyTable:
    estimator_version: str
    rows: tuple[tuple[str, int, int], ...]  # (dataset, rows, compared)
    errors: tuple[ErrorRow, ...]
    fits: tuple[FitRow, ...]
    definitions: tuple[tuple[str, str], ...]
    fitted_constants: tuple[str, ...] = ()  # none: nothing here is fitted to the measurements
    excluded: tuple[tuple[str, str, int], ...] = ()  # (dataset, reason, rows) not compared

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["excluded"] = [{"dataset": d, "reason": r, "rows": n} for d, r, n in self.excluded]
        out["rows"] = [{"dataset": d, "rows": n, "compared": c} for d, n, c in self.rows]
        out["definitions"] = dict(self.definitions)
        out["fitted_constants"] = list(self.fitted_constants)
        return out


DEFINITIONS = (
    ("compared", "measured rows whose exact setup estimator.job prices (method, precision, base storage, optimizer, "
                 "checkpointing, attention, LoRA targets and rank, batch, tokens, metric); the rest are counted "
                 "under 'excluded' with the reason"),
    ("tensor_bytes", "the measured peak: metrics that include the CUDA context (nvidia-smi) lose the "
                     "estimator's cuda_context_bytes on both sides; reserved rows are compared with the reserved "
                     "estimate, allocated rows with the allocated one"),
    ("error_pct", "(estimate - tensor bytes) / tensor bytes x 100; median and p90 of the absolute value"),
    ("fits", "tensor bytes <= budget_bytes(card) = (driver-reported memory - CUDA context) / headroom"),
    ("flagged", "the estimate is over the card's budget"),
    ("oom_rows", "an OOM row is a non-fitting job on every card no larger than its GPU (an emulated card: "
                 "the allocator's limit); public 'fits' rows are not used (fitting a card is not fitting its budget)"),
    ("cpu_sim", "CPU-simulated rows are judged against every card"),
    ("fitted_constants", "none: every byte count is read off the tensors PyTorch keeps (FINDINGS.md) or a "
                         "library's source, so there is nothing to evaluate leave-one-family-out"),
)


# --- pure functions ---------------------------------------------------------------------------------------

# Public rows in the harness's words (tools/import_public.py) → estimator.job options.
WEIGHTS = {  # how a public row's base is stored → Job.weights (and double quantisation)
    "bf16": ("bf16", False), "fp16": ("fp16", False), "fp32": ("fp32", False), "fp32 master weights": ("fp32", False),
    "nf4 (bnb)": ("nf4", False), "nf4 + double-quant (bnb)": ("nf4", True),
    # bnb FP4 stores exactly as NF4 (uint8 pairs + fp32 absmax per 64; only the 16-value code book differs)
    "fp4 (bnb)": ("nf4", False), "bnb 4-bit fp4 (compute fp16)": ("nf4", False),
    # torchao NF4Tensor: 4-bit pairs, int8 scaler per 64, one scale per 256 scalers: bnb NF4 + double quant
    "nf4 (torchao)": ("nf4", True),
    "int8 (bnb)": ("int8", False),
}
OPTIMIZERS = {"adamw": "adamw", "paged_adamw": "paged-adamw", "adamw8bit": "adamw8bit", "sgd": "sgd", "none": "adamw"}
METRICS = {"memtracker_fake_cpu": "allocated", "cuda_max_memory_allocated": "allocated",
           "max_memory_allocated": "allocated", "active_peak": "allocated", "max_memory_reserved": "reserved",
           "nvml_used": "nvidia-smi", "allocated_plus_non_torch": "nvidia-smi", "outcome": "allocated"}


def setup_and_reason(row: Mapping[str, Any]):
    """(the row's Setup in estimator.job's terms, "") or (None, why the row is not compared)."""
    from .measure.setup import Setup, job_of

    if row.get("excluded"):  # the importer's reason, its first clause without the particulars in parentheses
        text, prev = str(row["excluded"]), ""
        while prev != text:
            prev, text = text, re.sub(r"\s*\([^()]*\)", "", text)
        return None, re.split(r"[;(]", text)[0].strip()
    raw = row.get("setup")
    if not raw or any(raw.get(k) is None for k in ("method", "batch", "tokens")):
        return None, "no setup (method, batch, tokens)"
    data = {k: v for k, v in raw.items() if v is not None}
    if raw.get("grad_accum", 1) != 1:
        return None, "gradient accumulation > 1 (gradients live across micro-batches): not modelled"
    weights = str(raw.get("weights", "")).lower()
    double = False
    if weights:  # public rows say how the base is stored
        if weights.startswith("gptq-int4"):
            weights = "gptq-int4"
        if weights not in WEIGHTS and weights != "gptq-int4":
            return None, f"base stored as {weights!r}: not an estimator option"
        weights, double = WEIGHTS.get(weights, (weights, False))
        if raw["method"] == "full":
            weights = ""  # a full fine-tune's weights follow its precision
        data["weights"] = weights
    notes = str(row.get("notes") or "")
    if "compile" in notes.replace("no compile", ""):
        return None, "torch.compile (fuses ops, saves other tensors): not modelled"
    if "Chunked Cross Entropy" in notes or "chunked CE" in notes:
        return None, "chunked cross-entropy (logits in chunks): not modelled"
    if 'step "Baseline"' in notes:
        return None, "unpacked samples: the token count is a cap, not the length run"
    optimizer = str(raw.get("optimizer", "adamw"))
    if optimizer not in OPTIMIZERS:
        return None, f"optimizer {optimizer!r}: not an estimator option"
    data["optimizer"] = OPTIMIZERS[optimizer]
    if raw.get("attention") == "flash_attention_2":
        data["attention"] = "sdpa"  # FlashAttention-2 saves what SDPA's flash kernel saves: no score matrix
    if raw.get("lora_targets") == "all-linear+lm_head":
        return None, "LoRA on the LM head too: not modelled"
    metric = (row.get("measured") or {}).get("metric")
    if metric is not None:
        if metric not in METRICS:
            return None, f"metric {metric!r}: not an estimator metric"
        data["metric"] = METRICS[metric]
    setup = Setup.from_dict(data)
    job, why = job_of(setup)
    return (setup, "") if job is not None else (None, why)


def _double_quant(row: Mapping[str, Any]) -> bool:
    """Whether the row's 4-bit base also quantises its absmax (QLoRA double quantisation)."""
    return WEIGHTS.get(str((row.get("setup") or {}).get("weights", "")).lower(), ("", False))[1]


def setup_of(row: Mapping[str, Any]):
    """The row's Setup when the estimator has that setup, else None."""
    return setup_and_reason(row)[0]


def tensor_bytes(row: Mapping[str, Any], context_bytes: int) -> int | None:
    """The measured peak as the estimator models it (tensors only), or None for a row without a number."""
    m = row.get("measured") or {}
    if m.get("status") not in MEASURED or not m.get("peak_bytes"):
        return None
    peak = int(m["peak_bytes"])
    return peak - context_bytes if m.get("metric") in CONTEXT_METRICS else peak


def estimate_bytes(row: Mapping[str, Any], assumptions) -> int | None:
    """estimator.job's peak for the row's setup in the row's metric (less the CUDA context where the metric has
    it, as tensor_bytes does), or None (unsupported setup or refused config)."""
    return estimate_or_reason(row, assumptions)[0]


def estimate_or_reason(row: Mapping[str, Any], assumptions) -> tuple[int | None, str]:
    from .estimator.config import normalise
    from .estimator.graph import build_graph
    from .estimator.job import job_memory
    from .measure.setup import job_of

    setup, why = setup_and_reason(row)
    if setup is None:
        return None, why
    if not row.get("config"):
        return None, "no config.json"
    job, why = job_of(setup)
    if job is None:
        return None, why
    job = dataclasses.replace(job, double_quant=_double_quant(row))
    try:
        arch = normalise(row["config"], row.get("model") or "model")
        mem = job_memory(arch, build_graph(arch), assumptions, job, row.get("model") or "model")
    except Exception as exc:  # noqa: BLE001 - a config or option the estimator refuses is not compared
        return None, f"estimator refused: {type(exc).__name__}: {str(exc).split(': ', 1)[-1]}"[:160]
    context = assumptions.cuda_context_bytes if job.metric == "nvidia-smi" else 0
    return int(mem.peak_bytes) - context, ""


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


def compute(datasets: Mapping[str, Sequence[Mapping[str, Any]]], settings, estimator_version: str,
            estimate_fn: Callable[[Mapping[str, Any], Any], int | None] = estimate_bytes) -> AccuracyTable:
    """The table for {dataset name: rows}. `estimate_fn(row, assumptions)` defaults to the current estimator."""
    from .estimator.memory import budget_bytes

    s = settings.assumptions
    budgets = [(c, budget_bytes(c, s)) for c in settings.cards]
    errors, fits, counts = [], [], []
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
                continue
            assert setup is not None and est is not None
            judged.append((setup.method, measured, est, row))
        counts.append((name, len(rows), sum(1 for j in judged if j[1] is not None)))
        for method in ("full", "lora", "qlora", "inference"):
            mine = [j for j in judged if j[0] == method]
            if not mine:
                continue
            errors.append(error_row(name, method, [(e, m) for _, m, e, _ in mine if m is not None]))
            for card, budget in budgets:
                jobs = nonfit = flagged = fit = false_no = 0
                for _, m, e, row in mine:
                    if m is None:  # an OOM row: judged only on cards no larger than its GPU
                        if card not in _oom_cards(row, settings.cards, s.cuda_context_bytes):
                            continue
                        does_fit = False
                    else:
                        does_fit = m <= budget
                    jobs += 1
                    if does_fit:
                        fit += 1
                        false_no += e > budget
                    else:
                        nonfit += 1
                        flagged += e > budget
                fits.append(FitRow(name, method, card.name, budget, jobs, nonfit, flagged, fit, false_no))
    return AccuracyTable(estimator_version, tuple(counts), tuple(errors), tuple(fits), DEFINITIONS, (),
                         tuple((d, r, n) for (d, r), n in sorted(excluded.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1]))))


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


def render(table: AccuracyTable) -> str:
    """Plain-text table (the command's output)."""
    lines = [f"estimator {table.estimator_version}; rows compared: "
             + ", ".join(f"{d} {c}/{n}" for d, n, c in table.rows), "",
             f"{'dataset':<10} {'method':<10} {'n':>4} {'median |err|%':>14} {'p90 |err|%':>11} {'max':>8} {'mean err%':>10}"]
    for e in table.errors:
        f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        lines.append(f"{e.dataset:<10} {e.method:<10} {e.compared:>4} {f(e.median_abs_pct):>14} {f(e.p90_abs_pct):>11} "
                     f"{f(e.max_abs_pct):>8} {f(e.mean_signed_pct):>10}")
    lines += ["", f"{'dataset':<10} {'method':<10} {'card':<18} {'jobs':>5} {'non-fit flagged':>16} {'false no-fit':>13}"]
    for r in table.fits:
        lines.append(f"{r.dataset:<10} {r.method:<10} {r.card:<18} {r.jobs:>5} {f'{r.nonfit_flagged}/{r.nonfit}':>16} "
                     f"{f'{r.false_wont_fit}/{r.fit}':>13}")
    if table.excluded:
        lines += ["", "not compared (dataset, rows, why):"]
        lines += [f"  {d:<10} {n:>4}  {r}" for d, r, n in table.excluded]
    return "\n".join(lines)


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
