"""A training job's weights: which parameters train and in what dtype, the base's storage, the adapters peft makes,
and autocast's copies of the weights, without checkpointing and with it (job.py's phases read them)."""

from __future__ import annotations

from typing import NamedTuple

from ..config.arch import Arch
from ..graph.nodes import Graph, tied_weight_params
from .activations import Regime
from .experts import cast_active_matmul, cast_matmul
from .frameworks import framework_mats, runs_litgpt
from .job_options import Job, fp32_base
from .layer_terms import adapter_params, image_only, layer_index, skipped_layers, unpaged_adapter_params
from .lora import input_linear_params, target_roles
from .storage import quantised_params, quantised_tower_params, stored_mats, weight_bytes
from .tower_adapters import (
    TowerLinears,
    tower_adapted,
    tower_lora_params,
    tower_trained_params,
    tower_unpaged_params,
    unreached_weights,
)

# Heads that multiply by a weight they concatenate at each forward (MobileBertLMPredictionHead.forward:
# hidden_states.matmul(torch.cat([self.decoder.weight.t(), self.dense.weight])), a hidden x vocab tensor in the
# weights' dtype that the matmul saves, however the weights train, freed with the head's backward as a copy is
# (FINDINGS.md F99). Under AMP autocast's bf16 cast of it is the head's copy already priced.
CONCATENATED_HEAD = frozenset({"mobilebert"})


class Weights(NamedTuple):
    trainable: int  # parameters that get a gradient (and optimizer state)
    param_bytes: int  # bytes per trainable parameter (and per gradient)
    weights: int  # bytes of every weight: the base as stored, the trainable ones, adapters that get no gradient
    copies: int  # autocast's weight copies alive at the loss without checkpointing
    ckpt_copies: tuple[int, ...]  # with checkpointing: at the loss, in a recomputed layer (and at its attention)
    roles: frozenset[str] | None  # the text layers' adapted roles (lora.target_roles); None: every Linear
    rank: int
    mats: dict | None  # the quantised base's stored matrices (storage.stored_mats); None for a full fine-tune
    towers: TowerLinears  # the towers' adapted Linears (tower_adapters.tower_adapted)
    tower_trained: int  # of `trainable`, the towers' adapters: their gradients come after the text layers'
    # of `trainable`, those in tensors a paged optimizer leaves unpaged (lora.PAGED_MIN_ELEMENTS); a full
    # fine-tune's are not itemised (0): its norms and biases, under 0.1% of a model of billions of parameters, but
    # most of a tiny one's, whose allocated figure is under by their state. A ZeRO or FSDP (flat-parameter) setup
    # hands the optimizer flat partitions, all paged: there this is over by its share (parallel.per_gpu)
    unpaged: int = 0


def trained_weights(a: Arch, g: Graph, job: Job, r: Regime, model: str, images: int,
                    memo: dict | None = None) -> Weights:
    """The job's Weights. A text-only step (images 0) never runs the towers, nor the layers that run only beside an
    image (layer_terms.image_only: mllama's cross-attention layers, which MllamaTextModel.forward skips): a full
    fine-tune's weights there, and the adapters peft puts on them (made always: tower_adapters.py), get no gradient,
    so AdamW keeps no state for them (torch/optim/adamw.py skips a parameter whose .grad is None) and autocast makes
    no copy."""
    spec, distinct, P = g.spec, g.spec.distinct_layers, g.params_total
    head_mm = sum(p.matmul for p in spec.head) or tied_weight_params(a)
    vision = spec.reads_images
    skipped = [not images and image_only(a, b) for b, _ in distinct]  # per distinct layer: skipped text-only
    if job.method == "full":
        dead = unreached_weights(spec)  # the towers' layers above the one the projector reads get no gradient
        off = [sum(n * (b.params, b.matmul)[k] for (b, n), s in zip(distinct, skipped, strict=True) if s)
               for k in (0, 1)]
        idle = (g.params_towers, g.towers_matmul) if vision and not images else (dead, dead)
        unused = (idle[0] + off[0], idle[1] + off[1])
        param_bytes = {"amp": 4, "bf16": 2, "fp32": 4}[job.precision]
        # autocast's bf16 weight copies, saved for backward (F2). With checkpointing a layer's copies are made
        # inside its checkpointed forward and not kept: only the LM head's live at the loss, one layer's in the
        # recomputation (torch/utils/checkpoint.py: the recomputed forward's saved tensors).
        uncast = sum(n * (b.matmul - cast_matmul(a, b)) for b, n in distinct)  # grouped experts: no copy
        cat = param_bytes * head_mm if a.model_type in CONCATENATED_HEAD and not r.amp else 0
        copies = 2 * (g.params_matmul - unused[1] - uncast) if r.amp else cat
        layer_mm = max((cast_matmul(a, b) for b, _ in distinct), default=0)
        ckpt_copies: tuple[int, ...] = (2 * head_mm, 2 * layer_mm) if r.amp else (cat, 0)
        # the parameters the class keeps in fp32 (Graph.params_fp32) are 4 bytes in a pure-bf16 run too; their
        # gradients and AdamW states, which follow that dtype, are priced at param_bytes
        weights = param_bytes * P + (4 - param_bytes) * g.params_fp32
        return Weights(P - unused[0], param_bytes, weights, copies, ckpt_copies, None, 0, None, (), 0)
    roles, rank = target_roles(a, g, job.lora_targets, model), job.lora_rank
    towers = tower_adapted(spec, job.lora_targets, a.model_type) if job.tower_adapters else ()
    tower_params = tower_lora_params(towers, rank)
    tower_trained = tower_trained_params(towers, rank) if images else 0
    adapters = [n * v for (_, n), v in zip(distinct, adapter_params(spec, rank, roles, memo), strict=True)]
    unrun = sum(v for v, s in zip(adapters, skipped, strict=True) if s)  # the skipped layers': made, not trained
    unpaged = sum(n * v for (_, n), v, s in zip(distinct, unpaged_adapter_params(spec, rank, roles, memo,
                                                                                 runs_litgpt(job.loss)),
                                                skipped, strict=True) if not s) \
        + (tower_unpaged_params(towers, rank) if images else 0)
    trainable = sum(adapters) - unrun + tower_trained
    param_bytes = r.adapter_bytes
    # weights and the dequantised transient share it (LitGPT's quantiser packs the head too: frameworks.py)
    mats = framework_mats(a, job.loss, stored_mats(a, g, job.storage))
    weights = weight_bytes(g, job.storage, job.double_quant, mats) + param_bytes * (trainable + unrun - tower_trained
                                                                                    + tower_params)
    if job.upcast_fp32:  # prepare_model_for_kbit_training: every non-quantised fp16/bf16 parameter to fp32
        weights += 2 * (P - quantised_params(mats) - quantised_tower_params(g, job.storage) - g.params_fp32)
    # the fp32 LM head's bf16 autocast copy, saved for its input's gradient; freed by its backward, before any
    # checkpointed layer is recomputed. The head is fp32 in an fp32 or upcast base, and where the class keeps it so
    fp32 = fp32_base(job)
    head_copy = 2 * head_mm if r.amp and (job.upcast_fp32 or fp32 or any(p.params32 for p in spec.head)) else 0
    head_copy = head_copy or (r.residual_bytes * head_mm if a.model_type in CONCATENATED_HEAD else 0)
    copies = (2 * trainable if r.amp and param_bytes != 2 else 0) + head_copy
    ckpt_copies = (copies, copies - head_copy)
    if fp32:  # and every frozen fp32 Linear's: autocast casts it at each use (no cache: not a leaf that
        # requires grad, aten/src/ATen/autocast_mode.cpp cached_cast) and the matmul saves the copy for its
        # input's gradient, but in the first layer's input Linears, whose input needs none (a frozen embedding);
        # checkpointing keeps the recomputed layer's, and at its attention's backward only q/k/v's (F28, F60). A
        # shared pass (active_matmul: its weights are an earlier layer's) makes its own copies; a pass without
        # gradients saves none (layer_terms.skipped_layers)
        first_in = input_linear_params(distinct[layer_index(spec, memo)[0]][0]) if distinct else 0
        passes = [0 if k else cast_matmul(a, b) or cast_active_matmul(a, b)
                  for (b, _), k in zip(distinct, skipped_layers(a, spec), strict=True)]
        copies += 2 * (sum(n * m for (_, n), m in zip(distinct, passes, strict=True)) - first_in)
        ckpt_copies = (ckpt_copies[0], ckpt_copies[1] + 2 * max(passes, default=0),
                       ckpt_copies[1] + 2 * max((input_linear_params(b) for b, _ in distinct), default=0))
    return Weights(trainable, param_bytes, weights, copies, ckpt_copies, roles, rank, mats, towers, tower_trained,
                   unpaged)
