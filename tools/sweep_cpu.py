#!/usr/bin/env python3
"""The CPU-simulated sweep behind data/measurements/cpu-sim.jsonl: MemTracker on fake tensors, one process.

    .venv/bin/python tools/sweep_cpu.py --out data/measurements/cpu-sim.jsonl   # about 6 minutes on 2 shared cores
    .venv/bin/python tools/sweep_cpu.py --list                                  # the planned runs only

Every run is `neurarch-trace measure MODEL --device cpu ...` with the options in PLAN. Models come from the
committed snapshot (snapshot/models/), shrunk to a few layers where noted (`--max-layers`, recorded in each
line's `shrunk`): memory is linear in the layer count, so a 2-layer model at full width checks every per-layer
and per-token term while the simulation stays fast. The output is rewritten whole; rows come out in PLAN order.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (repo id in snapshot/, max layers or None for the full depth[, options added to every run of the model])
MODELS = [
    ("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5", None),  # the reference page's tiny model (qwen2)
    ("HuggingFaceTB/SmolLM-135M-Instruct", None),  # llama, 30 layers, tied
    # gpt2 and starcoder2 train with attention dropout, which the CPU SDPA kernel cannot do without materialising
    # the T x T probabilities (CUDA's flash kernel can): attention dropout is set to 0, other dropout stays.
    ("openai-community/gpt2", None, ["--set", "attn_pdrop=0.0"]),  # gpt2, 12 layers, tied, learned positions
    ("facebook/opt-125m", None),  # opt, 12 layers
    ("distilbert/distilgpt2", None, ["--set", "attn_pdrop=0.0"]),
    ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", 4),  # llama, GQA
    ("meta-llama/Llama-3.2-1B", 4),  # llama, 128k vocab, tied
    ("meta-llama/Meta-Llama-3-8B", 2),
    ("Qwen/Qwen2-0.5B-Instruct", 4),  # qwen2, tied, 152k vocab
    ("Qwen/Qwen2.5-7B", 2),
    ("Qwen/Qwen3-0.6B", 4),  # qwen3, q/k norms
    ("Qwen/Qwen3-8B", 2),
    ("google/gemma-2b", 2),  # gemma, 256k vocab, MQA, GeGLU
    ("google/gemma-2-2b-it", 2, ["--attention", "eager"]),  # gemma2: four norms per layer; no SDPA in transformers
    ("google/gemma-3-1b-it", 2),  # gemma3_text, sliding window
    ("microsoft/Phi-3-mini-4k-instruct", 2),  # phi3, fused qkv and gate_up
    ("mistralai/Mistral-7B-v0.1", 2),
    ("togethercomputer/RedPajama-INCITE-Chat-3B-v1", 2),  # gpt_neox, parallel residual
    ("bigscience/bloomz-560m", 4, ["--attention", "eager"]),  # bloom: alibi, 250k vocab; no SDPA in transformers
    ("stabilityai/stablelm-2-zephyr-1_6b", 2),  # stablelm, partial rotary
    ("bigcode/starcoder2-7b", 2, ["--set", "attention_dropout=0.0"]),  # starcoder2, plain MLP with bias
    ("ibm-granite/granite-3.3-8b-instruct", 2),  # granite
    ("allenai/OLMo-2-1124-7B", 2),  # olmo2, post-norms
    ("CohereForAI/aya-23-8B", 2),  # cohere, 256k vocab, parallel block
    ("EleutherAI/gpt-j-6b", 2),  # gptj
]

BASE = [  # every model
    ["--method", "full", "--tokens", "512"],
    ["--method", "full", "--tokens", "2048"],
    ["--method", "lora", "--tokens", "512"],
    ["--method", "lora", "--tokens", "2048"],
    ["--method", "inference", "--tokens", "512", "--new-tokens", "8"],
]
EXTRA = {  # a few models: batch, long context, other precisions and optimizers, checkpointing, eager
    "Qwen/Qwen2-0.5B-Instruct": [
        ["--method", "full", "--tokens", "128"], ["--method", "full", "--tokens", "1024", "--batch", "4"],
        ["--method", "full", "--tokens", "4096", "--batch", "8"], ["--method", "lora", "--tokens", "4096", "--batch", "8"],
        ["--method", "full", "--tokens", "512", "--precision", "bf16"], ["--method", "full", "--tokens", "512", "--adamw-impl", "forloop"],
        ["--method", "full", "--tokens", "512", "--optimizer", "sgd"], ["--method", "full", "--tokens", "2048", "--grad-ckpt"],
        ["--method", "lora", "--tokens", "2048", "--lora-targets", "q_proj,v_proj"],
        ["--method", "lora", "--tokens", "2048", "--precision", "bf16"], ["--method", "lora", "--tokens", "2048", "--lora-rank", "64"],
        ["--method", "inference", "--tokens", "2048", "--new-tokens", "8"],
        ["--method", "inference", "--tokens", "2048", "--new-tokens", "8", "--batch", "8"],
    ],
    "meta-llama/Meta-Llama-3-8B": [
        ["--method", "full", "--tokens", "128"], ["--method", "full", "--tokens", "8192", "--batch", "2"],
        ["--method", "lora", "--tokens", "8192", "--batch", "4"], ["--method", "full", "--tokens", "2048", "--attention", "eager"],
        ["--method", "inference", "--tokens", "4096", "--new-tokens", "8", "--batch", "4"],
        ["--method", "inference", "--tokens", "4000", "--new-tokens", "96"],
    ],
    "mistralai/Mistral-7B-v0.1": [
        ["--method", "full", "--tokens", "4096", "--batch", "4"], ["--method", "lora", "--tokens", "4096", "--batch", "4"],
        ["--method", "full", "--tokens", "512", "--adamw-impl", "forloop"], ["--method", "full", "--tokens", "2048", "--grad-ckpt"],
    ],
    "google/gemma-2b": [
        ["--method", "full", "--tokens", "4096", "--batch", "4"], ["--method", "lora", "--tokens", "8192", "--batch", "2"],
    ],
    "CohereForAI/aya-23-8B": [
        ["--method", "lora", "--tokens", "4096", "--batch", "8"], ["--method", "full", "--tokens", "8192", "--batch", "2"],
    ],
    "HuggingFaceTB/SmolLM-135M-Instruct": [
        ["--method", "full", "--tokens", "2048", "--batch", "4"], ["--method", "lora", "--tokens", "2048", "--batch", "8"],
        ["--method", "inference", "--tokens", "2048", "--new-tokens", "8", "--batch", "4"],
    ],
    "openai-community/gpt2": [
        ["--method", "full", "--tokens", "1024", "--batch", "8"], ["--method", "full", "--tokens", "1024", "--eval-mode"],
    ],
    "Qwen/Qwen3-8B": [["--method", "full", "--tokens", "4096", "--batch", "4"]],
    "microsoft/Phi-3-mini-4k-instruct": [["--method", "lora", "--tokens", "4096", "--batch", "4"]],
}


def _context(model: str) -> int | None:
    from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
    from generator.measure.setup import context_of

    record = load_record(DEFAULT_SNAPSHOT_DIR, model)
    return context_of(record.config()) if record else None


def plan(only: str | None = None) -> list[tuple[str, int | None, list[str]]]:
    """(model, max layers, options) per run; token counts over a model's context are cut to fit it."""
    runs = []
    for model, layers, *always in MODELS:
        if only and only not in model:
            continue
        context = _context(model)
        for opts in BASE + EXTRA.get(model, []):
            opts = list(opts)
            i = opts.index("--tokens") + 1
            new = int(opts[opts.index("--new-tokens") + 1]) if "--new-tokens" in opts else 0
            if context and int(opts[i]) + new > context:
                opts[i] = str(context - new)
            run = (model, layers, opts + (always[0] if always else []))
            if run not in runs:
                runs.append(run)
    return runs


def sized(runs: list[list[str]], sizes: list[tuple[str, str]], prefix: tuple[str, ...] = ()) -> list[list[str]]:
    """Each run's options with a (tokens, batch) from `sizes` in turn, after `prefix`: the matrix sweeps spread
    their batch and token sizes over the setups this way."""
    return [[*prefix, *opts, "--tokens", sizes[i % len(sizes)][0], "--batch", sizes[i % len(sizes)][1]]
            for i, opts in enumerate(runs)]


def family_plan(families: list[tuple[str, list[str]]], runs_of: Callable[[str], list[list[str]]],
                only: str | None, layers: int = 2) -> list[tuple[str, int | None, list[str]]]:
    """Every run of runs_of(model) for each (model, options every run adds), at `layers` layers; --only filters."""
    return [(model, layers, opts + always) for model, always in families if not only or only in model
            for opts in runs_of(model)]


def sweep_main(doc: str, out: Path, plan: Callable[[str | None], list[tuple[str, int | None, list[str]]]],
               only: str = "run only models whose id contains this text",
               prepare: Callable[[list[tuple[str, int | None, list[str]]]], None] | None = None) -> int:
    """The command line every sweep shares: --out (default `out`), --only, --list; `prepare` runs before the plan
    (writing the configs it reads)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=out)
    ap.add_argument("--only", help=only)
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    args = ap.parse_args()
    runs = plan(args.only)
    if args.list:
        for model, layers, opts in runs:
            print(model, f"--max-layers {layers}" if layers else "", " ".join(opts))
        print(f"{len(runs)} runs")
        return 0
    if prepare is not None:
        prepare(runs)
    return run_plan(runs, args.out)


def main() -> int:
    return sweep_main(__doc__ or "", ROOT / "data" / "measurements" / "cpu-sim.jsonl", plan)


def run_plan(runs: list[tuple[str, int | None, list[str]]], out: Path) -> int:
    """Run every (model, max layers, options) in one process and write the JSON lines to `out` (whole)."""
    from generator.measure.cli import _quiet, measure
    from generator.measure.record import dumps
    from generator.measure.setup import parse_overrides, parser, setup_from_args

    _quiet()
    lines, failures, start = [], 0, time.perf_counter()
    for n, (model, layers, opts) in enumerate(runs, 1):
        argv = [model, *opts] + (["--max-layers", str(layers)] if layers else [])
        args_ = parser().parse_args(argv)
        try:
            rec = measure(model, setup_from_args(args_), device="cpu", max_layers=layers,
                          overrides=parse_overrides(args_.set), allocator=args_.allocator)
        except Exception as exc:  # noqa: BLE001 - a sweep records what failed and goes on
            failures += 1
            print(f"[{n}/{len(runs)}] FAILED {' '.join(argv)}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        lines.append(dumps(rec))
        est = rec["estimate"]
        print(f"[{n}/{len(runs)}] {rec['seconds']:5.1f}s {' '.join(argv)}: {rec['measured']['peak_bytes'] / 2**30:.3f} GiB"
              + (f", estimate {est['peak_bytes'] / 2**30:.3f}" if est else ""), file=sys.stderr, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{len(lines)} runs written to {out}, {failures} failed, {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
