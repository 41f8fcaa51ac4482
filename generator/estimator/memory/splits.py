"""Two-card splits: where to cut the layer stack over two cards (pipeline parallel) when one cannot hold batch 1."""

from __future__ import annotations

from dataclasses import dataclass

from .profile import Profile


@dataclass(frozen=True)
class Split:
    cards: int
    cut_after_layer: int
    stage_bytes_batch1: tuple[int, int]
    max_batch: int  # 0 when even two cards cannot hold batch 1


def best_cut(p: Profile) -> tuple[int, int, int]:
    """The best contiguous layer cut over two cards (pipeline parallel), minimising the larger stage at batch 1:
    (layers on the first card, first stage bytes, second stage bytes). It does not depend on the card.

    The first stage grows and the second shrinks with the cut, so the best cut is where they cross:
    found by bisection, then the neighbours are compared (the lowest cut wins a tie)."""
    statics, acts, steps, eobs = p.static_prefix, p.act_prefix, p.step_prefix, p.eob_prefix
    n = p.layers
    grad, head_act = p.grad_fixed, p.head_per_sample

    def stages(k: int) -> tuple[int, int]:
        """Profile.stage(1, 0, k, True, False) and stage(1, k, layers, False, True), from the running sums."""
        static, act = statics[k] + p.embed_static, acts[k] + p.embed_per_sample
        first = max(static + act, steps[k] + p.embed_step, eobs[k] + p.embed_eob)
        if grad:
            first = max(first, static + grad + act + p.grad_per_sample)
        static = statics[n] - statics[k] + p.head_static
        act = acts[n] - acts[k] + head_act
        second = max(static + act, steps[n] - steps[k] + p.head_step, eobs[n] - eobs[k] + p.head_eob)
        if grad:
            second = max(second, static + grad + act - head_act + p.grad_per_sample)
        return first, second

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
    assert best is not None
    return best


def two_card_split(p: Profile, budget: int, cut: tuple[int, int, int] | None = None) -> Split:
    """The best cut (best_cut, or `cut` when the caller already has it) and the largest batch both cards hold:
    the smaller of the two stages' largest batches."""
    k, first, second = cut or best_cut(p)
    return Split(2, k, (first, second), min(p.max_batch(budget, 0, k, True, False),
                                            p.max_batch(budget, k, p.layers, False, True)))
