"""A measured row as estimator.job sees it: public rows' setups mapped onto Job options, the measured peak in the
estimator's terms, the estimate for the row's exact setup, or the reason the row is left out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from .estimator.memory.parallel import Setup, ranks

CONTEXT_METRICS = ("nvml_used", "allocated_plus_non_torch")
MISS_PCT = 10.0  # a public row whose estimate misses by more than this is listed with its named cause
MEASURED = ("ok", "measured")


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
METRICS = {"memtracker_fake_cpu": "allocated", "memtracker_cpu": "allocated",
           "cuda_max_memory_allocated": "allocated",
           "max_memory_allocated": "allocated", "active_peak": "allocated", "max_memory_reserved": "reserved",
           "nvml_used": "nvidia-smi", "allocated_plus_non_torch": "nvidia-smi", "outcome": "allocated"}


# The importer's terse reasons (tools/import_public.py), as the accuracy page words them.
IMPORT_REASONS = {
    "unit ambiguous": "unit ambiguous: GB or GiB is not stated (a 7% difference)",
    "trust C": "trust C: the source's figure is ambiguous or inconsistent",
    "sequence length not exact": "sequence length not exact: the source gives an approximate length or a cap (dynamic padding)",
    "no optimizer step": "no optimizer step: a forward-and-backward benchmark loop, not a training step (FINDINGS.md "
                         "F56 pairs its eager and SDPA runs)",
}


def setup_and_reason(row: Mapping[str, Any]):
    """(the row's Setup in estimator.job's terms, "") or (None, why the row is not compared)."""
    from .estimator.memory.job_options import LOSSES
    from .measure.setup import Setup, job_of

    if row.get("excluded"):  # the importer's reason, its first clause without the particulars in parentheses
        text, prev = str(row["excluded"]), ""
        while prev != text:
            prev, text = text, re.sub(r"\s*\([^()]*\)", "", text)
        reason = re.split(r"[;(]", text)[0].strip()
        return None, IMPORT_REASONS.get(reason, reason)
    raw = row.get("setup")
    if not raw or any(raw.get(k) is None for k in ("method", "batch", "tokens")):
        return None, "no setup (method, batch, tokens)"
    data = {k: v for k, v in raw.items() if v is not None}
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
    loss = raw.get("loss", "hf")  # Job.loss; "litgpt-chunked": LitGPT's lm_head_chunk_size=128 + chunked_cross_entropy
    if loss not in LOSSES:
        return None, f"loss {loss!r}: not an estimator option"
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
    setup = row.get("setup") or {}
    return WEIGHTS.get(str(setup.get("weights", "")).lower(), ("", False))[1] or bool(setup.get("double_quant"))


def _loss(row: Mapping[str, Any]) -> str:
    """How the row's loop meets the logits (Job.loss): "hf" unless the row's setup says what its script ran."""
    return str((row.get("setup") or {}).get("loss") or "hf")


def setup_of(row: Mapping[str, Any]):
    """The row's Setup when the estimator has that setup, else None."""
    return setup_and_reason(row)[0]


def held_nccl_bytes(row: Mapping[str, Any], nccl_bytes: int) -> int:
    """What a card holds beside a multi-GPU row's per-GPU peak that its metric leaves out: NCCL's buffers
    (Assumptions.nccl_bytes_per_gpu) where the row measured a torch counter on several GPUs; a driver's count
    (CONTEXT_METRICS) and the estimate in it have them already."""
    spread = row.get("parallel") or {}
    gpus, metric = spread.get("gpus") or 1, (row.get("measured") or {}).get("metric")
    if not isinstance(gpus, int) or metric in CONTEXT_METRICS:
        return 0
    several = ranks(str((row.get("setup") or {}).get("method")), Setup(str(spread.get("strategy")), gpus)) > 1
    return nccl_bytes if several else 0


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
    from .estimator.graph.nodes import build_graph
    from .estimator.memory.job import job_memory
    from .estimator.memory.parallel import default_setup
    from .estimator.normalise import normalise
    from .estimator.setups import job_on_setup
    from .measure.setup import job_of

    setup, why = setup_and_reason(row)
    if setup is None:
        return None, why
    if not row.get("config"):
        return None, "no config.json"
    kernels = "cpu" if (row.get("device") or {}).get("kind") == "cpu-simulated" else "cuda"
    job, why = job_of(setup, kernels)
    if job is None:
        return None, why
    job = dataclasses.replace(job, double_quant=_double_quant(row), loss=_loss(row))
    spread = row.get("parallel")  # a multi-GPU run's per-GPU peak: {"gpus", "strategy", "offload"}
    try:
        arch = normalise(row["config"], row.get("model") or "model")
        if spread:
            setup = default_setup(int(spread["gpus"]), spread["strategy"], spread.get("offload", "none"),
                                  sync_each_batch=bool(spread.get("sync_each_batch")),
                                  mixed_units=bool(spread.get("mixed_units")))
            mem = job_on_setup(arch, build_graph(arch), assumptions, job, setup, row.get("model") or "model")
        else:
            mem = job_memory(arch, build_graph(arch), assumptions, job, row.get("model") or "model")
    except Exception as exc:  # noqa: BLE001 - a config or option the estimator refuses is not compared
        return None, f"estimator refused: {type(exc).__name__}: {str(exc).split(': ', 1)[-1]}"[:160]
    context = assumptions.cuda_context_bytes if job.metric == "nvidia-smi" else 0
    return int(mem.peak_bytes) - context, ""


UNIT_CLAUSE = "unit ambiguous"


def clauses(text: str) -> list[str]:
    """The importer's reasons for leaving a row out, split at "; " outside parentheses (a clause's particulars
    may hold "; " themselves)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return [*out, text[start:]] if text else []


def unit_readings(row: Mapping[str, Any], assumptions) -> tuple[Mapping[str, Any], int, int, int] | None:
    """A public row left out only because its source does not say GB or GiB, read both ways: (the row as
    compared, the estimate, the measured tensor bytes if the figure is GB, and if it is GiB), or None where the
    row has another reason too or no estimate. Its figure is value x 1e9 or value x 2**30 bytes (the importer
    stores the GiB reading)."""
    reasons = clauses(str(row.get("excluded") or ""))
    if not reasons or not reasons[0].startswith(UNIT_CLAUSE):
        return None
    rest = "; ".join(c for c in reasons if not c.startswith(UNIT_CLAUSE))
    plain = {**row, "excluded": rest or None}
    est = estimate_or_reason(plain, assumptions)[0]
    gib = tensor_bytes(plain, assumptions.cuda_context_bytes)
    m = row.get("measured") or {}
    if est is None or gib is None or not m.get("value"):
        return None
    gb = gib - int(m["peak_bytes"]) + int(round(float(m["value"]) * 1e9))
    return plain, est, gb, gib

