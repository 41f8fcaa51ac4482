"""A method's memory per stage of the layer stack (Profile: what profile.py builds) and the largest batch a
budget holds (largest_batch): what the cards, the splits and the curve read."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from itertools import accumulate
from operator import mul
from typing import NamedTuple


class ServingStages(NamedTuple):
    """What a serving profile's stages hold beside their layers when vLLM cuts it over several (Profile.parts): its
    startup's forward, which every stage runs over its own layers, and its sampler's run, which the last alone
    does (vllm_server.Startup); the hidden states handed to every stage but the first (setups.serving_job); the
    multimodal towers' weights, which vLLM builds on every stage (the wrappers' __init__ build their towers under
    _mark_tower_model whatever the rank, v0.19.1 model_executor/models/*.py, e.g. qwen2_5_vl.py; profile_run runs
    the encoder on every rank). One card holds the larger of the first two and the towers once, in embed_static."""

    forward_bytes: int = 0
    sampler_bytes: int = 0
    handoff_bytes: int = 0
    towers_bytes: int = 0


class Branch(NamedTuple):
    """A late-backward peak (job.py's phases that hold one layer's backward transient beside every saved tensor
    but the head's, which is freed by then), or the forward's end (every saved tensor, the head's not made yet): static + fixed + batch x (the per-sample bytes less the head's +
    per_sample). rate and rate_sq: the branch's whole per-sample bytes (the model's less the head's, plus
    per_sample) per token and per token squared, to which Profile.totals_at adds the profile's own tokens-squared,
    masked and fixed per-sample terms."""

    phase: str  # the job phase it stands for (peak_phase)
    fixed: int
    per_sample: int
    rate: int
    rate_sq: int = 0


@dataclass(frozen=True)
class Profile:
    """One method's memory per stage: the loss-backward branch (static + bytes per sample), two batch-free
    branches (the end of the backward and the optimizer step) and the late-backward Branches; a stage's peak is
    the largest of them.
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
    # SDPA handed a mask (attention.masked_sdpa_windows): (window, bytes per token, per token squared) summed
    # over the layers, added from tokens >= window on; per_token and per_token_sq leave them out.
    masked: tuple[tuple[int, int, int], ...] = ()
    # Late-backward branches beside the loss backward's: LoRA on fused expert tensors (an adapted expert tensor's
    # gradient), eager attention's score gradients. () = none.
    backward: tuple[Branch, ...] = ()
    # A step's samples sharing one tensor that grows with the square of the batch: the bytes each ordered pair of
    # distinct samples adds beside their own (a SHARED_MASK_TOWERS tower's mask over the step's images, its
    # off-diagonal blocks: tower_adapters.pair_bytes), held with the embedding stage by every batch-growing branch
    embed_per_pair: int = 0
    # A tied embedding's copy on a stage that holds the head but not the embedding (static, optimizer step, end of
    # the backward): a pipeline's last stage keeps its own output layer, its gradient all-reduced with the first
    # stage's (Megatron-LM's LanguageModule.setup_embeddings_and_output_layer, DeepSpeed's TiedLayerSpec; vLLM's
    # last rank loads its own lm_head). One card holds the one weight: (0, 0, 0) untied, and never read there.
    tied_copy: tuple[int, int, int] = (0, 0, 0)
    # A serving profile's stages as vLLM holds them (parts() places each); all 0: training, and an encoder's
    # forward (per sequence: embed_per_sample)
    serving: ServingStages = ServingStages()
    total_static: int = field(init=False, repr=False, compare=False)
    # parts() of the whole model (every layer and both ends): what total, total_at, max_batch and peak_phase read
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

    # Per layer of the stack: what a slice of the stack (parts) reads, made when first asked for.
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

    # Running sums over the layers, for slices of the stack (parts): only a split over cards asks for them.
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
        return max(at_batch(branch, batch) for branch in self.whole_limits)

    def total_at(self, tokens: int, batch: int = 1) -> int:
        """total(batch) of the same training profile built at `tokens` per sample (train_profile's
        per-sample bytes are linear in tokens: the test suite holds the two equal on every snapshot model)."""
        return self.totals_at((tokens,), batch)[0]

    def totals_at(self, points: tuple[int, ...], batch: int = 1) -> list[int]:
        """total_at at each token count of `points` (the memory curve's), the profile's terms read once."""
        assert self.method != "serve", "serving caches are capped at windows: not linear in tokens"
        static, _, fixed = self.whole
        per_token, per_token_sq, per_sample_fixed = self.per_token, self.per_token_sq, self.per_sample_fixed
        masked, backward = self.masked, self.backward
        pairs = batch * (batch - 1) * self.embed_per_pair  # the images' shared mask: no token count in it
        out = []
        for tokens in points:
            square = tokens * tokens * per_token_sq + per_sample_fixed
            if masked:
                square += sum(tokens * n + tokens * tokens * sq for window, n, sq in masked if tokens >= window)
            late = max((static + pairs + b.fixed + batch * (tokens * b.rate + tokens * tokens * b.rate_sq + square)
                        for b in backward), default=0)
            out.append(max(static + pairs + batch * (tokens * per_token + square), fixed, late))
        return out

    def per_sample(self) -> int:
        return self.whole[1]

    def parts(self, first: int, last: int, with_embed: bool, with_head: bool) -> tuple[int, int, int]:
        """(static, per sample, batch-free peak) of a contiguous slice of layers [first, last) and its ends; a
        serving stage's startup and towers as vLLM holds them on that stage (ServingStages)."""
        e, h = with_embed, with_head
        copy_static, copy_step, copy_eob = self.tied_copy if h and not e else (0, 0, 0)
        static = self.static_prefix[last] - self.static_prefix[first] + (self.embed_static if e else 0) \
            + (self.head_static + copy_static if h else 0)
        if not (e and h):  # embed_static holds the one card's startup and towers: each stage's own instead
            forward, sampler, handoff, towers = self.serving
            static += (max(forward, sampler) if h else forward) - (max(forward, sampler) if e else 0) \
                + (0 if e else handoff + towers)
        act = self.act_prefix[last] - self.act_prefix[first] + (self.embed_per_sample if e else 0) \
            + (self.head_per_sample if h else 0)
        step = self.step_prefix[last] - self.step_prefix[first] + (self.embed_step if e else 0) \
            + (self.head_step + copy_step if h else 0)
        eob = self.eob_prefix[last] - self.eob_prefix[first] + (self.embed_eob if e else 0) \
            + (self.head_eob + copy_eob if h else 0) + (self.tied_eob if e and h else 0)
        return static, act, max(step, eob)

    def stage(self, batch: int, first: int, last: int, with_embed: bool, with_head: bool) -> int:
        """Bytes of a contiguous slice of layers [first, last) plus the ends it holds."""
        parts = self.parts(first, last, with_embed, with_head)
        return max(at_batch(branch, batch) for branch in self.limits(parts, with_head, with_embed))

    def max_batch(self, budget: int, first: int = 0, last: int = -1, with_embed: bool = True,
                  with_head: bool = True, cap: int = 1 << 40) -> int:
        """Largest b with stage(b) <= budget, 0 when batch 1 does not fit (largest_batch of the stage's limits)."""
        last = self.layers if last < 0 else last
        if first == 0 and last == self.layers and with_embed and with_head:
            return largest_batch(self.whole_limits, budget, cap)
        parts = self.parts(first, last, with_embed, with_head)
        return largest_batch(self.limits(parts, with_head, with_embed), budget, cap)

    def limits(self, parts: tuple[int, int, int], with_head: bool, with_embed: bool = True) -> Limits:
        """A stage's branches as (bytes at batch 0, bytes per sample, bytes per ordered pair of samples), from its
        parts(): the stage is max(static + b x act + b (b - 1) x pair, the batch-free branch, each late-backward
        Branch: the head's tensors freed, the Branch's own added)."""
        static, act, fixed = parts
        late = act - (self.head_per_sample if with_head else 0)
        pair = self.embed_per_pair if with_embed else 0
        return ((static, act, pair), (fixed, 0, 0),
                *((static + b.fixed, late + b.per_sample, pair) for b in self.backward))

    @functools.cached_property
    def whole_limits(self) -> Limits:
        """limits() of the whole model: what a card's largest batch is held against."""
        return self.limits(self.whole, True)

    def peak_phase(self, batch: int) -> str:
        """When the peak happens: the loss (logits), backward, the end of the backward, the optimizer step;
        serving: the decode with its full KV cache."""
        if self.method == "serve":
            return "decode (full KV cache)"
        loss, _, *late = (at_batch(branch, batch) for branch in self.whole_limits)
        step, eob = self.late
        if max(step, eob) > loss:
            return "optimizer step" if step >= eob else "end of backward (tied-embedding gradients)"
        if late:
            most, branch = max(zip(late, self.backward, strict=True), key=lambda t: t[0])
            if most > loss:
                return branch.phase
        return "loss (logits)" if self.head_per_sample * 2 > self.whole[1] else "backward (activations)"


# A stage's memory as branches (bytes at batch 0, bytes per sample, bytes per ordered pair of distinct samples):
# its peak at batch b is the largest of base + b x per_sample + b (b - 1) x per_pair (at_batch).
Limits = tuple[tuple[int, int, int], ...]


def at_batch(branch: tuple[int, int, int], batch: int) -> int:
    """A branch's bytes at `batch`: every sample its own bytes, every ordered pair of them its shared ones."""
    base, per_sample, per_pair = branch
    return base + batch * per_sample + batch * (batch - 1) * per_pair


def largest_batch(limits: Limits, budget: int, cap: int = 1 << 40) -> int:
    """Largest b with every branch's bytes at b (at_batch) <= budget, 0 when batch 1 does not fit: a branch growing
    linearly allows (budget - base) // per_sample; one with pairs the root of pair b^2 + (per_sample - pair) b =
    budget - base, in integers (isqrt, then the neighbours checked); the batch-free ones only batch 1's check."""
    best = cap
    for branch in limits:
        base, per_sample, per_pair = branch
        if base + per_sample > budget:
            return 0
        if per_pair > 0:
            linear, room = per_sample - per_pair, budget - base
            b = (math.isqrt(linear * linear + 4 * per_pair * room) - linear) // (2 * per_pair)
            while at_batch(branch, b + 1) <= budget:
                b += 1
            while at_batch(branch, b) > budget:
                b -= 1
            best = min(best, b)
        elif per_sample > 0:
            best = min(best, (budget - base) // per_sample)
    return best
