#!/usr/bin/env python3
"""The setups matrix behind data/measurements/cpu-sim-matrix.jsonl (issue 13 item 5): CPU-simulated runs of many
families over the LoRA options people run, and full fine-tunes of the same families.

    nice .venv/bin/python tools/sweep_matrix.py --out data/measurements/cpu-sim-matrix.jsonl   # ~15 min, 2 cores
    .venv/bin/python tools/sweep_matrix.py --list

Per family (2 layers at full width, `--max-layers 2`), LoRA:
- precision x LoRA dropout x gradient checkpointing, all-linear, rank 8: precision is amp (bf16 autocast, peft's
  fp32 adapters), pure bf16 with fp32 adapters (peft's autocast_adapter_dtype=True without autocast) and pure bf16
  with bf16 adapters (LitGPT, torchtune); dropout 0 and 0.05; checkpointing off and on (12 runs);
- q+v only at rank 64 under each precision, and q+v rank 8 with dropout and checkpointing (4 runs);
- a loop that keeps the model's outputs through backward (amp, 1 run);
full fine-tune: amp, pure bf16, amp with checkpointing, amp with Trainer's fused AdamW (4 runs);
then the corners those leave out (4 runs): rank 64 on all-linear with dropout and checkpointing under amp, and
without them under pure bf16 with fp32 adapters; q+v under pure bf16 with dropout, checkpointed with fp32 adapters
and not with bf16 ones.
Token counts rotate over 256, 512 and 1024 and the batch over 1 and 2, so sizes vary across the matrix. The corner
runs come last in each family's list, so the earlier runs keep their sizes: `--since 21` runs them alone, for
appending to the file.
Every run is `neurarch-trace measure MODEL --device cpu --max-layers 2 ...` (tools/sweep_cpu.py's loop).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "tools"))
from sweep_cpu import family_plan, sized, sweep_main  # noqa: E402

# (repo id in snapshot/, options added to every run); attention dropout off where the CPU kernel would
# materialise the probabilities (tools/sweep_cpu.py), eager where transformers' class has no SDPA.
FAMILIES = [
    ("HuggingFaceTB/SmolLM-135M-Instruct", []),  # llama, tied
    ("Qwen/Qwen2-0.5B-Instruct", []),  # qwen2, tied, 152k vocab
    ("Qwen/Qwen3-0.6B", []),  # qwen3, q/k norms
    ("google/gemma-2b", []),  # gemma, MQA, GeGLU, 256k vocab
    ("microsoft/Phi-3-mini-4k-instruct", []),  # phi3, fused qkv / gate_up
    ("mistralai/Mistral-7B-v0.1", []),  # mistral
    ("openai-community/gpt2", ["--set", "attn_pdrop=0.0"]),  # gpt2: residual and embedding dropout 0.1
    ("facebook/opt-125m", []),  # opt: dropout 0.1, LayerNorm
    ("EleutherAI/pythia-6.9b-deduped", []),  # gpt_neox, parallel residual
    ("bigcode/starcoder2-7b", ["--set", "attention_dropout=0.0"]),  # starcoder2, plain MLP
    ("allenai/OLMo-2-1124-7B", []),  # olmo2, post-norms
    ("ibm-granite/granite-3.3-8b-instruct", []),  # granite
    ("stabilityai/stablelm-2-zephyr-1_6b", []),  # stablelm, partial rotary
    ("CohereForAI/aya-23-8B", []),  # cohere, parallel block, tied 256k vocab
    ("EleutherAI/gpt-j-6b", []),  # gptj
    ("google/gemma-2-2b-it", ["--attention", "eager"]),  # gemma2: no SDPA in transformers
]
PRECISIONS = [["--precision", "amp"], ["--precision", "bf16", "--adapter-dtype", "fp32"],
              ["--precision", "bf16", "--adapter-dtype", "bf16"]]
SIZES = [("512", "1"), ("256", "2"), ("1024", "1"), ("512", "2")]


def _qv(model: str) -> str:
    return {"openai-community/gpt2": "c_attn", "EleutherAI/pythia-6.9b-deduped": "query_key_value",
            "microsoft/Phi-3-mini-4k-instruct": "qkv_proj"}.get(model, "q_proj,v_proj")


def runs_of(model: str) -> list[list[str]]:
    out = []
    for p in PRECISIONS:
        for dropout in ("0", "0.05"):
            for ckpt in ([], ["--grad-ckpt"]):
                out.append(["--method", "lora", "--lora-rank", "8", "--lora-dropout", dropout, *p, *ckpt])
    for p in PRECISIONS:
        out.append(["--method", "lora", "--lora-rank", "64", "--lora-targets", _qv(model), *p])
    out.append(["--method", "lora", "--lora-rank", "8", "--lora-targets", _qv(model), "--lora-dropout", "0.05",
                "--grad-ckpt", "--precision", "amp"])
    out.append(["--method", "lora", "--lora-rank", "8", "--keep-outputs", "--precision", "amp"])
    out += [["--method", "full", "--precision", "amp"], ["--method", "full", "--precision", "bf16"],
            ["--method", "full", "--precision", "amp", "--grad-ckpt"],
            ["--method", "full", "--precision", "amp", "--adamw-impl", "fused"]]
    out += [["--method", "lora", "--lora-rank", "64", "--lora-dropout", "0.05", "--grad-ckpt", *PRECISIONS[0]],
            ["--method", "lora", "--lora-rank", "64", *PRECISIONS[1]],
            ["--method", "lora", "--lora-rank", "8", "--lora-targets", _qv(model), "--lora-dropout", "0.05",
             "--grad-ckpt", *PRECISIONS[1]],
            ["--method", "lora", "--lora-rank", "8", "--lora-targets", _qv(model), "--lora-dropout", "0.05",
             *PRECISIONS[2]]]
    return sized(out, SIZES)


def plan(only: str | None = None, since: int = 0) -> list[tuple[str, int | None, list[str]]]:
    """Every family's runs from its `since`-th on (0: all)."""
    return family_plan(FAMILIES, lambda model: runs_of(model)[since:], only)


def main() -> int:
    # --since N (the one option sweep_main does not read): each family's runs from the N-th, to append
    since = 0
    if "--since" in sys.argv:
        at = sys.argv.index("--since")
        since = int(sys.argv[at + 1])
        del sys.argv[at:at + 2]
    return sweep_main(__doc__ or "", ROOT / "data" / "measurements" / "cpu-sim-matrix.jsonl",
                      lambda only: plan(only, since))

if __name__ == "__main__":
    raise SystemExit(main())
