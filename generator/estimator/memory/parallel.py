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
- tp: Megatron-LM column/row-parallel Linears and vocab-parallel embedding/head (Shoeybi et al. 2019,
  arXiv:1909.08053 §3) split every matmul and embedding weight / N; norms stay whole. Activations / N with sequence
  parallelism (Korthikanti et al. 2022, arXiv:2205.05198 Table 2: sbh(34 + 5as/h)/t; Megatron-LM
  megatron/training/theoretical_memory_usage.py compute_activation_memory: "partitioned by TP size due to tensor and
  sequence model parallelism"); logits / N (vocab-parallel cross entropy). Heads split / N; KV heads split / N, or
  replicated one per rank where N > kv_heads (vLLM vllm/model_executor/layers/linear.py QKVParallelLinear:
  num_kv_heads = 1, num_kv_head_replicas = tp / kv_heads; Megatron-LM transformer_config.py: num_query_groups must be
  a multiple or divisor of tensor_model_parallel_size).
- pp: N contiguous stages of layers, embedding on the first, final norm and head (and the logits) on the last,
  the cut minimising the largest stage (splits.best_cut for two cards, generalised). At batch 1 one micro-batch is in
  flight, so each stage holds its own layers' activations once (Megatron-LM theoretical_memory_usage.py: the first
  stage holds min(micro-batches, pp) in flight).
- offload optimizer (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840; DeepSpeed offload_optimizer): O, G and the
  fp32 master copy live on the CPU, the GPU keeps a compute-dtype copy of the trainable weights; DeepSpeed's zero2
  offload: GPU 2 P. offload params (ZeRO-Infinity offload_param; FSDP2 CPUOffloadPolicy): W, G, O on the CPU, the GPU
  holds only the gathered units: DeepSpeed's zero3 full offload, GPU = 4 x largest layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import JobError

PARTS = ("weights", "gradients", "optimizer_state", "activations", "logits", "kv_cache", "overhead")
STRATEGIES = ("single", "ddp", "zero2", "zero3", "fsdp", "tp", "pp", "tp+pp")
OFFLOADS = ("none", "optimizer", "params")
GPUS_PER_NODE = 8  # tp+pp: tensor parallel inside a node of 8, pipeline stages across nodes (vLLM, Megatron-LM)


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


@dataclass(frozen=True)
class Setup:
    strategy: str = "single"
    gpus: int = 1
    grad_ckpt: bool = False
    offload: str = "none"
    prefetch: bool = True  # zero3 / fsdp: the next unit's all-gather is in flight (off: DeepSpeed's estimator)


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
    if serve and s in ("ddp", "zero2", "zero3", "fsdp"):
        raise ParallelError(model, "strategy", s, "shards training state; serving splits the model with tp or pp")
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
        stages = n if s == "pp" else n // GPUS_PER_NODE
        if stages > job.layers:
            raise ParallelError(model, "gpus", n, f"{stages} pipeline stages need at least as many layers "
                                                  f"({job.layers})")


def per_gpu(job: SingleGpuJob, setup: Setup, model: str = "") -> PerGpu:
    """The per-GPU peak of `job` under `setup` (module docstring for the rules and sources)."""
    name, parts, stage_layers = peak_parts(job, setup, model)
    return PerGpu(setup, sum(parts), name, tuple(zip(PARTS, parts, strict=True)), _cpu_bytes(job, setup), stage_layers)


def peak_parts(job: SingleGpuJob, setup: Setup, model: str = "") -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """per_gpu without its record: the peak phase, its parts in PARTS order and (pp) the layers per stage; what
    the plan search asks of every setup it tries."""
    validate(job, setup, model)
    phases = job.phases_ckpt if setup.grad_ckpt else job.phases
    n, s = setup.gpus, setup.strategy
    stage_layers: tuple[int, ...] = ()
    if s == "tp":
        phases = tuple(_tp(job, ph, n) for ph in phases)
    elif s == "tp+pp":
        phases = tuple(_tp(job, ph, GPUS_PER_NODE) for ph in phases)
    if s in ("pp", "tp+pp"):
        stages = n if s == "pp" else n // GPUS_PER_NODE
        stage_layers, rows = _pp(job, phases, stages)
    elif s in ("tp", "single"):
        rows = [(ph.name, _parts(ph, ph.overhead_weights + ph.overhead_step + ph.overhead_fixed)) for ph in phases]
    else:
        rows = _data_parallel(job, phases, setup)
    # the first phase of the largest sum (the first of equals), as parts in PARTS order
    best, top = rows[0], -1
    for row in rows:
        total = sum(row[1])
        if total > top:
            best, top = row, total
    return best[0], best[1], stage_layers


def cpu_bytes_per_node(job: SingleGpuJob, setup: Setup) -> int:
    """PerGpu.cpu_bytes_per_node of `setup` (0 without offload)."""
    return _cpu_bytes(job, setup)


def _parts(ph: Phase, overhead: int, weights: int | None = None, gradients: int | None = None,
           optimizer_state: int | None = None) -> tuple[int, ...]:
    """A phase's parts in PARTS order; weights, gradients and optimizer state replaced where given."""
    return (ph.weights if weights is None else weights, ph.gradients if gradients is None else gradients,
            ph.optimizer_state if optimizer_state is None else optimizer_state, ph.activations, ph.logits,
            ph.kv_cache, overhead)


def _master_excess(job: SingleGpuJob) -> int:
    """Bytes the trainable weights hold above a compute-dtype copy (AMP's fp32 master: (4 - 2) x T)."""
    return max(0, job.trainable_weight_bytes - job.compute_bytes) * job.params_trainable


def _data_parallel(job: SingleGpuJob, phases: tuple[Phase, ...], setup: Setup) -> list[tuple[str, tuple[int, ...]]]:
    """Every phase's parts on one rank of ddp, zero2, zero3 or fsdp (module docstring); what does not depend on
    the phase is worked out once."""
    n, s, c = setup.gpus, setup.strategy, job.compute_bytes
    if s == "ddp":
        bucket = job.grad_bytes * job.params_trainable
        return [(ph.name, _parts(ph, ph.overhead_weights + ph.overhead_step + ph.overhead_fixed + bucket))
                for ph in phases]
    t = job.params_trainable
    trainable_share = t / job.params_total if job.params_total else 0.0
    # A trainable weight stored above compute dtype (AMP's fp32 master): DeepSpeed keeps a 16-bit model copy
    # (replicated by zero2, sharded by zero3) and partitions the fp32 master with the optimizer state; FSDP2 shards
    # the params in their own dtype and gathers them in param_dtype (MixedPrecisionPolicy).
    master = job.trainable_weight_bytes * t if _master_excess(job) else 0
    master_share = _ceil(master / n)
    copy16 = c * t if master and s != "fsdp" else 0
    # zero3, fsdp: the units being computed and prefetched, and one reduce-scatter input (the unit's gradient)
    unit_grad = _ceil(c * job.unit_params * trainable_share)
    units = 2 if setup.prefetch else 1
    # FSDP2's root (the params outside the layers) is not resharded after forward (_fsdp_state.py: "For the
    # root, do not reshard after forward"): gathered through forward and backward beside the layer units.
    root = job.first_stage_params + job.last_stage_params if s == "fsdp" else 0
    gathered_computing = c * (units * job.unit_params + root)
    zero2, offload = s == "zero2", setup.offload
    rows: list[tuple[str, tuple[int, ...]]] = []
    for ph in phases:  # int(-(-(x / n) // 1)) is _ceil(x / n), written out: this loop runs for every setup tried
        computing = ph.computing
        grads = int(-(-(ph.gradients / n) // 1))
        state = int(-(-(ph.optimizer_state / n) // 1))
        step = int(-(-(ph.overhead_step / n) // 1))
        if zero2:
            weights, gathered = ph.weights - master + copy16 + master_share, 0
            copies = 0 if master else ph.overhead_weights
        else:  # sharded params, the gathered units, the reduce-scatter input
            weights, copies = int(-(-((ph.weights + copy16) / n) // 1)), 0
            gathered = gathered_computing if computing else 0
            grads += unit_grad if computing else 0
        buffer = unit_grad if computing and not zero2 else 0
        if offload == "optimizer":  # ZeRO-Offload: master, gradients, state and the step on the CPU
            weights -= master_share
            grads, state, step = buffer, 0, 0
        elif offload == "params":  # everything on the CPU; the GPU holds the gathered units and their gradients
            weights, grads, state, step = 0, buffer, 0, 0
        rows.append((ph.name, (weights + gathered, grads, state, ph.activations, ph.logits, ph.kv_cache,
                               copies + step + ph.overhead_fixed)))
    return rows


def _cpu_bytes(job: SingleGpuJob, setup: Setup) -> int:
    """Offloaded bytes the ranks of one node hold together: the master copy, gradients and optimizer state
    (optimizer), and the params too (params); each rank its 1/N shard. DeepSpeed's estimators multiply this by an
    `additional_buffer_factor` (1.5) for pinned staging buffers; that factor is left to the caller."""
    if setup.offload == "none":
        return 0
    peak = max(job.phases, key=lambda ph: ph.weights + ph.gradients + ph.optimizer_state + ph.overhead_step)
    t = job.params_trainable
    total = job.grad_bytes * t + peak.optimizer_state + peak.overhead_step
    if setup.offload == "optimizer":
        total += job.trainable_weight_bytes * t if _master_excess(job) else 0
    else:
        total += peak.weights
    return _ceil(total / setup.gpus * min(setup.gpus, GPUS_PER_NODE))


def _tp(job: SingleGpuJob, ph: Phase, n: int) -> Phase:
    """One TP rank's share of a phase: weight-like parts keep the replicated params whole and split the rest / N
    (KV projections: one head per rank where N > kv_heads); activations, logits / N; KV cache per rank heads."""
    p = job.params_total or 1
    kv_rank_heads = max(1, job.kv_heads // n)
    extra_kv = job.kv_proj_params * (kv_rank_heads / job.kv_heads - 1 / n) if job.kv_heads else 0.0
    share = (job.tp_replicated_params + (p - job.tp_replicated_params) / n + extra_kv) / p

    def w(x: int) -> int:
        return _ceil(x * share)
    kv = _ceil(ph.kv_cache * kv_rank_heads / job.kv_heads) if job.kv_heads else _ceil(ph.kv_cache / n)
    return Phase(ph.name, w(ph.weights), w(ph.gradients), w(ph.optimizer_state), _ceil(ph.activations / n),
                 _ceil(ph.logits / n), kv, w(ph.overhead_weights), w(ph.overhead_step), ph.overhead_fixed,
                 ph.computing)


def _pp(job: SingleGpuJob, phases: tuple[Phase, ...], stages: int) -> tuple[tuple[int, ...], list]:
    """The contiguous cut of the layers into `stages` minimising the largest stage, and every stage's phases.

    Each phase's stage bytes are linear in the stage's layer count n: a + n x b, where b is one layer's share
    (params split evenly over the layers, activations and KV cache per layer) and a holds the ends (the embedding on
    the first stage; final norm, head and logits on the last) and the per-process overhead. Under a budget C a stage
    holds min over phases of (C - a) // b layers; the smallest C whose capacities (each >= 1) cover the layers is
    found by bisection, then every stage gets one layer and the rest fill the stages in order up to capacity."""
    p, layers = job.params_total or 1, job.layers
    layer_params = max(0, p - job.first_stage_params - job.last_stage_params) / layers

    def terms(ph: Phase, first: bool, last: bool) -> tuple[str, dict[str, float], dict[str, float]]:
        ends = (job.first_stage_params if first else 0) + (job.last_stage_params if last else 0)
        a = {f: getattr(ph, f) * ends / p for f in _SCALED}
        b = {f: getattr(ph, f) * layer_params / p for f in _SCALED}
        a.update(activations=0.0, kv_cache=0.0, logits=ph.logits if last else 0.0, overhead_fixed=ph.overhead_fixed)
        b.update(activations=ph.activations / layers, kv_cache=ph.kv_cache / layers, logits=0.0, overhead_fixed=0.0)
        return ph.name, a, b

    # The stages between the first and the last hold the same terms: one row stands for all of them.
    ends = {(k == 0, k == stages - 1) for k in (0, min(1, stages - 1), stages - 1)}
    row_of = {key: [terms(ph, *key) for ph in phases] for key in ends}
    # per row kind, each phase's (sum of a, sum of b): the bytes of a stage of n layers are a + n x b
    sums = {key: [(sum(a.values()), sum(b.values())) for _, a, b in row] for key, row in row_of.items()}
    order = [(k == 0, k == stages - 1) for k in range(stages)]
    stages_of = {key: order.count(key) for key in sums}  # how many stages hold each row kind

    def capacity(budget: float) -> dict[tuple[bool, bool], int]:
        """Layers a stage of each row kind holds within `budget`."""
        return {key: min(layers if b <= 0 else int((budget - a) // b) for a, b in row) for key, row in sums.items()}

    # capacity() and its test, row kind by row kind with an early exit (the bisection below asks it ~40 times):
    # per row kind, how many stages hold it, whether a phase adds nothing per layer (it allows `layers`) and the
    # (a, b) of the phases that do
    kinds_ = [(stages_of[key], any(b <= 0 for _, b in row), [(a, b) for a, b in row if b > 0])
              for key, row in sums.items()]

    def fits(budget: float) -> bool:
        """min(capacity(budget).values()) >= 1 and the stages hold every layer."""
        held = 0
        for count, flat, growing in kinds_:
            cap = layers if flat or not growing else int((budget - growing[0][0]) // growing[0][1])
            for a, b in growing:
                held_here = int((budget - a) // b)
                if held_here < cap:
                    cap = held_here
            if cap < 1:
                return False
            held += cap * count
        return held >= layers

    lo, hi = 0.0, max(a + layers * b for row in sums.values() for a, b in row) + 1.0
    while hi - lo > 1.0:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    counts, left = [1] * stages, layers - stages
    cap = capacity(hi)
    for k, key in enumerate(order):
        more = min(left, max(0, cap[key] - 1))
        counts[k] += more
        left -= more
    counts[-1] += left  # nothing is left when fits(hi); kept so every layer lands on a stage
    rows = []
    done = set()  # stages of one row kind and layer count hold the same rows: listed once (peak_parts takes the max)
    for key, n in zip(order, counts, strict=True):
        if (key, n) in done:
            continue
        done.add((key, n))
        for name, a, b in row_of[key]:
            v = {f: _ceil(a[f] + n * b[f]) for f in a}
            rows.append((name, (v["weights"], v["gradients"], v["optimizer_state"], v["activations"], v["logits"],
                                v["kv_cache"], v["overhead_weights"] + v["overhead_step"] + v["overhead_fixed"])))
    return tuple(counts), rows


_SCALED = ("weights", "gradients", "optimizer_state", "overhead_weights", "overhead_step")


def _ceil(x: float) -> int:
    return int(-(-x // 1))


def default_setup(gpus: int, strategy: str | None, offload: str, grad_ckpt: bool = False) -> Setup:
    """The CLI's setup: ddp when more than one GPU and no strategy is named, one GPU alone otherwise."""
    return Setup(strategy or ("ddp" if gpus > 1 else "single"), gpus, grad_ckpt, offload)
