"""One exact job (method, precision, storage, optimizer, checkpointing, attention, metric) → its peak memory.

The site's figures (memory.train_profile / serve_profile) are this module's default job; here every option of a
real run is priced, phase by phase, from the same per-layer formulas (activations.block_activation_bytes):
- training: the loss backward (no gradient yet, FINDINGS.md F2), the end of the backward (all gradients; a tied
  embedding's two gradients, F6), the optimizer step with its temporaries (F5); with gradient accumulation every
  micro-batch after the first beside all the gradients (F27);
- inference as transformers' `generate` runs it (the measurement harness): one prefill of all prompts, then
  decode through the KV cache (F7). The site's serving figure is a chunked-prefill server instead (memory.py).
Bytes per option, with sources, are in the functions below; `metric` turns tensor bytes into what a tool reports.
"""

from __future__ import annotations

from dataclasses import replace

from ..config.arch import Arch
from ..graph.nodes import Graph, tied_weight_params
from ..inputs import Assumptions
from .activations import forward_locals_bytes, last_linear_params
from .attention import eager_forward_scores, head_params, passed_position_bias_bytes
from .ends import final_norm_backward_bytes, head_norm_bytes
from .experts import frozen_input_expert_bytes, held_transient_bytes
from .frameworks import (
    dequant_bytes_per_weight,
    framework_buffer_bytes,
    framework_fixed_bytes,
    framework_layer_bytes,
    loss_terms,
    own_model,
    runs_torchtune,
)
from .generate import generate_phases
from .job_options import (
    Job,
    checkpoint_inputs,
    job_regime,
    layer_input_bytes,
    optimizer_bytes,
    prepared,
)
from .job_result import JobMemory, metric_memory, phase, phase_parts
from .late_backward import EXPERTS_PHASE, SCAN_PHASE, SHARED_PHASE, late_moments
from .layer_terms import (
    adapter_params,
    end_terms,
    kept_cache_bytes,
    last_mlp_backward_bytes,
    layer_bytes,
    layer_index,
    memoised,
    regime_terms,
    skipped_layers,
)
from .math_sdpa import math_backward_bytes
from .parallel import Phase, accumulating_phases
from .recurrence import chunk_scan_moments, rglru_kept_bytes
from .storage import (
    beside_held,
    carried_input_bytes,
    dequant_forward_bytes,
    dequant_meeting,
    dequant_transient_bytes,
    saves_matmul_input,
)
from .tower_adapters import image_bytes, image_regime, pair_bytes
from .trained_weights import trained_weights

EAGER_FORWARD_PHASE = "forward (the last attention layer's softmax)"
CACHE_PHASE = "forward (the loss, autocast's cached weight copies)"
FORWARD_PHASE = "forward (the end of the last layer)"
MLP_PHASE = "backward (the last layer's MLP)"
# A 4-bit or int8 base's weight is dequantised for each matmul and freed after it (storage.dequant_transient_bytes),
# inside a layer's forward or backward, never at the loss or the final norm (F29: bitsandbytes' own kernels, simulated)
DEQUANT_PHASE = "forward (the last layer's dequantised weight)"

def job_phases(a: Arch, g: Graph, s: Assumptions, job: Job, model: str = "",
               memo: dict | None = None) -> tuple[Phase, ...]:
    """Every phase of `job` on one GPU (allocated tensors, before the metric): what memory.parallel shares out.
    `memo`: the per-layer terms already worked out in this estimate (layer_terms.regime_terms), shared."""
    a, g, job, model, memo = prepared(a, g, job, model, memo)
    if job.method == "inference":
        return tuple(generate_phases(a, g, s, job))
    return _training(a, g, s, job, model, (job.grad_ckpt,), memo)[0][0]


def training_variants(a: Arch, g: Graph, s: Assumptions, job: Job, variants: tuple[bool, ...], model: str = "",
                      memo: dict | None = None) -> tuple[list[tuple[Phase, ...]], int, int, int, tuple[int, ...]]:
    """A training job's phases once per entry of `variants` (checkpointing off or on), its trainable parameters,
    its compute bytes, its trainable weights' bytes per parameter, and each layer's activations without checkpointing
    (which a pipeline stage's share follows): what setups.training_job needs, in one pass."""
    a, g, job, model, memo = prepared(a, g, job, model, memo)
    return _training(a, g, s, job, model, variants, memo)


def job_memory(a: Arch, g: Graph, s: Assumptions, job: Job, model: str = "") -> JobMemory:
    """The peak of `job` and its phase, with the breakdown at that phase, in the `metric`'s terms."""
    parts_of = [(ph.name, phase_parts(ph)) for ph in job_phases(a, g, s, job, model)]
    name, parts = max(parts_of, key=lambda ph: sum(ph[1].values()))
    return metric_memory(name, parts, s, job, g)


def _training(a: Arch, g: Graph, s: Assumptions, job: Job, model: str, variants: tuple[bool, ...],
              memo: dict | None = None) -> tuple[list[tuple[Phase, ...]], int, int, int, tuple[int, ...]]:
    """The job's phases once per entry of `variants` (checkpointing off or on; job.grad_ckpt is not read), its
    trainable parameters, compute bytes and trainable bytes per parameter, and each layer's activations without
    checkpointing (SingleGpuJob.layer_activations). The layer terms are worked out once per
    distinct layer (Spec.distinct_layers) and summed times their counts; `memo` shares them with other jobs."""
    spec = g.spec
    lora = job.method != "full"
    r = job_regime(job)
    c = r.compute_bytes
    B, T = job.batch, job.tokens
    distinct = spec.distinct_layers
    head_mm = sum(p.matmul for p in spec.head) or tied_weight_params(a)
    # images per sample: one where the model reads any (its soft tokens are among the T tokens)
    vision = spec.reads_images
    images = (1 if vision else 0) if job.images is None else job.images
    r = image_regime(a, r, images)  # gemma-3's and Gemma-4's block mask where an image is fed
    w = trained_weights(a, g, job, r, model, images, memo)
    trainable, param_bytes, weights, copies, ckpt_copies, roles, rank, mats = w[:8]
    buffers = framework_buffer_bytes(a, g, job.loss, lora)  # the framework's own model's (torchtune's RoPE caches)
    grad = param_bytes * trainable  # gradients take the trainable weights' dtype
    state, temp = optimizer_bytes(job.optimizer, trainable, param_bytes)
    if job.optimizer == "paged-adamw" and job.metric != "nvidia-smi":  # the state it pages is out of torch's count
        state = optimizer_bytes(job.optimizer, w.unpaged, param_bytes)[0]  # (job_options.apply_metric)
    # per distinct layer: its saved bytes per sample (layer), and (LoRA on fused expert tensors,
    # lora.expert_tensors) its effective weights, kept batch-free (fixed)
    saves = job.method == "qlora" and saves_matmul_input(job.storage, job.bnb_version)
    carried = B * T * carried_input_bytes(a, distinct, job.loss, job.keep_outputs, saves, c)  # F55
    terms = regime_terms(a, g, r, rank, roles, memo)
    def per_layer(b, n):  # transformers' class, and what LitGPT's own code keeps beyond it (frameworks.py)
        return T * (layer_bytes(a, b, r, job.attention, T, saves, job.upcast_fp32, n)
                    + framework_layer_bytes(a, b, r, roles, job.lora_targets, job.loss, job.attention, T))
    layer = memoised(memo, ("layer", r, rank, roles, job.attention, T, saves, job.upcast_fp32, job.loss,
                            job.lora_targets), lambda: [per_layer(b, n) for (b, _), n in zip(distinct, terms.act,
                                                                                             strict=True)])
    # what a recomputed layer holds beside its saved tensors: its last Linear's, a frozen routed MoE's (experts.py)
    held = memoised(memo, ("recompute", r, roles, saves, job.upcast_fp32), lambda: [
        T * held_transient_bytes(b, r, roles, saves, job.upcast_fp32, a) for b, _ in distinct])
    fixed = [f + framework_fixed_bytes(a, b, r, job.loss, job.attention, T)  # LitGPT's sliding-window masks
             for (b, _), f in zip(distinct, terms.experts, strict=True)]
    # a text-only step skips the layers that run only beside an image; a pass without gradients keeps nothing
    skip = skipped_layers(a, spec, images)  # (layer_terms.skipped_layers)
    layer, held = ([0 if k else v for k, v in zip(skip, t, strict=True)] for t in (layer, held))
    layers_sum = sum(n * v for (_, n), v in zip(distinct, layer, strict=True))
    fixed_sum = sum(n * f for (_, n), f in zip(distinct, fixed, strict=True)) - (  # without checkpointing
        0 if job.upcast_fp32 or own_model(job.loss) else frozen_input_expert_bytes(a, g, roles, r))
    embed = (r.residual_bytes * spec.hidden if r.trained else 0) * T
    # what each image's tower and projector keep, without checkpointing and with it (tower_adapters.image_bytes),
    # and a sample's block of Pixtral's mask over the step's images, whose blocks between samples are added below
    pair = pair_bytes(spec, w.towers, r, a.model_type, images)
    imaging = [images * v + pair for v in image_bytes(spec, w.towers, rank, r, a.model_type)]
    embed_side, frozen, head_rate = end_terms(a, g, s, r, memo, None if own_model(job.loss) else roles)
    embed += T * embed_side
    # a frozen embedding's output needs no gradient: layer 0's norm and the dropout after it keep nothing, unless
    # enable_input_require_grads runs (checkpointing, prepare_model_for_kbit_training)
    frozen_embed = 0 if job.upcast_fp32 else T * frozen
    head, logits = T * head_rate, T * s.logits_bytes * spec.logits
    head, logits, chunk = loss_terms(a, g, job.loss, job.batch, job.tokens, c, head, logits, lora and mats is not None,
                                     r.trained)
    # overhead by how it shares out over GPUs (parallel.Phase): autocast's copies of the weights; what every
    # process holds whole (the dequantised layer, the chunked loss's transient)
    cw, nested = dequant_bytes_per_weight(job.loss, job.storage, c), job.double_quant and not runs_torchtune(job.loss)
    dequant = dequant_transient_bytes(g, job.storage, cw, mats, nested)
    # what the dequantised weight adds beside each layer's recomputation, and what meets it there (F59, F64)
    beside = [beside_held(dequant, B * h, runs_torchtune(job.loss), *dequant_meeting(
        a, g, b, r, roles, job.upcast_fp32, B * T, job.storage, cw, nested))
        for (b, _), h in zip(distinct, held, strict=True)]
    # the phases after the backward hold no activation: the same with checkpointing or without, made once
    closing: tuple[Phase, ...] = ()
    if not lora and spec.tied:  # F6: the tied weight's two gradients and their sum
        tied = 2 * param_bytes * tied_weight_params(a)
        closing = (phase("end of backward (tied-embedding gradients)", weights=weights, gradients=grad + tied,
                         optimizer_state=state),)
    closing += (phase("optimizer step", weights=weights, gradients=grad, optimizer_state=state,
                      overhead_step=temp),)
    # SDPA's math kernel: its score gradients beside its tensors (math_sdpa.math_backward_bytes), the gradients made
    math_saved, math_grads = math_backward_bytes(a, g, r, T, job.attention)
    head_grads = param_bytes * head_params(a, g) if r.trained else 0  # the loss backward's first gradients
    made = head_grads + param_bytes * max(b.params for b, _ in distinct) if r.trained and math_grads else 0
    chunked = [chunk_scan_moments(b, r, T) if r.torch_scan else (0, 0) for b, _ in distinct]
    # what one layer's own backward adds late (eager softmax, torch scan, every expert, a shared layer's weights)
    late = late_moments(a, g, r, rank, roles, memo, saves, job.upcast_fp32, T, param_bytes, job.attention, skip,
                        chunked, layer)
    # per distinct layer, the saved bytes of the layers after its last one, freed before the backward reaches it
    index = layer_index(spec, memo)
    stack_acts = tuple(B * (layer[k] + T * terms.views[k]) + fixed[k] for k in index)  # SingleGpuJob.layer_activations
    last_of = {k: j for j, k in enumerate(index)}
    later = [sum(layer[k] for k in index[last_of[i] + 1:]) if i in last_of else 0 for i in range(len(distinct))]
    # checkpointed, per distinct layer at its lowest: what the recurrent layers above keep of their recomputation
    # (recurrence.rglru_kept_bytes), but through Unsloth's checkpointing, whose backward frees the recomputed graph
    lru = [0 if job.offload_checkpoints else T * rglru_kept_bytes(b, r) for b, _ in distinct]
    first_of = {k: j for j, k in reversed(list(enumerate(index)))}
    ckpt_layer = [v + sum(lru[k] for k in index[first_of[i] + 1:]) if any(lru) and i in first_of else v
                  for i, v in enumerate(layer)]
    # checkpointing a full fine-tune: the first layer of the stack, its input alone kept (and the embedding's
    # output), and the gradients of every other layer made before its recomputation, and of its own last Linear,
    # whose backward runs first while the layer's saved tensors are all still live (read off F18's peak)
    first = next((k for k in layer_index(spec, memo) if not skip[k]), 0) if spec.blocks else 0  # with gradients
    # the layer inputs checkpointing keeps on the GPU (all of them; with Unsloth's offload, its buffers and the last)
    per_input = layer_input_bytes(g, r)
    kept_inputs, first_kept = checkpoint_inputs(job, len(spec.blocks) - len(spec.no_grad), B * T * per_input)
    first_inputs = embed + imaging[1] + first_kept * T * per_input
    first_grads = head_grads + param_bytes * (sum(n * b.params for b, n in distinct) - distinct[first][0].params
                                              + last_linear_params(distinct[first][0])) if r.trained and distinct else 0
    head_norm, final_norm = T * head_norm_bytes(g, r), T * final_norm_backward_bytes(g, r)
    # the towers' adapters take their gradients after the text layers'
    adapter_grads_first = param_bytes * (trainable - w.tower_trained - adapter_params(spec, rank, roles, memo)[first]) \
        if lora and distinct else 0
    # at the loss the logits' fp32 copy and log_softmax are made, not yet their gradient (F27: c B per logit fewer)
    fwd_less = T * c * spec.logits if job.loss == "hf" else 0
    out: list[tuple[Phase, ...]] = []
    for grad_ckpt in variants:
        lay = ckpt_layer if grad_ckpt else layer  # `lay` is read where the layers are checkpointed
        biases = T * T * passed_position_bias_bytes(a, g, r) if grad_ckpt else 0  # T5's, later layers' inputs
        cache = T * kept_cache_bytes(a, g, r, grad_ckpt, job.upcast_fp32)  # kept output's (F8); upcast's (F62)
        kept, cache = (T * c * spec.logits + cache if job.keep_outputs else 0), \
            (cache if job.upcast_fp32 or spec.no_grad else 0)
        kept_logits = B * (T * c * spec.logits if job.keep_outputs else 0)  # the last pipeline stage's alone,
        at_loss = B * max(0, head - logits) + kept_logits  # at the loss and (a kept output's logits) after it
        if not grad_ckpt:
            emb = embed - frozen_embed + imaging[0]
            views = sum(n * v for (_, n), v in zip(distinct, terms.views, strict=True))  # the cache's copies (F11)
            acts = emb + layers_sum + head + kept + T * views
            phases = [phase("loss (logits)" if logits * 2 > acts else "backward (activations)", weights=weights,
                            optimizer_state=state, activations=B * (acts - logits) + fixed_sum + carried,
                            logits=B * logits, overhead_weights=copies, last_stage=chunk, experts=fixed_sum,
                            head_activations=at_loss)]
            if cache and not kept:  # the loss, its gradient not made yet (F27), the cache alive (F62)
                phases.append(phase("loss (logits)", weights=weights, optimizer_state=state, overhead_weights=copies,
                                    activations=B * (acts - logits + cache) + fixed_sum + carried,
                                    logits=B * (logits - fwd_less), last_stage=chunk, experts=fixed_sum,
                                    head_activations=at_loss))
            mlp = T * last_mlp_backward_bytes(a, distinct[index[-1]][0], r, roles, job.upcast_fp32) if index else 0
            if final_norm or mlp:  # the final norm's backward, the head's freed; then the last frozen MLP's (F65)
                # (the final norm's is the last pipeline stage's; an MLP's backward is each stage's own)
                phases.append(phase("backward (the final norm)" if head_norm + final_norm >= mlp else MLP_PHASE,
                                    weights=weights, optimizer_state=state, overhead_weights=copies, experts=fixed_sum,
                                    activations=B * (acts - head + max(head_norm + final_norm, mlp)) + fixed_sum,
                                    head_activations=kept_logits + B * max(0, head_norm + final_norm - mlp),
                                    stage_whole=B * mlp))
            fwd = T * held_transient_bytes(distinct[index[-1]][0], r, roles, saves, job.upcast_fp32, a,
                                            backward=False) if lora and index else 0
            if fwd:  # the last layer's end, every layer's tensors saved (F44), and the model's locals (F58)
                fwd += T * forward_locals_bytes(g, r)
                phases.append(phase(FORWARD_PHASE, weights=weights, optimizer_state=state, overhead_weights=copies,
                                    activations=B * (emb + layers_sum + T * views + fwd + cache) + fixed_sum + carried,
                                    experts=fixed_sum, stage_whole=B * fwd))
            if dequant:  # the last layer's last quantised matmul: every layer's saved tensors, its weight dequantised
                last = T * dequant_forward_bytes(a, g, distinct[index[-1]][0], r, roles, job.upcast_fp32)
                phases.append(phase(DEQUANT_PHASE, weights=weights, optimizer_state=state,
                                    activations=B * (emb + layers_sum + T * views + cache + last) + fixed_sum + carried,
                                    overhead_weights=copies, overhead_fixed=dequant, experts=fixed_sum,
                                    stage_whole=B * last))
            if any(f for f, _ in chunked):  # the last Mamba-2 layer's forward, before the head (recurrence)
                phases.append(phase("forward (the torch scan's chunks)", weights=weights, optimizer_state=state,
                                    activations=B * (emb + layers_sum + max(f for f, _ in chunked)) + fixed_sum
                                    + carried,
                                    overhead_weights=copies, overhead_fixed=dequant, experts=fixed_sum,
                                    stage_whole=B * max(f for f, _ in chunked)))
        else:
            # non-reentrant checkpointing per decoder layer (transformers gradient_checkpointing_enable): each
            # layer keeps only its input through the forward. At the loss nothing is recomputed; then the backward
            # reruns one layer at a time, whose saved tensors live beside the gradients made so far (the head's at
            # the last layer; a full fine-tune's every later layer's at the first).
            inputs = embed + imaging[1] + kept_inputs * T * per_input
            # the layer recomputed at the peak, and its per-expert tensors. Its working set alone (`layer`, not
            # `lay`: the recurrent layers' kept recomputation follows the layers) is each pipeline stage's whole
            # (Phase.stage_whole)
            recomputed = max(zip(lay, held, fixed, beside, layer, strict=True),
                             key=lambda t: B * (t[0] + t[1]) + t[2] + t[3], default=(0, 0, 0, 0, 0))
            phases = [phase("loss (logits)", weights=weights, optimizer_state=state,
                            activations=B * (inputs + head + kept - logits) + carried + biases, logits=B * logits,
                            overhead_weights=ckpt_copies[0], last_stage=chunk, head_activations=at_loss),
                      phase("backward (recomputing a checkpointed layer)", weights=weights, optimizer_state=state,
                            gradients=head_grads,
                            activations=B * inputs + B * (recomputed[0] + recomputed[1]) + recomputed[2] + biases,
                            overhead_weights=ckpt_copies[1], overhead_fixed=recomputed[3],
                            experts=recomputed[2], stage_whole=B * (recomputed[4] + recomputed[1]) + recomputed[2])]
            if r.trained and r.amp:  # a full fine-tune under autocast: its cached copies at the loss (LoRA's
                # are its adapters', in ckpt_copies already; a frozen weight's are not cached): autocast's cache
                # keeps every layer's bf16 copy of its fp32 weights until the autocast region exits
                # (aten/src/ATen/autocast_mode.cpp cached_cast: fp32 leaves that require grad), checkpointed or not
                phases.append(phase(CACHE_PHASE, weights=weights, optimizer_state=state,
                                    activations=B * (inputs + head + kept - logits) + carried + biases,
                                    logits=B * (logits - fwd_less), head_activations=at_loss,
                                    overhead_weights=copies, last_stage=chunk))
            if any(f for f, _ in chunked):  # a Mamba-2 layer's recomputed forward at its chunks (recurrence)
                k = max(range(len(distinct)), key=lambda i: B * (lay[i] + chunked[i][0]) + fixed[i])
                phases.append(phase("backward (recomputing the torch scan's chunks)", weights=weights,
                                    optimizer_state=state, gradients=head_grads,
                                    activations=B * (inputs + lay[k] + chunked[k][0]) + fixed[k] + biases,
                                    overhead_weights=ckpt_copies[1], overhead_fixed=dequant, experts=fixed[k],
                                    stage_whole=B * (layer[k] + chunked[k][0]) + fixed[k]))
            if r.trained:  # a full fine-tune's gradients grow as the backward goes down the stack while the
                # checkpointed inputs are freed: the first layer's recomputation, beside every later layer's gradients
                phases.append(phase("backward (recomputing the first checkpointed layer)", weights=weights,
                                    optimizer_state=state, gradients=first_grads,
                                    activations=B * (first_inputs + lay[first] + held[first]) + fixed[first],
                                    overhead_weights=ckpt_copies[1], overhead_fixed=beside[first],
                                    experts=fixed[first], stage_whole=B * (layer[first] + held[first]) + fixed[first]))
            elif lora:  # so do the adapters', which counts where they are large (LoRA on many experts' tensors):
                # every later layer's, beside the first layer's recomputation
                phases.append(phase("backward (recomputing the first checkpointed layer)", weights=weights,
                                    optimizer_state=state, gradients=adapter_grads_first,
                                    activations=B * (first_inputs + lay[first] + held[first]) + fixed[first],
                                    overhead_weights=ckpt_copies[1], overhead_fixed=beside[first],
                                    experts=fixed[first], stage_whole=B * (layer[first] + held[first]) + fixed[first]))
        if any(g for g, _ in terms.grads):  # the last (recomputed) layer's adapted down's backward (F10)
            i, (weight_grad, per_token) = max(enumerate(terms.grads), key=lambda t: t[1][0] + B * T * t[1][1]
                                              + (B * lay[t[0]] + fixed[t[0]] if grad_ckpt else 0))
            live, experts = (B * (inputs + lay[i]) + biases, fixed[i]) if grad_ckpt else (B * (emb + layers_sum), fixed_sum)
            phases.append(phase("backward (an adapted expert tensor's gradient)", weights=weights,
                                optimizer_state=state, activations=live + experts + weight_grad + B * T * per_token,
                                overhead_weights=ckpt_copies[1] if grad_ckpt else copies, overhead_fixed=dequant,
                                experts=experts + weight_grad,
                                stage_whole=(B * layer[i] + experts if grad_ckpt else 0) + weight_grad
                                + B * T * per_token))
        if math_grads:  # the last (the recomputed) layer's attention backward
            live = inputs if grad_ckpt else emb + layers_sum - min(layer) + T * views + kept
            phases.append(phase("backward (attention scores' gradients)", weights=weights, gradients=made,
                                optimizer_state=state, activations=B * (live + math_saved + math_grads)
                                + (biases if grad_ckpt else fixed_sum),
                                overhead_weights=ckpt_copies[-1] if grad_ckpt else copies, overhead_fixed=dequant,
                                stage_whole=B * (math_saved + math_grads),
                                head_activations=0 if grad_ckpt else kept_logits))
        moments = [m for m in late if not grad_ckpt or m.name != SHARED_PHASE]  # the recomputation casts anew
        if moments:  # the layer whose (recomputed) softmax or scan backward holds the most, the head's tensors freed
            name, k, extra, made_after, freed = max(moments, key=lambda t: B * t[2] + t[3] - t[4]
                                                    + (B * lay[t[1]] + fixed[t[1]] if grad_ckpt else -B * later[t[1]]))
            live, experts = (B * (inputs + lay[k] + extra) + biases, fixed[k]) if grad_ckpt else \
                (B * (emb + layers_sum - later[k] + T * views + kept + extra), fixed_sum)
            if name in (SCAN_PHASE, EXPERTS_PHASE, SHARED_PHASE) and not grad_ckpt and r.trained and r.amp:
                freed += 2 * head_mm  # the head's backward ran: its autocast copy is freed
            phases.append(phase(name, weights=weights, optimizer_state=state,
                                gradients=head_grads + made_after, activations=live + experts,
                                overhead_fixed=dequant, experts=experts,
                                overhead_weights=(ckpt_copies[1] if grad_ckpt else copies) - freed,
                                # (a scan's `extra` is net of its tail's tensors freed: the rest follows the layers)
                                stage_whole=B * (layer[k] + extra) + experts if grad_ckpt else B * max(0, extra),
                                head_activations=0 if grad_ckpt else kept_logits))
        held_scores = eager_forward_scores(a, g, r, T, grad_ckpt) if job.attention == "eager" else 0
        if held_scores:  # the largest attention layer's softmax in the forward: its locals' scores (attention.py)
            k = max(range(len(distinct)), key=lambda i: lay[i])
            live = inputs + lay[k] if grad_ckpt else emb + layers_sum + T * views + kept
            phases.append(phase(EAGER_FORWARD_PHASE, weights=weights, optimizer_state=state, overhead_fixed=dequant,
                                activations=B * (live + held_scores) + (fixed[k] + biases if grad_ckpt else fixed_sum) + carried,
                                overhead_weights=ckpt_copies[0] if grad_ckpt else copies,
                                stage_whole=B * (layer[k] + held_scores) + fixed[k] if grad_ckpt else B * held_scores,
                                head_activations=0 if grad_ckpt else kept_logits))
        scan_first = [t for t in late if t[0] == SCAN_PHASE and t[1] == first]
        if grad_ckpt and r.trained and scan_first:  # a full fine-tune's first recomputed layer: every later
            # layer's gradients made (as F18's phase), beside that layer's scan backward
            _, k, extra, made_after, freed = scan_first[0]
            phases.append(phase(SCAN_PHASE, weights=weights, optimizer_state=state,
                                gradients=first_grads + made_after - param_bytes * last_linear_params(distinct[k][0]),
                                activations=B * (first_inputs + lay[k] + extra) + fixed[k], overhead_fixed=dequant,
                                experts=fixed[k], overhead_weights=ckpt_copies[1] - freed,
                                stage_whole=B * (layer[k] + extra) + fixed[k]))
        ends = tuple(replace(p, activations=p.activations + B * sum(lru[k] for k in index)) for p in closing) \
            if grad_ckpt and any(lru) else closing  # every recurrent layer's recomputation, kept (F66)
        # every phase holding activations holds the embedding's output (and a tower's) on the first pipeline stage,
        # and a tower's mask, its blocks between the B samples too; the closing ones hold neither. job_limits moves a
        # batch-1 job to batch b by activations_pair
        firsts = B * (embed + imaging[1] if grad_ckpt else emb) + B * (B - 1) * pair
        phases = [replace(p, activations=p.activations + B * (B - 1) * pair, activations_pair=pair,
                          embed_activations=firsts) for p in phases]
        every = tuple(replace(p, overhead_fixed=p.overhead_fixed + buffers) for p in (*phases, *ends)) \
            if buffers else (*phases, *ends)  # only a framework's own model has buffers to add (the site's none)
        out.append(accumulating_phases(every, grad) if job.grad_accum > 1 else every)
    return out, trainable, c, param_bytes, stack_acts
