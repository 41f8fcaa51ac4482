"""Memory per GPU of one job spread over N GPUs: data parallel (DDP), ZeRO-2, ZeRO-3 / FSDP, tensor parallel (TP),
pipeline parallel (PP), with gradient checkpointing and CPU offload.

Input: the single-GPU job in numbers (`SingleGpuJob`: its phases, each the seven parts of a breakdown, and the
model's shape). Output: `PerGpu`, the same seven parts at the per-GPU peak, which they sum to, plus the CPU memory an
offload needs. Pure: numbers in, numbers out; nothing here imports the rest of the estimator.

Rules per part (W weights, G gradients, O optimizer state, A activations, L logits, K KV cache; P params, T trainable,
u the largest sharding unit's params, c compute bytes, N GPUs). Sources:
- ddp: every rank holds the whole job (torch.nn.parallel.DistributedDataParallel) plus its gradient buckets, a second
  copy of the gradients unless gradient_as_bucket_view=True ("the saved memory size will be equal to the total
  gradients size": torch/nn/parallel/distributed.py, DistributedDataParallel docstring).
- zero2: G and O (and the step's temporaries) / N; W replicated. DeepSpeed estimate_zero2_model_states_mem_needs
  (deepspeed/runtime/zero/stage_1_and_2.py): GPU = 2 P + 18 P / N (2 fp16 params; 18 = 2 + 4 grads, 4 master,
  8 Adam), the same split as Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054 §5, Fig. 1: P_os+g).
- zero2 / zero3 follow DeepSpeed: a trainable weight stored above compute dtype (AMP's fp32 master) becomes a 16-bit
  model copy (replicated by zero2, sharded by zero3) plus the fp32 master partitioned with the optimizer state.
- zero3 / fsdp: W, G, O / N, plus the unit being computed and the one prefetched, gathered in compute dtype, plus the
  unit's unsharded gradient in compute dtype waiting for its reduce-scatter; fsdp also the root's params (FSDP2
  keeps the root unsharded from forward through backward: _fsdp_state.py). DeepSpeed
  estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py): GPU = 4 x largest layer + 18 P / N
  (2 B gathered params + 2 B gradients of the largest layer); PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard/
  _fsdp_collectives.py: foreach_all_gather allocates the unit's unsharded params in param_dtype; foreach_reduce
  allocates reduce_scatter_input of the unit's padded unsharded numel in reduce_dtype, which defaults to param_dtype;
  _fsdp_param_group.py prefetches the next unit's all-gather). Under mixed precision the params are gathered already
  in compute dtype: autocast's weight copies (overhead_weights) do not exist.
- zero3's gradients are DeepSpeed's own allocations rather than its estimator's 4 B: one flat partition of the
  trainable gradients, c x T / N, allocated at init in the gradient accumulation dtype (the 16-bit model dtype
  under ZeRO: DeepSpeedEngine.get_data_types) on the GPU unless the optimizer is offloaded (stage3.py
  DeepSpeedZeroOptimizer_Stage3: grad_partitions_flat_buffer), in every phase; the step adds the fp32 gradients of
  one sub-group at a time (_prepare_fp32_grad_for_sub_group; sub_group_size 1e9 elements: runtime/zero/config.py).
  DeepSpeed gathers module by module, so at the loss the LM head (or a tied embedding) is gathered in place of a
  layer: its estimator's "largest layer" is the largest module (estimate_zero3_model_states_mem_needs_all_live).
- zero2 / zero3 reduce gradients through DeepSpeed's contiguous bucket of reduce_bucket_size elements (5e8 by
  default: runtime/zero/config.py) in the 16-bit communication dtype, whatever the model's size: ZeRO-3 keeps it from
  init, ZeRO-2 holds it through each backward (sharding.ZERO_REDUCE_BUCKET).
- tp: Megatron-LM column/row-parallel Linears and vocab-parallel embedding/head (Shoeybi et al. 2019,
  arXiv:1909.08053 §3) split every matmul and embedding weight / N; norms stay whole. Activations / N with sequence
  parallelism (Korthikanti et al. 2022, arXiv:2205.05198 Table 2: sbh(34 + 5as/h)/t; Megatron-LM
  megatron/training/theoretical_memory_usage.py compute_activation_memory: "partitioned by TP size due to tensor and
  sequence model parallelism"); logits / N (vocab-parallel cross entropy). Heads split / N; KV heads split / N, or
  replicated one per rank where N > kv_heads (vLLM vllm/model_executor/layers/linear.py QKVParallelLinear:
  num_kv_heads = 1, num_kv_head_replicas = tp / kv_heads; Megatron-LM transformer_config.py: num_query_groups must be
  a multiple or divisor of tensor_model_parallel_size). MLA's latent cache (kv_lora_rank + qk_rope_head_dim per token)
  is one head that every rank keeps whole: vLLM's MLA cache is [blocks, block_size, 1, kv_lora_rank +
  qk_rope_head_dim] on each rank whatever the TP size (vllm/distributed/kv_transfer/kv_connector/utils.py), the
  duplication vLLM's data-parallel attention exists to avoid.
- pp: N contiguous stages of layers, embedding on the first, final norm and head (and the logits) on the last, with
  its own copy of an embedding tied to the head (Megatron-LM LanguageModule.setup_embeddings_and_output_layer: the
  last stage's output layer is a parameter of its own, its gradient all-reduced with the first stage's; vLLM's
  last rank loads its own lm_head); for training the cut minimising the largest stage (splits.best_cut for two
  cards, generalised), for serving vLLM's own (get_pp_indices: pipeline.vllm_stage_layers). At batch 1 one
  micro-batch is in flight, so each stage holds its own layers' activations once
  (Megatron-LM theoretical_memory_usage.py: the first stage holds min(micro-batches, pp) in flight).
- accumulating (SingleGpuJob.accumulating): fsdp's no_sync keeps every unit's gradient unsharded until a step's
  last micro-batch (FullyShardedDataParallel.no_sync; FSDP2 set_requires_gradient_sync), unless sync_each_batch
  (Accelerate's GradientAccumulationPlugin); ZeRO reduces every micro-batch into its partitioned gradients (DeepSpeedEngine.no_sync refuses stages 2 and 3); ddp
  holds them whole anyway.
  mixed_units: FSDP1 units flattening frozen and trainable params hold gradients for all of them (use_orig_params=True;
  the FullyShardedDataParallel docstring). Rules and sources in sharding.py; FINDINGS.md F27.
- fsdp+ep: the routed experts spread over EXPERT_PARALLEL ranks of a node (GShard, arXiv:2006.16668; DeepSpeed-MoE,
  arXiv:2201.05596 §5), FSDP over the other ranks as torchtitan builds it (torchtitan/distributed/parallel_dims.py
  _build_mesh_with_ep: dp_shard = dp_shard_mod_ep x dp_shard_in_ep, experts fully_shard-ed over dp_shard_mod_ep):
  every part / N per rank as fsdp, but a gathered unit (and Phase.expert_activations) only 1 / 8 of the experts.
- offload optimizer (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840; DeepSpeed offload_optimizer): O, G and the
  fp32 master copy live on the CPU, the GPU keeps a compute-dtype copy of the trainable weights; DeepSpeed's zero2
  offload: GPU 2 P. offload params (ZeRO-Infinity offload_param; FSDP2 CPUOffloadPolicy): W, G, O on the CPU, the GPU
  holds only the gathered units: DeepSpeed's zero3 full offload, GPU = 4 x largest layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import JobError
from .pipeline import stage_rows
from .sharding import (
    EXPERT_PARALLEL,
    GPUS_PER_NODE,
    _ceil,
    _peak_row,
    cpu_bytes_per_node,
    sharded,
)

PARTS = ("weights", "gradients", "optimizer_state", "activations", "logits", "kv_cache", "overhead")
STRATEGIES = ("single", "ddp", "zero2", "zero3", "fsdp", "fsdp+ep", "tp", "pp", "tp+pp")
OFFLOADS = ("none", "optimizer", "params")


class ParallelError(JobError):
    """A parallel setup that cannot run (or is not defined) for this job, named by its key and value."""


@dataclass(frozen=True)
class Phase:
    """One moment of the single-GPU job (the loss, a backward, the optimizer step, prefill, decode) and what is live
    then, in bytes. `overhead` of the estimator's breakdown is split by how it scales with sharding."""

    name: str
    weights: int = 0
    gradients: int = 0
    optimizer_state: int = 0
    activations: int = 0
    logits: int = 0
    kv_cache: int = 0
    overhead_weights: int = 0  # copies of the weights in compute dtype (autocast's bf16 copies): follow W
    overhead_step: int = 0  # optimizer temporaries (torch.optim foreach): follow O
    overhead_fixed: int = 0  # per process (dequantised transient, CUDA context): never shrinks
    computing: bool = True  # forward/backward (gathered units live); False at the optimizer step
    expert_activations: int = 0  # of activations, per-expert tensors (LoRA's effective expert weights): fsdp+ep / 8
    # Not in total_bytes: what each ordered pair of distinct samples adds to `activations` past the batch the phase
    # was built at (a SHARED_MASK_TOWERS tower's one mask over the step's images: tower_adapters.pair_bytes), so that
    # a phase built at batch 1 moves to batch b as b x its activations + b (b - 1) x this (setups.job_limits)
    activations_pair: int = 0
    # vLLM's startup run (setups.serving_job): one layer's working set every process holds while it computes, the
    # forward's column-parallel outputs, split by tensor parallelism and whole on every pipeline stage (in the
    # breakdown's activations); and what only the last pipeline stage holds, whole on every tensor-parallel rank, the
    # sampler's run, or a training job's chunked loss's transient (in its overhead)
    transient: int = 0
    last_stage: int = 0
    # of activations, one layer's working set: the layer a checkpointed backward recomputes, or a layer's transient
    # beyond what every layer saved (the forward's last layer, a backward's softmax or scan): each pipeline stage
    # runs its own layers, so each holds one such set whole, where what the layers keep follows them
    # (pipeline.stage_rows)
    stage_whole: int = 0
    # of activations, what only the first stage holds (the embedding's output, a tower's) and what only the last does
    # (the head's and the loss's, a kept output's logits, the final norm's backward): the ends, where the stages'
    # layers hold the rest (pipeline.stage_rows)
    embed_activations: int = 0
    head_activations: int = 0

    @property
    def overhead(self) -> int:
        """The breakdown's overhead on one process: the weights' copies, the step's temporaries, what the process
        holds whole and what the last pipeline stage alone holds (one process holds all of them)."""
        return self.overhead_weights + self.overhead_step + self.overhead_fixed + self.last_stage

    @property
    def total_bytes(self) -> int:
        """Everything live at this moment: the sum of its parts (PerGpu's breakdown sums to it on one GPU)."""
        return (self.weights + self.gradients + self.optimizer_state + self.activations + self.logits + self.kv_cache
                + self.overhead + self.transient)


def accumulating_phases(phases: tuple[Phase, ...], grad_bytes: int) -> tuple[Phase, ...]:
    """A training job's phases when it accumulates gradients over micro-batches (F27): every micro-batch after a
    step's first runs beside the gradients accumulated so far, all `grad_bytes` of them, and autograd adds each
    new gradient into .grad in place (torch/csrc/autograd/functions/accumulate_grad.h), so a phase holds them all
    and no more; the phases after the backward hold them already."""
    return tuple(ph if ph.gradients >= grad_bytes else replace(ph, gradients=grad_bytes) for ph in phases)


def accumulating_job(job: SingleGpuJob) -> SingleGpuJob:
    """`job` accumulating its gradients over micro-batches: its phases and its checkpointed ones hold every
    gradient (accumulating_phases), and FSDP's no_sync keeps them unsharded (SingleGpuJob.accumulating)."""
    grads = job.grad_bytes * job.params_trainable
    return replace(job, accumulating=True, phases=accumulating_phases(job.phases, grads),
                   phases_ckpt=accumulating_phases(job.phases_ckpt, grads))


@dataclass(frozen=True)
class SingleGpuJob:
    """The single-GPU estimate of one job and the model shape its sharding needs."""

    method: str  # full | lora | qlora | serve
    phases: tuple[Phase, ...]  # without gradient checkpointing (serving: prefill, decode)
    params_total: int
    params_trainable: int
    compute_bytes: int  # bytes per element of gathered params and activations (bf16: 2)
    trainable_weight_bytes: int  # bytes per trainable param as W holds them (AMP fp32 master: 4)
    grad_bytes: int  # bytes per trainable param of G (DDP buckets take the same)
    layers: int
    unit_params: int  # largest FSDP / ZeRO-3 unit: the largest decoder layer
    first_stage_params: int  # params before the layers (embeddings): PP's first stage
    last_stage_params: int  # params after the layers (final norm, untied head): PP's last stage
    tp_replicated_params: int  # params every TP rank keeps whole (norms, row-parallel biases)
    kv_proj_params: int  # K and V projection params of all layers (replicated per rank when N > kv_heads)
    heads: int
    kv_heads: int
    phases_ckpt: tuple[Phase, ...] = ()  # the same job with gradient checkpointing; () = not offered
    unit_expert_params: int = 0  # routed-expert params of the largest unit (fsdp+ep gathers 1 / EXPERT_PARALLEL)
    experts: int = 0  # routed experts per MoE layer
    accumulating: bool = False  # gradients accumulate over micro-batches (Job.grad_accum > 1)
    kv_latent: float = 0.0  # of the KV cache per token, MLA's latent share: every TP rank keeps it whole
    unit_bytes: int = 0  # the largest unit as gathered: a quantised base's packed layer (0: compute_bytes a param)
    # a tied head's weight: counted once in params_total (with the embedding), a pipeline's last stage keeps its own
    # copy (stages.Profile.tied_copy has the sources)
    tied_head_params: int = 0
    # vLLM's serving job (setups.serving_job): its pipeline stages are cut as vLLM cuts them (pipeline.
    # vllm_stage_layers), and every stage but the first holds the hidden states and residual it is handed, a step's
    # worth in the model's dtype, whole on each tensor-parallel rank (gpu_model_runner.py, v0.19.1: the
    # intermediate tensors of max_num_tokens allocated at init); 0: the balancing cut, no hand-off buffer
    engine_cut: bool = False
    handoff_bytes: int = 0
    # of first_stage_params, the multimodal towers' (vision, audio, their projectors): vLLM builds them on every
    # pipeline stage (stages.ServingStages has the source); 0 outside vLLM's serving job
    tower_params: int = 0
    # per layer of the stack, its parameters and its KV cache's bytes (any scale), which a pipeline stage's share of
    # the layers' weight-like parts and cache follows (pipeline.stage_rows); () or all alike: evenly
    layer_params: tuple[int, ...] = ()
    layer_kv: tuple[int, ...] = ()
    # per layer of the stack, what it keeps without checkpointing (its saved tensors, its cache's copies, its experts'
    # tensors), which a stage's share of `phases`' layer activations follows; () or all alike: evenly. Checkpointed,
    # every layer keeps its input alone, alike: phases_ckpt's share is even (pipeline.stage_rows)
    layer_activations: tuple[int, ...] = ()
    # the embedding's and the head's matmul weights, and each layer's: a trained model's autocast copies follow them
    # on a pipeline's stages (the embedding has none; a tied head its whole, on the last stage) (pipeline.stage_rows)
    end_matmul: tuple[int, int] = (0, 0)
    layer_matmul: tuple[int, ...] = ()


@dataclass(frozen=True)
class Setup:
    strategy: str = "single"
    gpus: int = 1
    grad_ckpt: bool = False
    offload: str = "none"
    prefetch: bool = True  # zero3 / fsdp: the next unit's all-gather is in flight (off: DeepSpeed's estimator)
    sync_each_batch: bool = False  # fsdp, accumulating: reduce-scatter every micro-batch (no no_sync)
    mixed_units: bool = False  # fsdp: FSDP1 units holding frozen and trainable params (use_orig_params=True)


@dataclass(frozen=True)
class PerGpu:
    """The largest GPU's peak, its phase and breakdown (PARTS, summing to the peak), and the CPU memory offload
    needs per node (the ranks of one node together, at most GPUS_PER_NODE)."""

    setup: Setup
    per_gpu_peak_bytes: int
    peak_phase: str
    breakdown: tuple[tuple[str, int], ...]
    cpu_bytes_per_node: int
    stage_layers: tuple[int, ...] = ()  # pp: layers per stage, first to last

    @property
    def model_states_bytes(self) -> int:
        """Weights + gradients + optimizer state (DeepSpeed's "model states")."""
        parts = dict(self.breakdown)
        return parts["weights"] + parts["gradients"] + parts["optimizer_state"]


def validate(job: SingleGpuJob, setup: Setup, model: str = "") -> None:
    """Raise ParallelError for a setup that cannot run: each message names the key and the value."""
    n, s = setup.gpus, setup.strategy
    if s not in STRATEGIES:
        raise ParallelError(model, "strategy", s, f"must be one of {', '.join(STRATEGIES)}")
    if setup.offload not in OFFLOADS:
        raise ParallelError(model, "offload", setup.offload, f"must be one of {', '.join(OFFLOADS)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ParallelError(model, "gpus", n, "must be a positive integer")
    if s == "single" and n != 1:
        raise ParallelError(model, "gpus", n, "strategy single runs on one GPU; pick ddp, zero2, zero3, fsdp, tp or pp")
    if s in ("zero3", "fsdp", "tp", "pp", "tp+pp", "ddp") and n == 1:
        raise ParallelError(model, "strategy", s, "needs 2 or more GPUs (--gpus 1 is strategy single)")
    serve = job.method == "serve"
    if serve and s in ("ddp", "zero2", "zero3", "fsdp", "fsdp+ep"):
        raise ParallelError(model, "strategy", s, "shards training state; serving splits the model with tp or pp")
    if s == "fsdp+ep":
        _validate_experts(job, setup, model)
    if setup.grad_ckpt and (serve or not job.phases_ckpt):
        raise ParallelError(model, "grad_ckpt", True, "needs a training job with its checkpointed phases")
    if setup.offload == "optimizer" and s not in ("zero2", "zero3"):
        raise ParallelError(model, "offload", "optimizer", f"is ZeRO-Offload: strategy zero2 or zero3, not {s}")
    if setup.offload == "params" and s not in ("zero3", "fsdp"):
        raise ParallelError(model, "offload", "params", f"needs sharded params (zero3 or fsdp), not {s}")
    if s == "fsdp" and setup.offload == "optimizer":
        raise ParallelError(model, "offload", "optimizer", "FSDP's CPUOffloadPolicy offloads params: use params")
    if serve and setup.offload != "none":
        raise ParallelError(model, "offload", setup.offload, "is for training jobs")
    for key, on in (("sync_each_batch", setup.sync_each_batch), ("mixed_units", setup.mixed_units)):
        if on and (s not in ("fsdp", "fsdp+ep") or serve):
            raise ParallelError(model, key, True, f"is a choice of FSDP training (strategy fsdp), not {s}")
    if setup.mixed_units and job.method == "full":
        raise ParallelError(model, "mixed_units", True, "needs frozen params: a LoRA or QLoRA job")
    if s in ("tp", "tp+pp"):
        tp = min(n, GPUS_PER_NODE) if s == "tp+pp" else n
        if s == "tp+pp" and n % GPUS_PER_NODE:
            raise ParallelError(model, "gpus", n, f"tp+pp spans whole nodes of {GPUS_PER_NODE}")
        if job.heads % tp:
            raise ParallelError(model, "gpus", n, f"tensor parallel over {tp} GPUs must divide the {job.heads} "
                                                  f"attention heads")
        if job.kv_heads % tp and tp % job.kv_heads:
            raise ParallelError(model, "gpus", n, f"tensor parallel over {tp} GPUs must divide the {job.kv_heads} KV "
                                                  f"heads or be a multiple of them")
    if s in ("pp", "tp+pp"):
        if 0 in job.layer_params and job.params_total:  # a layer holding no weights runs an earlier one's
            raise ParallelError(model, "strategy", s, "this model runs its layers' weights in several passes (a "
                                                      "recurrence or a shared layer group): a pipeline stage's "
                                                      "layers would not hold their own weights (not priced)")
        stages = n if s == "pp" else n // GPUS_PER_NODE
        if stages > job.layers:
            raise ParallelError(model, "gpus", n, f"{stages} pipeline stages need at least as many layers "
                                                  f"({job.layers})")


def ranks(method: str, setup: Setup) -> int:
    """The processes `setup` runs `method` in, each with NCCL's communicator (Assumptions.nccl_bytes_per_gpu): one
    per GPU, but one in all for HF generate's pipeline, a device_map split in one process (accelerate's
    dispatch_model moves the hidden states from GPU to GPU: no process group)."""
    return 1 if method == "inference" and setup.strategy == "pp" else setup.gpus


def experts_spread(job: SingleGpuJob) -> bool:
    """Whether fsdp+ep can spread this job's routed experts: it has some, in a number EXPERT_PARALLEL divides."""
    return job.unit_expert_params > 0 and job.experts >= EXPERT_PARALLEL and job.experts % EXPERT_PARALLEL == 0


def _validate_experts(job: SingleGpuJob, setup: Setup, model: str) -> None:
    ep, s = EXPERT_PARALLEL, setup.strategy
    if not experts_spread(job):
        have = f"{job.experts} routed experts" if job.unit_expert_params > 0 else "no routed experts"
        raise ParallelError(model, "strategy", s, f"spreads routed experts over {ep} GPUs; this model has {have}")
    if setup.gpus % ep:
        raise ParallelError(model, "gpus", setup.gpus, f"fsdp+ep spans whole nodes of {ep}")


def per_gpu(job: SingleGpuJob, setup: Setup, model: str = "") -> PerGpu:
    """The per-GPU peak of `job` under `setup` (module docstring for the rules and sources)."""
    name, parts, stage_layers = peak_parts(job, setup, model)
    return PerGpu(setup, sum(parts), name, tuple(zip(PARTS, parts, strict=True)), cpu_bytes_per_node(job, setup), stage_layers)


def peak_parts(job: SingleGpuJob, setup: Setup, model: str = "") -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """per_gpu without its record: the peak phase, its parts in PARTS order and (pp) the layers per stage; what
    the plan search asks of every setup it tries."""
    validate(job, setup, model)
    phases = job.phases_ckpt if setup.grad_ckpt else job.phases
    n, s = setup.gpus, setup.strategy
    stage_layers: tuple[int, ...] = ()
    if s == "tp":
        phases = tp_phases(job, phases, n)
    elif s == "tp+pp":
        phases = tp_phases(job, phases, GPUS_PER_NODE)
    if s in ("pp", "tp+pp"):
        stages = n if s == "pp" else n // GPUS_PER_NODE
        stage_layers, rows = stage_rows(job, phases, stages, 1 if s == "pp" else GPUS_PER_NODE, setup.grad_ckpt)
    elif s in ("tp", "single"):
        rows = [(ph.name, _parts(ph)) for ph in phases]
    else:
        rows = _data_parallel(job, phases, setup)
    best = _peak_row(rows)
    return best[0], best[1], stage_layers



def _parts(ph: Phase, extra_overhead: int = 0) -> tuple[int, ...]:
    """A phase's parts in PARTS order on one process (its transient with the activations), `extra_overhead` (DDP's
    gradient buckets) beside its own."""
    return (ph.weights, ph.gradients, ph.optimizer_state, ph.activations + ph.transient, ph.logits, ph.kv_cache,
            ph.overhead + extra_overhead)


def _data_parallel(job: SingleGpuJob, phases: tuple[Phase, ...], setup: Setup) -> list[tuple[str, tuple[int, ...]]]:
    """Every phase's parts on one rank of ddp, zero2, zero3 or fsdp (module docstring)."""
    if setup.strategy == "ddp":
        bucket = job.grad_bytes * job.params_trainable
        return [(ph.name, _parts(ph, bucket)) for ph in phases]
    return sharded(job, setup.strategy, setup.grad_ckpt, setup.offload, setup.prefetch, setup.sync_each_batch,
                   setup.mixed_units).rows(setup.gpus)


def tp_phases(job: SingleGpuJob, phases: tuple[Phase, ...], n: int) -> tuple[Phase, ...]:
    """One tensor-parallel rank's share of every phase (_tp)."""
    return tuple(_tp(job, ph, n) for ph in phases)


def _tp(job: SingleGpuJob, ph: Phase, n: int) -> Phase:
    """One TP rank's share of a phase: weight-like parts keep the replicated params whole and split the rest / N
    (KV projections: one head per rank where N > kv_heads); activations, logits / N; KV cache per rank heads."""
    p = job.params_total or 1
    kv_rank_heads = max(1, job.kv_heads // n)
    extra_kv = job.kv_proj_params * (kv_rank_heads / job.kv_heads - 1 / n) if job.kv_heads else 0.0
    share = (job.tp_replicated_params + (p - job.tp_replicated_params) / n + extra_kv) / p

    def w(x: int) -> int:
        return _ceil(x * share)
    split = kv_rank_heads / job.kv_heads if job.kv_heads else 1 / n
    kv = _ceil(ph.kv_cache * (job.kv_latent + (1 - job.kv_latent) * split))
    return Phase(ph.name, w(ph.weights), w(ph.gradients), w(ph.optimizer_state), _ceil(ph.activations / n),
                 _ceil(ph.logits / n), kv, w(ph.overhead_weights), w(ph.overhead_step), ph.overhead_fixed,
                 ph.computing, transient=_ceil(ph.transient / n), last_stage=ph.last_stage,
                 stage_whole=_ceil(ph.stage_whole / n), embed_activations=_ceil(ph.embed_activations / n),
                 head_activations=_ceil(ph.head_activations / n))


def default_setup(gpus: int, strategy: str | None, offload: str, grad_ckpt: bool = False,
                  sync_each_batch: bool = False, mixed_units: bool = False) -> Setup:
    """The CLI's setup: ddp when more than one GPU and no strategy is named, one GPU alone otherwise."""
    return Setup(strategy or ("ddp" if gpus > 1 else "single"), gpus, grad_ckpt, offload,
                 sync_each_batch=sync_each_batch, mixed_units=mixed_units)
