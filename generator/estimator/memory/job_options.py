"""The options of one job (Job: the CLI's --method ... --metric, a recipe's fields), the values each takes, and
their checks: what job.py prices, validated before it prices them."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, fields
from typing import Any

from ...errors import JobError
from ..config.arch import Arch
from ..config.transformers_defaults import NO_GRADIENT_CHECKPOINTING
from ..graph.nodes import Graph
from ..inputs import Assumptions
from .activations import ADAPTER_NO_CAST, Regime, regime
from .attention import default_attention
from .frameworks import LITGPT_LOSS, TORCHTUNE_LOSS, framework_attention, framework_model, own_model
from .recipes import RECIPES, SITE_RECIPES
from .storage import ADAMW8BIT_STATE_BYTES, LINEAR_EXPERTS_V4, before_v5, bnb_keeps_experts, bnb_leaves_linears
from .target_names import PEFT_DEFAULT, PEFT_DEFAULT_TARGETS
from .tower_adapters import unadaptable_target

# The values each option of a Job takes (validate)
METHODS = ("full", "lora", "qlora", "inference")
PRECISIONS = ("amp", "bf16", "fp32")
WEIGHTS = ("bf16", "fp16", "fp32", "int8", "nf4", "gptq-int4", "fp8")
OPTIMIZERS = ("adamw", "adamw-fused", "adamw8bit", "paged-adamw", "sgd")
ATTENTIONS = ("sdpa", "eager")
METRICS = ("allocated", "reserved", "nvidia-smi")

# LoRA adapters' dtypes and bytes; none asked: regime's default (peft's autocast_adapter_dtype=True: fp32)
ADAPTER_BYTES = {"fp32": 4, "bf16": 2}
ADAPTER_DTYPES = tuple(ADAPTER_BYTES)

# How the loss meets the logits: transformers' ForCausalLMLoss (F1: 12 B per logit), TRL's chunked_nll (one
# checkpointed 256-token chunk of fp32 logits at a time), LitGPT's chunked_cross_entropy (bf16 logits kept).
LOSSES = ("hf", "trl-chunked", LITGPT_LOSS, TORCHTUNE_LOSS)

# Which kernels save the tensors: CUDA's (the estimate), or the CPU's (the simulation harness): CPU dropout masks
# take the input's dtype and CPU autocast runs layer_norm in bf16 (data/measurements/FINDINGS.md F8).
KERNELS = ("cuda", "cpu")

# A recurrent mixer's scan (memory.recurrence): the fused kernels transformers runs where they are installed
# (mamba-ssm and causal-conv1d for Mamba, flash-linear-attention for Gated DeltaNet), or its torch code, which runs
# without them (and always on the CPU).
SCANS = ("fused", "torch")


# The options only LoRA and QLoRA read (a recipe's are dropped for a full fine-tune; given, refused there). lora_rank
# is not one: the command line's --lora-rank also sets the site jobs' rank (job_flags.overrides).
ADAPTER_OPTIONS = ("lora_targets", "adapter_dtype", "lora_dropout", "tower_adapters")
# The options some methods do not read, with the methods that do: set away from its default (the Job field's), one is
# refused for any other method, not priced as if unset
READ_BY = {**dict.fromkeys(("grad_accum", "grad_ckpt", "optimizer"), ("full", "lora", "qlora")),
           **dict.fromkeys(ADAPTER_OPTIONS, ("lora", "qlora"))}


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
    attention: str = ""  # "" = the model class's default (default_attention)
    metric: str = "allocated"
    recipe: str = ""  # the recipe the options came from (recipes.RECIPES), echoed
    adapter_dtype: str = ""  # "" = peft's default: fp32 on any base (autocast_adapter_dtype=True)
    lora_dropout: float = 0.0
    keep_outputs: bool = False  # the loop keeps the model's output (logits, KV cache) alive through backward
    upcast_fp32: bool = False  # peft prepare_model_for_kbit_training: non-quantised parameters cast to fp32
    loss: str = "hf"
    kernels: str = "cuda"
    bnb_version: str = ""  # the bitsandbytes release the run uses, "" = a current one (0.43.2 or later)
    transformers_version: str = ""  # the transformers release HF generate runs, "" = a current one (legacy_cache)
    scan: str = ""  # a recurrent mixer's scan (SCANS): "" = the kernels' own (fused on CUDA, torch on the CPU)
    grad_accum: int = 1  # micro-batches per optimizer step (HF Trainer's gradient_accumulation_steps)
    offload_checkpoints: bool = False  # the checkpointed layers' inputs wait in CPU RAM (Unsloth's checkpointing)
    images: int | None = None  # images per training sample; None = one where the model reads images, 0 = text only
    padded: bool = False  # the batch's samples padded to its longest (HF collators): an attention mask in every layer
    # LoRA's targets reach the towers' Linears, as peft's do (False: the text model's alone, as LLaMA-Factory's and
    # ms-swift's defaults freeze the vision tower and projector: memory/tower_adapters.py)
    tower_adapters: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The options, with the storage the default resolves to; a full fine-tune's is the dtype it trains its
        weights in (fp32 master weights under AMP), not the bf16 a frozen base is held in."""
        held = self.storage if self.method != "full" or self.weights else \
            "bf16" if self.precision == "bf16" else "fp32"
        return {**vars(self), "weights": held}  # a frozen dataclass's instance dict: its fields, in order

    @staticmethod
    def from_options(recipe: str = "", **given: Any) -> Job:
        """A recipe's fields under the explicitly given options (given wins); an unknown recipe is an error."""
        if recipe and recipe not in RECIPES:
            raise JobError("command line", "recipe", recipe, f"must be one of {', '.join(RECIPES)}")
        fields_ = dict(RECIPES[recipe].fields) if recipe else {}
        if given.get("method") and given["method"] != fields_.get("method", given["method"]):
            # a QLoRA recipe run as plain LoRA keeps a bf16 base: its quantisation fields do not apply
            for key in ("weights", "double_quant", "upcast_fp32"):
                fields_.pop(key, None)
            fields_.pop("method", None)
        if given.get("grad_ckpt") is False:  # no checkpoints: a recipe's offload of them does not apply
            fields_.pop("offload_checkpoints", None)
        if {**fields_, **given}.get("method", Job.method) == "full":  # no adapters: a recipe's do not apply
            for key in ADAPTER_OPTIONS:
                fields_.pop(key, None)
        return Job(**{**fields_, **given, "recipe": recipe})

    @property
    def storage(self) -> str:
        if self.weights:
            return self.weights
        if self.precision == "fp32":
            return "fp32"
        return "nf4" if self.method == "qlora" else "bf16"


def site_job(method: str, lora_rank: int, **given: Any) -> Job:
    """The site's job of a training method: its recipe under the options recipes.SITE_RECIPES gives it, at the
    site's LoRA rank, with `given` (tokens, attention)."""
    recipe, options = SITE_RECIPES[method]
    return Job.from_options(recipe, method=method, lora_rank=lora_rank, **dict(options), **given)


def resolve(job: Job, a: Arch) -> Job:
    """The job with its defaults filled for this model: attention from the model class; and QLoRA through
    transformers on a model whose Linears bitsandbytes leaves as they are (storage.bnb_leaves_linears): LoRA on
    the base as it loads, bf16, or fp32 after prepare_model_for_kbit_training, which casts every parameter that is
    not Params4bit (peft/utils/other.py), every weight here (F60: its CPU-simulated steps peak at exactly those
    LoRA steps')."""
    if not job.attention:
        job = dataclasses.replace(job, attention=default_attention(a)[0])
    if job.method == "qlora" and not own_model(job.loss) and bnb_leaves_linears(a, job.storage,
                                                                             job.transformers_version):
        job = dataclasses.replace(job, method="lora", weights="fp32" if job.upcast_fp32 else "bf16",
                                  double_quant=False, upcast_fp32=False, bnb_version="")
    return job


def validate(job: Job, model: str) -> None:
    for key, value, allowed in (("method", job.method, METHODS), ("precision", job.precision, PRECISIONS),
                                ("weights", job.storage, WEIGHTS), ("optimizer", job.optimizer, OPTIMIZERS),
                                ("attention", job.attention or "sdpa", ATTENTIONS), ("metric", job.metric, METRICS),
                                ("adapter_dtype", job.adapter_dtype or "fp32", ADAPTER_DTYPES),
                                ("loss", job.loss, LOSSES), ("kernels", job.kernels, KERNELS),
                                ("scan", job.scan or "fused", SCANS)):
        if value not in allowed:
            raise JobError(model, key, value, f"must be one of {', '.join(allowed)}")
    if isinstance(job.lora_dropout, bool) or not isinstance(job.lora_dropout, (int, float)) \
            or not 0 <= job.lora_dropout < 1:
        raise JobError(model, "lora_dropout", job.lora_dropout, "must be in [0, 1)")
    for key, number in (("batch", job.batch), ("tokens", job.tokens), ("lora_rank", job.lora_rank),
                        ("grad_accum", job.grad_accum)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise JobError(model, key, number, "must be a positive integer")
    if job.new_tokens < 0 or (job.new_tokens and job.method != "inference"):
        raise JobError(model, "new_tokens", job.new_tokens, "is for method inference, and must be >= 0")
    if job.images is not None and (isinstance(job.images, bool) or not isinstance(job.images, int) or job.images < 0):
        raise JobError(model, "images", job.images, "must be a whole number of images per sample, 0 or more")
    if job.offload_checkpoints and (job.method == "inference" or not job.grad_ckpt):
        raise JobError(model, "offload_checkpoints", True, "offloads gradient checkpointing's layer inputs: it needs "
                                                           "a training method with grad_ckpt")
    if job.padded and job.method == "inference":
        raise JobError(model, "padded", True, "prices a padded training batch: it needs a training method")
    if job.recipe and job.method == "inference":
        raise JobError(model, "recipe", job.recipe, "is a training recipe: it needs a training method (full, lora, "
                                                    "qlora)")
    for option in fields(Job):
        methods = READ_BY.get(option.name)
        if methods and job.method not in methods and getattr(job, option.name) != option.default:
            raise JobError(model, option.name, getattr(job, option.name), f"is for {', '.join(methods)} jobs only")
    if job.method == "full" and job.weights and job.weights != {"amp": "fp32"}.get(job.precision, job.precision):
        raise JobError(model, "weights", job.weights, f"a full fine-tune trains the weights in its precision "
                                                      f"({job.precision}); a quantised or other base is not trainable")
    if job.method == "qlora" and job.storage not in ("nf4", "int8", "gptq-int4", "fp8"):
        raise JobError(model, "weights", job.storage, "QLoRA needs a quantised base (nf4, int8, gptq-int4, fp8)")
    if job.double_quant and job.storage != "nf4":
        raise JobError(model, "double_quant", True, f"is for nf4 weights, not {job.storage}")
    if job.scan == "fused" and job.kernels == "cpu":
        raise JobError(model, "scan", job.scan, "the fused kernels (mamba-ssm, flash-linear-attention) run on CUDA only")
    for key, version, example in (("bnb_version", job.bnb_version, "0.41.1"),
                                  ("transformers_version", job.transformers_version, "4.35.2")):
        if version and not re.fullmatch(r"\d+(\.\d+){1,2}", version):
            raise JobError(model, key, version, f"must be a release number such as {example}")


# transformers 4.36 brought the Cache classes (cache_utils.DynamicCache, whose update() replaces each layer's tensors
# in place); before, each attention layer returned a new (key, value) tuple, torch.cat of the previous step's and the
# new token's (modeling_llama.LlamaAttention.forward in 4.35: past_key_value = (key_states, value_states)), and
# generate's loop kept the previous step's tuples in model_kwargs["past_key_values"] until the forward returned.
TUPLE_CACHE_BEFORE = (4, 36)


def legacy_cache(transformers_version: str) -> bool:
    """Whether HF generate holds two KV caches at the end of a decode step: the previous step's tuples, still
    referenced by generate, and the new ones (transformers before TUPLE_CACHE_BEFORE; "" = a current release)."""
    return bool(transformers_version) and tuple(int(x) for x in transformers_version.split("."))[:2] \
        < TUPLE_CACHE_BEFORE


def prepared(a: Arch, g: Graph, job: Job, model: str, memo: dict | None
             ) -> tuple[Arch, Graph, Job, str, dict | None]:
    """The job checked and resolved, on the model its framework runs (frameworks.framework_model: LitGPT's untied
    head) with that framework's default attention (frameworks.framework_attention), and the estimate's memoised
    per-layer terms where that model is the one they were worked out for."""
    model = model or a.model_type
    validate(job, model)
    if job.images and not g.spec.reads_images:
        # a tower the reading leaves out (Phi-3.5-vision's CLIP: config/custom_code.py) is not "none"
        what = f"this reading has none ({a.approximate})" if a.approximate and "tower" in a.approximate else \
            "this one reads none"
        raise JobError(model, "images", job.images, "is for a model that reads images (a vision tower and a "
                                                    f"projector); {what}")
    taken = (job.images or 0) * g.spec.image_tokens  # an image's soft tokens are among the sample's tokens
    if job.tokens and taken > job.tokens:
        raise JobError(model, "images", job.images, f"take {taken:,} of a sample's tokens ({g.spec.image_tokens:,} "
                                                    f"an image), more than its {job.tokens:,} (--tokens)")
    wrapped = unadaptable_target(g.spec, job.lora_targets, a.model_type) if job.method != "full" and \
        job.tower_adapters else None
    if wrapped:
        raise JobError(model, "lora_targets", wrapped, f"peft cannot adapt {a.model_type}'s vision tower module of "
                                                       "that name (it wraps an nn.Linear named linear): target "
                                                       "all-linear, or the text model alone (--no-tower-adapters)")
    if refused := linear_experts_refusal(a, job):
        raise JobError(model, "transformers_version", job.transformers_version, refused)
    if job.grad_ckpt and not checkpoints(a, job.loss):
        turned = f"; the {job.recipe} recipe turns it on: add --no-grad-ckpt" if job.recipe else ""
        raise JobError(model, "grad_ckpt", True, f"transformers' {a.model_type} classes do not support gradient "
                                                 "checkpointing (supports_gradient_checkpointing is False: "
                                                 f"gradient_checkpointing_enable raises ValueError){turned}")
    a2, g2 = framework_model(a, g, job.loss)
    if not job.attention and (own := framework_attention(a2, job.loss)):
        job = dataclasses.replace(job, attention=own)
    return a2, g2, resolve(job, a2), model, memo if g2 is g else None


# Unsloth's gradient checkpointing (use_gradient_checkpointing="unsloth"; unsloth_zoo/gradient_checkpointing.py
# UnslothCheckpointFunction at ce232d6): each checkpointed layer's input of more than MINIMUM_SIZE elements (2 MiB of
# it) is copied to a pinned CPU buffer in the forward, but the last layer's from the second step on (LAST_GC_INDEX,
# "Don't offload the last layer"). The backward copies it back into a persistent GPU buffer sized to the largest
# input (GPU_BUFFERS) and recomputes the layer on that buffer; a second one (GPU_BUFFERS_B) double-buffers the copy
# where more than 512 MiB were free after the first step (DOUBLE_BUFFER_HEADROOM). Priced with both.
OFFLOAD_GPU_BUFFERS = 2
OFFLOAD_MIN_BYTES = 2 * 1024 * 1024


def checkpoint_inputs(job: Job, layers: int, input_bytes: int) -> tuple[int, int]:
    """How many checkpointed layer inputs of `input_bytes` (one sample's batch, all of it: B x T x hidden x dtype)
    the GPU holds (through the loss and the backward, at the first layer's recomputation): every layer's with
    torch.utils.checkpoint, the staging buffers and the last layer's with Unsloth's offload."""
    if not job.offload_checkpoints or input_bytes <= OFFLOAD_MIN_BYTES or layers < 2:
        return layers, 1
    return min(layers, 1 + OFFLOAD_GPU_BUFFERS), OFFLOAD_GPU_BUFFERS


def checkpoint_host_bytes(g: Graph, job: Job) -> int:
    """The pinned CPU RAM one process's offloaded checkpoints hold: every layer's input but the last (CPU_BUFFERS)."""
    if job.method == "inference" or not job.offload_checkpoints:
        return 0
    per_input = job.batch * job.tokens * layer_input_bytes(g, job_regime(job))
    layers = len(g.spec.blocks)
    return (layers - 1) * per_input if checkpoint_inputs(job, layers, per_input)[0] < layers else 0


def layer_input_bytes(g: Graph, r: Regime) -> int:
    """Per token, what a checkpointed layer keeps as its input: the residual stream, every stream of it
    (Spec.streams), and its share of the other hidden-width inputs the layers take (Spec.input_rows: Inkling's block
    states and messages)."""
    width = r.residual_bytes * g.spec.hidden
    return width * g.spec.streams + width * g.spec.input_rows // max(1, len(g.spec.blocks))


def optimizer_bytes(optimizer: str, trainable: int, param_bytes: int) -> tuple[float, int]:
    """The optimizer's state for `trainable` parameters of `param_bytes` each, and its step's temporaries:
    - adamw (torch.optim.AdamW, foreach on CUDA): exp_avg, exp_avg_sq as zeros_like(param) = 2 x param bytes; the
      foreach step holds one temporary as large as the parameters (F5: 20 x P measured under AMP);
    - adamw-fused (torch._fused_adamw_, Trainer's adamw_torch_fused), adamw8bit / paged-adamw (bitsandbytes' one
      fused kernel): in place, no temporary. sgd (no momentum): no state, torch._foreach_add_ in place.
    - paged-adamw is bitsandbytes' 32-bit PagedAdamW: its two states are float32 whatever the parameter's dtype
      (bitsandbytes/optim/optimizer.py Optimizer2State.init_state), 8 B a parameter for bf16 adapters too."""
    state = {"adamw": 2 * param_bytes, "adamw-fused": 2 * param_bytes, "paged-adamw": 8,
             "adamw8bit": ADAMW8BIT_STATE_BYTES, "sgd": 0}[optimizer] * trainable
    return state, param_bytes * trainable if optimizer == "adamw" else 0


def fp32_base(job: Job) -> bool:
    """A LoRA base stored in fp32 under autocast: fp32 norms and embedding, so an fp32 residual stream (F28)."""
    return job.method != "full" and job.precision == "amp" and job.storage == "fp32"


def runs_torch_scan(job: Job) -> bool:
    """Whether a recurrent mixer runs transformers' torch code: asked for, or on the CPU unless told otherwise."""
    return job.scan == "torch" or (job.kernels == "cpu" and not job.scan)


def job_regime(job: Job) -> Regime:
    """The dtypes a training job's tensors take (activations.regime), from its options."""
    lora = job.method != "full"
    return regime("lora" if lora else "full", job.precision, ADAPTER_BYTES.get(job.adapter_dtype, 0) if lora else 0,
                  lora and job.lora_dropout > 0, job.kernels == "cpu", lora and (job.upcast_fp32 or fp32_base(job)),
                  runs_torch_scan(job),
                  not (job.method == "qlora" and job.storage in ADAPTER_NO_CAST))._replace(
        padded=job.padded and job.batch > 1, kbit_upcast=lora and job.upcast_fp32)  # one sample padded: no mask


def apply_metric(parts: dict[str, int], s: Assumptions, job: Job, g: Graph, gpus: int = 1) -> None:
    """allocated: live tensors (torch.cuda.max_memory_allocated). bitsandbytes' paged optimizers allocate their
    state with cudaMallocManaged (bitsandbytes/functional.py get_paged), outside torch's caching allocator:
    allocated and reserved do not see it, the driver (nvidia-smi) does while it is resident. That is priced where
    the phases are made (job.py), which keep only the state of the tensors bitsandbytes leaves unpaged
    (lora.PAGED_MIN_ELEMENTS) but under nvidia-smi.
    reserved: allocated + the freed blocks the allocator keeps and cannot reuse at the peak. The one modelled:
    in training the bf16 logits (c x B x T x V) are freed before backward and their blocks are too small for the
    4-byte gradients that follow (CUDACachingAllocator never splits across blocks nor returns them without
    empty_cache). Rounding (512 B, 2 MiB for large blocks) is below 0.1% here and left out.
    nvidia-smi: reserved + the CUDA context (Assumptions.cuda_context_bytes), and on each of `gpus` > 1 NCCL's
    buffers (Assumptions.nccl_bytes_per_gpu), which no torch counter sees either."""
    spec = g.spec
    if job.metric in ("reserved", "nvidia-smi") and job.method != "inference" and parts["logits"]:
        parts["overhead"] += 2 * job.batch * job.tokens * spec.logits
    if job.metric == "nvidia-smi":
        parts["overhead"] += s.cuda_context_bytes + (s.nccl_bytes_per_gpu if gpus > 1 else 0)


def linear_experts_refusal(a: Arch, job: Job) -> str:
    """Why an adapter job run on transformers 4 is not priced where that release built the routed experts as
    nn.Linear modules (storage.LINEAR_EXPERTS_V4) and the job quantises them (bitsandbytes) or adapts them
    (all-linear, or an expert Linear's name); "" where it is priced. The estimator prices transformers 5's experts,
    3-D tensors in bf16 adapted through ParamWrapper: for such a job on 4.x, weights and adapters several times
    what the run holds. Attention-only adapters on a bf16 base are priced (the experts frozen either way); so is a
    framework's own model (LitGPT, torchtune), which transformers does not build."""
    names = LINEAR_EXPERTS_V4.get(a.model_type)
    if job.method == "full" or not names or a.experts <= 1 or not before_v5(job.transformers_version) \
            or own_model(job.loss):
        return ""
    bnb = bnb_keeps_experts(a, job.storage)  # (4.x quantises them where 5 is priced keeping them)
    targets = PEFT_DEFAULT_TARGETS.get(a.model_type, "") if job.lora_targets == PEFT_DEFAULT else job.lora_targets
    named = {t.strip() for t in targets.split(",")}
    adapted = "all-linear" in named or bool(named & set(names))
    if not bnb and not adapted:
        return ""
    done = " and ".join(w for w, on in (("bitsandbytes quantises", bnb), ("peft adapts", adapted)) if on)
    there = " and ".join(w for w, on in (("kept in bf16 by bitsandbytes", bnb), ("adapted through peft's "
                                                                               "ParamWrapper", adapted)) if on)
    fix = "omit --transformers-version for transformers 5's figure" + \
        ("" if bnb else ", or adapt attention alone (--lora-targets q_proj,k_proj,v_proj,o_proj)")
    return (f"transformers 4 builds {a.model_type}'s {a.experts} routed experts as nn.Linear modules "
            f"({', '.join(names)} each), which {done} one by one; the estimate prices transformers 5's 3-D expert "
            f"tensors, {there}, not this run: {fix}")


def checkpoints(a: Arch, loss: str = "hf") -> bool:
    """Whether a training run can checkpoint this model's layers: transformers refuses where none of the model
    type's classes supports it (transformers_defaults.NO_GRADIENT_CHECKPOINTING, read off the installed release);
    a framework's own model code (LitGPT, torchtune) checkpoints its own blocks."""
    return bool(own_model(loss)) or a.model_type not in NO_GRADIENT_CHECKPOINTING
