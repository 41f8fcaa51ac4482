"""The caching allocator's share of a step, by setup: what the allocator replay (measure --allocator) adds to the live
tensors, and whether the estimate with the card's headroom still covers the least memory the step runs in."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .accuracy_words import LENGTHS_VARIED
from .estimator import engine_setting
from .estimator.report import Memory

ALL_SETUPS = "every setup at one length"  # the row pooling the fixed-length runs (what the estimate prices)


@dataclass(frozen=True)
class AllocatorRow:
    """One setup's replayed steps. Percentages are over the live tensors' peak (max_memory_allocated)."""

    setup: str
    runs: int
    reserved_over_median_pct: float  # max_memory_reserved on a card with room, over the live peak
    reserved_over_max_pct: float
    least_card_over_median_pct: float  # the least memory the step runs in, over the live peak
    least_card_over_max_pct: float
    reserved_error_median_abs_pct: float  # the estimator's reserved metric against the replay's reserved peak
    reserved_error_mean_signed_pct: float
    headroom_margin_min_pct: float  # min over runs of (estimate x headroom / least card - 1) x 100
    headroom_short: int  # runs whose estimate x headroom is under the least card: a "fits" a card can refute
    # the same runs under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (measure/expandable.py), where replayed so
    expandable_runs: int = 0
    least_card_expandable_median_pct: float | None = None
    least_card_expandable_max_pct: float | None = None
    expandable_short: int = 0  # runs whose estimate x headroom is under that least card


def replayed(row: Mapping[str, Any]) -> bool:
    """Whether the row's step was replayed through the allocator."""
    measured = row.get("measured") or {}
    return bool(measured.get("reserved_bytes")) and bool(measured.get("minimum_capacity_bytes"))


def reserved_twin(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as if it had been read with max_memory_reserved: its estimate is then the estimator's reserved one."""
    measured = dict(row["measured"], metric="max_memory_reserved", peak_bytes=row["measured"]["reserved_bytes"])
    return dict(row, measured=measured)


def _pct(over: float) -> float:
    return round(over * 100, 1)


# live peak, reserved, least card, allocated estimate, reserved estimate, least card with expandable segments (0: not
# replayed so)
Run = tuple[int, int, int, int, int, int]


def replay_groups(rows: Sequence[Mapping[str, Any]], label: Callable[[Mapping[str, Any]], str | None],
                  estimate: Callable[[Mapping[str, Any]], int | None]) -> dict[str, list[Run]]:
    """The replayed rows the estimator prices, by setup (`label(row)`, None to leave a row out), then every setup at
    one length pooled (ALL_SETUPS). `estimate(row)` is the estimator's peak in the row's metric (allocated for a
    simulated step); each row is estimated twice, as read and as its reserved twin."""
    groups: dict[str, list[Run]] = {}
    for row in rows:
        name = label(row) if replayed(row) else None
        if name is None:
            continue
        allocated_est, reserved_est = estimate(row), estimate(reserved_twin(row))
        if allocated_est is None or reserved_est is None:
            continue
        m = row["measured"]
        groups.setdefault(name, []).append((int(m["peak_bytes"]), int(m["reserved_bytes"]),
                                            int(m["minimum_capacity_bytes"]), allocated_est, reserved_est,
                                            int(m.get("minimum_capacity_bytes_expandable") or 0)))
    one_length = [run for name, runs in groups.items() if not name.endswith(LENGTHS_VARIED) for run in runs]
    if one_length:
        groups[ALL_SETUPS] = one_length
    return groups


def allocator_rows(groups: Mapping[str, Sequence[Run]], headroom: float) -> tuple[AllocatorRow, ...]:
    """replay_groups' figures per setup, then every setup at one length pooled."""
    out = []
    for name, runs in groups.items():
        reserved_over = [r / a - 1 for a, r, _, _, _, _ in runs]
        least_over = [c / a - 1 for a, _, c, _, _, _ in runs]
        errors = [e / r - 1 for _, r, _, _, e, _ in runs]
        margins = [ea * headroom / c - 1 for _, _, c, ea, _, _ in runs]
        expandable = [(x / a - 1, ea * headroom / x - 1) for a, _, _, ea, _, x in runs if x]
        out.append(AllocatorRow(
            name, len(runs), _pct(statistics.median(reserved_over)), _pct(max(reserved_over)),
            _pct(statistics.median(least_over)), _pct(max(least_over)),
            _pct(statistics.median(abs(e) for e in errors)), _pct(statistics.fmean(errors)),
            _pct(min(margins)), sum(1 for m in margins if m < 0), len(expandable),
            _pct(statistics.median(o for o, _ in expandable)) if expandable else None,
            _pct(max(o for o, _ in expandable)) if expandable else None,
            sum(1 for _, m in expandable if m < 0)))
    return tuple(out)


def least_card_pcts(groups: Mapping[str, Sequence[Run]], expandable: bool = False) -> tuple[float, ...]:
    """Each step of ALL_SETUPS: the least memory it ran in over its live peak, in %, smallest first (expandable:
    under expandable segments, the steps replayed so). A card with x% more than a job's live peak would have run
    the steps whose figure is at most x (a tight card's odds)."""
    runs = groups.get(ALL_SETUPS, ())
    least = [(x if expandable else c, a) for a, _, c, _, _, x in runs]
    return tuple(sorted(_pct(c / a - 1) for c, a in least if c))


def runs_within(least_over: Sequence[float], spare_pct: float) -> int:
    """How many of least_card_pcts' steps would have run with spare_pct % over their live peak."""
    return sum(1 for x in least_over if x <= spare_pct)


@dataclass(frozen=True)
class Margin:
    """What a card leaves over a job's peak, and how many replayed steps that would have run (a tight card's odds)."""

    spare_pct: float  # the card's capacity over the peak, %
    runs: int  # of the default allocator's replayed steps (least_card_pcts), those it covers
    of: int
    expandable_runs: int  # the same with expandable segments
    expandable_of: int


def margin(capacity_bytes: int, peak_bytes: int, least_over: Sequence[float],
           least_expandable: Sequence[float]) -> Margin:
    """The Margin of a card with `capacity_bytes` for tensors over a job of `peak_bytes`, against the replayed steps'
    least cards (accuracy.json's least_card_over_pct, least_card_expandable_pct)."""
    spare = (capacity_bytes / peak_bytes - 1) * 100
    return Margin(spare, runs_within(least_over, spare), len(least_over), runs_within(least_expandable, spare),
                  len(least_expandable))


@dataclass(frozen=True)
class TightCard:
    """A site method tight on its smallest holding card (Memory.tight_card_*): the card, the peak it holds (serving:
    that card's own figure, CardPlan.serve_bytes_batch1), its Margin, and for serving the gpu_memory_utilization a
    vLLM server needs there (estimator.engine_setting; None where its default holds it)."""

    method: str  # full, lora, qlora, serve
    card: str
    peak_bytes: int
    margin: Margin
    engine_setting: float | None = None


def tight_cards(memory: Memory, least_over: Sequence[float], least_expandable: Sequence[float]) -> list[TightCard]:
    """Per method (full, LoRA, QLoRA, serving), its TightCard where it has one: what the page's tight lines and the
    command's say alike. The replayed steps' odds are a training step's; the caller leaves them off for serving."""
    out = []
    for method, name, peak in (("full", memory.tight_card_full, memory.train_full_bytes_batch1),
                               ("lora", memory.tight_card_lora, memory.train_lora_bytes_batch1),
                               ("qlora", memory.tight_card_qlora, memory.train_qlora_bytes_batch1 or 0),
                               ("serve", memory.tight_card_serve, 0)):
        card = next((c for c in memory.cards if c.name == name), None)
        peak = peak or (card.serve_bytes_batch1 if card is not None and method == "serve" else 0)
        if card is None or not peak:
            continue
        setting = engine_setting(peak, card.usable_bytes, dict(memory.assumptions)["cuda_context_bytes"]) \
            if method == "serve" else None
        out.append(TightCard(method, card.name, peak, margin(card.capacity_bytes, peak, least_over, least_expandable),
                             setting))
    return out
