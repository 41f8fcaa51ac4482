"""Saved-for-backward bytes per token of a layer and of the head, for any training regime (AMP, pure bf16, fp32;
weights trained or frozen; LoRA adapters on all or some Linears).

Every term is a tensor PyTorch keeps for the backward, read off CPU-simulated real steps of 16 model types
(data/measurements/FINDINGS.md F1-F4, F8; Korthikanti et al. 2022, arXiv:2205.05198, Table 2 for the layout,
less the score terms that SDPA's fused kernels do not keep). memory.py (the site's jobs) and job.py (one exact
setup) both price activations with these functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block, norm_sums
from ..inputs import Assumptions
from .lora import adapted_linears

# transformers' Python-written GELUs (activations.py NewGELUActivation, FastGELUActivation, QuickGELUActivation)
# save three more MLP-width tensors than one fused op (FINDINGS.md F8: gpt2's gelu_new).
PYTHON_GELU = ("gelu_new", "gelu_fast", "quick_gelu")


@dataclass(frozen=True)
class Regime:
    """How a training step keeps its tensors: the residual stream's and the matmuls' bytes per element, whether
    the base weights train, and whether autocast casts each Linear's input (FINDINGS.md F3/F4)."""

    residual_bytes: int
    compute_bytes: int
    trained: bool  # full fine-tune: the base weights take gradients; LoRA/QLoRA: frozen
    amp: bool  # bf16 autocast: fp32 norm outputs and adapter inputs are cast per reading Linear


def regime(method: str, precision: str) -> Regime:
    """amp: fp32 weights under bf16 autocast for a full fine-tune (HF Trainer --bf16), a bf16 base with fp32
    adapters for LoRA; bf16: everything bf16 (LitGPT bf16-true, torchtune); fp32: no autocast."""
    trained = method == "full"
    if precision == "fp32":
        return Regime(4, 4, trained, False)
    if precision == "bf16":
        return Regime(2, 2, trained, False)
    return Regime(4 if trained else 2, 2, trained, True)


def norm_bytes(rms_width: int, width: int, stats: int, read: int, fed: int, r: Regime) -> int:
    """Saved bytes per token of a group of norms (FINDINGS.md F3/F4; modeling_llama.LlamaRMSNorm upcasts to fp32,
    torch's native_layer_norm saves its input, mean and rstd). `width` all norms, `rms_width` the RMSNorms',
    `stats` their statistics bytes, `read` width x reading Linears, `fed` widths some Linear reads."""
    ln = width - rms_width
    if not r.trained:  # a frozen weight needs no normalised output: the fp32 input (+ rsqrt / mean, rstd)
        return 4 * width + stats if r.amp else 4 * rms_width + r.residual_bytes * ln + stats
    if r.amp:  # fp32 input; RMS: the fp32 normalised output for the weight's gradient; a bf16 cast per reader
        return 4 * width + stats + 4 * rms_width + r.compute_bytes * read
    # pure bf16 / fp32: RMS upcasts its input; the normalised output (weight gradient) and the scaled output
    # (the Linears' shared input) in the weights' dtype
    return 4 * rms_width + r.residual_bytes * ln + stats + r.residual_bytes * (rms_width + fed)


def adapter_activation_bytes(adapted: list[tuple[int, int, str]], rank: int, r: Regime) -> int:
    """Per token: under AMP, peft casts each adapted Linear's input to the fp32 adapter and autocast casts it back,
    so every lora_A saves its own bf16 copy; else the input is the same tensor for adapters sharing it (counted
    once; o_proj's is the SDPA output, already saved). Each lora_B saves A's output (rank)."""
    c = r.compute_bytes
    if r.amp:
        return c * sum(i + rank for i, _, _ in adapted)
    groups = {g: i for i, _, g in adapted if g != "attn_out"}
    return c * (sum(groups.values()) + rank * len(adapted))


def block_activation_bytes(a: Arch, b: Block, r: Regime, rank: int = 0,
                           roles: frozenset[str] | None = None) -> int:
    """Saved-for-backward bytes of one layer per token (SDPA attention): norms, the parts' saved tensors (frozen:
    `act_frozen`), fp32 softmax statistics, q/k norms over head_dim and adapters' inputs."""
    c = r.compute_bytes
    out = norm_bytes(b.rms_width, b.norm_width, b.norm_stats_bytes, b.norm_read, b.norm_fed, r)
    out += c * (b.act if r.trained else b.act_frozen) + 4 * b.act32
    attention = sum(1 for p in b.parts if p.attn_flops and not p.type.startswith("MoE"))
    if a.qk_norm and attention:
        # q_norm / k_norm (qwen3, olmo2, gemma3): the fp32 upcast, plus the normalised output when it trains
        qk = a.heads * a.head_dim + a.kv_heads * a.head_dim
        out += attention * qk * (4 + (0 if not r.trained else 4 if r.amp else r.residual_bytes))
    if a.act in PYTHON_GELU:
        out += 3 * c * sum(p.act // 2 for p in b.parts if p.type == "MLP")  # act = 2 x inter for a plain MLP
    if rank:
        out += adapter_activation_bytes(adapted_linears(b, roles), rank, r)
    return out


def head_activation_bytes(a: Arch, g: Graph, r: Regime, s: Assumptions) -> int:
    """Per token after the stack: the final norm (read by the LM head) and `logits_bytes` per logit (F1);
    final-logit soft-capping (gemma2: logits / cap, tanh, x cap) keeps tanh's output for its backward."""
    spec = g.spec
    rms, stats, read, fed = norm_sums(spec.head)
    width = sum(p.norm_width for p in spec.head)
    softcap = r.compute_bytes * spec.logits if a.raw.get("final_logit_softcapping") else 0
    return norm_bytes(rms, width, stats, read, fed, r) + s.logits_bytes * spec.logits + softcap
