"""Report → the model page's paragraph on how its figures are computed: the budget, the terms of each method, and
how serving is priced (vLLM's startup, the weights as stored, the KV cache), as text."""

from __future__ import annotations

from typing import Any

from .. import format as f
from .. import recipe_words
from ..estimator import Report

_PHASE_TEXT = {"loss (logits)": "the loss (the logits)", "optimizer step": "the optimizer step",
               "backward (activations)": "backward (the saved activations)",
               "decode (full KV cache)": "decoding with a full KV cache"}
# the serve_* assumptions the page says: vllm serve's defaults its startup is priced at (vllm_server.py), its sampler
SERVER_DEFAULTS = ("step_tokens", "max_sequences", "step_tokens_large_gpus", "max_sequences_large_gpus",
                   "sampler_bytes_per_entry")


def assumptions_context(report: Report, a: dict[str, Any]) -> dict[str, Any]:
    """What model.html's paragraph on how the figures are computed reads: the Report's terms and `a`, its
    assumptions, as text."""
    mem = report.memory
    phase = dict(mem.peak_phase_by_method)
    first = mem.cards[0] if mem.cards else None
    # eager where the model's class has no SDPA (the finding attention_default says why): its scores are kept
    eager = any(x.check == "attention_default" and x.severity == "warning" for x in report.findings)
    # SDPA's math kernel (finding attention_math_kernel) keeps the scores too, in fp32
    math = any(x.check == "attention_math_kernel" for x in report.findings)
    return {
        "attention": "eager attention (the model's class has no SDPA: the score matrix is kept, see the findings)"
                     if eager else "SDPA's math kernel (the fp32 score matrix is kept, see the findings)" if math
                     else "SDPA attention (no score matrix stored)",
        "train_tokens": f.count(mem.train_tokens),
        "requested_tokens": f.count(a["train_tokens"]),
        "capped": mem.train_tokens < a["train_tokens"],
        "headroom": f.ratio(a["headroom"]),
        "headroom_divisor": f.decimal(a["headroom"]),
        "cuda_context": f.gb(a["cuda_context_bytes"]),
        "master": f.byte_count(a["master_weight_bytes"]),
        "grad": f.byte_count(a["grad_bytes"]),
        "optimizer": f.byte_count(a["optimizer_state_bytes"]),
        "autocast": f.byte_count(a["autocast_copy_bytes"]),
        "foreach": f.byte_count(a["foreach_temp_bytes"]),
        "base": f.byte_count(a["base_weight_bytes"]),
        "compute": f.byte_count(a["compute_bytes"]),
        "logits": f.byte_count(a["logits_bytes"]),
        "rank": f.count(a["lora_rank"]),
        "serve_tokens": f.count(mem.serve_tokens),
        "server": {k: f.count(a[f"serve_{k}"]) for k in SERVER_DEFAULTS} | {"decoder": report.model.kind == "decoder",
                   "startup": f.gb(mem.serve_startup_bytes), "startup_large": f.gb(mem.serve_startup_bytes_large_gpus)},
        "serve_weight": f.byte_count(a["serve_weight_bytes"]),
        "serve_storage": _serve_storage(report),
        "serve_weights_total": f.gb(mem.serve_weight_bytes),
        "kv_per_token": f.byte_count(mem.kv_bytes_per_token),
        "kv_per_sequence": f.gb(mem.kv_bytes_per_sequence),
        "kv_note": _kv_note(report),
        "peak_full": _PHASE_TEXT.get(phase.get("train_full", ""), phase.get("train_full", "")),
        "peak_lora": _PHASE_TEXT.get(phase.get("train_lora", ""), phase.get("train_lora", "")),
        "peak_serve": _PHASE_TEXT.get(phase.get("serve", ""), phase.get("serve", "")),
        "encoder": report.model.kind == "encoder",  # served as one forward per batch (profile.serve_profile)
        # the training methods as recipes the command runs (QLoRA's where it applies: a 16-bit checkpoint)
        "recipes": [r for r in recipe_words.site_recipes(a["lora_rank"], report.params.vision > 0)
                    if r["method"] != "QLoRA" or mem.train_qlora_bytes_batch1 is not None],
        "example": None if first is None else {
            "card": first.name, "usable": f.gb(first.usable_bytes), "budget": f.gb(first.budget_bytes)},
    }


def _serve_storage(report: Report) -> dict[str, str] | None:
    """How a quantised checkpoint's weights are served (the storage the serving column is priced at,
    Report.params.quantization), None when they are served in bf16."""
    name = f.serve_weights(report.params.quantization)
    if name == "bf16":
        return None
    return {"name": name, "describes": str(dict(report.params.quantization or ()).get("describes") or "")}


def _kv_note(report: Report) -> str | None:
    """The cache in FP8 where the checkpoint has vLLM keep it so (the fp8_kv_cache finding), and why a sequence's
    cache is not its tokens times the bytes per token (profile.kv_bytes_per_sequence): cross-attention over an
    encoder's tokens or an image (mllama), windows, or a recurrent layer's fixed state."""
    words = ["in FP8, as the checkpoint's quantization_config has vLLM keep it"] \
        if any(x.check == "fp8_kv_cache" for x in report.findings) else []
    mem = report.memory
    naive = mem.serve_tokens * mem.kv_bytes_per_token
    if mem.kv_bytes_per_sequence == naive:
        pass
    elif report.model.kind == "encoder-decoder":
        words.append("the cross-attention's keys and values of the encoder's tokens included")
    elif mem.kv_bytes_per_sequence < naive:
        words.append("layers with a sliding window keep only their window")
    elif mem.state_bytes_per_sequence:
        words.append("the recurrent layers' fixed state included")
    else:
        words.append("the cross-attention's keys and values over its image included")
    return "; ".join(words) or None
