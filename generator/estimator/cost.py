"""Cost: roofline hours and USD of the reference fine-tuning job on each priced GPU.

FLOPs per token (Kaplan et al. 2020, arXiv:2001.08361 §2.1; Narayanan et al. 2021, arXiv:2104.04473
eq. 3): forward = 2 x matmul weights used per token (an MoE's active experts only) + attention
4 x heads x head_dim x keys per attention layer, keys = T/2 under the causal mask, capped by sliding
windows. Full fine-tune = 3 x forward (backward = input and weight gradients). LoRA skips the
weight-gradient GEMMs of the frozen base: linears cost 2 x forward, attention (no weights) 3 x, and
adapters on Linears 6 x their parameters; adapters on an MoE's expert tensors make every expert's delta weight
once per step (layer_terms.expert_adapters), 6 x its multiply-adds, shared by the step's tokens. Time per step =
max(FLOPs / peak, bytes / bandwidth) (roofline); the expected hours divide by an assumed MFU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .config.arch import Arch
from .graph.nodes import Graph
from .inputs import Assumptions, Gpu
from .memory.plans import roofline_seconds


@dataclass(frozen=True)
class CostLine:
    card: str  # GPU name
    method: str  # "full" or "lora"
    hours: float  # expected: roofline hours / MFU
    usd: float | None  # hours x price; None when the GPU has no price
    roofline_hours: float
    bound: str  # "compute" or "memory"
    peak_tflops: float
    precision: str  # "bf16" or "fp16" (T4 has no bf16)
    mfu: float
    price_usd_per_hour: float | None
    flops: float  # whole job


def job_tokens(a: Arch, s: Assumptions) -> int:
    return min(s.job_tokens, a.max_context)


def attention_keys(tokens: int, window: int, causal: bool) -> float:
    """Average keys each query attends to: T/2 under a causal mask (halving QK^T and AV), the window
    where it caps that (w - w^2 / 2T for T > w), all T for a bidirectional encoder."""
    if not causal:
        return float(min(tokens, window) if window > 0 else tokens)
    if window <= 0 or tokens <= window:
        return 0.5 * tokens
    return window - window * window / (2.0 * tokens)


def flops_per_token(a: Arch, g: Graph, s: Assumptions, method: str, lora_params: int, tokens: int) -> float:
    """Forward FLOPs per token from the active matmul weights (MoE: routed top-k + shared experts)."""
    linear = 2.0 * g.active_matmul
    attention = sum(flops * attention_keys(tokens, window, causal) for window, causal, flops in g.attention_terms)
    if method == "full":
        return 3.0 * (linear + attention)
    return 2.0 * linear + 3.0 * attention + 6.0 * lora_params


def training_flops_per_token(a: Arch, g: Graph, s: Assumptions, lora_params: int, tokens: int,
                             expert_delta_macs: int = 0) -> tuple[float, float]:
    """flops_per_token of a full fine-tune and of LoRA at the same tokens: the attention's sum once for both.
    lora_params: the adapters on Linears (per token); expert_delta_macs: the expert tensors' delta weights, made
    once per step of the reference job's batch (s.job_batch x tokens). The passes a training forward runs under
    torch.no_grad (Spec.no_grad: HRM-Text's early L cycles) run forward only: no backward through them."""
    linear = 2.0 * g.active_matmul
    attention = sum(flops * attention_keys(tokens, window, causal) for window, causal, flops in g.attention_terms)
    delta = 6.0 * expert_delta_macs / (max(1, s.job_batch) * max(1, tokens))
    causal = g.spec.kind != "encoder"
    frozen = [b for k, b in enumerate(g.spec.blocks) if k in g.spec.no_grad]
    ng_linear = 2.0 * sum(b.active_matmul for b in frozen)
    ng_attention = sum(flops * attention_keys(tokens, max(window, 0), causal and b.stack != "encoder")
                       for b in frozen for window, flops in b.attn)
    # a full fine-tune's backward is 2x its forward (weights and inputs); LoRA's 1x for the Linears, 2x attention
    return (3.0 * (linear + attention) - 2.0 * (ng_linear + ng_attention),
            2.0 * linear + 3.0 * attention + 6.0 * lora_params + delta - ng_linear - 2.0 * ng_attention)


class StepWork(NamedTuple):
    """What one training step of the reference job does, the same on every GPU: its FLOPs and the bytes it moves."""

    steps: int
    flops: float  # per step
    bytes: int  # per step
    weight_bytes: int = 0  # one pass over the weights: what checkpointing's extra forward reads again per step

    def job_bytes(self, checkpointed: bool = False) -> float:
        """The bytes the whole job moves on one GPU (plans.job_hours' roofline)."""
        return float((self.bytes + (self.weight_bytes if checkpointed else 0)) * self.steps)


def step_work(a: Arch, s: Assumptions, method: str, flops_per_token: float, weight_bytes: int, trainable: int,
              activation_bytes_per_sample: int) -> StepWork:
    """One step of the reference job by `method`, from its FLOPs per token (training_flops_per_token)."""
    tokens = job_tokens(a, s)
    steps = s.job_epochs * -(-s.job_samples // s.job_batch)
    flops_step = flops_per_token * tokens * s.job_batch
    # Bytes per step: weights read in forward and backward (x3 for full: dgrad and wgrad passes),
    # AdamW reading master/grad/m/v and writing master/m/v (28 B per trainable parameter), and
    # every saved activation written once and read once.
    passes = 3 if method == "full" else 2
    bytes_step = passes * weight_bytes + 28 * trainable + 2 * s.job_batch * activation_bytes_per_sample
    return StepWork(steps, flops_step, bytes_step, weight_bytes)


def job_cost(s: Assumptions, gpu: Gpu, method: str, work: StepWork) -> CostLine:
    """The reference job (its step_work, computed once per method) on one GPU."""
    steps, flops_step = work.steps, work.flops
    bf16 = gpu.bf16_tflops is not None
    peak = float((gpu.bf16_tflops if gpu.bf16_tflops is not None else gpu.fp16_tflops) or 0) * 1e12
    seconds, bound = roofline_seconds(flops_step, work.bytes, peak, gpu.bandwidth_gb_per_s * 1e9)
    roofline_h = steps * seconds / 3600.0
    mfu = s.mfu_full if method == "full" else s.mfu_lora
    hours = roofline_h / mfu
    usd = None if gpu.price_usd_per_hour is None else hours * gpu.price_usd_per_hour
    return CostLine(gpu.name, method, hours, usd, roofline_h, bound,
                    peak / 1e12, "bf16" if bf16 else "fp16", mfu, gpu.price_usd_per_hour, flops_step * steps)
