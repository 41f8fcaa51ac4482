"""The pure entry point: config dict + job + cards → Report. No I/O, no clock, no environment."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from .. import __version__
from .checks import Finding, check_checkpoint, check_rope, check_scope, check_shapes, check_special_tokens
from .config import normalise
from .cost import CostLine, job_cost
from .graph import build_graph
from .inputs import Assumptions, Card, Gpu
from .memory import (Profile, budget_bytes, kv_bytes_per_token, lora_params, max_batch, serve_profile,
                     train_profile, two_card_split)
from .report import SCHEMA_VERSION, CardPlan, Memory, ModelInfo, Params, Report, SplitPlan, StructureRow

FORMULAS = {
    "params": "sum over graph nodes of Linear in*out (+bias), Embedding rows*width, norms (RMSNorm w, "
              "LayerNorm 2w); tied lm_head counted once (transformers modeling files)",
    "train_full": "max((4+4+8) B x params + 2 B x matmul weights + activations, (4+4+8+4) B x params); "
                  "activations = layers x saved tensors per token (SDPA, no scores) + 14 B x vocab per token",
    "train_lora": "2 B x params (bf16 base) + 20 B x adapter params (r x (in+out) per Linear, head excluded) "
                  "+ activations (bf16 residual) + adapter inputs",
    "serve": "2 B x params + one prefill chunk's largest layer transient + per sequence (2 x layers x kv_heads "
             "x head_dim x 2 B per token + 4 B x vocab next-token logits)",
    "max_batch": "largest b with memory(b) <= (driver-reported memory - CUDA context) / headroom",
    "split": "two cards, contiguous layer cut minimising the larger stage (pipeline parallel), only where "
             "batch 1 does not fit one card",
    "cost": "steps x max(FLOPs/peak, bytes/bandwidth) / MFU; FLOPs = 6 x matmul weights per token full, "
            "4 x for LoRA, causal attention halved",
}


def estimate(config: Mapping[str, Any], *, model_id: str, assumptions: Assumptions, cards: tuple[Card, ...],
             gpus: Mapping[str, Gpu], checkpoint_params: int | None = None, downloads: int | None = None,
             sha: str | None = None) -> Report:
    """Estimate parameters, memory, cost and findings for one config.json (already parsed)."""
    s = assumptions
    arch = normalise(config, model_id)
    graph = build_graph(arch)
    train_tokens = min(s.train_tokens, arch.max_context)
    adapters = lora_params(graph, arch, s.lora_rank)
    profiles: dict[str, Profile] = {
        "train_full": train_profile(arch, graph, s, train_tokens, "full", s.lora_rank),
        "train_lora": train_profile(arch, graph, s, train_tokens, "lora", s.lora_rank),
        "serve": serve_profile(arch, graph, s, s.serve_tokens),
    }
    plans = tuple(_card_plan(card, profiles, s) for card in cards)

    def smallest(key: str) -> str | None:
        fitting = [c for c in sorted(plans, key=lambda c: c.budget_bytes) if getattr(c, key) >= 1]
        return fitting[0].name if fitting else None

    memory = Memory(
        assumptions=tuple(sorted(dataclasses.asdict(s).items())), train_tokens=train_tokens,
        serve_tokens=s.serve_tokens,
        train_full_bytes_batch1=profiles["train_full"].total(1),
        train_lora_bytes_batch1=profiles["train_lora"].total(1),
        serve_bytes_batch1=profiles["serve"].total(1), job_batch=s.job_batch,
        train_full_bytes_job_batch=profiles["train_full"].total(s.job_batch),
        train_lora_bytes_job_batch=profiles["train_lora"].total(s.job_batch), kv_bytes_per_token=kv_bytes_per_token(arch, s),
        peak_phase=tuple((k, p.peak_phase(1)) for k, p in profiles.items()),
        smallest_card_full=smallest("train_full_max_batch"), smallest_card_lora=smallest("train_lora_max_batch"),
        smallest_card_serve=smallest("serve_max_batch"), cards=plans,
    )
    costs = _costs(arch, graph, s, cards, gpus, profiles, adapters)
    match = None if checkpoint_params is None else checkpoint_params == graph.params_total
    findings: list[Finding] = [*check_scope(arch, train_tokens, s.train_tokens), *check_shapes(arch),
                               *check_special_tokens(arch), *check_rope(arch),
                               *check_checkpoint(arch, graph, checkpoint_params)]
    return Report(
        schema_version=SCHEMA_VERSION, estimator_version=__version__,
        model=ModelInfo(model_id, arch.family, arch.model_type, arch.architectures, arch.custom_code,
                        arch.text_tower_only, downloads, sha),
        params=Params(graph.params_total, checkpoint_params, match, graph.params_embedding, graph.params_lm_head,
                      graph.params_per_layer, arch.layers, adapters),
        memory=memory, cost=costs,
        structure=tuple(StructureRow(n.index, n.name, n.type, n.output_shape, n.params) for n in graph.nodes),
        findings=tuple(findings),
        provenance=(("config_keys", arch.used()), ("formulas", dict(FORMULAS))),
    )


def _card_plan(card: Card, profiles: Mapping[str, Profile], s: Assumptions) -> CardPlan:
    budget = budget_bytes(card, s)
    batches = {k: max_batch(p.total, budget) for k, p in profiles.items()}
    splits = tuple(
        SplitPlan(k, sp.cards, sp.cut_after_layer, sp.stage_bytes_batch1, sp.max_batch)
        for k, p in profiles.items() if batches[k] == 0
        for sp in (two_card_split(p, budget),)
    )
    return CardPlan(card.name, card.memory_marketed_bytes, card.memory_usable_bytes, budget,
                    batches["train_full"], batches["train_lora"], batches["serve"], splits or None)


def _costs(arch, graph, s: Assumptions, cards, gpus, profiles, adapters) -> tuple[CostLine, ...]:
    seen: list[str] = []
    for card in cards:
        seen += [g for g in card.gpus if g not in seen]
    lines = []
    full, lora = profiles["train_full"], profiles["train_lora"]
    per_sample = {
        "full": full.embed_per_sample + full.layers * full.layer_per_sample + full.head_per_sample,
        "lora": lora.embed_per_sample + lora.layers * lora.layer_per_sample + lora.head_per_sample,
    }
    for key in seen:
        gpu = gpus[key]
        if gpu.price_usd_per_hour is None:
            continue
        lines.append(job_cost(arch, graph, s, gpu, "full", adapters, 2 * graph.params_total, graph.params_total,
                              per_sample["full"]))
        lines.append(job_cost(arch, graph, s, gpu, "lora", adapters, 2 * graph.params_total, adapters,
                              per_sample["lora"]))
    return tuple(lines)
