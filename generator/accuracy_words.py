"""A measured run in words, for /accuracy/: its setup as the by-setup table labels it, and what differs between it
and the run the estimator prices (the cause a public miss is listed with)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .estimator.memory.job_options import legacy_cache

# Frameworks whose runs build their own model (not transformers' class), as a row's framework names them
OWN_MODEL_CODE = ("torchtune", "lit-gpt", "litgpt")
# What a row's metric counts beyond the live tensors the estimate prices
METRIC_WORDS = {"max_memory_reserved": "the caching allocator's cached blocks too, beyond the live tensors priced",
                "allocated_plus_non_torch": "memory outside PyTorch's allocator too: the CUDA context and libraries' "
                                            "workspaces",
                "nvml_used": "the driver's count: the CUDA context and the allocator's cache too",
                "not_stated": "the source does not say which count"}


def miss_cause(row: Mapping[str, Any], setup) -> str:
    """A public row's framework, stack, recipe and metric, in words: what differs from the run the estimator prices
    (the most likely cause of a miss, named rather than excluded). bitsandbytes before 0.43.2 (July 2024, #1270)
    saved each 4-bit matmul's input; the estimate follows today's. torchao's LinearNF4 (torchtune's QLoRA) keeps only
    the weight for backward (torchao/dtypes/nf4tensor.py)."""
    m = row.get("measured") or {}
    parts = [str(row.get("framework") or "framework not stated")]
    if row.get("cause"):  # what the source itself shows (public-amendments.json)
        parts.append(f"the source: {row['cause']}")
    source = str(row.get("source") or "")
    year = next((y for y in ("2022", "2023", "2024", "2025") if y in str(row.get("notes") or "") + source), "")
    text = " ".join(str(row.get(k) or "") for k in ("framework", "notes")) + " " + source
    if setup.method == "qlora" and getattr(setup, "weights", "") == "int8":
        parts.append(f"an LLM.int8() base (bitsandbytes {setup.bnb_version or 'release not stated'}), whose "
                     "MatMul8bitLt saves each input")
    elif setup.method == "qlora" and "torchao" in str((row.get("setup") or {}).get("weights", "")):
        parts.append("a torchao NF4 base, whose LinearNF4 saves only the weight, as the estimate's bitsandbytes does")
    elif setup.method == "qlora" and setup.bnb_version:
        parts.append(f"priced with bitsandbytes {setup.bnb_version}, whose MatMul4Bit saved each input (--bnb-version)")
    elif setup.method == "qlora" and (re.search(r"bnb 0\.(3\d|4[0-2])\b|(Jan|Feb|Mar|Apr|May|Jun) 2024", text)
                                    or year in ("2022", "2023")):
        parts.append("stack before bitsandbytes 0.43.2, whose MatMul4Bit saved its input: the estimate follows "
                     "today's bitsandbytes")
    if setup.method == "inference" and setup.transformers_version:
        parts.append(f"priced with transformers {setup.transformers_version}'s generate"
                     + (", which held the previous step's KV cache beside the new one (--transformers-version)"
                        if legacy_cache(setup.transformers_version) else ""))
    spread = row.get("parallel")
    if spread:
        parts.append(f"{spread['strategy']} over {spread['gpus']} GPUs"
                     + (f" with {spread['offload']} offload" if spread.get("offload", "none") != "none" else "")
                     + ": the per-GPU peak as memory.parallel shares the job out"
                     + (f" (the source: {row['notes']})" if row.get("notes") else ""))
    if "auto_map" in (row.get("config") or {}):
        parts.append("the snapshot's config is custom code (auto_map), priced as keeping its attention scores; "
                     "this framework runs its own SDPA implementation" if setup.attention != "sdpa" else
                     "the snapshot's config is custom code (auto_map), priced as transformers' own class; this "
                     "framework runs its own model code")
    own = next((name for name in OWN_MODEL_CODE if name in str(row.get("framework") or "").lower()), None)
    # (a row priced with its framework's own loss and model, LitGPT's, says so in its recipe instead)
    if own and "auto_map" not in (row.get("config") or {}) and (row.get("setup") or {}).get("loss", "hf") == "hf":
        parts.append(f"{own} runs its own model code and loss, priced here as transformers' class and its loss")
    parts.append(f"recipe: {setup.method}, {setup.precision}"
                 + (f", {setup.optimizer}" if setup.method != "inference" else "")  # serving steps no optimizer
                 + (", checkpointing" if setup.grad_ckpt else "") + f", {setup.attention or 'sdpa'}"
                 + (f", {loss} loss" if (loss := (row.get("setup") or {}).get("loss", "hf")) != "hf" else ""))
    metric = str(m.get("metric"))
    parts.append(f"metric {metric}" + (f" ({METRIC_WORDS[metric]})" if metric in METRIC_WORDS else ""))
    if str(row.get("trust")) != "A":
        parts.append(f"trust {row.get('trust')}")
    return "; ".join(parts)


# The setups the site's pages price (estimate.py's profiles): their accuracy line reads these rows.
SITE_SETUPS = {"full": "full, AMP", "lora": "LoRA, AMP, fp32 adapters, all-linear",
               "qlora": "QLoRA, AMP, fp32 adapters, all-linear, double quant, checkpointing"}


# Every setup a model page quotes: its method's, with eager attention where the model class has no SDPA, with an image
# per sample where the model reads images (setup_label's words in its order)
PAGE_SETUPS = frozenset(base + eager + images for base in SITE_SETUPS.values() for eager in ("", ", eager")
                        for images in ("", ", images"))


LENGTHS_VARIED = "lengths varied"  # a run whose steps' lengths were drawn (Setup.min_tokens)


def setup_label(setup) -> str:
    """A run's setup in words, for the by-setup table: method, precision, an fp32 base, adapters, targets, dropout,
    checkpointing, attention, optimizer, outputs kept, gradient accumulation, padding, images fed (rank, batch and
    tokens are pooled)."""
    if setup.method == "inference":
        return "serving, HF generate" + (", eager" if setup.attention == "eager" else "") \
            + (", images" if getattr(setup, "images", 0) else "")
    words = ["full" if setup.method == "full" else setup.method.replace("qlora", "QLoRA").replace("lora", "LoRA"),
             {"amp": "AMP", "bf16": "pure bf16", "fp32": "fp32"}[setup.precision]]
    if setup.method != "full":
        adapter = setup.adapter_dtype or ("bf16" if setup.precision == "bf16" else "fp32")
        if getattr(setup, "weights", "") == "fp32":
            words.append("fp32 base")
        words += [f"{adapter} adapters", "all-linear" if setup.lora_targets == "all-linear" else "some Linears"]
        if setup.lora_dropout:
            words.append("LoRA dropout")
    if setup.method == "qlora":
        words += (["double quant"] if getattr(setup, "double_quant", False) else []) \
            + (["fp32 upcast"] if getattr(setup, "upcast_fp32", False) else [])
    if setup.grad_ckpt:
        words.append("checkpointing")
    if setup.attention == "eager":
        words.append("eager")
    if setup.optimizer != "adamw" or setup.adamw_impl != "foreach":
        words.append(setup.optimizer if setup.optimizer != "adamw" else f"AdamW {setup.adamw_impl}")
    if getattr(setup, "keep_outputs", False):
        words.append("outputs kept")
    if getattr(setup, "grad_accum", 1) > 1:
        words.append("gradient accumulation")
    if getattr(setup, "min_tokens", 0):
        words.append(LENGTHS_VARIED)
    if getattr(setup, "padded", False):
        words.append("padded")
    if getattr(setup, "images", 0):
        words.append("images")
    return ", ".join(words)
