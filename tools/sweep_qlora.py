#!/usr/bin/env python3
"""The QLoRA runs behind data/measurements/cpu-sim-qlora.jsonl (issue 13 item 4): CPU-simulated steps of a
bitsandbytes nf4 base under peft LoRA, checked against the estimator's QLoRA terms (FINDINGS.md F29).

    nice .venv/bin/python tools/sweep_qlora.py --out data/measurements/cpu-sim-qlora.jsonl   # ~80 s, 2 cores
    .venv/bin/python tools/sweep_qlora.py --list

bitsandbytes (>= 0.46, the [measure] extra) runs on the CPU: the harness quantises each Linear with its own
quantize_4bit (under FakeTensorMode its registered fake kernel) and runs the 4-bit matmul as CUDA does for a
training step's M > 1,536 rows (generator/measure/run.py cuda_4bit_step), so every run here has batch x tokens
>= 2,048. Per family (2 layers at full width), seven runs:
- TRL's QLoRA (the trl-sft-qlora recipe less its chunked loss and paged optimizer, which the CPU has not): nf4 with
  double quantisation, prepare_model_for_kbit_training, LoRA dropout 0.05, all-linear rank 16, checkpointing on
  and off (2 runs);
- nf4 without double quantisation or the fp32 upcast (Unsloth's and axolotl's way), all-linear rank 8 (1 run);
- double quantisation, checkpointing, q+v at rank 64 (1 run);
- pure bf16 with bf16 adapters (LitGPT's bf16-true), all-linear rank 8 (1 run);
- the fp32 upcast without double quantisation, q+v with dropout (1 run);
- the site's QLoRA (estimator/setups.py QLORA): double quantisation, checkpointing, all-linear rank 16 (1 run).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tools"))
from sweep_cpu import family_plan, sized, sweep_main  # noqa: E402
from sweep_matrix import _qv  # noqa: E402

FAMILIES = [
    ("HuggingFaceTB/SmolLM-135M-Instruct", []),  # llama, tied
    ("Qwen/Qwen2-0.5B-Instruct", []),  # qwen2, tied, 152k vocab, q/k/v biases
    ("mistralai/Mistral-7B-v0.1", []),  # mistral
    ("google/gemma-2b", []),  # gemma, MQA, GeGLU, 256k vocab
    ("microsoft/Phi-3-mini-4k-instruct", []),  # phi3, fused qkv / gate_up
    ("allenai/OLMo-2-1124-7B", []),  # olmo2, post-norms
    ("ibm-granite/granite-3.3-8b-instruct", []),  # granite
    ("facebook/opt-125m", []),  # opt: dropout 0.1, LayerNorm, biases
]
SIZES = [("1024", "2"), ("2048", "1"), ("512", "4")]  # batch x tokens >= 2,048: CUDA's dequantising matmul


def runs_of(model: str) -> list[list[str]]:
    trl = ["--double-quant", "--kbit-prep", "--lora-dropout", "0.05", "--lora-rank", "16"]
    out = [[*trl, "--grad-ckpt"], trl, ["--lora-rank", "8"],
           ["--double-quant", "--grad-ckpt", "--lora-rank", "64", "--lora-targets", _qv(model)],
           ["--precision", "bf16", "--adapter-dtype", "bf16", "--lora-rank", "8"],
           ["--kbit-prep", "--lora-rank", "8", "--lora-targets", _qv(model), "--lora-dropout", "0.05"],
           ["--double-quant", "--grad-ckpt", "--lora-rank", "16"]]
    return sized(out, SIZES, ("--method", "qlora"))


def plan(only: str | None = None) -> list[tuple[str, int | None, list[str]]]:
    return family_plan(FAMILIES, runs_of, only)


def main() -> int:
    return sweep_main(__doc__ or "", ROOT / "data" / "measurements" / "cpu-sim-qlora.jsonl", plan)


if __name__ == "__main__":
    raise SystemExit(main())
