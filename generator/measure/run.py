"""Run one Setup: a real training step or a serving run, simulated on fake CPU tensors or measured on CUDA."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Mapping
from typing import Any
from unittest import mock

import torch

from .allocator import CachingAllocator, capacity_figures
from .build import (
    MeasureError,
    apply_lora,
    build_on_meta,
    count_params,
    dtypes,
    fake_pack_nf4,
    kbit_prepare,
    make_optimizer,
    materialise,
    meta_linear4bit,
    model_kind,
    quantise_nf4,
    unwrap_params4bit,
)
from .expandable import ExpandableAllocator
from .images import check_images, image_inputs, mrope_positions, placeholder_check_skipped, value_mode
from .setup import Setup
from .tracker import PeakTracker

# The output fields a causal LM hands its cache back in (as generate's _update_model_kwargs_for_generation reads
# them): transformers 5's `cache`, the older `past_key_values`, RWKV's `state`. RecurrentGemma returns none: its cache
# lives in its layers, addressed by cache_position.
CACHE_FIELDS = ("cache", "past_key_values", "state")


def _cache_of(out, takes) -> dict:
    """The keyword arguments that hand `out`'s cache to the next decode step ({} where the model keeps its own): a
    KV cache by the name the forward takes (`takes`, its parameters), RWKV's state as `state`."""
    for name in CACHE_FIELDS:
        value = getattr(out, name, None)
        if value is not None:
            return {name if name == "state" else "cache" if "cache" in takes else "past_key_values": value}
    return {}


def workload(model, setup: Setup, vocab: int, device: str, tracker: PeakTracker | None, sync=None) -> None:
    """The measured work. Training: `steps` steps of forward + loss, backward, optimizer step, zero_grad.
    Inference: a prefill of `tokens` (KV cache on, only the last position's logits), then `new_tokens`
    greedy decode steps through the cache, with fp32 next-token logits as transformers' generate makes."""
    _, _, amp = dtypes(setup)
    autocast = torch.autocast(device, dtype=torch.bfloat16) if amp else contextlib.nullcontext()
    ids = torch.randint(0, vocab, (setup.batch, setup.tokens), device=device)

    def stage(name: str, key: str | None = None) -> None:
        if tracker is not None:
            tracker.stage = name
            tracker.phase_key = key
            tracker.reset_mod_stats()  # MemTracker refuses a second call of the root module otherwise

    if setup.method == "inference":
        model.eval()
        # the prompts' images: generate hands them to the prefill and holds them in its model_kwargs to the end
        ids, pictures = _with_images(model, ids, setup)
        # the positions generate passes where the forward takes them (RecurrentGemma's cache is read by them)
        takes = inspect.signature(model.forward).parameters
        at = (lambda start, n: {"cache_position": torch.arange(start, start + n, device=device)}) \
            if "cache_position" in takes else (lambda start, n: {})
        kept = {"logits_to_keep": 1} if "logits_to_keep" in takes else {}
        with torch.no_grad():
            stage("prefill", "prefill")
            with autocast:
                out = model(input_ids=ids, use_cache=True, **kept, **at(0, setup.tokens), **pictures)
            past = _cache_of(out, takes)
            logits = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
            del out
            for i in range(setup.new_tokens):
                nxt = logits.argmax(dim=-1, keepdim=True)
                del logits
                stage(f"decode {i + 1}", "decode")
                with autocast:
                    out = model(input_ids=nxt, use_cache=True, **at(setup.tokens + i, 1), **past)
                past = _cache_of(out, takes)
                logits = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
                del out
        return
    model.train(setup.train_mode)
    if setup.grad_ckpt:
        if setup.reentrant:  # reentrant checkpointing needs an input that requires grad: a frozen embedding's output
            # is made to (transformers enable_input_require_grads, as LLaMA-Factory's _gradient_checkpointing_enable)
            model.enable_input_require_grads()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": setup.reentrant})
    opt = make_optimizer(model, setup)
    if tracker is not None:
        tracker.track_external(model, opt)
    k = setup.grad_accum
    lengths = setup.lengths()
    ids, pictures = _with_images(model, ids, setup)
    labels, mask = _labels(model, ids), _padding(ids, setup)
    for step in range(1, setup.steps + 1):
        if setup.min_tokens:  # a batch padded to its own longest sample: this step's length
            del ids, labels, mask
            ids, pictures = _with_images(model, torch.randint(0, vocab, (setup.batch, lengths[step - 1]),
                                                              device=device), setup)
            labels, mask = _labels(model, ids), _padding(ids, setup)
        for micro in range(1, k + 1):  # HF Trainer's gradient accumulation: the loss over k, added into .grad
            stage(f"step {step}" + (f" micro-batch {micro}" if k > 1 else ""),
                  "last step" if step == setup.steps else None)
            with autocast:
                out = model(input_ids=ids, **mask, **pictures) if labels is None else model(
                    input_ids=ids, labels=_masked(labels, mask), **mask, **pictures)
                loss = embedding_loss(out) if labels is None else out.loss
            loss = loss / k if k > 1 else loss
            if not setup.keep_outputs:  # HF Trainer's compute_loss keeps only the loss; a hand-written loop may not
                del out
            loss.backward()
            del loss
            if tracker is not None:
                tracker.backward_done()
            out = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sync is not None:
            sync()


def _with_images(model, ids: torch.Tensor, setup: Setup) -> tuple[torch.Tensor, dict]:
    """The ids with setup.images images' tokens, and the model's image inputs (images.image_inputs); none for 0."""
    if not setup.images:
        return ids, {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    ids, extra = image_inputs(base.config, ids, setup.images, base.dtype)
    return ids, mrope_positions(base, ids, extra)


def _labels(model, ids: torch.Tensor) -> torch.Tensor | None:
    """The training step's labels: the input ids (a causal, masked or seq2seq LM's every token), one per sequence
    for a sequence classifier (a float target where num_labels is 1, transformers' regression loss, MSE; a class
    index otherwise), none for an embedding model (embedding_loss)."""
    config = (model.get_base_model() if hasattr(model, "get_base_model") else model).config
    kind = model_kind(config)
    if kind == "embedding":
        return None
    if kind != "classifier":
        return ids
    return torch.zeros(ids.shape[0], dtype=torch.float32 if config.num_labels == 1 else torch.long, device=ids.device)


def _padding(ids: torch.Tensor, setup: Setup) -> dict[str, torch.Tensor]:
    """The model's attention_mask where the setup pads (Setup.padded): every sample but the first padded on its last
    quarter, as a collator pads a batch to its longest sample (DataCollatorWithPadding, TRL's); none otherwise."""
    if not setup.padded or ids.shape[0] < 2:
        return {}
    mask = torch.ones_like(ids)
    mask[1:, ids.shape[1] - ids.shape[1] // 4:] = 0
    return {"attention_mask": mask}


def _masked(labels: torch.Tensor, mask: dict[str, torch.Tensor]) -> torch.Tensor:
    """The labels with the padded tokens' set to -100 (the collators' ignore index), where the batch is padded."""
    return labels.masked_fill(mask["attention_mask"] == 0, -100) if mask and labels.dim() == 2 else labels


def embedding_loss(out) -> torch.Tensor:
    """An embedding model's step as sentence-transformers trains one (MultipleNegativesRankingLoss, its default for
    pairs): each sequence's first-token state (CLS pooling), normalised, scored against every sequence of the batch
    at scale 20 (in-batch negatives), cross-entropy on the diagonal. What it adds beside the encoder is
    batch x hidden; the encoder's own tensors are the step's memory."""
    emb = torch.nn.functional.normalize(out.last_hidden_state[:, 0].float(), dim=-1)
    scores = 20.0 * emb @ emb.T
    return torch.nn.functional.cross_entropy(scores, torch.arange(scores.shape[0], device=scores.device))


def _unpacked(position_ids: torch.Tensor) -> None:
    """masking_utils.find_packed_sequence_indices' answer for the harness's inputs: one sequence per row."""
    return None


@contextlib.contextmanager
def cuda_4bit_step():
    """A QLoRA step as it runs on CUDA, two places where the CPU would take another path (FINDINGS.md F29):
    - bitsandbytes' 4-bit matmul. MatMul4Bit.forward calls the gemm_4bit op; under FakeTensorMode its fake kernel
      only makes the output, while CUDA past 1,536 rows (all rows on sm100, most shapes past 512) takes
      _dequant_linear_fallback (bitsandbytes/backends/cuda/ops.py): the absmax and the weight dequantised into
      fresh buffers, then F.linear. The default kernel is that same sequence, so the simulation runs it and sees
      the transient weight.
    - peft's 4-bit LoRA layer asks `torch.is_autocast_enabled()`, which without a device reads CUDA's autocast:
      under the CPU's autocast it answers False and the layer casts each adapter's input to fp32 and the output
      back, which a CUDA run under autocast does not (activations.ADAPTER_NO_CAST). The question is answered for
      the device the simulation runs on."""
    import bitsandbytes  # noqa: F401 - registers the torch.ops.bitsandbytes namespace
    from bitsandbytes.backends.default.ops import _gemm_4bit_default_impl

    asked = torch.is_autocast_enabled

    def on_this_device(device_type: str | None = None) -> bool:
        return asked(device_type or "cpu")

    with mock.patch.object(torch.ops.bitsandbytes.gemm_4bit, "default", _gemm_4bit_default_impl), \
            mock.patch.object(torch, "is_autocast_enabled", on_this_device):
        yield


class _GroupedMatmul(torch.autograd.Function):
    """aten._grouped_mm on fake tensors of a dtype its meta kernel refuses (anything but bf16): CUDA's kernel takes
    fp32 and fp16 too (aten/src/ATen/native/cuda/GroupedBlas.cpp: its bf16 fast path, else _grouped_mm_fallback,
    an mm per group into one output), and its autograd node (GroupedMmBackward0) saves each operand only for the
    other's gradient (a frozen weight: the weight, not the input) and makes only the gradients asked for. Same
    allocations, no values: the simulation never reads them."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a if b.requires_grad else None, b if a.requires_grad else None)
        ctx.shapes = a.shape, b.shape
        return a.new_empty(a.shape[0], b.shape[-1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a_shape, b_shape = ctx.shapes
        return (grad.new_empty(a_shape) if ctx.needs_input_grad[0] else None,
                grad.new_empty(b_shape) if ctx.needs_input_grad[1] else None, None)


@contextlib.contextmanager
def cuda_grouped_mm():
    """Routed experts whose weights are not bf16 (prepare_model_for_kbit_training upcasts the experts bitsandbytes
    leaves unquantised to fp32) as a CUDA card from sm80 runs them: transformers' _grouped_mm calls torch's grouped
    matmul there (integrations/moe.py _can_use_grouped_mm), whose meta kernel checks for bf16 only."""
    from transformers.integrations import moe

    ours = moe._grouped_mm

    def grouped(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        if weight.dtype == torch.bfloat16:
            return ours(input, weight, offs)
        return _GroupedMatmul.apply(input.to(weight.dtype), weight, offs)

    with mock.patch.object(moe, "_grouped_mm", grouped):
        yield


def run_cpu(config: Mapping[str, Any], setup: Setup, explain: bool = False, allocator: bool = False,
            real: bool = False) -> dict[str, Any]:
    """MemTracker on fake CPU tensors: exact tensor bytes of the step, no CUDA kernels' own choices. `real`: on real
    CPU tensors (seeded random weights), for a step that reads values fake tensors lack (Longformer's global-attention
    test, an expert loop's nonzero): the same storages counted, at the cost of computing them. `allocator`: the
    storages replayed through the CUDA caching allocator (allocator.py) give `reserved_bytes` (max_memory_reserved on
    a card with room) and `minimum_capacity_bytes` (the least memory the step runs in, cached segments freed to make
    room), and both again with expandable segments (expandable.py).

    transformers cannot read a fake tensor's values, so masking_utils.find_packed_sequence_indices takes the
    position ids of a forward without a cache (gradient checkpointing) for packed sequences (`not
    is_tracing(packed_sequence_mask)` guards its unpacked answer, and is_tracing is True on a FakeTensor) and
    create_causal_mask / create_sliding_window_causal_mask then build the [B, 1, T, T] mask and SDPA takes it
    (with repeat_kv's copies) where a real run passes None and is_causal. The harness feeds one unpacked sequence
    per row (position ids 0..T-1), whose real answer is None: the simulation is given that answer (FINDINGS F13)."""
    from transformers import masking_utils

    if setup.optimizer == "adamw8bit":
        raise MeasureError("adamw8bit's CUDA kernels are not simulated on the CPU")
    check_images(config, setup.images)
    qlora = setup.method == "qlora"
    if real and (qlora or setup.images):
        raise MeasureError("--device cpu-real runs text-only LoRA, full fine-tunes and serving, not QLoRA or images")

    def once(capture_at: int | None) -> tuple[PeakTracker, tuple[int, int]]:
        if real:  # the same weights and tokens each run: a router's choices, and so the peak, repeat (--explain)
            torch.manual_seed(0)
        meta = build_on_meta(config, setup, with_lora=not qlora)
        if qlora:  # quantise first, then peft wraps the 4-bit Linears (its bnb LoRA layers), all on meta
            meta_linear4bit(meta, setup.double_quant)
            if setup.upcast_fp32:
                kbit_prepare(meta)
            meta = apply_lora(meta, setup, dtypes(setup)[1])
            unwrap_params4bit(meta)
        vocab = meta.get_input_embeddings().num_embeddings
        with contextlib.nullcontext() if real else value_mode(config, setup.images), mock.patch.object(
                masking_utils, "find_packed_sequence_indices", _unpacked), cuda_4bit_step() if qlora \
                else contextlib.nullcontext(), cuda_grouped_mm(), placeholder_check_skipped(meta):
            model = materialise(meta, "cpu", values=real)
            states = fake_pack_nf4(model, setup.double_quant) if qlora else []
            counts = count_params(model)
            tracker = PeakTracker(explain=explain, capture_at=capture_at,
                                  record_allocations=allocator and capture_at is None)
            if setup.method == "inference":
                tracker.track_external(model)
            if states:
                tracker.track_external(*states)
            with tracker:
                workload(model, setup, vocab, "cpu", tracker)
        return tracker, counts

    start = time.perf_counter()
    tracker, (total, trainable) = once(None)
    peak = tracker.peak_breakdown()
    live = None
    if explain:
        again, _ = once(peak["total"])
        live = again.live_at_peak
    measured = {"metric": "memtracker_cpu" if real else "memtracker_fake_cpu", "status": "ok",
                "peak_bytes": peak["total"], "categories": {k: v for k, v in peak.items() if k != "total"}}
    if tracker.allocation_events is not None:
        # the default allocator, then PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (expandable.py)
        for suffix, make in (("", CachingAllocator), ("_expandable", ExpandableAllocator)):
            reserved, least = capacity_figures(tracker.allocation_events, make)
            measured["reserved_bytes" + suffix], measured["minimum_capacity_bytes" + suffix] = reserved, least
    return {
        "device": {"kind": "cpu-simulated", "name": "real tensors (cpu)" if real else "FakeTensorMode(cpu)"},
        "measured": measured,
        "peak": dict(tracker.peak_where, phase_peaks=dict(tracker.phase_peaks)),
        "params": {"total": total, "trainable": trainable},
        "live_at_peak": live,
        "seconds": round(time.perf_counter() - start, 2),
    }


def run_cuda(config: Mapping[str, Any], setup: Setup, memory_fraction: float | None = None,
             categories: bool = True) -> dict[str, Any]:
    """A real step on the GPU: the caching allocator's peaks, the process's use per the driver, and an OOM flag.

    Not yet run on a GPU in this repository (no GPU was lent when it was written): tools/gpu_sweep.sh is the
    first check. Several runs may share one process: everything is freed and the memory fraction reset after
    each, and `leftover_bytes` says what was still allocated before it started.
    """
    import gc

    if not torch.cuda.is_available():
        raise MeasureError("no CUDA device")
    check_images(config, setup.images)
    torch.empty(1, device="cuda")  # create the context
    leftover = torch.cuda.memory_allocated()
    free0, total_bytes = torch.cuda.mem_get_info()
    context = total_bytes - free0 - torch.cuda.memory_reserved()  # driver + context (+ anything else on the GPU)
    if memory_fraction is not None:
        torch.cuda.set_per_process_memory_fraction(memory_fraction)
    start = time.perf_counter()
    status, error, total, trainable = "ok", None, None, None
    tracker = PeakTracker() if categories else None
    model = None
    try:
        torch.cuda.reset_peak_memory_stats()
        if setup.method == "qlora":  # quantise first, then peft wraps the 4-bit Linears (its bnb LoRA layers)
            _, adapter_dtype, _ = dtypes(setup)
            model = materialise(build_on_meta(config, setup, with_lora=False), "cuda")
            quantise_nf4(model, setup.double_quant)
            if setup.upcast_fp32:
                kbit_prepare(model)
            model = apply_lora(model, setup, adapter_dtype, device="cuda")
        else:
            model = materialise(build_on_meta(config, setup), "cuda")
        vocab = model.get_input_embeddings().num_embeddings
        total, trainable = count_params(model)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()  # the peak of the work, weights included (they are allocated)
        if tracker is not None and setup.method == "inference":
            tracker.track_external(model)
        with tracker if tracker is not None else contextlib.nullcontext():
            workload(model, setup, vocab, "cuda", tracker, sync=torch.cuda.synchronize)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as exc:
        status, error = "oom", str(exc).splitlines()[0][:300]
    free1, _ = torch.cuda.mem_get_info()
    stats = torch.cuda.memory_stats()
    measured: dict[str, Any] = {
        "metric": "cuda_max_memory_allocated", "status": status,
        "peak_bytes": int(torch.cuda.max_memory_allocated()),
        "allocated_peak_bytes": int(torch.cuda.max_memory_allocated()),
        "reserved_peak_bytes": int(torch.cuda.max_memory_reserved()),
        "active_peak_bytes": int(stats.get("active_bytes.all.peak", 0)),
        "process_used_bytes": int(total_bytes - free1),  # what nvidia-smi shows for the GPU, the context included
        "context_bytes": int(context),
        "leftover_bytes": int(leftover),
        "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
    }
    if tracker is not None and status == "ok":
        peak = tracker.peak_breakdown()
        measured["tracker_peak_bytes"] = peak["total"]
        measured["categories"] = {k: v for k, v in peak.items() if k != "total"}
    if error:
        measured["error"] = error
    where = dict(tracker.peak_where, phase_peaks=dict(tracker.phase_peaks)) if tracker is not None and status == "ok" else None
    del model, tracker
    gc.collect()
    torch.cuda.empty_cache()
    if memory_fraction is not None:
        torch.cuda.set_per_process_memory_fraction(1.0)
    return {
        "device": {"kind": "cuda", "name": torch.cuda.get_device_name(), "total_bytes": int(total_bytes),
                   "memory_fraction": memory_fraction,
                   "limit_bytes": int(total_bytes * memory_fraction) if memory_fraction else int(total_bytes)},
        "measured": measured,
        "peak": where,
        "params": {"total": total, "trainable": trainable},
        "live_at_peak": None,
        "seconds": round(time.perf_counter() - start, 2),
    }
