"""Memory: bytes to train (full, LoRA) and to serve, per card the largest batch, and two-card splits.

Formulas (per parameter P and per token, see inputs.Assumptions for every byte size and its source):
- full AMP: fwd/bwd peak = (4 master + 4 grad + 8 AdamW) P + 2 bytes x matmul weights (autocast
  copies) + activations; the AdamW step peak = (4 + 4 + 8 + 4 foreach temporary) P. Peak = the larger.
  Every expert of an MoE is held (and stepped); only the routed top-k save activations per token.
- LoRA: 2 P (frozen bf16 base) + adapters at the same 20 bytes, + activations (+ adapter inputs).
- activations per layer and token: saved tensors of SDPA attention (no score matrix; Korthikanti
  et al. 2022, arXiv:2205.05198, Table 2, with the score/dropout terms removed for fused kernels)
  and of the MLP (MoE: top_k x the expert's tensors + the shared expert); the loss adds
  `logits_bytes` per logit element. VLMs add one image's vision-tower activations per sample.
- serving: weights (bf16, or the checkpoint's quantised storage) + one prefill chunk's working set
  + per sequence: per layer min(tokens, window) x its KV elements x 2 bytes (GQA/MQA K and V heads,
  MLA's latent), recurrent state where a layer has one (SSM, linear attention), and the fp32
  next-token logits. Encoders serve a batch of sequences at the context with no cache;
  encoder-decoders hold the encoder output and the decoder's self- and cross-attention KV.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .arch import Arch
from .graph import Graph
from .inputs import Assumptions, Card
from .quant import serve_weight_bytes
from .spec import Block, Part


@dataclass(frozen=True)
class Profile:
    """One method's memory as static bytes per stage + bytes per sample, split by where they live."""

    method: str
    embed_static: int  # bytes held for the embedding stage (embeddings, vision tower, ...)
    layer_static: tuple[int, ...]  # bytes per layer independent of batch
    head_static: int  # final norm + head (+ tied-weight effects)
    step_extra: int  # optimizer-step-only temporaries for the whole model (foreach AdamW)
    embed_per_sample: int
    layer_per_sample: tuple[int, ...]
    head_per_sample: int  # final norm, head input, logits and loss
    layers: int
    # prefix sums of layer_static / layer_per_sample, so that a stage costs O(1) (splits try every cut)
    static_prefix: tuple[int, ...] = field(init=False, repr=False, compare=False)
    act_prefix: tuple[int, ...] = field(init=False, repr=False, compare=False)
    total_static: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def prefix(values: tuple[int, ...]) -> tuple[int, ...]:
            out, run = [0], 0
            for v in values:
                run += v
                out.append(run)
            return tuple(out)
        object.__setattr__(self, "static_prefix", prefix(self.layer_static))
        object.__setattr__(self, "act_prefix", prefix(self.layer_per_sample))
        object.__setattr__(self, "total_static", self.embed_static + self.static_prefix[-1] + self.head_static)

    def total(self, batch: int) -> int:
        return self.stage(batch, 0, self.layers, True, True)

    def per_sample(self) -> int:
        return self.embed_per_sample + self.act_prefix[-1] + self.head_per_sample

    def stage(self, batch: int, first: int, last: int, with_embed: bool, with_head: bool) -> int:
        """Bytes of a contiguous slice of layers [first, last) plus the ends it holds."""
        static = self.static_prefix[last] - self.static_prefix[first] + (self.embed_static if with_embed else 0) \
            + (self.head_static if with_head else 0)
        act = self.act_prefix[last] - self.act_prefix[first] + (self.embed_per_sample if with_embed else 0) \
            + (self.head_per_sample if with_head else 0)
        step = self.step_extra * static // max(self.total_static, 1) if self.step_extra else 0
        return max(static + batch * act, static + step)

    def max_batch(self, budget: int, first: int = 0, last: int = -1, with_embed: bool = True,
                  with_head: bool = True, cap: int = 1 << 40) -> int:
        """Largest b with stage(b) <= budget, 0 when batch 1 does not fit: the stage is static + b x act
        (or static + step, a constant), so b = (budget - static) // act: what max_batch() finds."""
        last = self.layers if last < 0 else last
        if self.stage(1, first, last, with_embed, with_head) > budget:
            return 0
        static = self.static_prefix[last] - self.static_prefix[first] + (self.embed_static if with_embed else 0) \
            + (self.head_static if with_head else 0)
        act = self.act_prefix[last] - self.act_prefix[first] + (self.embed_per_sample if with_embed else 0) \
            + (self.head_per_sample if with_head else 0)
        return cap if act <= 0 else min((budget - static) // act, cap)

    def peak_phase(self, batch: int) -> str:
        """When the peak happens: the optimizer step, the loss (logits), backward, or prefill."""
        if self.method == "serve":
            return "decode (full KV cache)"
        act = self.per_sample()
        if self.step_extra > batch * act:
            return "optimizer step"
        return "loss (logits)" if self.head_per_sample * 2 > act else "backward (activations)"


def part_activation_bytes(p: Part, s: Assumptions, residual_bytes: int, rank: int = 0) -> int:
    """Saved-for-backward bytes of one part per token (bf16 compute, SDPA attention).

    A norm saves its input and normalised output; under AMP (fp32 residual) the Linear after it
    also saves a bf16 cast of that output. With a bf16 base there is no cast. Under LoRA, peft casts
    each adapted Linear's input for lora_A and keeps A's output (rank) for B's gradient.
    """
    c = s.compute_bytes
    cast = c if residual_bytes != c else 0
    out = (2 * residual_bytes + cast) * p.norm_width + c * p.act + 4 * p.act32
    if rank:
        out += c * sum(i + rank for i, _ in p.linears)
    return out


def block_activation_bytes(b: Block, s: Assumptions, residual_bytes: int, rank: int = 0) -> int:
    """The sum of part_activation_bytes over the block's parts, from the block's sums (it is linear)."""
    c = s.compute_bytes
    cast = c if residual_bytes != c else 0
    out = (2 * residual_bytes + cast) * b.norm_width + c * b.act + 4 * b.act32
    if rank:
        out += c * (b.lora_in + rank * len(b.linears))
    return out


def lora_params(g: Graph, a: Arch, rank: int) -> int:
    """LoRA A (r x in) and B (out x r) on every nn.Linear of every layer; the head is left out."""
    assert g.spec is not None
    return sum(rank * b.lora_io for b in g.spec.blocks)


def _ends(g: Graph) -> tuple[list[Part], list[Part]]:
    assert g.spec is not None
    return list(g.spec.embed), list(g.spec.head)


def train_profile(a: Arch, g: Graph, s: Assumptions, tokens: int, method: str, rank: int) -> Profile:
    spec = g.spec
    assert spec is not None
    embed, head = _ends(g)
    c = s.compute_bytes
    layer_tokens = [_tokens_of(b, tokens) for b in spec.blocks]
    if method == "full":
        per_param = s.master_weight_bytes + s.grad_bytes + s.optimizer_state_bytes
        residual = s.master_weight_bytes
        copy = s.autocast_copy_bytes

        def static(parts: list[Part] | tuple[Part, ...]) -> int:
            return sum(per_param * p.params + copy * p.matmul for p in parts)

        layer_static = tuple(per_param * b.params + copy * b.matmul for b in spec.blocks)
        matmul = sum(p.matmul for p in [*embed, *head]) + sum(b.matmul for b in spec.blocks)
        step = s.foreach_temp_bytes * g.params_total - copy * matmul
        embed_static, head_static, lora_rank = static(embed), static(head), 0
    else:
        adapter_rate = s.master_weight_bytes + s.grad_bytes + s.optimizer_state_bytes
        residual = s.base_weight_bytes
        layer_static = tuple(s.base_weight_bytes * b.params + adapter_rate * rank * b.lora_io for b in spec.blocks)
        embed_static = s.base_weight_bytes * sum(p.params for p in embed)
        head_static = s.base_weight_bytes * sum(p.params for p in head)
        step = s.foreach_temp_bytes * lora_params(g, a, rank)
        lora_rank = rank
    layer_act = tuple(n * block_activation_bytes(b, s, residual, lora_rank) for b, n in zip(spec.blocks, layer_tokens))
    cast = c if residual != c else 0
    head_act = tokens * ((2 * residual + cast) * spec.hidden + s.logits_bytes * spec.logits)
    embed_act = tokens * residual * spec.hidden + c * spec.vision_act * (1 if spec.image_tokens else 0)
    return Profile(method, embed_static, layer_static, head_static, max(step, 0), embed_act, layer_act, head_act,
                   len(spec.blocks))


def _tokens_of(b: Block, tokens: int) -> int:
    return tokens  # encoder and decoder stacks of an encoder-decoder both run at the job's tokens


def kv_bytes_of_block(b: Block, s: Assumptions, tokens: int, encoder_tokens: int = 0) -> int:
    """Cache bytes one sequence holds in this layer after `tokens` tokens: KV capped at each window,
    cross-attention KV over the encoder's tokens, and fixed recurrent state."""
    out = b.state * s.kv_bytes
    for window, kv in b.kv:
        n = encoder_tokens if window < 0 else (min(tokens, window) if window > 0 else tokens)
        out += n * kv * s.kv_bytes
    return out


def serve_profile(a: Arch, g: Graph, s: Assumptions, tokens: int) -> Profile:
    """Weights + one prefill chunk's working set (fixed) + per sequence its caches and logits."""
    spec = g.spec
    assert spec is not None
    c = s.compute_bytes
    embed, head = _ends(g)
    weights = serve_weight_bytes(a, s)

    def block_weights(b: Block) -> int:
        return weights(b.parts) if a.quant is not None and a.quant.bits < 16 else int(s.serve_weight_bytes * b.params)
    transient_width = max((b.transient for b in spec.blocks), default=0) + 2 * spec.hidden
    # Prefill runs one sequence-sized chunk at a time (vLLM's chunked prefill, HF generate at batch 1):
    # the largest layer transient (q/k/v/output or the MLP intermediates) plus two residual copies.
    transient = tokens * c * transient_width + c * spec.vision_transient
    if spec.kind == "encoder":
        # A batch of sequences at the context, no cache: each sequence holds its own working set
        # and its output (the head's logits per token, fp32).
        return Profile("serve", weights(embed), tuple(block_weights(b) for b in spec.blocks), weights(head), 0,
                       transient + tokens * 4 * spec.logits, (0,) * len(spec.blocks), 0, len(spec.blocks))
    enc_tokens = tokens if spec.kind == "encoder-decoder" else 0
    per_layer = tuple(0 if b.stack == "encoder" else kv_bytes_of_block(b, s, tokens, enc_tokens) for b in spec.blocks)
    # An encoder-decoder keeps the encoder's output (tokens x hidden) per sequence for cross-attention.
    enc_out = enc_tokens * c * spec.hidden
    return Profile("serve", weights(embed) + transient, tuple(block_weights(b) for b in spec.blocks), weights(head), 0,
                   enc_out, per_layer, s.decode_logits_bytes * spec.vocab, len(spec.blocks))


def kv_bytes_per_token(a: Arch, s: Assumptions) -> int:
    """K and V for every layer at full attention, per token: 2 x kv_heads x head_dim x bytes per
    attention layer (GQA/MQA aware), kv_lora_rank + qk_rope_head_dim for MLA; windows not applied."""
    assert a.spec is not None
    return sum(kv * s.kv_bytes for b in a.spec.blocks for window, kv in b.kv if window >= 0)


def kv_bytes_per_sequence(a: Arch, s: Assumptions, tokens: int) -> int:
    """One sequence's whole cache at `tokens`: windows capped, recurrent state included."""
    assert a.spec is not None
    enc = tokens if a.spec.kind == "encoder-decoder" else 0
    if a.spec.kind == "encoder":
        return 0
    return sum(kv_bytes_of_block(b, s, tokens, enc) for b in a.spec.blocks if b.stack != "encoder")


def state_bytes_per_sequence(a: Arch, s: Assumptions) -> int:
    """Fixed recurrent state per sequence (SSM conv + SSM state, linear-attention state)."""
    assert a.spec is not None
    return sum(b.state * s.kv_bytes for b in a.spec.blocks)


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
    """Best contiguous layer cut over two cards (pipeline parallel): minimise the larger stage.

    The first stage grows and the second shrinks with the cut, so the best cut is where they cross:
    found by bisection, then the neighbours are compared (the lowest cut wins a tie)."""
    def stages(k: int) -> tuple[int, int]:
        return p.stage(1, 0, k, True, False), p.stage(1, k, p.layers, False, True)

    lo, hi = 0, p.layers
    while lo < hi:  # smallest k with first(k) >= second(k)
        mid = (lo + hi) // 2
        first, second = stages(mid)
        if first >= second:
            hi = mid
        else:
            lo = mid + 1
    best = None
    for k in (lo - 1, lo):
        if 0 <= k <= p.layers:
            first, second = stages(k)
            if best is None or max(first, second) < max(best[1], best[2]):
                best = (k, first, second)
    k, first, second = best  # type: ignore[misc]

    # The larger stage fits b when both do: the smaller of the two stages' largest batches.
    return Split(2, k, (first, second), min(p.max_batch(budget, 0, k, True, False),
                                            p.max_batch(budget, k, p.layers, False, True)))
