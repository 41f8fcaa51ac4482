"""The Report: one frozen record of an estimate, and its JSON form (the contract in DESIGN.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .checks import Finding
from .cost import CostLine
from .graph.structure import StructureRow, StructureTable
from .memory.curve import CurvePoint
from .memory.parallel import Setup, ranks
from .memory.plans import Plan, PlanFloor, Unreachable
from .serving_speed import ServingSpeed

# The formulas a Report names in its provenance (Report.provenance): each figure in words, with its source.
FORMULAS = {
    "params": "sum over graph nodes of Linear in*out (+bias), Embedding rows*width, norms (RMSNorm w, "
              "LayerNorm 2w); tied lm_head counted once (transformers modeling files); MoE: every expert",
    "active_params": "parameters used per token: router + top-k routed experts + shared experts (+ the rest)",
    "train_full": "max((4+8) B x params + 2 B x matmul weights + activations (no gradient yet at the loss), "
                  "(4+4+8) B x params + 2 x 4 B x vocab x width if tied (end of backward), (4+4+8+4) B x params "
                  "(AdamW step)); activations = layers x saved tensors per token (SDPA, no scores) + 12 B x vocab "
                  "per token",
    "train_lora": "2 B x params (bf16 base) + 14 B x adapter params (r x (in+out) per Linear, head excluded) "
                  "+ activations (frozen Linears save no input) + adapter inputs",
    "serve": "vllm serve: 2 B x params (or the quantised storage) + its startup peak, the larger of one step's "
             "forward (a decoder's at max_num_batched_tokens: its largest layer transient and two residual "
             "copies per token) and its sampler's run over max_num_seqs rows (38 B x vocab each, as vLLM's logged "
             "activation peaks read: logits, their fp32 copy, top-k/top-p's tensors, probabilities, noise), at "
             "vLLM's defaults for the GPU (8,192 tokens and 1,024 "
             "sequences on 70 GiB or more but the A100, 2,048 and 256 on the rest, which the model's own figure "
             "takes; a card listing GPUs of both takes the former) + per sequence (per attention layer "
             "min(tokens, window) x 2 x kv_heads x head_dim x 2 B; MLA (kv_lora_rank + qk_rope_head_dim) x 2 B; "
             "SSM/linear-attention state)",
    "job": "memory.peak_bytes: the exact job (memory.job) priced phase by phase (loss, recomputed layer, end of "
           "backward, optimizer step; prefill, decode of HF generate) in its metric; breakdown at the peak phase",
    "max_batch": "largest b with memory(b) <= (driver-reported memory - CUDA context) / headroom",
    "split": "two cards, contiguous layer cut minimising the larger stage (pipeline parallel: the second card "
             "keeps its own copy of a tied embedding), only where batch 1 does not fit one card",
    "cost": "steps x max(FLOPs/peak, bytes/bandwidth) / MFU; FLOPs = 6 x active matmul weights per token "
            "full, 4 x for LoRA (+ 6 x its adapters on Linears, + an MoE's expert-tensor delta weights once per "
            "step), causal attention halved, sliding windows capped",
    "plans": "per method and priced GPU, the fewest GPUs (1, 2, 4, 8, then nodes of 8 up to 512) whose per-GPU peak "
             "at batch 1 fits the card (on fewer GPUs than job_batch, accumulating gradients over micro-batches to it, "
             "every one held: FSDP's no_sync unsharded), the simplest strategy first (one GPU; zero2; zero3/fsdp with "
             "checkpointing; ZeRO with DeepSpeed's defaults: a reduce bucket of 5e8 elements, the step in sub-groups "
             "of 1e9); CPU offload only where nothing else runs up to 512 GPUs, within the host memory per "
             "node of 8; hours = max(FLOPs (+ one forward when checkpointing) / peak, bytes / bandwidth) / "
             "(GPUs x MFU)",
    "serving": "fewest GPUs holding one sequence with tensor parallelism (x pipeline stages across nodes); "
               "decode = bandwidth x 0.78 / (active weights + KV read per token), prefill = peak x 0.69 / forward "
               "FLOPs per token (roofline; FasterTransformer ratios via llm-analysis)",
}


SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ModelInfo:
    id: str
    family: str  # the family whose semantics were applied
    model_type: str  # as config.json writes it
    architectures: tuple[str, ...]
    custom_code: bool
    text_tower_only: bool
    downloads: int | None
    sha: str | None
    kind: str = "decoder"  # "decoder", "encoder" or "encoder-decoder"
    approximate: bool = False  # the estimate is not exact under transformers semantics
    approximate_reason: str | None = None  # what the page shows after "approximate: "
    # where config.json came from (the snapshot record's config_provenance: hub, copy, preset, resaved, repaired,
    # reconstructed, local); None where the caller did not say
    config_provenance: str | None = None


@dataclass(frozen=True)
class Params:
    graph: int
    checkpoint: int | None
    match: bool | None
    embedding: int
    lm_head: int
    per_layer: int
    layers: int
    lora_adapter: int  # trainable parameters of LoRA at the job's rank
    active: int = 0  # parameters used per token: routed top-k experts + shared (= graph when dense)
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    text: int = 0  # the language model (embeddings, layers, head)
    vision: int = 0  # vision tower + projector (VLMs; 0 otherwise)
    stored: int | None = None  # elements a quantised checkpoint stores (packed weights + scales)
    quantization: tuple[tuple[str, Any], ...] | None = None  # method, bits, group size, description
    layer_kinds: tuple[tuple[str, int], ...] = ()  # (kind, count) over the stack: attention, sliding, mla, ...
    layer_sizes: tuple[tuple[int, int], ...] = ()  # (parameters, layers of that many), in order of first appearance
    lm_head_tied: bool = False  # an LM head whose weight is the embedding's (lm_head counts its bias alone, or 0)

    @property
    def count_status(self) -> str:
        """The graph's count against the checkpoint's: "none" (no checkpoint count), "gap", "match" (equal), or
        "stored": a quantised checkpoint counts its stored elements (packed weights and scales), equal to the
        graph's parameters stored the same way but not to the parameters themselves."""
        if self.checkpoint is None:
            return "none"
        return "gap" if not self.match else "match" if self.checkpoint == self.graph else "stored"


@dataclass(frozen=True)
class SplitPlan:
    method: str  # "train_full", "train_lora" or "serve"
    cards: int
    cut_after_layer: int
    stage_bytes_batch1: tuple[int, int]
    max_batch: int


@dataclass(frozen=True)
class CardPlan:
    name: str
    memory_bytes: int  # marketed capacity
    usable_bytes: int  # driver-reported total
    budget_bytes: int  # usable less CUDA context, over headroom: what estimates are held against
    train_full_max_batch: int
    train_lora_max_batch: int
    serve_max_batch: int
    split: tuple[SplitPlan, ...] | None  # None when every method fits at batch 1
    # QLoRA (NF4 base, double quantisation, paged AdamW, checkpointing) on one card; 0 where batch 1 does not fit
    # or QLoRA does not apply (an already quantised checkpoint: plans_unreachable says so)
    train_qlora_max_batch: int = 0
    capacity_bytes: int = 0  # usable less CUDA context: what the process can allocate (budget = this / headroom)
    serve_dtype: str = ""  # "float32" where vLLM serves the model so on this card's GPUs (vllm_support.serving_scale)
    # serving one sequence at this card's vLLM defaults (card_plans.card_servers) and dtype; 0: vLLM refuses the
    # model on its GPUs (vllm_support.serving_scale 0)
    serve_bytes_batch1: int = 0

    @property
    def served(self) -> bool:
        """Whether vLLM serves the model on this card's GPUs at all (serve_bytes_batch1)."""
        return self.serve_bytes_batch1 > 0


@dataclass(frozen=True)
class Memory:
    assumptions: tuple[tuple[str, Any], ...]
    train_tokens: int
    serve_tokens: int
    train_full_bytes_batch1: int
    train_lora_bytes_batch1: int
    serve_bytes_batch1: int  # the model's own serving figure, at vLLM's reference defaults (vllm_server.py)
    job_batch: int  # the priced job's micro batch (CLI --batch)
    train_full_bytes_job_batch: int
    train_lora_bytes_job_batch: int
    kv_bytes_per_token: int  # every attention layer's K/V (or MLA latent) per token, windows not applied
    peak_phase_by_method: tuple[tuple[str, str], ...]  # (train_full / train_lora / serve, when its peak happens)
    smallest_card_full: str | None
    smallest_card_lora: str | None
    smallest_card_serve: str | None
    cards: tuple[CardPlan, ...]
    kv_bytes_per_sequence: int = 0  # one sequence's cache at serve_tokens: windows capped, state included
    state_bytes_per_sequence: int = 0  # fixed recurrent state per sequence (SSM, linear attention)
    # what vllm serve measures at startup beside its weights (vllm_server.startup_peak): at the reference defaults,
    # and at a large GPU's; 0 for an encoder
    serve_startup_bytes: int = 0
    serve_startup_bytes_large_gpus: int = 0
    image_tokens: int = 0  # text tokens one image (audio models: one clip) takes, from the vision/audio config
    serve_weight_bytes: int = 0  # weights as served: bf16, or the quantised checkpoint's storage
    # The exact job (estimator.job; the CLI's --method ... --metric, default the site's full AMP AdamW job at
    # batch 1): its peak, when it happens, the parts at that moment (they sum to the peak) and its options.
    peak_bytes: int = 0
    peak_phase: str = ""
    breakdown: tuple[tuple[str, int], ...] = ()
    job: tuple[tuple[str, Any], ...] = ()
    curve: tuple[CurvePoint, ...] = ()  # batch-1 peaks from 512 tokens to the context (estimator/curve.py)
    offload_cpu_bytes_per_node: int = 0  # the exact job's --offload and --offload-checkpoints: CPU memory the
    # ranks of one node hold
    # the site's full fine-tune at batch 1 accumulating gradients over micro-batches (how a card that holds less
    # than job_batch runs the reference job): every gradient held between them (FINDINGS.md F27)
    train_full_bytes_accumulating: int = 0
    # per method, the smallest card whose capacity holds batch 1 but not its headroom, where no smaller card fits
    # (memory.profile.card_verdict's "tight": the allocator's fragmentation decides); None where there is none
    tight_card_full: str | None = None
    tight_card_lora: str | None = None
    tight_card_serve: str | None = None
    # the site's QLoRA job (NF4 base, double quantisation, paged AdamW, checkpointing) at batch 1, and the card it is
    # tight on; None where QLoRA does not apply (an already quantised checkpoint)
    train_qlora_bytes_batch1: int | None = None
    tight_card_qlora: str | None = None

    @property
    def held_context_bytes(self) -> int:
        """What of the exact job's peak a card's budget and capacity leave out already: an nvidia-smi peak counts
        the CUDA context, which both take off the card's memory (profile.budget_bytes), so a card holds the peak
        less it (held_peak_bytes)."""
        return dict(self.assumptions)["cuda_context_bytes"] if dict(self.job or ()).get("metric") == "nvidia-smi" \
            else 0

    @property
    def nccl_bytes(self) -> int:
        """NCCL's buffers on each GPU of the exact job's setup where it has several (Assumptions.nccl_bytes_per_gpu),
        outside the allocator; 0 on one GPU."""
        job = dict(self.job or ())
        setup = Setup(str(job.get("strategy") or "single"), int(job.get("gpus") or 1))
        several = ranks(str(job.get("method")), setup) > 1  # HF generate's pipeline: one process
        return int(dict(self.assumptions).get("nccl_bytes_per_gpu", 0)) if several else 0

    @property
    def held_nccl_bytes(self) -> int:
        """What a card holds beside the exact job's peak: NCCL's buffers (nccl_bytes), which a peak torch counts
        (allocated, reserved) leaves out; an nvidia-smi peak has them already."""
        return 0 if dict(self.job or ()).get("metric") == "nvidia-smi" else self.nccl_bytes

    @property
    def held_peak_bytes(self) -> int:
        """The exact job's peak as a card's budget and capacity hold it (held_context_bytes, held_nccl_bytes)."""
        return self.peak_bytes - self.held_context_bytes + self.held_nccl_bytes

    @property
    def serve_named_bytes(self) -> int:
        """The serving figure of the card a summary names, the smallest that holds one sequence, at that card's vLLM
        defaults and dtype (CardPlan.serve_bytes_batch1, serve_named_dtype); the model's own figure where no card
        holds it."""
        return next((c.serve_bytes_batch1 for c in self.cards if c.name == self.smallest_card_serve
                     and c.served), self.serve_bytes_batch1)

    @property
    def serve_named_dtype(self) -> str:
        """"float32" where the card serve_named_bytes is of serves the model so (CardPlan.serve_dtype), else ""."""
        return next((c.serve_dtype for c in self.cards if c.name == self.smallest_card_serve), "")


@dataclass(frozen=True)
class Report:
    schema_version: int
    estimator_version: str
    model: ModelInfo
    params: Params
    memory: Memory
    cost: tuple[CostLine, ...]
    structure: Sequence[StructureRow]  # a StructureTable, or () where the caller asked for none
    findings: tuple[Finding, ...]
    provenance: tuple[tuple[str, Any], ...]  # config keys used (and their source) and formulas
    # Setups that run the model (setups.py): per method and priced GPU the fewest GPUs holding batch 1,
    # the methods nothing runs and why, and serving speeds at the smallest tensor-parallel count.
    plans: tuple[Plan, ...] = ()
    plans_unreachable: tuple[Unreachable, ...] = ()
    serving: tuple[ServingSpeed, ...] = ()
    # Where a card holds a training method on no count up to 512: what each GPU keeps however many share the job
    plan_floors: tuple[PlanFloor, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON twin: tuples become lists, pair-tuples become objects (_OBJECT_FIELDS), keys stay stable."""
        return _plain(self)


# Fields holding (key, value) pairs that the JSON twin shows as one object, the values as they are (None stays
# None): converted once, as objects, rather than to lists of lists first.
_OBJECT_FIELDS = {Memory: frozenset({"assumptions", "peak_phase_by_method", "breakdown", "job"}),
                  Params: frozenset({"layer_kinds", "quantization"}), Report: frozenset({"provenance"}),
                 PlanFloor: frozenset({"parts", "beyond"})}


# What dataclasses.asdict() followed by list-for-tuple gives, without asdict's deep copy of every leaf
# (a 1,100-row structure table made it most of an estimate's time): the leaves are immutable numbers,
# strings and None, returned as they are. Fields are read with dataclasses.fields, so a field added to
# any of these classes is in the JSON without a change here.
_ATOMS = frozenset({int, float, str, bool, type(None)})
# Annotations of fields that hold a leaf (the modules use `from __future__ import annotations`, so
# these are strings): such a field is copied as it is, the others are converted.
_ATOM_HINTS = frozenset({"int", "float", "str", "bool", "int | None", "float | None", "str | None", "bool | None"})
# Annotations of fields that hold a tuple of leaves (a structure row's shape, a model's class names): such a
# field becomes a list as it is, with no look at its items.
_LEAF_TUPLE_HINTS = frozenset({"tuple[int, ...]", "tuple[str, ...]"})
_Layout = tuple[tuple[str, ...], tuple[str, ...], bool, frozenset[str], frozenset[str]]


def _layout(cls: type) -> _Layout:
    """A dataclass's field names, those whose annotation allows a container, whether its instances
    keep their fields in a __dict__ (not __slots__), its fields shown as objects (_OBJECT_FIELDS) and its
    fields holding a tuple of leaves (_LEAF_TUPLE_HINTS)."""
    fields = dataclasses.fields(cls)
    return (tuple(f.name for f in fields), tuple(f.name for f in fields if f.type not in _ATOM_HINTS),
            not hasattr(cls, "__slots__"), _OBJECT_FIELDS.get(cls, frozenset()),
            frozenset(f.name for f in fields if f.type in _LEAF_TUPLE_HINTS))


def _field(value: Any, name: str, objects: frozenset[str]) -> Any:
    """One container field's JSON form: an object for the pair fields, else _plain."""
    if name in objects:
        return None if value is None else dict(value)
    return _plain(value)


def _records(values: Any, names: tuple[str, ...], containers: tuple[str, ...], has_dict: bool,
             objects: frozenset[str], leaf_tuples: frozenset[str]) -> list | None:
    """Instances of one dataclass as dicts, from copies of their instance dicts; None when one holds
    more or fewer entries than the class has fields (then the caller reads the fields one by one). A
    frozen dataclass's instance dict is its fields, in the order __init__ set them: field order."""
    if not has_dict:
        return None
    out = [v.__dict__.copy() for v in values]
    if set(map(len, out)) != {len(names)}:
        return None
    atoms = _ATOMS.issuperset
    for k in containers:  # field by field over the records (a structure table: one shape field, ~1,100 rows)
        if k in objects:
            for d in out:
                v = d[k]
                d[k] = None if v is None else dict(v)
            continue
        if k in leaf_tuples:
            for d in out:
                d[k] = list(d[k])
            continue
        for d in out:
            v = d[k]
            if v.__class__ is tuple and atoms(map(type, v)):  # a shape: the common case, one C-level pass
                d[k] = list(v)
            elif v.__class__ not in _ATOMS:
                d[k] = _plain(v)
    return out


def _plain(value: Any) -> Any:
    cls = value.__class__
    if cls in _ATOMS:
        return value
    if cls is tuple or cls is list:
        if _ATOMS.issuperset(map(type, value)):  # shapes, name lists: one C-level pass
            return list(value)
        kinds = set(map(type, value))
        if len(kinds) == 1 and (layout := _LAYOUTS.get(kinds.pop())) is not None:
            rows = _records(value, *layout)
            if rows is not None:
                return rows
        return [v if v.__class__ in _ATOMS else _plain(v) for v in value]
    if cls is dict:
        return {k: _plain(v) for k, v in value.items()}
    if cls is StructureTable:  # its dicts are made straight from the spec
        return value.records()
    layout = _LAYOUTS.get(cls)
    if layout is None and isinstance(cls, type) and dataclasses.is_dataclass(cls):
        layout = _layout(cls)
    if layout is not None:
        rows = _records((value,), *layout)
        return rows[0] if rows is not None else {n: _field(getattr(value, n), n, layout[3]) for n in layout[0]}
    if isinstance(value, (list, tuple)):  # named tuples: lists, as asdict + JSON made them
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (int, float, str)):
        return value
    raise TypeError(f"a Report field holds a {cls.__name__}, which has no JSON form")


# The layouts of the Report's own classes, read once (a structure table has up to ~1,100 rows).
_LAYOUTS: dict[type, _Layout] = {
    cls: _layout(cls) for cls in (ModelInfo, Params, SplitPlan, CardPlan, Memory, StructureRow, Report, Finding,
                                  CostLine, Plan, PlanFloor, Unreachable, ServingSpeed, CurvePoint)
}
