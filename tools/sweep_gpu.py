#!/usr/bin/env python3
"""The GPU sweep (CUDA): real models at full depth, emulated smaller cards, and the CPU-sim plan's twins.

    python3 tools/sweep_gpu.py --out gpu-h200.jsonl --deadline 500      # what tools/gpu_sweep.sh runs

One process; every run is `neurarch-trace measure ... --device cuda` (generator.measure.run.run_cuda) and its
JSON line is appended and flushed at once, so a run cut short keeps what it measured. No new run starts after
`--deadline` seconds. Order = value per second: (1) real checkpoints' configs at full depth, (2) jobs near a
card's budget on emulated cards (torch.cuda.set_per_process_memory_fraction; an OOM is recorded, not fatal),
(3) the CPU-simulated plan again on CUDA (same configs and options: CPU simulation vs the CUDA truth).
qlora / adamw8bit runs need bitsandbytes (carry its wheel, see gpu_sweep.sh); they are skipped without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FULL_DEPTH = [  # (model, options); no shrinking
    ("Gensyn/Qwen2.5-0.5B-Instruct", ["--method", "full", "--tokens", "2048"]),
    ("Gensyn/Qwen2.5-0.5B-Instruct", ["--method", "full", "--tokens", "2048", "--batch", "4"]),
    ("Gensyn/Qwen2.5-0.5B-Instruct", ["--method", "lora", "--tokens", "2048", "--batch", "4"]),
    ("Gensyn/Qwen2.5-0.5B-Instruct", ["--method", "inference", "--tokens", "2048", "--new-tokens", "64", "--batch", "8"]),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", ["--method", "full", "--tokens", "2048", "--batch", "8"]),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", ["--method", "full", "--tokens", "2048", "--batch", "4"]),
    ("HuggingFaceTB/SmolLM2-1.7B-Instruct", ["--method", "full", "--tokens", "2048"]),
    ("HuggingFaceTB/SmolLM2-1.7B-Instruct", ["--method", "lora", "--tokens", "2048", "--batch", "8"]),
    ("meta-llama/Llama-3.2-1B", ["--method", "full", "--tokens", "2048"]),
    ("meta-llama/Llama-3.2-1B", ["--method", "full", "--tokens", "2048", "--batch", "4"]),
    ("meta-llama/Llama-3.2-1B", ["--method", "lora", "--tokens", "2048", "--batch", "4"]),
    ("meta-llama/Llama-3.2-1B", ["--method", "inference", "--tokens", "4096", "--new-tokens", "64", "--batch", "16"]),
    ("Qwen/Qwen3-1.7B", ["--method", "full", "--tokens", "2048"]),
    ("Qwen/Qwen3-1.7B", ["--method", "lora", "--tokens", "4096", "--batch", "2"]),
    ("meta-llama/Llama-3.2-3B", ["--method", "lora", "--tokens", "2048", "--batch", "4"]),
    ("meta-llama/Llama-3.2-3B", ["--method", "full", "--tokens", "2048", "--precision", "bf16"]),
    ("google/gemma-2b", ["--method", "lora", "--tokens", "2048", "--batch", "2"]),
    ("microsoft/Phi-3-mini-4k-instruct", ["--method", "lora", "--tokens", "2048", "--batch", "2"]),
    ("meta-llama/Llama-3.1-8B", ["--method", "lora", "--tokens", "2048"]),
    ("meta-llama/Llama-3.1-8B", ["--method", "lora", "--tokens", "4096", "--batch", "2"]),
    ("meta-llama/Llama-3.1-8B", ["--method", "lora", "--tokens", "2048", "--lora-targets", "q_proj,v_proj", "--precision", "bf16"]),
    ("meta-llama/Llama-3.1-8B", ["--method", "inference", "--tokens", "4096", "--new-tokens", "64"]),
    ("meta-llama/Llama-3.1-8B", ["--method", "inference", "--tokens", "1024", "--new-tokens", "512", "--batch", "16"]),
    ("meta-llama/Llama-2-7b-hf", ["--method", "inference", "--tokens", "6", "--new-tokens", "50"]),  # LitGPT's M039
    ("meta-llama/Llama-2-13b-hf", ["--method", "inference", "--tokens", "512", "--new-tokens", "512", "--batch", "4"]),  # optimum M154
    ("mistralai/Mistral-7B-v0.1", ["--method", "lora", "--tokens", "2048", "--batch", "2"]),
    ("meta-llama/Llama-3.1-8B", ["--method", "full", "--tokens", "512"]),  # 20 B/param > 141 GB: the OOM is the datum
    ("meta-llama/Llama-3.1-8B", ["--method", "qlora", "--tokens", "2048"]),
    ("meta-llama/Llama-3.2-3B", ["--method", "full", "--tokens", "2048", "--optimizer", "adamw8bit", "--precision", "bf16"]),
]
EMULATED = [  # (model, card, options): the card's budget lies between the current estimate and the proposal's
    ("meta-llama/Llama-3.2-1B", "A100 40 GB", ["--method", "full", "--tokens", "512", "--batch", "8"]),
    ("meta-llama/Llama-3.2-1B", "A100 40 GB", ["--method", "lora", "--tokens", "2048", "--batch", "4"]),
    ("Qwen/Qwen3-1.7B", "A100 40 GB", ["--method", "full", "--tokens", "2048"]),
    ("Qwen/Qwen3-1.7B", "A100 / H100 80 GB", ["--method", "full", "--tokens", "2048", "--batch", "4"]),
    ("meta-llama/Llama-3.2-3B", "A100 / H100 80 GB", ["--method", "full", "--tokens", "2048", "--batch", "2"]),
    ("meta-llama/Llama-3.2-3B", "T4 16 GB", ["--method", "lora", "--tokens", "1024"]),
    ("meta-llama/Llama-3.2-3B", "L4 24 GB", ["--method", "lora", "--tokens", "2048"]),
    ("meta-llama/Llama-3.1-8B", "A100 40 GB", ["--method", "lora", "--tokens", "2048"]),
    ("meta-llama/Llama-3.1-8B", "L4 24 GB", ["--method", "inference", "--tokens", "2048", "--new-tokens", "64", "--batch", "8"]),
    ("meta-llama/Llama-3.1-8B", "L4 24 GB", ["--method", "inference", "--tokens", "4096", "--new-tokens", "64", "--batch", "4"]),
    ("google/gemma-2b", "A100 / H100 80 GB", ["--method", "full", "--tokens", "2048", "--batch", "2"]),
    ("google/gemma-2b", "L4 24 GB", ["--method", "lora", "--tokens", "2048"]),
    ("google/gemma-2b", "A100 40 GB", ["--method", "lora", "--tokens", "4096"]),
    ("Gensyn/Qwen2.5-0.5B-Instruct", "T4 16 GB", ["--method", "full", "--tokens", "1024"]),
    ("meta-llama/Llama-3.1-8B", "L4 24 GB", ["--method", "lora", "--tokens", "2048"]),  # clearly over: an OOM
]


def runs(only: str | None) -> list[tuple[str, int | None, list[str], str | None]]:
    from tools.sweep_cpu import plan

    out: list[tuple[str, int | None, list[str], str | None]] = []
    out += [(m, None, o, None) for m, o in FULL_DEPTH]
    out += [(m, None, o, c) for m, c, o in EMULATED]
    out += [(m, layers, o, None) for m, layers, o in plan()]
    return [r for r in out if not only or only in r[0]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSON lines file (appended)")
    ap.add_argument("--deadline", type=float, default=500.0, help="seconds after which no new run starts")
    ap.add_argument("--only", help="run only models whose id contains this text")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    plan = runs(args.only)
    if args.list:
        for m, layers, o, card in plan:
            print(m, f"--max-layers {layers}" if layers else "", " ".join(o), f"--card '{card}'" if card else "")
        print(f"{len(plan)} runs")
        return 0
    from generator.measure.cli import _quiet, card_fraction, measure
    from generator.measure.record import dumps
    from generator.measure.setup import parse_overrides, parser, setup_from_args

    _quiet()
    try:
        import bitsandbytes  # noqa: F401
        have_bnb = True
    except ImportError:
        have_bnb = False
    start, done, failed = time.perf_counter(), 0, 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a", encoding="utf-8") as fh:
        for n, (model, layers, opts, card) in enumerate(plan, 1):
            if time.perf_counter() - start > args.deadline:
                print(f"deadline: {len(plan) - n + 1} runs not started", file=sys.stderr)
                break
            if not have_bnb and ("qlora" in opts or "adamw8bit" in opts):
                print(f"[{n}] skipped (no bitsandbytes): {model} {' '.join(opts)}", file=sys.stderr)
                continue
            argv = [model, *opts] + (["--max-layers", str(layers)] if layers else [])
            a = parser().parse_args(argv)
            try:
                fraction = card_fraction(card) if card else None
                rec = measure(model, setup_from_args(a), device="cuda", max_layers=layers,
                              overrides=parse_overrides(a.set), memory_fraction=fraction,
                              note=f"emulating {card}" if card else None)
            except Exception as exc:  # noqa: BLE001 - the sweep goes on
                failed += 1
                print(f"[{n}] FAILED {' '.join(argv)}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                continue
            if card:
                rec["device"]["emulated_card"] = card
            fh.write(dumps(rec) + "\n")
            fh.flush()
            done += 1
            m = rec["measured"]
            print(f"[{n}/{len(plan)}] {time.perf_counter() - start:5.0f}s {' '.join(argv)}{f' on {card}' if card else ''}: "
                  f"{m['status']} {m['peak_bytes'] / 2**30:.3f} GiB alloc, {m['reserved_peak_bytes'] / 2**30:.3f} reserved",
                  file=sys.stderr, flush=True)
    print(f"{done} runs written to {args.out}, {failed} failed, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
