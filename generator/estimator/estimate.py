"""The pure entry point: config dict + job + cards → Report. No I/O, no clock, no environment."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import __version__
from ..errors import JobError
from .card_plans import card_plans, card_servers, tight_card
from .checks import (
    Finding,
    check_checkpoint,
    check_defaults,
    check_quantization,
    check_rope,
    check_scan_kernels,
    check_scope,
    check_shapes,
    check_special_tokens,
    check_tower_adapters,
    check_vllm_support,
)
from .cost import CostLine, StepWork, job_cost, job_tokens, step_work, training_flops_per_token
from .graph.nodes import build_graph
from .graph.parts import Spec
from .graph.structure import StructureTable
from .inputs import Assumptions, Card, Gpu
from .memory.attention import default_attention
from .memory.curve import memory_curve
from .memory.job_options import Job, checkpoint_host_bytes, checkpoints, resolve, site_job
from .memory.job_result import metric_memory
from .memory.layer_terms import all_linear_params, expert_adapters
from .memory.parallel import Setup, accumulating_job, per_gpu, ranks
from .memory.peak_table import PeakTable, cached_peak
from .memory.plans import GpuOffer, Unreachable
from .memory.profile import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    serve_profile,
    state_bytes_per_sequence,
    train_profile,
)
from .memory.serve_weights import model_serve_weight_bytes
from .memory.sharding import GPUS_PER_NODE
from .memory.stages import Profile
from .memory.stored_formats import stored_elements
from .memory.vllm_server import (
    ServerDefaults,
    large_gpu_server,
    raised_at,
    reference_server,
    startup_peak,
)
from .normalise import normalise
from .report import (
    FORMULAS,
    SCHEMA_VERSION,
    Memory,
    ModelInfo,
    Params,
    Report,
)
from .sequence_limits import check_job_context, check_serve_context
from .serving_speed import ServingSpeed
from .setups import (
    exact_job,
    job_limits,
    merged_serving,
    model_shape,
    offers,
    plan_floors,
    plans_for,
    scaled_offers,
    scaled_plans,
    serving_jobs,
    serving_model,
    serving_table,
    training_flops,
    training_job,
    training_nccl_bytes,
)
from .vllm_support import (
    SERVED_NOWHERE,
    check_fp8_kv_cache,
    check_half_precision_serving,
    check_quantised_serving,
    check_sparse_attention_serving,
    fp8_kv_cache,
    quant_below,
    quant_capability,
    quant_float32,
    quant_method,
    serving_scale,
    sparse_unserved,
)


def estimate(config: Mapping[str, Any], *, model_id: str, assumptions: Assumptions, cards: tuple[Card, ...],
             gpus: Mapping[str, Gpu], checkpoint_params: int | None = None, downloads: int | None = None,
             sha: str | None = None, job: Job | None = None, setup: Setup | None = None,
             serve_tokens_asked: int | None = None, structure: bool = True,
             config_provenance: str | None = None) -> Report:
    """Estimate parameters, memory, cost, plans and findings for one config.json (already parsed). `job` on
    `setup`: the exact run whose per-GPU peak memory.peak_bytes reports (default: full AMP AdamW at batch 1 and the
    training tokens on one GPU). `serve_tokens_asked`: a serving length the user named (the CLI's --serve-tokens);
    past the context it is an error, or with rope scaling a warning and priced as asked, as an explicit job is.
    The site's own serving length (assumptions.serve_tokens) is capped at the context instead, with a finding.
    `structure`: whether the Report carries the structure table (pages and the JSON twin do; the terminal
    summary does not, and skips its cost). `config_provenance`: where config.json came from, echoed in model."""
    s = assumptions
    arch = normalise(config, model_id)
    graph = build_graph(arch)
    spec = graph.spec
    train_tokens = min(s.train_tokens, arch.max_context)
    # No sequence is served past the context the model was trained for (issue 16 item 2; encoders read whole
    # sequences of at most their context).
    serve_tokens = min(s.serve_tokens, arch.max_context)
    serve_past = check_serve_context(arch, serve_tokens_asked, model_id) if serve_tokens_asked else []
    if serve_past and serve_tokens_asked:  # rope scaling: priced as asked
        serve_tokens = serve_tokens_asked
    # what vLLM serves with: an FP8 KV cache where the checkpoint's quantization_config sets one (fp8_kv_cache)
    served_s = dataclasses.replace(s, kv_bytes=1) if fp8_kv_cache(arch) else s
    # this estimate's table of per-layer terms, worked out once and shared by its profiles and jobs
    memo: dict = {}
    profiles: dict[str, Profile] = {
        "train_full": train_profile(arch, graph, s, train_tokens, "full", s.lora_rank, memo),
        "train_lora": train_profile(arch, graph, s, train_tokens, "lora", s.lora_rank, memo),
        "serve": serve_profile(arch, graph, served_s, serve_tokens, memo),
    }
    adapters = all_linear_params(arch, graph, s.lora_rank, memo)
    explicit = job is not None and (job.tokens > 0 or job.new_tokens > 0)
    site_full = Job(tokens=train_tokens)  # the site's own full fine-tune, at its tokens: the job when none is named
    job = job or site_full
    setup = setup or Setup()
    if setup.grad_ckpt:  # the exact job carries checkpointing; its phases are built with it
        job, setup = dataclasses.replace(job, grad_ckpt=True), dataclasses.replace(setup, grad_ckpt=False)
    if job.offload_checkpoints and setup.strategy in ("tp", "pp", "tp+pp"):  # each rank holds every layer's input
        raise JobError(model_id, "offload_checkpoints", True, f"prices one process holding every layer (one GPU or "
                                                              f"data parallel), not strategy {setup.strategy}")
    if not job.tokens:  # the site's tokens: training capped at the context, serving's prompt
        job = dataclasses.replace(job, tokens=serve_tokens if job.method == "inference" else train_tokens)
    if job.method == "inference" and job.precision == "amp":  # autocast is a training notion: bf16 serving
        job = dataclasses.replace(job, precision="bf16")
    past_context = check_job_context(arch, job, model_id, spec.kind) if explicit else []
    shape = model_shape(arch, graph)
    weights_served = model_serve_weight_bytes(arch, graph, s)
    # the site's jobs, their attention the model class's already (what job_options.resolve fills in: done once, here)
    attention = default_attention(arch)[0]
    site_jobs = {  # each a recipe under the site's options (recipes.SITE_RECIPES)
        **{m: training_job(arch, graph, s, site_job(m, s.lora_rank, tokens=train_tokens, attention=attention,
                                                    **({} if checkpoints(arch) else {"grad_ckpt": False})),
                           shape, model_id, memo=memo) for m in ("full", "lora", "qlora")},
    }
    # vLLM's defaults and dtype differ by GPU (vllm_server.server_defaults, vllm_support.serving_scale): the serving
    # profile and jobs per (defaults, float32) that a card or a GPU takes
    scale = serving_scale(arch, gpus)  # per GPU: float32 (2), none (0), or as priced (1)
    card_scale = {c.name: next(iter(x)) if len(x := {scale[gpus[k].name] for k in c.gpus}) == 1 else 1 for c in cards}
    servers = {c.name: (server, card_scale[c.name] == 2)
               for c, server in zip(cards, card_servers(cards, gpus, s), strict=True)}
    gpu_offers = offers(cards, gpus, s)  # each priced GPU with its card's budget and its vLLM defaults
    own = {(g.server, scale[g.model] == 2) for g in gpu_offers}
    reference = (reference_server(s), False)
    serve_at = {v: profiles["serve"] if v == reference else serve_profile(arch, graph, served_s, serve_tokens, memo,
                                                                          *v)
                for v in sorted({reference, *servers.values(), *own})}
    # in float32 (vllm_support.serving_scale 2) the weights in the 16-bit bytes the plans search in, worked out once
    weights_float32 = model_serve_weight_bytes(arch, graph, s, True) if any(v[1] for v in serve_at) else 0
    served = {v: serving_jobs(graph, s, p, v[0], weights_float32 if v[1] else weights_served, shape, serve_tokens,
                              v[1])
              for v, p in serve_at.items()}
    site_jobs.update(served[reference])
    # the site's full job: its phases are built already
    the_job = site_jobs["full"] if job is site_full or job == site_full else exact_job(arch, graph, s, job, shape,
                                                                                       model_id)
    spread = per_gpu(the_job, setup, model_id)
    exact = metric_memory(spread.peak_phase, dict(spread.breakdown), s, job, graph, ranks(job.method, setup))
    # QLoRA's phases at batch 1 (None where the checkpoint is quantised already: plans_unreachable says why)
    qlora_limits = job_limits(site_jobs["qlora"], _site_metric) if arch.quant is None else None
    card_serve = {name: serve_at[v] for name, v in servers.items()}
    raised = {name: raised_at(spec, s, server, serve_tokens, fp32) for name, (server, fp32) in servers.items()}
    # no two-card cut of a model whose layers run an earlier layer's weights again (a layer holding none, as
    # parallel.validate refuses a pipeline of it)
    plans = card_plans(cards, profiles, s, qlora_limits, card_scale, card_serve, raised, 0 not in shape.layer_params)
    kv_per_sequence = kv_bytes_per_sequence(arch, served_s, serve_tokens)
    # full and LoRA FLOPs per token of the reference job: priced per GPU by the costs and the plans alike
    on_experts, delta_macs = expert_adapters(arch, graph, s.lora_rank)
    flops_per_token = training_flops_per_token(arch, graph, s, adapters - on_experts, job_tokens(arch, s), delta_macs)
    work = _step_work(arch, graph, s, profiles, adapters, flops_per_token)
    setup_plans, unreachable, serving, floors = _setups(arch, graph, s, gpu_offers, site_jobs, flops_per_token,
                                                        serve_tokens, weights_served, kv_per_sequence, work, scale,
                                                        served)

    by_budget = sorted(plans, key=lambda c: c.budget_bytes)  # the cards, smallest budget first (stable on ties)

    def smallest(key: str) -> str | None:
        return next((c.name for c in by_budget if getattr(c, key) >= 1), None)

    memory = Memory(
        assumptions=tuple(sorted(vars(s).items())), train_tokens=train_tokens,
        serve_tokens=serve_tokens,
        train_full_bytes_batch1=profiles["train_full"].total(1),
        train_lora_bytes_batch1=profiles["train_lora"].total(1),
        serve_bytes_batch1=profiles["serve"].total(1), job_batch=s.job_batch,
        train_full_bytes_job_batch=profiles["train_full"].total(s.job_batch),
        train_lora_bytes_job_batch=profiles["train_lora"].total(s.job_batch),
        kv_bytes_per_token=kv_bytes_per_token(arch, served_s),
        peak_phase_by_method=tuple((k, p.peak_phase(1)) for k, p in profiles.items()),
        peak_bytes=exact.peak_bytes, peak_phase=exact.peak_phase, breakdown=exact.breakdown,
        # the job as priced: the attention it defaulted to (the model class's) named, not left empty
        job=tuple({**resolve(job, arch).to_dict(), "gpus": setup.gpus, "strategy": setup.strategy,
                   "offload": setup.offload, "sync_each_batch": setup.sync_each_batch,
                   "mixed_units": setup.mixed_units}.items()),
        # ZeRO's offload, and each rank's offloaded checkpoints (Unsloth's), on the ranks of one node
        offload_cpu_bytes_per_node=spread.cpu_bytes_per_node
        + checkpoint_host_bytes(graph, resolve(job, arch)) * min(setup.gpus, GPUS_PER_NODE),
        # the site's full job accumulating gradients (the cost section's micro-batches): every gradient held
        train_full_bytes_accumulating=max(ph.total_bytes for ph in accumulating_job(site_jobs["full"]).phases),
        smallest_card_full=smallest("train_full_max_batch"), smallest_card_lora=smallest("train_lora_max_batch"),
        smallest_card_serve=smallest("serve_max_batch"), cards=plans,
        tight_card_full=tight_card(by_budget, profiles["train_full"].whole_limits, "train_full"),
        tight_card_lora=tight_card(by_budget, profiles["train_lora"].whole_limits, "train_lora"),
        tight_card_serve=tight_card(by_budget, {n: p.whole_limits for n, p in card_serve.items()}, "serve",
                                    card_scale),
        train_qlora_bytes_batch1=None if qlora_limits is None else max(base + grow for base, grow, _ in qlora_limits),
        tight_card_qlora=None if qlora_limits is None else tight_card(by_budget, qlora_limits, "train_qlora"),
        kv_bytes_per_sequence=kv_per_sequence,
        state_bytes_per_sequence=state_bytes_per_sequence(arch, s), image_tokens=spec.image_tokens,
        serve_startup_bytes=startup_peak(spec, s, reference_server(s), serve_tokens),
        serve_startup_bytes_large_gpus=startup_peak(spec, s, large_gpu_server(s), serve_tokens),
        serve_weight_bytes=weights_served,
        curve=memory_curve(arch, graph, served_s, {("full", train_tokens): profiles["train_full"],
                                            ("lora", train_tokens): profiles["train_lora"],
                                            ("serve", serve_tokens): profiles["serve"]}),
    )
    costs = _costs(s, cards, gpus, work)
    stored = stored_elements(arch)
    match = None if checkpoint_params is None else checkpoint_params in (graph.params_total, stored)
    attends = any(p.attends for b in spec.blocks for p in b.parts)
    named = tuple(dict.fromkeys(gpus[k].name for c in cards for k in c.gpus))  # the priced GPUs, in the cards' order
    findings: list[Finding] = [*check_scope(arch, train_tokens, s.train_tokens, serve_tokens, s.serve_tokens,
                                            spec.kind, attends),
                               *check_shapes(arch), *check_scan_kernels(arch, graph, s, train_tokens),
                               *check_special_tokens(arch), *check_rope(arch), *check_defaults(arch),
                               *check_quantization(arch, graph, stored, model_id),
                               *check_checkpoint(arch, graph, checkpoint_params, stored), *past_context,
                               *check_tower_adapters(graph),
                               *check_half_precision_serving(arch, tuple(n for n in named if scale[n] == 2)),
                               *check_sparse_attention_serving(arch, _in(named, sparse_unserved(arch, gpus))),
                               *check_quantised_serving(arch, quant_method(arch), quant_capability(arch),
                                                        _in(named, quant_below(arch, gpus)),
                                                        _in(named, quant_float32(arch, gpus)),
                                                        any(scale[n] for n in named)),
                               *check_vllm_support(arch), *check_fp8_kv_cache(arch),
                               *serve_past]
    vision = graph.params_towers
    kinds: dict[str, int] = {}  # layers per kind, in order of first appearance (a kind is part of a distinct layer)
    sizes: dict[int, int] = {}  # layers per parameter count, the same way
    for b, n in spec.distinct_layers:
        kinds[b.kind] = kinds.get(b.kind, 0) + n
        sizes[b.params] = sizes.get(b.params, 0) + n
    quant = None if arch.quant is None else (("method", arch.quant.method), ("bits", arch.quant.bits),
                                              ("group_size", arch.quant.group_size),
                                              ("describes", arch.quant.describes))
    return Report(
        schema_version=SCHEMA_VERSION, estimator_version=__version__,
        model=ModelInfo(model_id, arch.family, arch.model_type, arch.architectures, arch.custom_code,
                        arch.text_tower_only, downloads, sha, spec.kind, arch.approximate is not None,
                        arch.approximate, config_provenance),
        params=Params(graph.params_total, checkpoint_params, match, graph.params_embedding, graph.params_lm_head,
                      graph.params_per_layer, len(spec.blocks), adapters, graph.params_active, arch.experts,
                      arch.experts_per_token, graph.params_total - vision, vision, stored, quant,
                      tuple(kinds.items()), tuple(sizes.items()),
                      spec.tied and any(x.name.startswith("LM_Head") or x.type == "LM Head" for x in spec.head)),
        memory=memory, cost=costs,
        structure=structure_rows(spec, graph.context) if structure else (),
        findings=tuple(findings),
        provenance=(("config_keys", arch.used()), ("formulas", dict(FORMULAS))),
        plans=tuple(setup_plans), plans_unreachable=tuple(unreachable), serving=serving, plan_floors=tuple(floors),
    )


def _in(named: tuple[str, ...], some: tuple[str, ...]) -> tuple[str, ...]:
    """Of the priced GPUs `named` in the cards' order, those in `some`."""
    return tuple(n for n in named if n in some)


def _site_metric(method: str, parts: tuple[int, ...]) -> int:
    """The site's figure of a job's parts (parallel.PARTS order): allocated bytes, their sum (QLoRA's phases keep
    only the optimizer state paged AdamW leaves in torch's allocator: job_options.apply_metric)."""
    return sum(parts)


_SUMMED = ("full", "lora", "qlora", "serve", "serve2")  # the methods whose _site_metric is the plain sum of the parts


def _setups(arch, graph, s: Assumptions, gpu_offers: tuple[GpuOffer, ...], jobs, flops_per_token: tuple[float, float],
            serve_tokens: int, weights_served: int, kv_per_sequence: int, work: dict[str, StepWork],
            scale: Mapping[str, int],
            served: Mapping[tuple[ServerDefaults, bool], dict]):
    """Plans for full, LoRA, QLoRA and serving on every priced GPU, the serving speeds and, where a card holds a
    training method on no count, what each GPU keeps however many share it (setups.py). The plans' job hours take
    the cost section's roofline (`work`), checkpointing reading the weights once more per step. Serving is
    searched on each GPU at its server's defaults and dtype (`served`: the serving jobs per ServerDefaults and
    float32), as vLLM serves the model there (`scale`: vllm_support.serving_scale)."""
    peak = cached_peak(jobs, _site_metric, _SUMMED, s.job_batch, training_nccl_bytes(s))
    flops = training_flops(arch, s, flops_per_token)
    not_applicable = {}
    if arch.quant is not None:
        not_applicable["qlora"] = (f"the checkpoint is already quantised ({arch.quant.describes}); QLoRA quantises "
                                   "a 16-bit base to NF4, so it does not apply as such")

    def plans_on(table: PeakTable, offered: tuple, methods: Mapping) -> tuple[list, list]:
        return plans_for(methods, table, offered, {m: f[0] for m, f in flops.items()},
                         {"full": s.mfu_full, "lora": s.mfu_lora, "qlora": s.mfu_lora},
                         {m: f[1] for m, f in flops.items()}, not_applicable, s.host_memory_bytes_per_node,
                         (s.job_samples * s.job_epochs, s.job_batch),
                         {m: (w.job_bytes(), w.job_bytes(checkpointed=True))
                          for m, w in {**work, "qlora": work["lora"]}.items()})
    plans, unreachable = plans_on(peak, gpu_offers, {m: j for m, j in jobs.items() if not m.startswith("serve")})
    model = None if graph.spec.kind == "encoder" else serving_model(arch, graph, s, weights_served, kv_per_sequence,
                                                                     serve_tokens, jobs["serve"].kv_latent)
    found: list = []
    lost: list = []
    rows: list[ServingSpeed] = []
    for (server, fp32), at_server in served.items():  # each group of GPUs at its server's defaults and dtype
        group = tuple(g for g in gpu_offers if g.server == server and (scale.get(g.model, 1) == 2) == fp32)
        if not group:
            continue
        table = peak if at_server["serve"] is jobs["serve"] else \
            cached_peak({**jobs, **at_server}, _site_metric, _SUMMED, s.job_batch, training_nccl_bytes(s))
        got, missed = plans_on(table, scaled_offers(group, scale), at_server)
        found += scaled_plans(got, scale)
        lost.append([u for u in missed if u.method == "serve"])
        if model is not None:  # no speed where it serves in float32: the priced TFLOPS are 16-bit
            rows += serving_table(model, table, tuple(g for g in group if scale.get(g.model, 1) == 1), got)
    plans += merged_serving(found, gpu_offers)
    if gpu_offers and not any(scale.get(g.model, 1) for g in gpu_offers):  # not memory: vLLM refuses it on each
        unreachable.append(Unreachable("serve", SERVED_NOWHERE))
    else:  # serving is unreachable where no group serves it
        unreachable += lost[0] if lost and all(lost) else []
    order = {(g.name, g.model): i for i, g in enumerate(gpu_offers)}
    serving = tuple(sorted(rows, key=lambda r: order[(r.gpu, r.gpu_model)]))
    return plans, unreachable, serving, plan_floors(peak, plans, gpu_offers)


def structure_rows(spec: Spec, tokens: int) -> StructureTable:
    """The structure table: one row per part in forward order (the embedding stage, every layer's parts, the
    head), output shapes at `tokens` (the config's maximum context). Its rows are made when first read, and the
    JSON twin's dicts straight from the spec (graph/structure.py)."""
    return StructureTable(spec, tokens)


def _step_work(arch, graph, s: Assumptions, profiles, adapters, flops_per_token: tuple[float, float]
               ) -> dict[str, StepWork]:
    """A step of the reference job by full and LoRA: its FLOPs and bytes depend on the model and method only,
    worked out once and priced per GPU by the costs and the plans."""
    full, lora = profiles["train_full"], profiles["train_lora"]
    flops_full, flops_lora = flops_per_token
    return {"full": step_work(arch, s, "full", flops_full, 2 * graph.params_total, graph.params_total,
                              full.per_sample()),
            "lora": step_work(arch, s, "lora", flops_lora, 2 * graph.params_total, adapters, lora.per_sample())}


def _costs(s: Assumptions, cards, gpus, work: dict[str, StepWork]) -> tuple[CostLine, ...]:
    seen: list[str] = []
    for card in cards:
        seen += [g for g in card.gpus if g not in seen]
    lines = []
    for key in seen:
        gpu = gpus[key]
        if gpu.price_usd_per_hour is None:
            continue
        lines.append(job_cost(s, gpu, "full", work["full"]))
        lines.append(job_cost(s, gpu, "lora", work["lora"]))
    return tuple(lines)
