"""One exact job (method, precision, storage, optimizer, checkpointing, attention, metric) → its peak memory.

The site's figures (memory.train_profile / serve_profile) are this module's default job; here every option of a
real run is priced, phase by phase, from the same per-layer formulas (activations.block_activation_bytes):
- training: the loss backward (no gradient yet, FINDINGS.md F2), the end of the backward (all gradients; a tied
  embedding's two gradients, F6), the optimizer step with its temporaries (F5);
- inference as transformers' `generate` runs it (the measurement harness): one prefill of all prompts, then
  decode through the KV cache (F7). The site's serving figure is a chunked-prefill server instead (memory.py).
Bytes per option, with sources, are in the functions below; `metric` turns tensor bytes into what a tool reports.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ...errors import JobError
from ..config.arch import Arch, Quant
from ..graph.nodes import Graph
from ..inputs import Assumptions
from .activations import block_activation_bytes, head_activation_bytes, regime
from .lora import adapted_linears, lora_params, target_roles
from .parallel import Phase
from .profile import kv_bytes_of_block, per_distinct_layer
from .storage import _mat_elements

METHODS = ("full", "lora", "qlora", "inference")


PRECISIONS = ("amp", "bf16", "fp32")


WEIGHTS = ("bf16", "fp16", "fp32", "int8", "nf4", "gptq-int4", "fp8")


OPTIMIZERS = ("adamw", "adamw8bit", "paged-adamw", "sgd")


ATTENTIONS = ("sdpa", "eager")


METRICS = ("allocated", "reserved", "nvidia-smi")


PARTS = ("weights", "gradients", "optimizer_state", "activations", "logits", "kv_cache", "overhead")


# Storage of a quantised base, per nn.Linear inside the layers (embeddings, norms and the LM head stay 16-bit:
# bitsandbytes skips lm_head, transformers' get_keys_to_not_convert). Read with quant._mat_elements.
QUANTS = {
    # bnb NF4: 2 weights per uint8 + fp32 absmax per 64 (Dettmers et al. 2023, QLoRA, arXiv:2305.14314 §2)
    "nf4": Quant("bitsandbytes", 4, 2, 64, 4.0, "bnb NF4, blocksize 64"),
    # LLM.int8(): int8 weight + fp32 scale per output row (bitsandbytes Int8Params SCB)
    "int8": Quant("bitsandbytes", 8, 1, 0, 4.0, "bnb LLM.int8()"),
    # GPTQ int4 (AutoGPTQ / gptqmodel): packed int32 qweight, qzeros, fp16 scales per 128 inputs, g_idx
    "gptq-int4": Quant("gptq", 4, 8, 128, 2.0, "GPTQ int4, group 128"),
    # fp8 e4m3 weight + fp32 scale per output channel (transformers FbgemmFp8Linear)
    "fp8": Quant("fp8", 8, 1, 0, 4.0, "fp8 e4m3, per-channel scale"),
}


# QLoRA's double quantisation: the fp32 absmax per 64 becomes uint8 + an fp32 absmax per 256 of them
# (QLoRA §2 "Double Quantization": 0.5 -> 0.127 bits per parameter): 1/64 + 4/(64 x 256) bytes per weight.
DOUBLE_QUANT_SAVING = 4 / 64 - (1 / 64 + 4 / (64 * 256))


# bitsandbytes 8-bit optimizers: two uint8 states + one fp32 absmax per 256-element block each
# (bitsandbytes/optim/optimizer.py Optimizer2State.init_state, blocksize 256; Dettmers et al. 2022,
# arXiv:2110.02861). Tensors under 4,096 elements stay 32-bit (min_8bit_size); their share is ignored.
ADAMW8BIT_STATE_BYTES = 2 + 2 * 4 / 256


@dataclass(frozen=True)
class Job:
    """The options of one run (the CLI's --method ... --metric). weights "" = follows precision (bf16 base for
    LoRA, NF4 for QLoRA, bf16 served; fp32 with --precision fp32)."""

    method: str = "full"
    precision: str = "amp"
    weights: str = ""
    double_quant: bool = False  # QLoRA's nested absmax quantisation (nf4 only)
    optimizer: str = "adamw"
    grad_ckpt: bool = False
    lora_rank: int = 16
    lora_targets: str = "all-linear"
    batch: int = 1
    tokens: int = 2048
    new_tokens: int = 0
    attention: str = "sdpa"
    metric: str = "allocated"

    def to_dict(self) -> dict[str, Any]:
        """The options, with the storage the default resolves to."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "weights": self.storage}

    @property
    def storage(self) -> str:
        if self.weights:
            return self.weights
        if self.precision == "fp32":
            return "fp32"
        return "nf4" if self.method == "qlora" else "bf16"


@dataclass(frozen=True)
class JobMemory:
    peak_bytes: int
    peak_phase: str
    breakdown: tuple[tuple[str, int], ...]  # PARTS at the peak phase; they sum to peak_bytes


def validate(job: Job, model: str) -> None:
    for key, value, allowed in (("method", job.method, METHODS), ("precision", job.precision, PRECISIONS),
                                ("weights", job.storage, WEIGHTS), ("optimizer", job.optimizer, OPTIMIZERS),
                                ("attention", job.attention, ATTENTIONS), ("metric", job.metric, METRICS)):
        if value not in allowed:
            raise JobError(model, key, value, f"must be one of {', '.join(allowed)}")
    for key, value in (("batch", job.batch), ("tokens", job.tokens), ("lora_rank", job.lora_rank)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise JobError(model, key, value, "must be a positive integer")
    if job.new_tokens < 0 or (job.new_tokens and job.method != "inference"):
        raise JobError(model, "new_tokens", job.new_tokens, "is for method inference, and must be >= 0")
    if job.method == "full" and job.weights and job.weights != {"amp": "fp32"}.get(job.precision, job.precision):
        raise JobError(model, "weights", job.weights, f"a full fine-tune trains the weights in its precision "
                                                      f"({job.precision}); a quantised or other base is not trainable")
    if job.method == "qlora" and job.storage not in ("nf4", "int8", "gptq-int4", "fp8"):
        raise JobError(model, "weights", job.storage, "QLoRA needs a quantised base (nf4, int8, gptq-int4, fp8)")
    if job.double_quant and job.storage != "nf4":
        raise JobError(model, "double_quant", True, f"is for nf4 weights, not {job.storage}")


def weight_bytes(g: Graph, storage: str, double_quant: bool = False, mats: dict | None = None) -> int:
    """Bytes of the whole model's weights stored as `storage` (quantised: the layers' Linears; the rest 16-bit)."""
    spec = g.spec
    if storage in ("bf16", "fp16", "fp32"):
        return (4 if storage == "fp32" else 2) * g.params_total
    q = QUANTS[storage]
    total = 2.0 * g.params_total
    for (count, i, o), times in (mats or layer_mats(g)).items():
        total += times * (_mat_elements(q, count, i, o)[1] - 2 * count * i * o)
        if double_quant:
            total -= times * DOUBLE_QUANT_SAVING * count * i * o
    return int(total)


def layer_mats(g: Graph) -> dict[tuple[int, int, int], int]:
    """Every weight matrix (count, in, out) of the layers' parts and how often it occurs. The parts of repeated
    layers share their `mats` and `linears` tuples (Block.numbered copies a layer's parts field by field), so each
    distinct pair is expanded once: the same sum as a walk over every part, in a fraction of the time."""
    layers: dict[int, list] = {}  # numbered copies of one layer share its `linears` tuple: walk its parts once
    for b in g.spec.blocks:
        entry = layers.get(id(b.linears)) if b.linears else None
        if entry is None:
            layers[id(b.linears) if b.linears else id(b)] = [b, 1]
        else:
            entry[1] += 1
    seen: dict[tuple[int, int], list] = {}
    for b, copies in layers.values():
        for p in b.parts:
            key = (id(p.mats), id(p.linears))
            entry = seen.get(key)
            if entry is None:
                seen[key] = [p, copies]
            else:
                entry[1] += copies
    tally: dict[tuple[int, int, int], int] = {}
    for p, times in seen.values():
        for m in p.weight_mats:
            tally[m] = tally.get(m, 0) + times
    return tally


def dequant_transient_bytes(g: Graph, storage: str, c: int, mats: dict | None = None) -> int:
    """A 4-bit or int8 base's largest Linear dequantised to the compute dtype for a matmul (bitsandbytes
    MatMul4Bit: dequantize_4bit(W) @ x, freed after; its backward does the same); GPTQ and fp8 kernels read the
    packed weight: 0."""
    if storage not in ("nf4", "int8"):
        return 0
    return c * max((i * o for _, i, o in (mats or layer_mats(g))), default=0)


def score_bytes(a: Arch, c: int) -> int:
    """Bytes per attention-score element eager attention keeps (transformers' eager_attention_forward):
    softmax(QK^T, dtype=float32) (fp32, saved by softmax) and its cast to the query dtype (saved by the AV
    matmul); dropout 0 keeps no mask. Gemma-2's logit soft-capping adds tanh's saved output
    (modeling_gemma2.eager_attention_forward)."""
    return 4 + c + (c if a.raw.get("attn_logit_softcapping") else 0)


def eager_scores_bytes(a: Arch, g: Graph, tokens: int, c: int, one_layer: bool = False) -> int:
    """Per sequence: heads x T x T score elements per attention layer (every layer's, or the largest one's when
    only one layer's tensors live: checkpointing's recomputation, serving)."""
    spec = g.spec
    heads = [p.act32 for b in spec.blocks for p in b.parts if p.attn_flops and not p.type.startswith("MoE")]
    return (max(heads, default=0) if one_layer else sum(heads)) * tokens * tokens * score_bytes(a, c)


def _phase(name: str, **parts: int) -> Phase:
    """One phase; `overhead` comes split by how it shares out over GPUs (parallel.Phase): autocast's weight
    copies, the optimizer step's temporaries, and what every process holds whole."""
    return Phase(name, **{k: int(v) for k, v in parts.items()}, computing=name != "optimizer step")


def job_phases(a: Arch, g: Graph, s: Assumptions, job: Job, model: str = "") -> tuple[Phase, ...]:
    """Every phase of `job` on one GPU (allocated tensors, before the metric): what memory.parallel shares out."""
    model = model or a.model_type
    validate(job, model)
    return tuple(_inference(a, g, s, job) if job.method == "inference" else _training(a, g, s, job, model))


def phase_parts(ph: Phase) -> dict[str, int]:
    """A phase as the breakdown's PARTS (overhead summed)."""
    return {"weights": ph.weights, "gradients": ph.gradients, "optimizer_state": ph.optimizer_state,
            "activations": ph.activations, "logits": ph.logits, "kv_cache": ph.kv_cache,
            "overhead": ph.overhead_weights + ph.overhead_step + ph.overhead_fixed}


def job_memory(a: Arch, g: Graph, s: Assumptions, job: Job, model: str = "") -> JobMemory:
    """The peak of `job` and its phase, with the breakdown at that phase, in the `metric`'s terms."""
    parts_of = [(ph.name, phase_parts(ph)) for ph in job_phases(a, g, s, job, model)]
    name, parts = max(parts_of, key=lambda ph: sum(ph[1].values()))
    return metric_memory(name, parts, s, job, g)


def metric_memory(name: str, parts: dict[str, int], s: Assumptions, job: Job, g: Graph) -> JobMemory:
    """A peak's breakdown (one GPU's, or the largest GPU's of a parallel setup) in the job's metric."""
    parts = dict(parts)
    _apply_metric(parts, s, job, g)
    return JobMemory(sum(parts.values()), name, tuple((k, parts[k]) for k in PARTS))


def _training(a: Arch, g: Graph, s: Assumptions, job: Job, model: str) -> list[Phase]:
    spec = g.spec
    r = regime("full" if job.method == "full" else "lora", job.precision)
    c = r.compute_bytes
    B, T = job.batch, job.tokens
    P = g.params_total
    if job.method == "full":
        trainable, param_bytes = P, {"amp": 4, "bf16": 2, "fp32": 4}[job.precision]
        weights = param_bytes * P
        roles, rank, mats = None, 0, None
        copies = 2 * g.params_matmul if r.amp else 0  # autocast's bf16 weight copies, saved for backward
    else:
        roles = target_roles(a, g, job.lora_targets, model)
        rank = job.lora_rank
        trainable = lora_params(g, a, rank, roles)
        param_bytes = 2 if job.precision == "bf16" else 4  # peft keeps adapters fp32 under AMP
        mats = layer_mats(g) if job.storage in QUANTS else None  # weights and the dequantised transient share it
        weights = weight_bytes(g, job.storage, job.double_quant, mats) + param_bytes * trainable
        copies = 2 * trainable if r.amp else 0
    grad = param_bytes * trainable  # gradients take the trainable weights' dtype
    # Optimizer state per trainable parameter, and the step's temporaries:
    # - adamw (torch.optim.AdamW, foreach on CUDA): exp_avg, exp_avg_sq as zeros_like(param) = 2 x param bytes;
    #   the foreach step holds one temporary as large as the parameters (F5: 20 x P measured under AMP).
    # - adamw8bit / paged-adamw (bitsandbytes): one fused kernel updates in place, no temporary.
    # - sgd (no momentum): no state, torch._foreach_add_ in place.
    state = {"adamw": 2 * param_bytes, "paged-adamw": 2 * param_bytes, "adamw8bit": ADAMW8BIT_STATE_BYTES,
             "sgd": 0}[job.optimizer] * trainable
    temp = param_bytes * trainable if job.optimizer == "adamw" else 0
    layers = per_distinct_layer(spec.blocks, lambda b: T * _layer_bytes(a, b, r, rank, roles, job, T))
    embed = (r.residual_bytes * spec.hidden if r.trained else 0) * T + c * spec.vision_act * (1 if spec.image_tokens
                                                                                             else 0)
    head = T * head_activation_bytes(a, g, r, s)
    logits = T * s.logits_bytes * spec.logits
    overhead = {"overhead_weights": copies, "overhead_fixed": dequant_transient_bytes(g, job.storage, c, mats)}
    if not job.grad_ckpt:
        acts = embed + sum(layers) + head
        out = [_phase("loss (logits)" if logits * 2 > acts else "backward (activations)", weights=weights,
                      optimizer_state=state, activations=B * (acts - logits), logits=B * logits, **overhead)]
    else:
        # non-reentrant checkpointing per decoder layer (transformers gradient_checkpointing_enable): each layer
        # keeps only its input through the forward. At the loss nothing is recomputed; then the backward reruns
        # one layer at a time, whose saved tensors live beside the gradients made so far (the head's).
        inputs = embed + len(layers) * T * r.residual_bytes * spec.hidden
        head_params = sum(p.params for p in spec.head) + (spec.vocab * (a.embed_dim or a.hidden)
                                                          if spec.tied and r.trained else 0)
        out = [_phase("loss (logits)", weights=weights, optimizer_state=state,
                      activations=B * (inputs + head - logits), logits=B * logits, **overhead),
               _phase("backward (recomputing a checkpointed layer)", weights=weights, optimizer_state=state,
                      gradients=param_bytes * head_params if r.trained else 0,
                      activations=B * (inputs + max(layers, default=0)), **overhead)]
    if job.method == "full" and spec.tied:  # F6: the tied weight's two gradients and their sum
        tied = 2 * param_bytes * spec.vocab * (a.embed_dim or a.hidden)
        out.append(_phase("end of backward (tied-embedding gradients)", weights=weights, gradients=grad + tied,
                          optimizer_state=state))
    out.append(_phase("optimizer step", weights=weights, gradients=grad, optimizer_state=state, overhead_step=temp))
    return out


def _layer_bytes(a: Arch, b, r, rank: int, roles, job: Job, T: int) -> int:
    """Saved bytes per token of one layer for this job: memory.block_activation_bytes plus what eager attention
    and a bitsandbytes base add."""
    c = r.compute_bytes
    out = block_activation_bytes(a, b, r, rank, roles)
    attention = [p for p in b.parts if p.attn_flops and not p.type.startswith("MoE")]
    if job.attention == "eager" and attention:
        # eager_attention_forward's matmuls save q and the heads-wide repeat_kv copies of k and v in place of
        # SDPA's q, k, v; its output is saved by o_proj when that trains (SDPA saved it itself); no fp32 LSE;
        # and the heads x T x T scores (score_bytes) per token of the T
        q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        delta = c * ((2 if r.trained else 1) * q - 2 * kv) - 4 * a.heads
        out += sum(delta + p.act32 * T * score_bytes(a, c) for p in attention)
    if job.method == "qlora" and job.storage in ("nf4", "int8"):
        # bitsandbytes' MatMul4Bit / MatMul8bitLt autograd functions save their input (ctx.tensors = (A, B)) even
        # for a frozen weight (bitsandbytes/autograd/_functions.py), where nn.Linear would save none: one copy of
        # each distinct input not saved already (q/k/v and gate/up share theirs; o_proj reads the SDPA output).
        out += c * sum({g_: i for i, _, g_ in adapted_linears(b, None) if g_ != "attn_out"}.values())
    return out


def _inference(a: Arch, g: Graph, s: Assumptions, job: Job) -> list[Phase]:
    """HF generate (F7): prefill of all B prompts in one forward, then decode. Prefill: weights + the prompts'
    KV cache + per prompt token c x (the largest part's working set + 4 hidden-wide tensors: inputs_embeds,
    the layer input, the post-attention residual, the normed input) [+ eager scores of one layer]. Decode:
    weights + the KV cache at prompt + new tokens + the next-token logits (bf16 + transformers' fp32 copy)."""
    spec = g.spec
    c = 4 if job.precision == "fp32" else 2
    B, T, N = job.batch, job.tokens, job.new_tokens
    weights = weight_bytes(g, job.storage, job.double_quant)
    enc = T if spec.kind == "encoder-decoder" else 0

    def kv(tokens: int) -> int:
        per = sum(kv_bytes_of_block(b, s, tokens, enc) for b in spec.blocks if b.stack != "encoder")
        return per * c // s.kv_bytes  # the cache takes the compute dtype

    transient = max((b.transient for b in spec.blocks), default=0) + 4 * spec.hidden
    acts = T * c * transient
    if job.attention == "eager":
        acts += eager_scores_bytes(a, g, T, c, one_layer=True)
    dequant = dequant_transient_bytes(g, job.storage, c)
    return [_phase("prefill", weights=weights, kv_cache=B * kv(T), activations=B * acts, overhead_fixed=dequant),
            _phase("decode", weights=weights, kv_cache=B * kv(T + N), logits=B * (c + 4) * spec.vocab)]


def _apply_metric(parts: dict[str, int], s: Assumptions, job: Job, g: Graph) -> None:
    """allocated: live tensors (torch.cuda.max_memory_allocated). bitsandbytes' paged optimizers allocate their
    state with cudaMallocManaged (bitsandbytes/functional.py get_paged), outside torch's caching allocator:
    allocated and reserved do not see it, the driver (nvidia-smi) does while it is resident.
    reserved: allocated + the freed blocks the allocator keeps and cannot reuse at the peak. The one modelled:
    in training the bf16 logits (c x B x T x V) are freed before backward and their blocks are too small for the
    4-byte gradients that follow (CUDACachingAllocator never splits across blocks nor returns them without
    empty_cache). Rounding (512 B, 2 MiB for large blocks) is below 0.1% here and left out.
    nvidia-smi: reserved + the CUDA context (Assumptions.cuda_context_bytes)."""
    spec = g.spec
    paged = job.optimizer == "paged-adamw"
    if paged and job.metric != "nvidia-smi":
        parts["optimizer_state"] = 0
    if job.metric in ("reserved", "nvidia-smi") and job.method != "inference" and parts["logits"]:
        parts["overhead"] += 2 * job.batch * job.tokens * spec.logits
    if job.metric == "nvidia-smi":
        parts["overhead"] += s.cuda_context_bytes
