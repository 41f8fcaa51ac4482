"""Data-parallel sharding of one job (parallel.py's zero2, zero3, fsdp and fsdp+ep; its docstring has the rules and
sources): every phase's parts on one of N ranks, and the CPU memory an offload needs. Pure: numbers in, numbers out.
The job, its phases and the setup are parallel.SingleGpuJob, parallel.Phase and parallel.Setup, typed loosely here:
parallel imports this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPUS_PER_NODE = 8  # tp+pp: tensor parallel inside a node of 8, pipeline stages across nodes (vLLM, Megatron-LM)
# ZeRO-3 steps the optimizer one sub-group of a rank's partition at a time (deepspeed/runtime/zero/config.py,
# DeepSpeedZeroConfig.sub_group_size: 1e9 elements by default), each with its fp32 gradient
ZERO3_SUB_GROUP = 1_000_000_000
# ZeRO-2 and ZeRO-3 copy each gradient into a contiguous reduce bucket (contiguous_gradients, on by default) of
# reduce_bucket_size elements, 5e8 by default (deepspeed/runtime/zero/config.py), in the communication dtype, the
# model's 16-bit one. Accelerate keeps the default where no DeepSpeed config file sets it; HF's example configs say
# "auto", which Accelerate and the Trainer fill with hidden_size ** 2 (accelerator.py _prepare_deepspeed).
ZERO_REDUCE_BUCKET = 500_000_000
EXPERT_PARALLEL = GPUS_PER_NODE  # fsdp+ep: the experts spread over the 8 GPUs of a node (all-to-all over NVLink)


@dataclass(frozen=True)
class Sharding:
    """One job's phases under zero2, zero3 or fsdp (and its offload) worked out once, so that N GPUs' parts are a
    few ceiling divisions (the plan search asks for many N). Per phase (name, w0, wx, wm, g0, gx, gs, sx, act,
    logits, kv, o0, ox): weights w0 + ceil(wx / N) + wm x ceil(master / N), gradients g0 + ceil(gx / N) +
    min(ceil(gs / N), the bytes of one ZERO3_SUB_GROUP), optimizer state ceil(sx / N), overhead o0 + ceil(ox / N);
    activations, logits and KV cache whole. cpu_total: the offloaded bytes of all ranks (cpu_bytes_per_node)."""

    master: int
    phases: tuple[tuple, ...]
    cpu_total: int

    def rows(self, n: int) -> list[tuple[str, tuple[int, ...]]]:
        """Every phase's parts (PARTS order) on one of `n` ranks; int(-(-(x / n) // 1)) is _ceil(x / n)."""
        m = int(-(-(self.master / n) // 1))
        return [(name, (w0 + int(-(-(wx / n) // 1)) + wm * m,
                        g0 + int(-(-(gx / n) // 1)) + (min(int(-(-(gs / n) // 1)), cap) if gs else 0),
                        int(-(-(sx / n) // 1)), act, logits, kv, o0 + int(-(-(ox / n) // 1))))
                for name, w0, wx, wm, g0, gx, (gs, cap), sx, act, logits, kv, o0, ox in self.phases]

    def peak(self, n: int) -> tuple[int, ...]:
        """The parts of the first phase of the largest sum on one of `n` ranks (what peak_parts picks)."""
        return _peak_row(self.rows(n))[1]

    def floor(self) -> tuple[int, ...]:
        """The parts of the largest phase on one rank as the count grows without end: the constants of `limits`,
        what no count divides (a rank's own activations and logits, the gathered units, zero2's weights)."""
        return _peak_row([(name, (w0, g0, 0, act, logits, kv, o0))
                          for name, w0, _, _, g0, _, _, _, act, logits, kv, o0, _ in self.phases])[1]

    def cpu(self, n: int) -> int:
        """PerGpu.cpu_bytes_per_node on `n` GPUs."""
        return _per_node(self.cpu_total, n)

    def limits(self) -> tuple[tuple[int, int], ...] | None:
        """Per phase (A, S): its constants and the sum of its numerators, so that every ceil(x / N) being at least
        x / N, its bytes on N GPUs are at least A + S / N (a sub-group's gradient, min(gs / N, cap), left out: at
        least 0); None where the peak may rise with the count (a negative term), where no such bound says where it
        can start fitting."""
        out = []
        for _, w0, wx, wm, g0, gx, _, sx, act, logits, kv, o0, ox in self.phases:
            if wm < 0 or min(wx, gx, sx, ox) < 0:
                return None
            out.append((w0 + g0 + act + logits + kv + o0, wx + gx + sx + ox + wm * self.master))
        return tuple(out)


def sharded(job: Any, strategy: str, grad_ckpt: bool = False, offload: str = "none", prefetch: bool = True,
            sync_each_batch: bool = False, mixed_units: bool = False) -> Sharding:
    """`job` under zero2, zero3 or fsdp, as a Sharding; what does not depend on the phase is worked out once."""
    s, c, t = strategy, job.compute_bytes, job.params_trainable
    trainable_share = t / job.params_total if job.params_total else 0.0
    # A trainable weight stored above compute dtype (AMP's fp32 master): DeepSpeed keeps a 16-bit model copy
    # (replicated by zero2, sharded by zero3) and partitions the fp32 master with the optimizer state; FSDP2 shards
    # the params in their own dtype and gathers them in param_dtype (MixedPrecisionPolicy).
    master = job.trainable_weight_bytes * t if _master_excess(job) else 0
    copy16 = c * t if master and s not in ("fsdp", "fsdp+ep") else 0
    # zero3, fsdp: the units being computed and prefetched, and one reduce-scatter input (the unit's gradient);
    # fsdp+ep gathers a unit's experts only over its own expert shard
    unit = job.unit_params - (job.unit_expert_params - _ceil(job.unit_expert_params / EXPERT_PARALLEL)
                              if s == "fsdp+ep" else 0)
    # FSDP1 with use_orig_params=True flattens a unit's frozen and trainable params into one FlatParameter, whose
    # gradient covers them all (the class docstring of torch/distributed/fsdp/fully_sharded_data_parallel.py: mixing
    # them is "recommended to avoid ... to prevent higher than expected gradient memory usage"; torch 2.1's said
    # "equivalent to not freezing those parameters").
    # LitGPT's LoRA wraps each Block so (finetune/lora.py: FSDPStrategy(auto_wrap_policy={Block})); the params
    # outside the layers, all frozen, form their own unit and have none.
    layer_params = max(0, job.params_total - job.first_stage_params - job.last_stage_params)
    grow = (layer_params + t) / t if mixed_units and t else 1.0
    # DeepSpeed ZeRO-3 gathers module by module, so the LM head (a tied embedding standing for it) is gathered whole
    # at the loss in place of a layer (beside the prefetched one): its estimator's largest layer is the largest module
    # (estimate_zero3_model_states_mem_needs_all_live: max numel of a module's own params), the head of most LLMs
    head = max(job.last_stage_params, job.tied_head_params) if s == "zero3" else 0
    unit_grad = _ceil(job.grad_bytes * unit if mixed_units else c * unit * trainable_share)
    # Accumulating over micro-batches under FSDP's no_sync (FSDP2: set_requires_gradient_sync(False)), as Lightning
    # Fabric's no_backward_sync and Accelerate's accumulate (GradientAccumulationPlugin sync_each_batch=False) run
    # every micro-batch but a step's last: FSDP1's _post_backward_hook returns before its reduce-scatter, so every
    # unit's gradient stays unsharded on every rank, added into across micro-batches ("FSDP will accumulate the
    # full model gradients (instead of gradient shards) until the eventual sync": FullyShardedDataParallel.no_sync;
    # with CPU offload too, "the gradients will not be offloaded to CPU when inside the context manager").
    whole = job.accumulating and s in ("fsdp", "fsdp+ep") and not sync_each_batch
    units = 2 if prefetch else 1
    # FSDP2's root (the params outside the layers) is not resharded after forward (_fsdp_state.py: "For the
    # root, do not reshard after forward"): gathered through forward and backward beside the layer units.
    root = job.first_stage_params + job.last_stage_params if s in ("fsdp", "fsdp+ep") else 0
    # a quantised base's units are gathered packed (SingleGpuJob.unit_bytes: FSDP-QLoRA), the root in compute dtype
    per_unit = job.unit_bytes * unit / job.unit_params if job.unit_bytes and job.unit_params else c * unit
    gathered_computing = max(_ceil(units * per_unit), _ceil((units - 1) * per_unit) + c * head) + c * root
    zero2 = s == "zero2"
    # DeepSpeed ZeRO-3 allocates at init one flat partition of every trainable gradient, in the gradient accumulation
    # dtype (the model's 16-bit dtype under ZeRO: DeepSpeedEngine.get_data_types), on the GPU unless the optimizer is
    # offloaded (stage3.py, DeepSpeedZeroOptimizer_Stage3: grad_partitions_flat_buffer); the backward reduce-scatters
    # into it, and the step adds one sub-group's fp32 gradient at a time (_prepare_fp32_grad_for_sub_group).
    partition = c * t if s == "zero3" and offload == "none" else 0
    # The reduce bucket is allocated whatever the model's size, on the GPU even under offload: ZeRO-3 at init,
    # beside the optimizer state, kept through every phase (stage3.py: the ipg buckets' buffer); ZeRO-2 at each
    # backward's first gradient hook, released at its end (stage_1_and_2.py process_gradients -> setup_buckets,
    # _release_ipg_buffers): the phases _gradients_made.
    bucket = c * ZERO_REDUCE_BUCKET if s in ("zero2", "zero3") else 0
    rows = []
    for ph in job.phases_ckpt if grad_ckpt else job.phases:
        computing = ph.computing
        reducing = bucket if s == "zero3" or _gradients_made(ph.name) else 0
        buffer = unit_grad if computing and not zero2 else 0
        if zero2:  # replicated weights less the master, which is sharded
            w0, wx, wm = ph.weights - master + copy16, 0, 1
            copies = 0 if master else ph.overhead_weights
        else:  # sharded params, the gathered units, the reduce-scatter input
            w0, wx, wm, copies = gathered_computing if computing else 0, ph.weights + copy16, 0, 0
        grads = _ceil(ph.gradients * grow) if mixed_units else ph.gradients
        g0, gx = (buffer + grads, 0) if whole and computing else (buffer, grads)
        sub_group = (0, 0)
        if partition:  # the partition in every phase; the step's fp32 gradients one sub-group at a time
            gx, sub_group = partition, (0, 0) if computing else (grads, _ceil(grads / t * ZERO3_SUB_GROUP))
        sx, ox = ph.optimizer_state, ph.overhead_step
        if offload == "optimizer":  # ZeRO-Offload: master, gradients, state and the step on the CPU
            wm, gx, sx, ox = wm - 1, 0, 0, 0
        elif offload == "params":  # everything on the CPU; the GPU holds the gathered units and their gradients
            w0, wx, wm, gx, sx, ox = w0 if not zero2 else 0, 0, 0, 0, 0, 0
        act = ph.activations - (ph.expert_activations - _ceil(ph.expert_activations / EXPERT_PARALLEL)
                                if s == "fsdp+ep" else 0)
        rows.append((ph.name, w0, wx, wm, g0, gx, sub_group, sx, act, ph.logits, ph.kv_cache,
                     copies + ph.overhead_fixed + ph.last_stage + reducing, ox))
    return Sharding(master, tuple(rows), _cpu_total(job, offload))


def _gradients_made(name: str) -> bool:
    """Whether a phase comes after the backward's first gradient (the LM head's, whose hook allocates ZeRO-2's
    reduce bucket): a moment inside the backward past the loss. At the loss (the phase named for its logits or, where
    they are the smaller, its activations), in a forward and at the step the bucket does not exist."""
    return name.startswith(("backward (", "end of backward")) and name != "backward (activations)"


def cpu_bytes_per_node(job: Any, setup: Any) -> int:
    """PerGpu.cpu_bytes_per_node: the offloaded bytes the ranks of one node hold together, each rank its 1/N shard
    of _cpu_total (0 without offload)."""
    return _per_node(_cpu_total(job, setup.offload), setup.gpus)


def _per_node(total: int, n: int) -> int:
    """Of `total` bytes shared out 1/N per rank over `n` GPUs, what the ranks of one node (at most GPUS_PER_NODE)
    hold together."""
    return _ceil(total / n * min(n, GPUS_PER_NODE)) if total else 0


def _cpu_total(job: Any, offload: str) -> int:
    """Offloaded bytes of all ranks: the master copy, gradients and optimizer state (optimizer), and the params
    too (params). The step on the CPU holds no temporary as large as the parameters: DeepSpeedCPUAdam updates in
    place (csrc/adam/cpu_adam), and torch.optim keeps foreach to accelerator tensors (optimizer.py
    _default_to_fused_or_foreach), a CPU step running its for-loop. DeepSpeed's estimators multiply the total by an
    `additional_buffer_factor` (1.5) for pinned staging buffers; that factor is left to the caller."""
    if offload == "none":
        return 0
    peak = max(job.phases, key=lambda ph: ph.weights + ph.gradients + ph.optimizer_state)
    t = job.params_trainable
    total = job.grad_bytes * t + peak.optimizer_state
    if offload == "optimizer":
        total += job.trainable_weight_bytes * t if _master_excess(job) else 0
    else:
        total += peak.weights
    return total



def _master_excess(job: Any) -> int:
    """Bytes the trainable weights hold above a compute-dtype copy (AMP's fp32 master: (4 - 2) x T)."""
    return max(0, job.trainable_weight_bytes - job.compute_bytes) * job.params_trainable



def _peak_row(rows: list[tuple[str, tuple[int, ...]]]) -> tuple[str, tuple[int, ...]]:
    """The first phase of the largest sum (the first of equals): (name, parts in PARTS order)."""
    best, top = rows[0], -1
    for row in rows:
        total = sum(row[1])
        if total > top:
            best, top = row, total
    return best


def _ceil(x: float) -> int:
    return int(-(-x // 1))
