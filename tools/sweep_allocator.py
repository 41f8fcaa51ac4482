#!/usr/bin/env python3
"""The allocator sweep behind data/measurements/cpu-sim-allocator.jsonl: CPU-simulated steps of whole models (every
layer), each replayed through the CUDA caching allocator (`neurarch-trace measure --allocator`).

    nice .venv/bin/python tools/sweep_allocator.py --out data/measurements/cpu-sim-allocator.jsonl   # about 65 min
    .venv/bin/python tools/sweep_allocator.py --list

What it measures, per step, beside the live tensors' peak (what max_memory_allocated reads):
- reserved_bytes: what max_memory_reserved reads on a card with room, where the allocator never gives a segment
  back: the figure torchtune, ms-swift and `nvidia-smi` report;
- minimum_capacity_bytes: the least memory the step runs in, the allocator freeing its cached segments and trying
  again before it raises out-of-memory: the figure a "fits on this card" answer is about;
- reserved_bytes_expandable, minimum_capacity_bytes_expandable: the same with
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (generator/measure/expandable.py).
The setups are the site's methods and the recipes people run, at every layer (fragmentation depends on how many
tensors of each size a step makes, so a 2-layer model would not show it), on models from 135M to 9B; then 12-step
runs whose lengths vary, as a loader padding each batch to its longest sample feeds them (`--min-tokens`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tools"))
from sweep_cpu import _context, sweep_main  # noqa: E402

# (repo id in snapshot/, options added to every run): eager where transformers' class has no SDPA.
MODELS = [
    ("HuggingFaceTB/SmolLM-135M-Instruct", []),
    ("Qwen/Qwen3-0.6B", []),
    ("meta-llama/Llama-3.2-1B-Instruct", []),
    ("Qwen/Qwen2.5-1.5B-Instruct", []),
    ("google/gemma-2-2b-it", ["--attention", "eager"]),
    ("microsoft/Phi-3-mini-4k-instruct", []),
    ("mistralai/Mistral-7B-v0.1", []),
    ("meta-llama/Llama-3.1-8B", []),
    ("meta-llama/Llama-3.2-3B-Instruct", []),
    ("Qwen/Qwen3-4B", []),
    ("Qwen/Qwen3-8B", []),
    ("google/gemma-2-9b-it", ["--attention", "eager"]),
]
SETUPS = [
    # the site's LoRA (HF Trainer, bf16 autocast, peft's fp32 adapters, all-linear), with and without checkpointing
    ["--method", "lora", "--tokens", "512", "--batch", "2"],
    ["--method", "lora", "--tokens", "2048", "--batch", "1"],
    ["--method", "lora", "--tokens", "2048", "--batch", "1", "--grad-ckpt"],
    ["--method", "lora", "--tokens", "4096", "--batch", "1", "--grad-ckpt"],
    # torchtune's LoRA recipe: pure bf16, bf16 adapters on q and v, checkpointing
    ["--method", "lora", "--precision", "bf16", "--adapter-dtype", "bf16", "--lora-rank", "8", "--lora-targets",
     "q_proj,v_proj", "--grad-ckpt", "--tokens", "512", "--batch", "2"],
    # QLoRA as TRL runs it: nf4 with double quantisation, peft's kbit preparation, checkpointing
    ["--method", "qlora", "--double-quant", "--kbit-prep", "--grad-ckpt", "--tokens", "1024", "--batch", "1"],
    # full fine-tunes: AMP, and pure bf16 with checkpointing
    ["--method", "full", "--tokens", "1024", "--batch", "1"],
    ["--method", "full", "--precision", "bf16", "--grad-ckpt", "--tokens", "2048", "--batch", "1"],
    # serving: HF generate
    ["--method", "inference", "--tokens", "2048", "--new-tokens", "16", "--batch", "4"],
]
# Training as a padded-per-batch loader runs it: 12 steps whose lengths are drawn from [tokens / 8, tokens], the
# middle one at `tokens` (Setup.lengths), on the models below; each freed block fits only requests of its size or
# less, so steps of other lengths strand what the longest needs.
VARIED = ["--steps", "12"]
VARIED_MODELS = ["Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen3-4B", "mistralai/Mistral-7B-v0.1",
                 "meta-llama/Llama-3.1-8B"]
VARIED_SETUPS = [
    ["--method", "lora", "--tokens", "2048", "--min-tokens", "256", "--batch", "1"],
    ["--method", "lora", "--tokens", "2048", "--min-tokens", "256", "--batch", "1", "--grad-ckpt"],
    ["--method", "qlora", "--double-quant", "--kbit-prep", "--grad-ckpt", "--tokens", "2048", "--min-tokens", "256",
     "--batch", "1"],
    ["--method", "full", "--tokens", "1024", "--min-tokens", "128", "--batch", "1"],
]
# The same, longer: what a varied-length run's cached blocks come to after 40 and 100 steps.
LONG = [("Qwen/Qwen3-0.6B", ["--method", "lora", "--tokens", "2048", "--min-tokens", "256", "--batch", "1",
                             "--grad-ckpt", "--steps", str(steps)]) for steps in (40, 100)]
# Phi-3-mini's projections are fused (qkv_proj): torchtune's q and v are one Linear there.
TARGETS = {"microsoft/Phi-3-mini-4k-instruct": {"q_proj,v_proj": "qkv_proj"}}


def plan(only: str | None = None) -> list[tuple[str, int | None, list[str]]]:
    """(model, None: every layer, options) per run; a setup past the model's context is left out."""
    runs = []
    for model, always in MODELS:
        if only and only not in model:
            continue
        context = _context(model)
        for opts in SETUPS:
            opts = [TARGETS.get(model, {}).get(o, o) for o in opts]
            new = int(opts[opts.index("--new-tokens") + 1]) if "--new-tokens" in opts else 0
            if context is None or int(opts[opts.index("--tokens") + 1]) + new <= context:
                runs.append((model, None, [*opts, *always, "--allocator"]))
    for model in VARIED_MODELS:
        if not only or only in model:
            runs += [(model, None, [*opts, *VARIED, "--allocator"]) for opts in VARIED_SETUPS]
    runs += [(model, None, [*opts, "--allocator"]) for model, opts in LONG if not only or only in model]
    return runs


def main() -> int:
    return sweep_main(__doc__ or "", ROOT / "data" / "measurements" / "cpu-sim-allocator.jsonl", plan)


if __name__ == "__main__":
    raise SystemExit(main())
