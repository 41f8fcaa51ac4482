"""Memory: bytes to train (full, LoRA) and to serve, per stage of the layer stack (splits.py cuts it over two cards).

Formulas (per parameter P and per token; inputs.Assumptions for every byte size and its source; what is live at
each peak was read off CPU-simulated real steps, data/measurements/FINDINGS.md F1-F7):
- full AMP, three candidate peaks (F2, F5, F6): the loss backward = (4 master + 8 AdamW) P + 2 bytes x matmul
  weights (autocast copies) + activations, with no gradient yet (zero_grad(set_to_none=True)); the end of the
  backward = (4 + 4 + 8) P + 2 x 4 x vocab x embed_dim when the embedding is tied (two gradients and their sum);
  the AdamW step = (4 + 4 + 8 + 4 foreach temporary) P. Peak = the largest. Every expert of an MoE is held
  (and stepped); only the routed top-k save activations per token.
- LoRA: 2 P (frozen bf16 base) + adapters at 4 + 8 + 2 (autocast copy) bytes + activations with frozen
  Linears saving no input (F4) + each adapter's bf16 input copy and rank output.
- activations per layer and token (F3): norms (fp32 input, rsqrt or mean/rstd, the normalised output when the
  weight trains, one bf16 cast per Linear reading it under AMP), attention (rope'd q and k once, v, SDPA output,
  fp32 LSE; no score matrix: SDPA, Korthikanti et al. 2022 arXiv:2205.05198 Table 2 less the score terms),
  the MLP (gate, act, up, product; frozen: no product); the loss adds `logits_bytes` (12) per logit (F1).
  VLMs add one image's vision-tower activations per sample.
- serving (the site's figure): a chunked-prefill server (vLLM): weights (bf16, or the checkpoint's quantised
  storage) + one prefill chunk's working set + per sequence: per layer min(tokens, window) x its KV elements x
  2 bytes (GQA/MQA K and V heads, MLA's latent), recurrent state (SSM, linear attention), the fp32 next-token
  logits. HF generate's batched prefill (F7) is job.py's `--method inference`. Encoders serve a batch of
  sequences at the context with no cache; encoder-decoders hold the encoder output and both KV caches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from itertools import accumulate
from operator import mul
from typing import NamedTuple

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block, Part, Spec
from ..inputs import Assumptions, Card
from .activations import (
    regime,
)
from .attention import default_attention, eager_layer_terms
from .layer_terms import adapter_params, distinct_values, end_terms, layer_index, layer_values, regime_terms
from .lora import all_linear_roles
from .storage import serve_weight_bytes


@dataclass(frozen=True)
class Profile:
    """One method's memory per stage: the loss-backward branch (static + bytes per sample) and two batch-free
    branches, the end of the backward and the optimizer step; a stage's peak is the largest of the three.
    The layer terms are held per distinct layer (Spec.distinct_layers, with the layers each stands for in
    `counts`): the whole model's figures are sums over them; `layout` lays them out per layer of the stack
    (layer_terms.layer_index) only where a slice of the stack is asked for (a split over cards)."""

    method: str
    embed_static: int  # loss-backward branch: bytes held for the embedding stage (embeddings, vision tower, ...)
    distinct_static: tuple[int, ...]  # per distinct layer, independent of batch
    head_static: int  # final norm + head
    embed_per_sample: int
    distinct_per_sample: tuple[int, ...]
    head_per_sample: int  # final norm, head input, logits and loss
    counts: tuple[int, ...]  # per distinct layer, the layers it stands for
    layout: tuple[int, ...] = field(repr=False)  # per layer of the stack, the index of its distinct layer
    # The optimizer step (weights + gradients + state + foreach temporary) and the end of the backward
    # (weights + gradients + state), per distinct layer; () = the branch does not exist (serving).
    distinct_step: tuple[int, ...] = ()
    embed_step: int = 0
    head_step: int = 0
    distinct_eob: tuple[int, ...] = ()
    embed_eob: int = 0
    head_eob: int = 0
    tied_eob: int = 0  # the tied embedding's two gradients at the end of the backward: only with both ends
    # Training: the per-sample bytes are tokens x per_token + per_sample_fixed (every saved tensor is per
    # token under SDPA; the fixed part is a VLM's image), so total_at() moves the profile to other token
    # counts in O(1) (the memory curve). 0 for serving, whose caches are capped at windows.
    per_token: int = 0
    per_sample_fixed: int = 0
    # Eager attention (a model class without SDPA, attention.default_attention): its scores add heads x T x T per
    # layer, so the per-sample bytes are tokens x per_token + tokens^2 x per_token_sq + per_sample_fixed.
    per_token_sq: int = 0
    # SDPA handed a mask (activations.masked_sdpa_windows): (window, bytes per token, per token squared) summed
    # over the layers, added from tokens >= window on; per_token and per_token_sq leave them out.
    masked: tuple[tuple[int, int, int], ...] = ()
    # LoRA on fused expert tensors (job.py's phase "backward (an adapted expert tensor's gradient)"): a fourth
    # branch, static + grad_fixed + batch x (the per-sample bytes less the head's + grad_per_sample); grad_rate is
    # its bytes per token (total_at). 0 = no such branch.
    grad_fixed: int = 0
    grad_per_sample: int = 0
    grad_rate: int = 0
    total_static: int = field(init=False, repr=False, compare=False)
    # _parts of the whole model (every layer and both ends): what total, total_at, max_batch and peak_phase read
    whole: tuple[int, int, int] = field(init=False, repr=False, compare=False)
    late: tuple[int, int] = field(init=False, repr=False, compare=False)  # the whole model's (step, end of backward)

    def __post_init__(self) -> None:
        fields_ = self.__dict__  # frozen: the derived fields are set once, here (object.__setattr__'s effect)
        counts = self.counts
        static = fields_["total_static"] = self.embed_static + sum(map(mul, counts, self.distinct_static)) \
            + self.head_static
        act = self.embed_per_sample + sum(map(mul, counts, self.distinct_per_sample)) + self.head_per_sample
        step = sum(map(mul, counts, self.distinct_step)) + self.embed_step + self.head_step
        eob = sum(map(mul, counts, self.distinct_eob)) + self.embed_eob + self.head_eob + self.tied_eob
        fields_["whole"] = (static, act, max(step, eob))
        fields_["late"] = (step, eob)

    @property
    def layers(self) -> int:
        return len(self.layout)

    def _per_layer(self, values: tuple[int, ...]) -> tuple[int, ...]:
        """Per-distinct-layer values laid out per layer of the stack."""
        return tuple(map(values.__getitem__, self.layout))

    # Per layer of the stack: what a slice of the stack (_parts) reads, made when first asked for.
    @functools.cached_property
    def layer_static(self) -> tuple[int, ...]:
        return self._per_layer(self.distinct_static)

    @functools.cached_property
    def layer_per_sample(self) -> tuple[int, ...]:
        return self._per_layer(self.distinct_per_sample)

    @functools.cached_property
    def layer_step(self) -> tuple[int, ...]:
        return self._per_layer(self.distinct_step) if self.distinct_step else ()

    @functools.cached_property
    def layer_eob(self) -> tuple[int, ...]:
        return self._per_layer(self.distinct_eob) if self.distinct_eob else ()

    # Running sums over the layers, for slices of the stack (_parts): only a split over cards asks for them.
    @functools.cached_property
    def static_prefix(self) -> tuple[int, ...]:
        return tuple(accumulate(self.layer_static, initial=0))

    @functools.cached_property
    def act_prefix(self) -> tuple[int, ...]:
        return tuple(accumulate(self.layer_per_sample, initial=0))

    @functools.cached_property
    def step_prefix(self) -> tuple[int, ...]:
        return tuple(accumulate(self.layer_step, initial=0)) if self.layer_step else (0,) * (self.layers + 1)

    @functools.cached_property
    def eob_prefix(self) -> tuple[int, ...]:
        return tuple(accumulate(self.layer_eob, initial=0)) if self.layer_eob else (0,) * (self.layers + 1)

    def total(self, batch: int) -> int:
        static, act, fixed = self.whole
        if self.grad_fixed:
            return max(static + batch * act, fixed, self._grad_branch(batch, static, act, True))
        return max(static + batch * act, fixed)

    def total_at(self, tokens: int, batch: int = 1) -> int:
        """total(batch) of the same training profile built at `tokens` per sample (train_profile's
        per-sample bytes are linear in tokens: the test suite holds the two equal on every snapshot model)."""
        assert self.method != "serve", "serving caches are capped at windows: not linear in tokens"
        static, _, fixed = self.whole
        square = tokens * tokens * self.per_token_sq + self.per_sample_fixed
        if self.masked:
            square += sum(tokens * n + tokens * tokens * sq for window, n, sq in self.masked if tokens >= window)
        grad = static + self.grad_fixed + batch * (tokens * self.grad_rate + square) if self.grad_fixed else 0
        return max(static + batch * (tokens * self.per_token + square), fixed, grad)

    def per_sample(self) -> int:
        return self.whole[1]

    def _parts(self, first: int, last: int, with_embed: bool, with_head: bool) -> tuple[int, int, int]:
        """(static, per sample, batch-free peak) of a contiguous slice of layers [first, last) and its ends."""
        e, h = with_embed, with_head
        static = self.static_prefix[last] - self.static_prefix[first] + (self.embed_static if e else 0) \
            + (self.head_static if h else 0)
        act = self.act_prefix[last] - self.act_prefix[first] + (self.embed_per_sample if e else 0) \
            + (self.head_per_sample if h else 0)
        step = self.step_prefix[last] - self.step_prefix[first] + (self.embed_step if e else 0) \
            + (self.head_step if h else 0)
        eob = self.eob_prefix[last] - self.eob_prefix[first] + (self.embed_eob if e else 0) \
            + (self.head_eob if h else 0) + (self.tied_eob if e and h else 0)
        return static, act, max(step, eob)

    def stage(self, batch: int, first: int, last: int, with_embed: bool, with_head: bool) -> int:
        """Bytes of a contiguous slice of layers [first, last) plus the ends it holds."""
        static, act, fixed = self._parts(first, last, with_embed, with_head)
        if self.grad_fixed:
            return max(static + batch * act, fixed, self._grad_branch(batch, static, act, with_head))
        return max(static + batch * act, fixed)

    def _grad_branch(self, batch: int, static: int, act: int, with_head: bool) -> int:
        return static + self.grad_fixed + batch * (act - (self.head_per_sample if with_head else 0)
                                                   + self.grad_per_sample)

    def max_batch(self, budget: int, first: int = 0, last: int = -1, with_embed: bool = True,
                  with_head: bool = True, cap: int = 1 << 40) -> int:
        """Largest b with stage(b) <= budget, 0 when batch 1 does not fit (largest_batch of the stage's limits)."""
        last = self.layers if last < 0 else last
        if first == 0 and last == self.layers and with_embed and with_head:
            return largest_batch(self.whole_limits, budget, cap)
        return largest_batch(self.limits(self._parts(first, last, with_embed, with_head), with_head), budget, cap)

    def limits(self, parts: tuple[int, int, int], with_head: bool) -> Limits:
        """A stage's branches as (bytes at batch 0, bytes per sample), from its _parts: the stage is max(static +
        b x act, the batch-free branch[, the adapted expert tensor's gradient branch, _grad_branch])."""
        static, act, fixed = parts
        if self.grad_fixed:
            return ((static, act), (fixed, 0), (static + self.grad_fixed,
                                                act - (self.head_per_sample if with_head else 0)
                                                + self.grad_per_sample))
        return (static, act), (fixed, 0)

    @functools.cached_property
    def whole_limits(self) -> Limits:
        """limits() of the whole model: what a card's largest batch is held against."""
        return self.limits(self.whole, True)

    def peak_phase(self, batch: int) -> str:
        """When the peak happens: the loss (logits), backward, the end of the backward, the optimizer step;
        serving: the decode with its full KV cache."""
        if self.method == "serve":
            return "decode (full KV cache)"
        static, act, _ = self.whole
        step, eob = self.late
        if max(step, eob) > static + batch * act:
            return "optimizer step" if step >= eob else "end of backward (tied-embedding gradients)"
        if self.grad_fixed and self._grad_branch(batch, static, act, True) > static + batch * act:
            return "backward (an adapted expert tensor's gradient)"
        return "loss (logits)" if self.head_per_sample * 2 > act else "backward (activations)"


# A stage's memory as branches (bytes at batch 0, bytes per sample): its peak at batch b is the largest b-th value.
Limits = tuple[tuple[int, int], ...]


def largest_batch(limits: Limits, budget: int, cap: int = 1 << 40) -> int:
    """Largest b with every branch's base + b x per_sample <= budget, 0 when batch 1 does not fit: each branch
    growing with the batch allows (budget - base) // per_sample, the batch-free ones only batch 1's check."""
    best = cap
    for base, per_sample in limits:
        if base + per_sample > budget:
            return 0
        if per_sample > 0:
            best = min(best, (budget - base) // per_sample)
    return best


def _ends(g: Graph) -> tuple[list[Part], list[Part]]:
    return list(g.spec.embed), list(g.spec.head)


def train_profile(a: Arch, g: Graph, s: Assumptions, tokens: int, method: str, rank: int,
                  memo: dict | None = None) -> Profile:
    """The site's jobs: full AMP AdamW (foreach) and LoRA on every Linear of a bf16 base, AMP, AdamW. Every layer
    term is worked out once per distinct layer (Spec.distinct_layers), then laid out per layer (layer_values);
    `memo`: the estimate's table of them, shared with its jobs (memoised)."""
    spec = g.spec
    distinct = spec.distinct_layers
    counts = [n for _, n in distinct]
    embed, head = _ends(g)
    r = regime(method, "amp")
    adam = s.master_weight_bytes + s.optimizer_state_bytes
    # LoRA on every Linear, + adapted expert tensors' effective weights, kept per layer (job.py)
    roles = None if method == "full" else all_linear_roles(a)
    terms = regime_terms(a, g, r, 0 if method == "full" else rank, roles, memo)
    if method == "full":
        copy = s.autocast_copy_bytes

        def static(params: int, matmul: int) -> int:  # the loss backward: no gradient exists yet (F2)
            return adam * params + copy * matmul

        def late(params: int, temp: int) -> int:  # the end of the backward (temp 0) and the AdamW step
            return (adam + s.grad_bytes + temp) * params

        ends = [sum(p.params for p in part) for part in (embed, head)]
        step = s.foreach_temp_bytes
        layer_static = [static(b.params, b.matmul) for b, _ in distinct]
        embed_static, head_static = (static(n, sum(p.matmul for p in part)) for n, part in zip(ends, (embed, head), strict=True))
        layer_step = [late(b.params, step) for b, _ in distinct]
        layer_eob: list[int] = [late(b.params, 0) for b, _ in distinct]
        embed_step, head_step = late(ends[0], step), late(ends[1], step)
        embed_eob, head_eob = late(ends[0], 0), late(ends[1], 0)
        # F6: a tied weight's two gradients (embedding, LM head) and their sum are live together.
        tied = 2 * s.grad_bytes * spec.vocab * (a.embed_dim or a.hidden) if spec.tied else 0
        embed_act = s.master_weight_bytes * spec.hidden
    else:
        adapter_rate = adam + s.autocast_copy_bytes  # fp32 adapter, AdamW state, its bf16 autocast copy
        adapters = adapter_params(spec, rank, roles, memo)
        layer_static = [s.base_weight_bytes * b.params + adapter_rate * n + e
                        for (b, _), n, e in zip(distinct, adapters, terms.experts, strict=True)]
        embed_static = s.base_weight_bytes * sum(p.params for p in embed)
        head_static = s.base_weight_bytes * sum(p.params for p in head)
        # the adapters' AdamW step: weights + adapters (4 + 4 + 8 + 4 foreach) B each
        late_rate = adam + s.grad_bytes + s.foreach_temp_bytes
        layer_step = [s.base_weight_bytes * b.params + late_rate * n for (b, _), n in zip(distinct, adapters, strict=True)]
        layer_eob = []
        embed_step, head_step, embed_eob, head_eob, tied = embed_static, head_static, 0, 0, 0
        embed_act = -end_terms(a, g, s, r, memo)[1]  # a frozen embedding saves nothing (F4), nor the norm reading it
        grads = terms.grads
        grad_fixed, grad_token = 0, 0
        if any(t != (0, 0) for t in grads):  # the last layer of the largest transient (its latest on a tie)
            grad_fixed, grad_token = max(layer_values(spec, grads, memo)[::-1], key=lambda t: t[0] + tokens * t[1])
    dropout, _, head_rate = end_terms(a, g, s, r, memo)
    embed_act += dropout  # the embedding dropout's mask (activations.DROPOUTS)
    # the fused qkv output kept by q's view (gpt2): the training forward's cache is on without checkpointing
    rates = [rate + view for rate, view in zip(terms.act, terms.views, strict=True)]
    squares = [0] * len(rates)
    windows: list[tuple[tuple[int, int, int], ...]] = [()] * len(rates)
    if default_attention(a)[0] == "eager":  # no SDPA in the model's class: eager keeps its scores
        eager = distinct_values(spec, lambda b: eager_layer_terms(a, b, r.compute_bytes, r.trained, r))
        rates = [rate + linear for rate, (linear, _) in zip(rates, eager, strict=True)]
        squares = [sq for _, sq in eager]
    else:  # SDPA handed a mask (a window at tokens >= its width) keeps it and GQA's repeated k/v (F11)
        windows = terms.windows
    # every layer runs at the job's tokens (an encoder-decoder's encoder and decoder alike)
    n = tokens
    layer_act = [n * rate + n * n * sq + sum(n * m + n * n * msq for w, m, msq in ws if n >= w)
                 for rate, sq, ws in zip(rates, squares, windows, strict=True)]
    masked: dict[int, tuple[int, int]] = {}
    for ws, count in zip(windows, counts, strict=True):
        for w, m, msq in ws:
            m0, sq0 = masked.get(w, (0, 0))
            masked[w] = (m0 + count * m, sq0 + count * msq)
    vision = s.compute_bytes * spec.vision_act * (1 if spec.image_tokens else 0)
    rates_sum = sum(k * rate for k, rate in zip(counts, rates, strict=True))
    grad = (grad_fixed, tokens * grad_token, embed_act + rates_sum + grad_token) if method != "full" else (0, 0, 0)
    return Profile(method, embed_static, tuple(layer_static), head_static, tokens * embed_act + vision,
                   tuple(layer_act), tokens * head_rate, tuple(counts), layer_index(spec, memo), tuple(layer_step),
                   embed_step, head_step, tuple(layer_eob), embed_eob, head_eob, tied,
                   embed_act + rates_sum + head_rate, vision, sum(k * sq for k, sq in zip(counts, squares, strict=True)),
                   tuple((w, m, msq) for w, (m, msq) in sorted(masked.items())), *grad)


def encoder_tokens(spec: Spec, tokens: int) -> int:
    """Tokens the decoder's cross-attention reads, and the encoder output one sequence keeps: one image's patches
    where the encoder's input fixes them (Spec.encoder_tokens), else an encoder-decoder's job tokens (its encoder
    and decoder both run at them); none for a decoder."""
    return spec.encoder_tokens or (tokens if spec.kind == "encoder-decoder" else 0)


def kv_bytes_of_block(b: Block | CacheTerms, s: Assumptions, tokens: int, encoder_tokens: int = 0) -> int:
    """Cache bytes one sequence holds in this layer after `tokens` tokens: KV capped at each window,
    cross-attention KV over the encoder's tokens, and fixed recurrent state."""
    out = b.state * s.kv_bytes
    for window, kv in b.kv:
        n = encoder_tokens if window < 0 else (min(tokens, window) if window > 0 else tokens)
        out += n * kv * s.kv_bytes
    return out


def serve_profile(a: Arch, g: Graph, s: Assumptions, tokens: int, memo: dict | None = None) -> Profile:
    """Weights + one prefill chunk's working set (fixed) + per sequence its caches and logits; each distinct layer
    worked out once (`memo`: the estimate's table, layer_index)."""
    spec = g.spec
    c = s.compute_bytes
    embed, head = _ends(g)
    weights = serve_weight_bytes(a, s)

    def block_weights(b: Block) -> int:
        return weights(b.parts) if a.quant is not None and a.quant.bits < 16 else int(s.serve_weight_bytes * b.params)
    transient = _serve_transient(g, s, tokens)
    distinct = spec.distinct_layers
    counts, layout = tuple([n for _, n in distinct]), layer_index(spec, memo)
    layer_weights = tuple([block_weights(b) for b, _ in distinct])
    if spec.kind == "encoder":
        # A batch of sequences at the context, no cache: each sequence holds its own working set
        # and its output (the head's logits per token, fp32).
        return Profile("serve", weights(embed), layer_weights, weights(head), transient + tokens * 4 * spec.logits,
                       (0,) * len(distinct), 0, counts, layout)
    enc_tokens = encoder_tokens(spec, tokens)
    caches = tuple([0 if b.stack == "encoder" else kv_bytes_of_block(b, s, tokens, enc_tokens) for b, _ in distinct])
    # An encoder-decoder keeps the encoder's output (tokens x hidden) per sequence for cross-attention.
    enc_out = enc_tokens * c * spec.hidden
    return Profile("serve", weights(embed) + transient, layer_weights, weights(head), enc_out, caches,
                   s.decode_logits_bytes * spec.vocab, counts, layout)


def _serve_transient(g: Graph, s: Assumptions, tokens: int, width: int | None = None) -> int:
    """Prefill runs one sequence-sized chunk at a time (vLLM's chunked prefill, HF generate at batch 1): the
    largest layer transient (q/k/v/output or the MLP intermediates) plus two residual copies."""
    spec = g.spec
    c = s.compute_bytes
    if width is None:
        width = max((b.transient for b, _ in spec.distinct_layers), default=0)
    return tokens * c * (width + 2 * spec.hidden) + c * spec.vision_transient


def serve_token_bytes(g: Graph, s: Assumptions, tokens: int, cache: CacheTerms | None = None) -> int:
    """The part of serve_profile(..., tokens).total(1) that depends on tokens (the prefill chunk, one
    sequence's caches, an encoder's logits or an encoder-decoder's encoder output), by the same formulas:
    the memory curve moves the serving peak to other token counts without rebuilding the profile.
    `cache`: cache_block(g), when the caller asks at many token counts."""
    return serve_token_curve(g, s, (tokens,), cache)[0]


def serve_token_curve(g: Graph, s: Assumptions, points: tuple[int, ...],
                      cache: CacheTerms | None = None) -> list[int]:
    """serve_token_bytes at each token count of `points`: what does not depend on tokens looked up once."""
    spec = g.spec
    cache = cache or cache_block(g)
    c = s.compute_bytes
    width, vision = c * (cache.transient + 2 * spec.hidden), c * spec.vision_transient  # _serve_transient's terms
    if spec.kind == "encoder":
        return [tokens * width + vision + tokens * 4 * spec.logits for tokens in points]
    out = []
    for tokens in points:
        enc_tokens = encoder_tokens(spec, tokens)
        out.append(tokens * width + vision + enc_tokens * c * spec.hidden
                   + kv_bytes_of_block(cache, s, tokens, enc_tokens))
    return out


def cache_block(g: Graph) -> CacheTerms:
    """One block holding every cached layer's state and (window, KV) terms: kv_bytes_of_block is a sum over
    them, so this block's cache is the whole model's, in one pass over its distinct windows."""
    spec = g.spec
    kv: dict[int, int] = {}
    state, transient = 0, 0
    for b, copies in spec.distinct_layers:  # each distinct layer once, times the layers it stands for
        transient = max(transient, b.transient)
        if b.stack != "encoder":
            state += copies * b.state
            for window, n in b.kv:
                kv[window] = kv.get(window, 0) + copies * n
    return CacheTerms(state, tuple(kv.items()), transient)


class CacheTerms(NamedTuple):
    """What kv_bytes_of_block reads of a Block (state, kv), summed over the layers, and the largest layer
    transient (_serve_transient)."""
    state: int
    kv: tuple[tuple[int, int], ...]
    transient: int


def kv_bytes_per_token(a: Arch, s: Assumptions) -> int:
    """K and V for every layer at full attention, per token: 2 x kv_heads x head_dim x bytes per
    attention layer (GQA/MQA aware), kv_lora_rank + qk_rope_head_dim for MLA; windows not applied."""
    return sum(n * kv * s.kv_bytes for b, n in a.spec.distinct_layers for window, kv in b.kv if window >= 0)


def kv_bytes_per_sequence(a: Arch, s: Assumptions, tokens: int) -> int:
    """One sequence's whole cache at `tokens`: windows capped, recurrent state included."""
    enc = encoder_tokens(a.spec, tokens)
    if a.spec.kind == "encoder":
        return 0
    return sum(n * kv_bytes_of_block(b, s, tokens, enc) for b, n in a.spec.distinct_layers if b.stack != "encoder")


def state_bytes_per_sequence(a: Arch, s: Assumptions) -> int:
    """Fixed recurrent state per sequence (SSM conv + SSM state, linear-attention state)."""
    return sum(n * b.state * s.kv_bytes for b, n in a.spec.distinct_layers)


def budget_bytes(card: Card, s: Assumptions) -> int:
    """What one card offers an estimate: driver-reported total, less the CUDA context, over headroom."""
    return int((card.memory_usable_bytes - s.cuda_context_bytes) / s.headroom)
