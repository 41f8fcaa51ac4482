"""The per-card table: each card's largest batch per method, its two-card splits, the card a method is tight on.

A card is a memory class (site_config.yaml cards); tight: held within its capacity, not its budget."""

from __future__ import annotations

from collections.abc import Mapping

from .inputs import Assumptions, Card, Gpu
from .memory.profile import budget_bytes, capacity_bytes
from .memory.splits import Cut, best_cut, engine_cut, two_card_batch
from .memory.stages import Limits, Profile, ServingStages, largest_batch
from .memory.vllm_server import Raised, ServerDefaults, large_gpu_server, raised_sequences, server_defaults
from .report import CardPlan, SplitPlan


def card_servers(cards: tuple[Card, ...], gpus: Mapping[str, Gpu], s: Assumptions) -> list[ServerDefaults]:
    """Per card, the `vllm serve` defaults its serving figure is priced at (vllm_server.server_defaults): its GPUs',
    or the large GPUs' where it lists GPUs of both (the A100 80GB beside the H100), whose startup holds more: the
    row says a card holds the model only where each of its GPUs does at its defaults; the setups give each GPU at
    its own."""
    out = []
    for card in cards:
        # a card that names no priced GPU: by its own memory and name
        found = {server_defaults(s, card.memory_usable_bytes, gpus[k].name) for k in card.gpus} or {
            server_defaults(s, card.memory_usable_bytes, card.name)}
        out.append(next(iter(found)) if len(found) == 1 else large_gpu_server(s))
    return out


def card_plans(cards: tuple[Card, ...], profiles: Mapping[str, Profile], s: Assumptions,
               qlora_limits: Limits | None = None, serve_scale: Mapping[str, int] | None = None,
               card_serve: Mapping[str, Profile] | None = None,
               raised: Mapping[str, Raised] | None = None, cuttable: bool = True) -> tuple[CardPlan, ...]:
    """Each card's largest batches (QLoRA's from its job's limits, 0 without them) and two-card splits. What a
    card is held against (the profiles' and QLoRA's limits, the best two-card cut per method) is the same on every
    card: worked out once per profile, each card then only divides its budget. `serve_scale`: per card,
    vllm_support.serving_scale of its GPUs; a card whose serving bytes are scaled serves what its budget over the scale
    holds (half in float32, none where vLLM has no kernel), with no two-card split. `card_serve`: per card, the
    serving profile at its server's defaults (card_servers), profiles["serve"] where it names none; `raised`: per
    card, what its batch past max_num_seqs costs (vllm_server.raised_sequences). `cuttable` False: no two-card split
    (a model whose layers run an earlier layer's weights again, parallel.validate)."""
    limits: dict[int, tuple] = {}  # per profile (by id), its whole-model limits
    cuts: dict[int, Cut] = {}  # per profile, the best two-card cut, where a card asks for one
    plans = []
    for card in cards:
        own = {**profiles, "serve": (card_serve or {}).get(card.name, profiles["serve"])}
        budget, capacity = budget_bytes(card, s), capacity_bytes(card, s)
        scale = {k: (serve_scale or {}).get(card.name, 1) if k == "serve" else 1 for k in own}
        batches = {k: largest_batch(limits.get(id(p)) or limits.setdefault(id(p), p.whole_limits),
                                    budget // scale[k]) if scale[k] else 0 for k, p in own.items()}
        if card.name in (raised or {}) and batches["serve"]:
            serve = own["serve"]
            batches["serve"] = raised_sequences(batches["serve"], budget // scale["serve"],
                                                serve.total(1) - serve.per_sample(), serve.per_sample(),
                                                (raised or {})[card.name])
        splits: list[SplitPlan] = []
        for k, batch in batches.items():
            # an encoder's serving profile has no startup to cut (Profile.serving): vLLM's encoder classes (BertModel,
            # RobertaModel, ...) do not declare SupportsPP, so it runs on no pipeline of two cards
            if batch == 0 and scale[k] == 1 and cuttable and not (k == "serve" and own[k].serving == ServingStages()):
                # serving: vLLM's own cut (splits.engine_cut), as the setups' serving plans take; training: the
                # cut that balances the two cards
                cut = cuts.get(id(own[k])) or cuts.setdefault(id(own[k]), (engine_cut if k == "serve" else best_cut)(
                    own[k]))
                # a training split's two processes each hold NCCL's buffers beside their stage, as a setup's GPUs
                # do (setups.training_nccl_bytes); serving's headroom holds them
                held = budget - (s.nccl_bytes_per_gpu if k != "serve" else 0)
                splits.append(SplitPlan(k, 2, cut.layers, (cut.first, cut.second), two_card_batch(cut, held)))
        plans.append(CardPlan(card.name, card.memory_marketed_bytes, card.memory_usable_bytes, budget,
                              batches["train_full"], batches["train_lora"], batches["serve"], tuple(splits) or None,
                              0 if qlora_limits is None else largest_batch(qlora_limits, budget), capacity,
                              "float32" if scale["serve"] == 2 else "", scale["serve"] * own["serve"].total(1)))
    return tuple(plans)


def tight_card(by_budget: list[CardPlan], limits: Limits | Mapping[str, Limits], key: str,
               scale: Mapping[str, int] | None = None) -> str | None:
    """The smallest card whose capacity holds batch 1 of `key` (train_full, train_lora, train_qlora, serve) where
    that card's budget does not (profile.card_verdict's "tight"); None where the smallest card holding it has the
    headroom too, or none holds it. `limits`: the method's, or per card (serving, at each card's server). `scale`:
    per card, its serving scale (card_plans), which divides its capacity (0: it serves none)."""
    held = {c.name: (scale or {}).get(c.name, 1) for c in by_budget}
    per_card = limits if isinstance(limits, Mapping) else dict.fromkeys(held, limits)
    holding = next((c for c in by_budget if held[c.name]
                    and largest_batch(per_card[c.name], c.capacity_bytes // held[c.name]) >= 1), None)
    return holding.name if holding is not None and getattr(holding, f"{key}_max_batch") == 0 else None
