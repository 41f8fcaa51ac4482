"""Serving speed on one GPU type, at the smallest tensor-parallel count that holds the model: decode and prefill
tokens per second, how many sequences fit, and the price of a million output tokens.

Roofline (Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4)): a step takes max(FLOPs / compute,
bytes / bandwidth). Decoding at small batch is bandwidth-bound: every step reads the active weights and each
sequence's KV cache (Pope et al. 2022, arXiv:2211.05102 §2; kipply, "Transformer inference arithmetic" 2022).
Efficiencies: decode reaches `bandwidth_efficiency` of the memory bandwidth and prefill `prefill_mfu` of the peak
FLOPS; the defaults are the ratios of ideal to measured latency of a 13B model on one A100 under FasterTransformer
(cli99/llm-analysis examples/FasterTransformer/README.md, from kipply's benchmark: decode 17.07 ms ideal vs 22.0 ms
measured = 0.78; prefill 43.7 vs 63.17 ms = 0.69).

Tensor parallel over N GPUs: the ranks read their 1/N of the weights and KV cache in parallel (the few replicated
norms and KV heads of estimator.parallel are left out of the time), but for MLA's latent cache, which every rank
keeps and reads whole (estimator.memory.parallel). MoE at batch B reads the dense weights and the
experts some sequence routes to: E x (1 - (1 - k/E)^B) of E experts per layer in expectation under uniform routing
(k active of E; at B = 1 exactly the k active ones). Pure: numbers in, numbers out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .memory.parallel import ParallelError, Setup
from .memory.sharding import GPUS_PER_NODE

DECODE_BANDWIDTH_EFFICIENCY = 0.78  # 17.07 / 22.0 ms (module docstring)
PREFILL_MFU = 0.69  # 43.7 / 63.17 ms (module docstring)


@dataclass(frozen=True)
class ServingModel:
    """What a decode step reads and a prefill computes, for the whole model (one GPU's view: parallel splits it)."""

    dense_weight_bytes: int  # weights every token reads: all but the routed experts (embeddings' one row aside)
    expert_weight_bytes: int = 0  # all routed experts of all layers (0 for a dense model)
    experts: int = 0  # routed experts per MoE layer
    experts_active: int = 0  # top-k routed per token
    kv_bytes_per_token: int = 0  # K and V of all layers per cached token (windows not applied)
    serve_tokens: int = 4096  # tokens per sequence (prompt + generated): the KV one decoded token reads at the end
    flops_per_token: float = 0.0  # forward FLOPs per token (estimator.cost.flops_per_token's forward)
    kv_latent: float = 0.0  # MLA's share of kv_bytes_per_token: each tensor-parallel rank reads it whole


@dataclass(frozen=True)
class ServingSpeed:
    gpu: str
    gpus: int
    strategy: str  # "tp" ("single" on one GPU, "tp+pp" over nodes)
    decode_tokens_per_s: float  # one sequence at batch 1
    prefill_tokens_per_s: float
    max_concurrency: int  # sequences of serve_tokens whose caches fit beside the weights
    usd_per_million_output_tokens: float | None  # at max_concurrency; None when unpriced
    gpu_model: str = ""  # the priced GPU's own name, where the card (gpu) lists several

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def active_weight_bytes(m: ServingModel, batch: int) -> float:
    """Weights one decode step of `batch` sequences reads: dense + the expected distinct experts' share."""
    if not m.experts or not m.expert_weight_bytes:
        return float(m.dense_weight_bytes)
    k, e = min(m.experts_active, m.experts), m.experts
    touched = 1.0 - (1.0 - k / e) ** max(1, batch)
    return m.dense_weight_bytes + m.expert_weight_bytes * touched


def decode_step_seconds(m: ServingModel, batch: int, gpus: int, bandwidth_gb_per_s: float, peak_tflops: float,
                        bandwidth_efficiency: float = DECODE_BANDWIDTH_EFFICIENCY,
                        mfu: float = PREFILL_MFU) -> float:
    """One decode step of `batch` sequences at the end of their serve_tokens, over `gpus` tensor-parallel GPUs."""
    kv = batch * m.kv_bytes_per_token * m.serve_tokens
    bytes_ = active_weight_bytes(m, batch) + kv * (1 - m.kv_latent + m.kv_latent * gpus)  # over all the ranks
    memory_s = bytes_ / (gpus * bandwidth_gb_per_s * 1e9 * bandwidth_efficiency)
    compute_s = batch * m.flops_per_token / (gpus * peak_tflops * 1e12 * mfu) if peak_tflops > 0 else 0.0
    return max(memory_s, compute_s)


def decode_upper_bound(m: ServingModel, gpus: int, bandwidth_gb_per_s: float) -> float:
    """Tokens per second no batch-1 decode can pass: all bandwidth, nothing but the bytes it must read."""
    bytes_ = active_weight_bytes(m, 1) + m.kv_bytes_per_token * m.serve_tokens * (1 - m.kv_latent + m.kv_latent * gpus)
    return gpus * bandwidth_gb_per_s * 1e9 / bytes_ if bytes_ > 0 else float("inf")


def serving_speed(m: ServingModel, gpu: str, setup: Setup, batch1_peak_bytes: int, per_sequence_bytes: int,
                  budget_bytes: int, bandwidth_gb_per_s: float, peak_tflops: float, usd_per_hour: float | None,
                  bandwidth_efficiency: float = DECODE_BANDWIDTH_EFFICIENCY, mfu: float = PREFILL_MFU,
                  cap: int = 1 << 20, gpu_model: str = "") -> ServingSpeed:
    """Speeds of `setup` (the smallest tensor-parallel one: setups.serving_table). batch1_peak_bytes: the largest GPU's peak serving one sequence;
    per_sequence_bytes: what each further sequence adds on that GPU (its KV cache share and logits).
    usd_per_hour: per GPU. With pipeline stages (tp+pp) only one stage works on a token at a time, so the step
    uses the tensor-parallel width (8), not all GPUs; pipeline alone (pp), one GPU's."""
    if setup.gpus < 1:
        raise ParallelError("", "gpus", setup.gpus, "must be a positive integer")
    width = min(setup.gpus, GPUS_PER_NODE) if setup.strategy == "tp+pp" else 1 if setup.strategy == "pp" \
        else setup.gpus
    stages = setup.gpus // width
    step = decode_step_seconds(m, 1, width, bandwidth_gb_per_s, peak_tflops, bandwidth_efficiency, mfu)
    decode = 1.0 / step if step > 0 else float("inf")
    prefill = width * peak_tflops * 1e12 * mfu / m.flops_per_token if m.flops_per_token > 0 else float("inf")
    if per_sequence_bytes <= 0:
        conc = cap
    else:
        conc = max(0, min(cap, 1 + (budget_bytes - batch1_peak_bytes) // per_sequence_bytes))
    usd = None
    if usd_per_hour is not None and conc > 0:
        # a pipeline keeps `stages` micro-batches in flight, each of conc / stages sequences
        batch = max(1, conc // stages)
        tokens_s = stages * batch / decode_step_seconds(m, batch, width, bandwidth_gb_per_s, peak_tflops,
                                                        bandwidth_efficiency, mfu)
        usd = usd_per_hour * setup.gpus / (tokens_s * 3600.0) * 1e6
    return ServingSpeed(gpu, setup.gpus, setup.strategy, decode, prefill, int(conc), usd, gpu_model)
