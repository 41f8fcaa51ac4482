"""Jobs as memory.parallel sees them: the site's full, LoRA, QLoRA and serving jobs and the CLI's exact job as
SingleGpuJobs, the plans that run them and the serving speed on each priced GPU.

One SingleGpuJob per method is built from job.py's phases (training) or the serving profile (the site's
chunked-prefill server) and shared by every setup tried: the plan search only shares it out (parallel.per_gpu),
each (method, setup) once across GPUs. The site's training jobs are recipes (memory/recipes.py SITE_RECIPES); QLoRA's
is the QLoRA paper's (Dettmers et al. 2023, arXiv:2305.14314 §2-3), without peft's fp32 upcast."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from .config.arch import Arch
from .cost import flops_per_token, job_tokens
from .graph.nodes import Graph, tied_weight_params
from .inputs import Assumptions, Card, Gpu
from .memory.experts import cast_matmul
from .memory.host_link import link_bytes
from .memory.job import job_phases, training_variants
from .memory.job_options import Job, checkpoints, resolve
from .memory.job_result import JobMemory, metric_memory
from .memory.kinds import MAX_GPUS, TP_KINDS, kinds
from .memory.parallel import PARTS, ParallelError, Phase, Setup, SingleGpuJob, experts_spread, per_gpu, ranks
from .memory.peak_table import SHARDED, PeakTable
from .memory.plans import GpuOffer, Plan, PlanFloor, Unreachable, first_fit, search_plans
from .memory.profile import budget_bytes, encoder_tokens, kv_bytes_of_block
from .memory.serve_weights import routed_expert_serve
from .memory.sharding import GPUS_PER_NODE
from .memory.stages import Limits, Profile
from .memory.storage import gathered_unit_bytes
from .memory.vllm_server import ServerDefaults, Startup, residual_bytes, server_defaults, startup_in_16_bits
from .serving_speed import ServingModel, ServingSpeed, serving_speed

SITE_METHODS = ("full", "lora", "qlora", "serve")


@dataclasses.dataclass(frozen=True)
class Shape:
    """What sharding needs of the model beside the phases (parallel.SingleGpuJob's shape fields)."""

    params_total: int
    layers: int
    unit_params: int
    first_stage_params: int
    last_stage_params: int
    tp_replicated_params: int
    kv_proj_params: int
    heads: int
    kv_heads: int
    unit_expert_params: int = 0  # the routed experts' params in the largest unit (fsdp+ep)
    experts: int = 0  # routed experts per MoE layer
    kv_latent: float = 0.0  # MLA's share of the cached elements per token (SingleGpuJob.kv_latent)
    tied_head_params: int = 0  # a tied head's weight, which a pipeline's last stage copies (SingleGpuJob)
    tower_params: int = 0  # of first_stage_params, the multimodal towers', on every stage of vLLM's (SingleGpuJob)
    layer_params: tuple[int, ...] = ()  # per layer of the stack, its parameters (SingleGpuJob.layer_params)
    end_matmul: tuple[int, int] = (0, 0)  # the embedding's and the head's matmul weights (SingleGpuJob.end_matmul)
    layer_matmul: tuple[int, ...] = ()  # per layer of the stack, its matmul weights (SingleGpuJob.layer_matmul)


def model_shape(a: Arch, g: Graph) -> Shape:
    """The largest layer (the ZeRO-3 / FSDP unit), the ends (PP's first and last stages), the params every TP rank
    keeps whole (norms: parts without a matmul, the embeddings aside, which are vocab-parallel) and the K and V
    projections (2 x hidden x kv_heads x head_dim per attention layer), and the largest layer's routed experts."""
    spec = g.spec
    distinct = spec.distinct_layers  # each distinct layer summed once, times the layers it stands for
    replicated = sum(n * sum(max(0, p.params - p.matmul) for p in b.parts) for b, n in distinct)
    replicated += sum(max(0, p.params - p.matmul) for p in spec.head)
    # per attention layer holding its weights (a shared pass's are an earlier layer's)
    kv_proj = sum(n for b, n in distinct if b.kv and b.params) * 2 * a.hidden * a.kv_heads * a.head_dim
    largest = g.largest_layer
    routed = sum(c * i * o for p in largest.parts for c, i, o in p.expert_mats) if largest else 0
    return Shape(g.params_total, max(1, len(spec.blocks)), largest.params if largest else 0,
                 sum(p.params for p in spec.embed), sum(p.params for p in spec.head), replicated, kv_proj, a.heads,
                 a.kv_heads, routed, a.experts if routed else 0, kv_latent_share(g),
                 tied_weight_params(a), g.params_towers, tuple(b.params for b in spec.blocks),
                 (sum(p.matmul for p in spec.embed), sum(p.matmul for p in spec.head)),
                 tuple(cast_matmul(a, b) for b in spec.blocks))


def kv_latent_share(g: Graph) -> float:
    """MLA's share of the elements a token caches (its layers' latent: kv_lora_rank + qk_rope_head_dim, and a
    sparse-attention indexer's key, one head too), which every tensor-parallel rank keeps and reads whole
    (memory/parallel.py); 0 without MLA."""
    cached = [(b.kind == "mla", n * sum(kv for _, kv in b.kv)) for b, n in g.spec.distinct_layers]
    return sum(kv for mla, kv in cached if mla) / (sum(kv for _, kv in cached) or 1)


def training_job(a: Arch, g: Graph, s: Assumptions, job: Job, shape: Shape, model: str = "",
                 both: bool = True, memo: dict | None = None) -> SingleGpuJob:
    """`job` (full, lora or qlora) as a SingleGpuJob; `both`: with its checkpointed phases too (the plan search
    tries both; a job that asks for checkpointing has only those), else only the phases `job` asks for. `memo`:
    the per-layer terms the estimate's other jobs and profiles worked out already (profile.memoised)."""
    # a recipe that always checkpoints (QLoRA): plans.candidates tries no other
    both = both and checkpoints(a, job.loss)  # a class that cannot checkpoint: its one variant (job_options)
    variants = ((True,) if job.grad_ckpt else (False, True)) if both else (job.grad_ckpt,)
    phases, trainable, compute_bytes, param_bytes, layer_acts = training_variants(a, g, s, job, variants, model, memo)
    plain, ckpt, priced = phases[0], (phases[-1] if both else ()), resolve(job, a)
    return dataclasses.replace(_single(job.method, plain, ckpt, trainable, compute_bytes, param_bytes, shape,
                                       job.grad_accum > 1), unit_bytes=gathered_unit_bytes(a, g, priced.storage,
                                                                                          priced.double_quant),
                               # a checkpointed stack keeps each layer's input alike: its stages' share is even
                               layer_activations=() if variants[0] else layer_acts)


def exact_job(a: Arch, g: Graph, s: Assumptions, job: Job, shape: Shape, model: str = "") -> SingleGpuJob:
    """The run `job` names (the CLI's --method ...) as a SingleGpuJob: HF generate, or training with the phases it
    asks for."""
    if job.method == "inference":
        return inference_job(a, g, s, job, shape, model)
    return training_job(a, g, s, job, shape, model, both=False)


def job_on_setup(a: Arch, g: Graph, s: Assumptions, job: Job, setup: Setup, model: str = "") -> JobMemory:
    """`job`'s peak on the largest GPU of `setup` (parallel.per_gpu), in the job's metric: what a measured
    multi-GPU run's per-GPU peak is compared with."""
    spread = per_gpu(exact_job(a, g, s, job, model_shape(a, g), model), setup, model)
    return metric_memory(spread.peak_phase, dict(spread.breakdown), s, job, g, ranks(job.method, setup))


def inference_job(a: Arch, g: Graph, s: Assumptions, job: Job, shape: Shape, model: str = "") -> SingleGpuJob:
    """The CLI's `--method inference` (HF generate: prefill, decode) as a serving SingleGpuJob."""
    c = 4 if job.precision == "fp32" else 2
    # each layer's cache at the decode's length, as generate.py sizes it (a window's, an encoder layer's none)
    enc = encoder_tokens(g.spec, job.tokens)
    layer_kv = tuple(0 if b.stack == "encoder" else kv_bytes_of_block(b, s, job.tokens + job.new_tokens, enc)
                     for b in g.spec.blocks)
    return dataclasses.replace(_single("serve", job_phases(a, g, s, job, model), (), 0, c, c, shape),
                               layer_kv=layer_kv)


def serving_job(serve: Profile, weight_bytes: int, shape: Shape, c: int, sequences: int = 1,
                startup: Startup | None = None, residual: int = 0) -> SingleGpuJob:
    """The site's serving figure (profile.serve_profile) as the phases of `sequences` held beside the weights:
    the profile's fixed bytes (the server's startup peak) and per sequence its caches (an encoder's: its forward
    and output). `startup`: a generating model's two startup peaks (vllm_server.startup_bytes), each a phase of
    its own, for ranks share them differently. The step's forward is one layer's working set at a time, which
    every pipeline stage holds as it runs its layers: its column-parallel outputs split over the tensor-parallel
    ranks (Phase.transient), the `residual` copies of the hidden states whole on each (vllm_server.residual_bytes).
    The sampler runs on the last pipeline stage only (gpu_model_runner.profile_run: get_pp_group().is_last_rank),
    where every tensor-parallel rank gathers the whole vocabulary's logits and samples (vLLM's LogitsProcessor
    all-gathers them, Platform.use_all_gather): Phase.last_stage. Its stages are cut as vLLM cuts them, each after
    the first holding a step's hidden states and residual handed to it, as large as the `residual` copies
    (SingleGpuJob.engine_cut, handoff_bytes)."""
    fixed = serve.total_static - weight_bytes  # the server's startup peak
    caches = serve.per_sample()  # the embedding side and every layer (a serving profile's head keeps none)
    phases: tuple[Phase, ...]
    if startup is None:
        phases = (Phase("decode (full KV cache)", weights=weight_bytes, activations=max(0, fixed),
                        kv_cache=sequences * caches),)
    else:
        rest = max(0, fixed - max(startup))
        whole = min(residual, startup.forward_bytes)
        phases = (Phase("decode (full KV cache)", weights=weight_bytes, activations=rest, overhead_fixed=whole,
                        transient=startup.forward_bytes - whole, kv_cache=sequences * caches),
                  Phase("decode (full KV cache)", weights=weight_bytes, activations=rest,
                        last_stage=startup.sampler_bytes, kv_cache=sequences * caches))
    # each layer's caches as the profile holds them (a window, a recurrent state, an encoder layer's none)
    layer_kv = tuple(map(serve.distinct_per_sample.__getitem__, serve.layout))
    return dataclasses.replace(_single("serve", phases, (), 0, c, c, shape), engine_cut=True, handoff_bytes=residual,
                               tower_params=shape.tower_params, layer_kv=layer_kv)


def serving_jobs(g: Graph, s: Assumptions, serve: Profile, server: ServerDefaults, weight_bytes: int, shape: Shape,
                 tokens: int, float32: bool = False) -> dict[str, SingleGpuJob]:
    """The site's serving jobs at `server`'s defaults (`serve`: its profile, profile.serve_profile, as `float32`
    asks): one sequence and two (serving_table's step per sequence), a generating model's startup in its two
    phases (serving_job)."""
    startup = None if g.spec.kind == "encoder" else startup_in_16_bits(g.spec, s, server, tokens, float32)
    residual = residual_bytes(g.spec, s, server, tokens)
    c = s.compute_bytes
    return {"serve": serving_job(serve, weight_bytes, shape, c, 1, startup, residual),
            "serve2": serving_job(serve, weight_bytes, shape, c, 2, startup, residual)}


def merged_serving(plans: list[Plan], gpu_offers: tuple[GpuOffer, ...]) -> list[Plan]:
    """Serving plans searched apart on groups of `gpu_offers` (GPUs of other server defaults), in the offers'
    order and marked cheapest (per hour) and smallest (fewest GPUs) across them all, as search_plans marks one
    search's."""
    order = {(g.name, g.model): i for i, g in enumerate(gpu_offers)}
    plans = sorted(plans, key=lambda p: order[(p.gpu, p.gpu_model)])
    fitting = [p for p in plans if p.fits]
    fewest = min((p.gpus for p in fitting), default=0)
    low = min((p.usd_per_hour for p in fitting if p.usd_per_hour is not None), default=None)
    return [dataclasses.replace(p, cheapest=p.fits and low is not None and p.usd_per_hour == low,
                                smallest=p.fits and p.gpus == fewest) for p in plans]


def _single(method: str, phases: tuple[Phase, ...], ckpt: tuple[Phase, ...], trainable: int, c: int, w: int,
            shape: Shape, accumulating: bool = False) -> SingleGpuJob:
    return SingleGpuJob(method, phases, shape.params_total, trainable, c, w, w, shape.layers, shape.unit_params,
                        shape.first_stage_params, shape.last_stage_params, shape.tp_replicated_params,
                        shape.kv_proj_params, shape.heads, shape.kv_heads, phases_ckpt=ckpt,
                        unit_expert_params=shape.unit_expert_params, experts=shape.experts, accumulating=accumulating,
                        kv_latent=shape.kv_latent, tied_head_params=shape.tied_head_params,
                        layer_params=shape.layer_params, end_matmul=shape.end_matmul, layer_matmul=shape.layer_matmul)


def job_limits(job: SingleGpuJob, adjust: Callable[[str, tuple[int, ...]], int]) -> Limits:
    """A one-GPU training job's phases at batch 1 (checkpointed where it checkpoints) as (bytes at batch 0,
    bytes per sample, bytes per ordered pair of samples): per phase only the activations and the logits grow with
    the batch (job.py multiplies them, and nothing else, by it), and a shared mask over the step's images with its
    square (Phase.activations_pair). The same on every card: worked out once, each card's batch is largest_batch."""
    out = []
    for ph in job.phases_ckpt or job.phases:
        parts = (ph.weights, ph.gradients, ph.optimizer_state, 0, 0, ph.kv_cache, ph.overhead)
        out.append((adjust(job.method, parts), ph.activations + ph.logits, ph.activations_pair))
    return tuple(out)


def offers(cards: tuple[Card, ...], gpus: Mapping[str, Gpu], s: Assumptions) -> tuple[GpuOffer, ...]:
    """Every GPU a card lists, with that card's budget and its `vllm serve` defaults (plans and serving are per card
    and priced GPU)."""
    out = []
    for card in cards:
        for key in card.gpus:
            gpu = gpus[key]
            out.append(GpuOffer(card.name, budget_bytes(card, s), gpu.price_usd_per_hour,
                                gpu.bf16_tflops if gpu.bf16_tflops is not None else gpu.fp16_tflops,
                                gpu.bandwidth_gb_per_s, gpu.name, gpu.host_link_gb_per_s,
                                server_defaults(s, card.memory_usable_bytes, gpu.name)))
    return tuple(out)


def scaled_offers(gpu_offers: tuple[GpuOffer, ...], scale: Mapping[str, int]) -> tuple[GpuOffer, ...]:
    """The offers serving is searched on (serving_scale): none where the GPU serves none, and what the budget holds
    in 16 bits where its bytes are scaled (half of it in float32), the peaks found then scaled back
    (scaled_plans)."""
    return tuple(dataclasses.replace(g, budget_bytes=g.budget_bytes // scale.get(g.model, 1))
                 for g in gpu_offers if scale.get(g.model, 1))


def scaled_plans(plans: list[Plan], scale: Mapping[str, int]) -> list[Plan]:
    """Serving plans searched on scaled_offers with their per-GPU peak scaled back (twice the 16-bit one in fp32)."""
    return [dataclasses.replace(p, per_gpu_peak_bytes=scale[p.gpu_model] * p.per_gpu_peak_bytes)
            if p.method == "serve" and scale.get(p.gpu_model, 1) > 1 else p for p in plans]


def plans_for(jobs: Mapping[str, SingleGpuJob], peak: PeakTable,
              gpu_offers: tuple[GpuOffer, ...], job_flops: Mapping[str, float], mfu: Mapping[str, float],
              ckpt_flops: Mapping[str, float], not_applicable: Mapping[str, str],
              host_bytes_per_node: int | None = None,
              job_samples: tuple[int, int] = (0, 0),
              moved: Mapping[str, tuple[float, float]] | None = None) -> tuple[list[Plan], list[Unreachable]]:
    """search_plans over the methods that apply; the others are unreachable for the reason given. job_samples: the
    reference job's (samples over all epochs, samples per optimizer step), which an offload setup moves its
    weights or gradients for over PCIe (host_link.py). moved: the bytes each method's job moves (search_plans)."""
    methods = tuple(m for m in SITE_METHODS if m in jobs and m not in not_applicable)
    experts = any(experts_spread(j) for j in jobs.values())
    plans, unreachable = search_plans(peak, methods, gpu_offers, job_flops, mfu, ckpt_flops, host_bytes_per_node,
                                      peak.first_count, link_bytes(jobs, *job_samples), experts, moved,
                                      checkpointed(jobs))
    unreachable += [Unreachable(m, why) for m, why in not_applicable.items()]
    order = {m: i for i, m in enumerate(SITE_METHODS)}
    return plans, sorted(unreachable, key=lambda u: order.get(u.method, 9))


TRAINING = ("full", "lora", "qlora")


def checkpointed(jobs: Mapping[str, SingleGpuJob]) -> bool:
    """Whether the training jobs come with checkpointed phases: none does where the model's class cannot
    checkpoint (training_job, job_options.checkpoints), and the plan search then tries no setup with it."""
    return any(jobs[m].phases_ckpt for m in TRAINING if m in jobs) or not any(m in jobs for m in TRAINING)


def training_nccl_bytes(s: Assumptions) -> dict[str, int]:
    """NCCL's buffers on each GPU of a training setup of several (PeakTable's nccl_bytes): the training methods
    hold them beside the headroom, which the caching allocator's fragmentation takes (FINDINGS.md F49). Serving does
    not: vLLM allocates its KV cache in one piece, so the headroom its budget keeps holds them, on every card
    (memory less the CUDA context and NCCL's buffers is over the budget: tested), where a trainer's would not."""
    return dict.fromkeys(TRAINING, s.nccl_bytes_per_gpu)


def plan_floors(peak: PeakTable, plans: list[Plan], gpu_offers: tuple[GpuOffer, ...]) -> list[PlanFloor]:
    """Per training method that some card holds on no count up to MAX_GPUS: the least that one GPU keeps under any
    ZeRO / FSDP setup tried, offload included, however many GPUs share the job (PeakTable.floor). A card whose
    budget is below it holds the method on no count of these setups; one above it would need more than MAX_GPUS,
    and `beyond` says how many of it that setup needs (_count_past_max)."""
    out = []
    experts = any(experts_spread(j) for j in peak.jobs.values())  # as plans_for tried them
    ckpt = checkpointed(peak.jobs)
    budget_bytes = {g.name: g.budget_bytes for g in gpu_offers}
    for method in dict.fromkeys(p.method for p in plans if not p.fits and p.method != "serve"):
        best: tuple[int, tuple[int, ...], Setup] | None = None
        for kind in kinds(method, experts=experts, checkpoints=ckpt) + kinds(method, offload=True, checkpoints=ckpt):
            if kind.strategy not in SHARDED:
                continue
            try:
                got = peak.floor(method, kind.setup(kind.last))
            except ParallelError:
                continue
            if best is None or got[0] < best[0]:
                best = (*got, kind.setup(kind.last))
        if best is None:
            continue
        bytes_, parts, setup = best
        over = dict.fromkeys(p.gpu for p in plans
                             if p.method == method and not p.fits and budget_bytes[p.gpu] >= bytes_)
        beyond = tuple((card, _count_past_max(peak, method, setup, budget_bytes[card])) for card in over)
        named = (*zip(PARTS, parts, strict=True), ("nccl", peak.nccl_bytes.get(method, 0)))  # and NCCL's buffers
        out.append(PlanFloor(method, setup.strategy, setup.grad_ckpt, setup.offload, bytes_,
                             tuple((k, v) for k, v in named if v), beyond))
    return out


_NODES_AT_MOST = 2**17  # 1,048,576 GPUs: past this, a count is no answer anyone can use (0: more than this)


def _count_past_max(peak: PeakTable, method: str, setup: Setup, budget: int) -> int:
    """The fewest GPUs, whole nodes past MAX_GPUS, at which `setup`'s line holds the method within `budget` (its
    per-GPU peak never rises with the count: galloping, then bisecting); 0 where not even _NODES_AT_MOST nodes do."""
    def fits(nodes: int) -> bool:
        return peak(method, dataclasses.replace(setup, gpus=nodes * GPUS_PER_NODE))[0] <= budget
    lo, hi = MAX_GPUS // GPUS_PER_NODE, 2 * MAX_GPUS // GPUS_PER_NODE  # lo does not fit (the search tried it)
    while not fits(hi):
        if hi >= _NODES_AT_MOST:
            return 0
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi * GPUS_PER_NODE


def serving_model(a: Arch, g: Graph, s: Assumptions, weight_bytes: int, kv_per_sequence: int,
                  serve_tokens: int, kv_latent: float) -> ServingModel:
    """What a decode step reads: the routed experts apart (P - A params over 1 - k/E of them, so that batch 1 reads
    exactly the active parameters), the embedding table aside when the head does not share it (one row read).
    `kv_latent`: kv_latent_share, which the model's Shape holds already."""
    p, active = g.params_total, g.params_active or g.params_total
    per_param = weight_bytes / p if p else 0.0
    e, k = a.experts, min(a.experts_per_token, a.experts)
    # k = E (a per-layer top-k list whose largest routes every expert) reads every expert: no routed share apart
    experts = int((p - active) / (1 - k / e)) if e and 0 < k < e and active < p else 0
    # the routed experts at their own stored bytes (gpt-oss: MXFP4 experts beside bf16 attention and head), the
    # rest at what remains; the embedding table aside (one row read), at the compute dtype it stays in
    mats, mats_bytes = routed_expert_serve(a, g, s)
    expert_bytes = experts * (mats_bytes / mats if mats else per_param)
    embedding_bytes = 0 if g.spec.tied else g.params_embedding * s.serve_weight_bytes
    dense_bytes = weight_bytes - expert_bytes - embedding_bytes  # fp32 parts (Part.params32) at their 4 bytes
    forward = flops_per_token(a, g, s, "full", 0, serve_tokens) / 3.0
    return ServingModel(int(dense_bytes), int(expert_bytes), e if experts else 0, k if experts else 0,
                        -(-kv_per_sequence // max(1, serve_tokens)), serve_tokens, forward, kv_latent)


def serving_table(model: ServingModel, peak: Callable[[str, Setup], tuple[int, int]],
                  gpu_offers: tuple[GpuOffer, ...], plans: tuple[Plan, ...] | list[Plan] = ()) -> tuple[ServingSpeed, ...]:
    """Per priced GPU: the smallest tensor-parallel setup that holds one sequence (plans.first_fit over one GPU,
    tensor parallel in a node, tensor parallel x pipeline nodes) and its speeds; a GPU that no setup up to MAX_GPUS
    holds is left out (plans_unreachable says so for serving as a whole). A serving plan of the GPU that is not
    pipeline-alone is that setup already (its search tries the same kinds first at every count), so it is reused."""
    planned = {(p.gpu, p.gpu_model): p for p in plans if p.method == "serve" and p.fits and p.strategy != "pp"}
    rows = []
    memo: dict = {}
    for gpu in gpu_offers:
        plan = planned.get((gpu.name, gpu.model))
        got = (Setup(plan.strategy, plan.gpus), plan.per_gpu_peak_bytes) if plan is not None else \
            first_fit(peak, "serve", TP_KINDS, gpu.budget_bytes, None, memo)
        if got is None:
            continue
        setup, one = got
        two = peak("serve2", setup)[0]
        rows.append(serving_speed(model, gpu.name, setup, one, two - one, gpu.budget_bytes, gpu.bandwidth_gb_per_s,
                                  gpu.peak_tflops, gpu.usd_per_hour, cap=gpu.server.max_sequences,
                                  gpu_model=gpu.model))
    return tuple(rows)


def training_flops(a: Arch, s: Assumptions, per_token: tuple[float, float]) -> dict[str, tuple[float, float]]:
    """Per training method, the reference job's FLOPs from the full and LoRA FLOPs per token
    (cost.training_flops_per_token at cost.job_tokens) and the same with gradient checkpointing, which runs each
    layer's forward again in the backward (Chen et al. 2016, arXiv:1604.06174 §3: one extra forward, a third of a
    full fine-tune's FLOPs). QLoRA trains the same adapters as LoRA: the same count."""
    steps = s.job_epochs * -(-s.job_samples // s.job_batch)
    per_step = job_tokens(a, s) * s.job_batch * steps
    full, lora = (f * per_step for f in per_token)
    forward = full / 3.0
    return {"full": (full, full + forward), "lora": (lora, lora + forward), "qlora": (lora, lora + forward)}
