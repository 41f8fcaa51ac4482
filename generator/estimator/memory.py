"""Memory: bytes to train (full, LoRA) and to serve, per card the largest batch, and two-card splits.

Formulas (per parameter P and per token, see inputs.Assumptions for every byte size and its source):
- full AMP: fwd/bwd peak = (4 master + 4 grad + 8 AdamW) P + 2 bytes x matmul weights (autocast
  copies) + activations; the AdamW step peak = (4 + 4 + 8 + 4 foreach temporary) P. Peak = the larger.
- LoRA: 2 P (frozen bf16 base) + adapters at the same 20 bytes, + activations (+ adapter inputs).
- activations per layer and token: saved tensors of SDPA attention (no score matrix; Korthikanti
  et al. 2022, arXiv:2205.05198, Table 2, with the score/dropout terms removed for fused kernels)
  and of the MLP; the loss adds `logits_bytes` per logit element.
- serving: 2 P + one prefill chunk's working set + per sequence its KV cache (2 x layers x kv_heads
  x head_dim x 2 bytes per token) and its fp32 next-token logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .config import Arch
from .graph import Graph
from .inputs import Assumptions, Card


@dataclass(frozen=True)
class Profile:
    """One method's memory as static bytes per stage + bytes per sample, split by where they live."""

    method: str
    embed_static: int  # bytes held for the embedding stage (params of embeddings etc.)
    layer_static: int  # bytes per decoder layer independent of batch
    head_static: int  # final norm + head (+ tied-weight effects)
    step_extra: int  # optimizer-step-only temporaries for the whole model (foreach AdamW)
    embed_per_sample: int
    layer_per_sample: int
    head_per_sample: int  # final norm, head input, logits and loss
    layers: int

    def total(self, batch: int) -> int:
        return self.stage(batch, 0, self.layers, True, True)

    def stage(self, batch: int, first: int, last: int, with_embed: bool, with_head: bool) -> int:
        """Bytes of a contiguous slice of layers [first, last) plus the ends it holds."""
        n = last - first
        static = n * self.layer_static + (self.embed_static if with_embed else 0) + (self.head_static if with_head else 0)
        act = n * self.layer_per_sample + (self.embed_per_sample if with_embed else 0) + (self.head_per_sample if with_head else 0)
        total_static = self.embed_static + self.layers * self.layer_static + self.head_static
        step = self.step_extra * static // max(total_static, 1)
        return max(static + batch * act, static + step)

    def peak_phase(self, batch: int) -> str:
        """When the peak happens: the optimizer step, the loss (logits), backward, or prefill."""
        if self.method == "serve":
            return "decode (full KV cache)"
        act = self.embed_per_sample + self.layers * self.layer_per_sample + self.head_per_sample
        if self.step_extra > batch * act:
            return "optimizer step"
        return "loss (logits)" if self.head_per_sample * 2 > act else "backward (activations)"


def layer_activation_bytes(a: Arch, s: Assumptions, residual_bytes: int) -> int:
    """Saved-for-backward bytes of one decoder layer per token (bf16 compute, SDPA attention)."""
    c, q, kv = s.compute_bytes, a.heads * a.head_dim, a.kv_heads * a.head_dim
    # Each norm saves its input and normalised output; under AMP (fp32 residual) the Linear after it
    # also saves a bf16 cast of that output. With a bf16 base there is no cast.
    cast = c if residual_bytes != c else 0
    norms = len(a.layer_norms) * (2 * residual_bytes + cast) * a.hidden
    rope_copies = 3 if a.position == "rope" else 1  # pre-rope q/k, rotate_half, post-rope q/k
    attn = c * (rope_copies * (q + kv) + kv + 2 * q) + 4 * a.heads  # + SDPA output, o_proj input, fp32 LSE
    mlp = c * a.intermediate * (4 if a.mlp == "gated" else 2)  # gate, act, up, product | fc1, act
    return norms + attn + mlp


def head_activation_bytes(a: Arch, s: Assumptions, residual_bytes: int, tokens: int) -> int:
    """Final norm, head input and the loss: per sample of `tokens` tokens."""
    cast = s.compute_bytes if residual_bytes != s.compute_bytes else 0
    return tokens * ((2 * residual_bytes + cast) * a.hidden + s.logits_bytes * a.vocab)


def lora_params(g: Graph, a: Arch, rank: int) -> int:
    """LoRA A (r x in) and B (out x r) on every Linear of every layer; the head is left out."""
    return a.layers * sum(rank * (i + o) for i, o in g.linears_per_layer)


def train_profile(a: Arch, g: Graph, s: Assumptions, tokens: int, method: str, rank: int) -> Profile:
    L = a.layers
    head_params = g.params_lm_head + (g.params_total - g.params_embedding - g.params_lm_head - L * g.params_per_layer)
    matmul_per_layer = sum(i * o for i, o in g.linears_per_layer)
    head_matmul = a.vocab * a.embed_dim
    if method == "full":
        per_param = s.master_weight_bytes + s.grad_bytes + s.optimizer_state_bytes
        residual = s.master_weight_bytes
        embed_static = per_param * g.params_embedding
        layer_static = per_param * g.params_per_layer + s.autocast_copy_bytes * matmul_per_layer
        head_static = per_param * head_params + s.autocast_copy_bytes * head_matmul
        step = s.foreach_temp_bytes * g.params_total - s.autocast_copy_bytes * (L * matmul_per_layer + head_matmul)
        lora_act = 0
    else:
        adapter_rate = s.master_weight_bytes + s.grad_bytes + s.optimizer_state_bytes
        per_layer_adapters = sum(rank * (i + o) for i, o in g.linears_per_layer)
        residual = s.base_weight_bytes
        embed_static = s.base_weight_bytes * g.params_embedding
        layer_static = s.base_weight_bytes * g.params_per_layer + adapter_rate * per_layer_adapters
        head_static = s.base_weight_bytes * head_params
        step = s.foreach_temp_bytes * L * per_layer_adapters
        # peft casts each adapted Linear's input for lora_A and keeps A's output for B's gradient.
        lora_act = s.compute_bytes * sum(i + rank for i, _ in g.linears_per_layer)
    layer_act = tokens * (layer_activation_bytes(a, s, residual) + lora_act)
    return Profile(method, embed_static, layer_static, head_static, max(step, 0), tokens * residual * a.hidden,
                   layer_act, head_activation_bytes(a, s, residual, tokens), L)


def serve_profile(a: Arch, g: Graph, s: Assumptions, tokens: int) -> Profile:
    """bf16 weights + one prefill chunk's working set (fixed) + per sequence its KV cache and logits."""
    L, c = a.layers, s.compute_bytes
    kv_per_token_layer = 2 * a.kv_heads * a.head_dim * s.kv_bytes
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    # Prefill runs one sequence-sized chunk at a time (vLLM's chunked prefill, HF generate at batch 1):
    # the largest layer transient (q/k/v/output or the MLP intermediates) plus two residual copies.
    transient = tokens * c * (max(2 * q + 2 * kv, a.intermediate * (3 if a.mlp == "gated" else 2)) + 2 * a.hidden)
    head_params = g.params_total - g.params_embedding - L * g.params_per_layer
    # Each decoding sequence holds its KV cache and its next-token logits in fp32 (sampling).
    return Profile("serve", s.serve_weight_bytes * g.params_embedding + transient,
                   s.serve_weight_bytes * g.params_per_layer, s.serve_weight_bytes * head_params, 0, 0,
                   tokens * kv_per_token_layer, s.decode_logits_bytes * a.vocab, L)


def kv_bytes_per_token(a: Arch, s: Assumptions) -> int:
    """K and V for every layer: 2 x layers x kv_heads x head_dim x bytes (GQA/MQA aware)."""
    return 2 * a.layers * a.kv_heads * a.head_dim * s.kv_bytes


def budget_bytes(card: Card, s: Assumptions) -> int:
    """What one card offers an estimate: driver-reported total, less the CUDA context, over headroom."""
    return int((card.memory_usable_bytes - s.cuda_context_bytes) / s.headroom)


def max_batch(need: Callable[[int], int], budget: int, cap: int = 1 << 40) -> int:
    """Largest b with need(b) <= budget (need is non-decreasing in b); 0 when batch 1 does not fit."""
    if need(1) > budget:
        return 0
    lo, hi = 1, 2
    while hi < cap and need(hi) <= budget:
        lo, hi = hi, hi * 2
    hi = min(hi, cap)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Split:
    cards: int
    cut_after_layer: int
    stage_bytes_batch1: tuple[int, int]
    max_batch: int  # 0 when even two cards cannot hold batch 1


def two_card_split(p: Profile, budget: int) -> Split:
    """Best contiguous layer cut over two cards (pipeline parallel): minimise the larger stage."""
    best = None
    for k in range(0, p.layers + 1):
        first, second = p.stage(1, 0, k, True, False), p.stage(1, k, p.layers, False, True)
        if best is None or max(first, second) < max(best[1], best[2]):
            best = (k, first, second)
    k, first, second = best  # type: ignore[misc]

    def need(b: int) -> int:
        return max(p.stage(b, 0, k, True, False), p.stage(b, k, p.layers, False, True))

    return Split(2, k, (first, second), max_batch(need, budget))
