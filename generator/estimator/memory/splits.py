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
    assert best is not None
    return best


def two_card_split(p: Profile, budget: int, cut: tuple[int, int, int] | None = None) -> Split:
    """The best cut (best_cut, or `cut` when the caller already has it) and the largest batch both cards hold:
    the smaller of the two stages' largest batches."""
    k, first, second = cut or best_cut(p)
    return Split(2, k, (first, second), min(p.max_batch(budget, 0, k, True, False),
                                            p.max_batch(budget, k, p.layers, False, True)))
