"""Two-card splits: where to cut the layer stack over two cards (pipeline parallel) when one cannot hold batch 1."""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

from .pipeline import vllm_stage_layers
from .stages import Limits, Profile, at_batch, largest_batch


class Cut(NamedTuple):
    """A contiguous layer cut over two cards: the layers on the first card, each stage's bytes at batch 1, and
    both stages' branches (Profile.limits), whose largest_batch is the largest batch both cards hold."""

    layers: int
    first: int
    second: int
    limits: Limits


def best_cut(p: Profile) -> Cut:
    """The best contiguous layer cut over two cards (pipeline parallel), minimising the larger stage at batch 1.
    It does not depend on the card: worked out once per profile, each card's batch is then two_card_batch.

    The first stage grows and the second shrinks with the cut, so the best cut is where they cross:
    found by bisection, then the neighbours are compared (the lowest cut wins a tie). At batch 1 a stage's loss
    branch and its late-backward branches all read static + per-sample bytes only, so three
    running sums over the layers do (static + per sample, optimizer step, end of backward): Profile.stage's
    branches, each ends' terms added as constants. A serving profile is cut as vLLM cuts it: engine_cut."""
    assert p.method != "serve", "vLLM cuts its own way: engine_cut"
    n, layout = p.layers, p.layout
    zeros = (0,) * (n + 1)

    def running(values: tuple[int, ...]) -> tuple[int, ...]:  # over the layers of the stack, from 0
        return tuple(accumulate(map(values.__getitem__, layout), initial=0)) if values else zeros
    loads = running(tuple(a + b for a, b in zip(p.distinct_static, p.distinct_per_sample, strict=True)))
    steps, eobs = running(p.distinct_step), running(p.distinct_eob)
    # the ends' share of each stage's loss branch, or of a late-backward branch where that is larger
    # (Profile.limits: a branch adds its fixed and per-sample bytes, less the head's per-sample ones)
    late = max((b.fixed + b.per_sample for b in p.backward), default=0)
    # the second stage holds the head and, where it is tied, its own copy of the embedding (Profile.tied_copy)
    copy_static, copy_step, copy_eob = p.tied_copy
    head_static = p.head_static + copy_static
    first_end = p.embed_static + p.embed_per_sample + max(0, late)
    second_end = head_static + p.head_per_sample + max(0, late - p.head_per_sample)
    embed_step, embed_eob, head_step, head_eob = p.embed_step, p.embed_eob, p.head_step + copy_step, \
        p.head_eob + copy_eob
    load_n, step_n, eob_n = loads[n], steps[n], eobs[n]
    seen: dict[int, tuple[int, int]] = {}  # the bisection's stages, read again for the neighbours

    def stages(k: int) -> tuple[int, int]:
        """Profile.stage(1, 0, k, True, False) and stage(1, k, layers, False, True), from the running sums."""
        got = seen.get(k)
        if got is None:
            load, step, eob = loads[k], steps[k], eobs[k]
            got = seen[k] = (max(load + first_end, step + embed_step, eob + embed_eob),
                             max(load_n - load + second_end, step_n - step + head_step, eob_n - eob + head_eob))
        return got

    lo, hi = 0, n
    while lo < hi:  # smallest k with first(k) >= second(k)
        mid = (lo + hi) // 2
        first, second = stages(mid)
        if first >= second:
            hi = mid
        else:
            lo = mid + 1
    best = None
    for k in (lo - 1, lo):
        if 0 <= k <= n:
            first, second = stages(k)
            if best is None or max(first, second) < max(best[1], best[2]):
                best = (k, first, second)
    assert best is not None
    k = best[0]
    # the stages' own parts (Profile.parts) at this cut: their static bytes over the first k layers, once
    static = sum(map(p.distinct_static.__getitem__, layout[:k]))
    static_n = p.total_static - p.embed_static - p.head_static
    act, act_n = loads[k] - static, load_n - static_n
    head = (static_n - static + head_static, act_n - act + p.head_per_sample,
            max(step_n - steps[k] + head_step, eob_n - eobs[k] + head_eob))
    embed = (static + p.embed_static, act + p.embed_per_sample, max(steps[k] + p.embed_step, eobs[k] + p.embed_eob))
    return Cut(k, best[1], best[2], p.limits(embed, False) + p.limits(head, True, False))


def engine_cut(p: Profile) -> Cut:
    """A serving profile's cut over two cards as vLLM makes it, whatever its stages then hold: the even cut
    (pipeline.vllm_stage_layers, get_pp_indices), each stage running the startup's forward over its own layers, the
    second alone sampling, beside the hidden states handed to it (Profile.parts; setups.serving_job has the
    sources). The setups' two-GPU serving plans (pipeline.stage_rows) hold each stage to the same bytes."""
    k, n = vllm_stage_layers(p.layers, 2)[0], p.layers
    first, second = p.limits(p.parts(0, k, True, False), False), p.limits(p.parts(k, n, False, True), True, False)
    return Cut(k, max(at_batch(b, 1) for b in first), max(at_batch(b, 1) for b in second), first + second)


def two_card_batch(cut: Cut, budget: int) -> int:
    """The largest batch both cards of `cut` hold within `budget` each: the smaller of the two stages' largest
    batches (0 when even two cards cannot hold batch 1)."""
    return largest_batch(cut.limits, budget)
