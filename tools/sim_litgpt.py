#!/usr/bin/env python3
"""LitGPT's own LoRA step, simulated on fake CPU tensors, beside the estimator's `--recipe litgpt` (FINDINGS.md F30).

    git clone https://github.com/Lightning-AI/litgpt /tmp/litgpt && git -C /tmp/litgpt checkout 2685705
    .venv/bin/python tools/sim_litgpt.py --litgpt /tmp/litgpt Llama-3.2-1B meta-llama/Llama-3.2-1B --layers 4

The step (`--method lora`, the default) is finetune/lora.py's fit() loop as that commit runs it: the model built under bf16-true (weights and
adapters bf16), LoRA r 8 / alpha 16 / dropout 0.05 on query and value, `model.max_seq_length` set to the sample's
length, `model(input_ids, lm_head_chunk_size=128)`, utils.chunked_cross_entropy, backward, torch AdamW (foreach),
two steps. It runs LitGPT's own GPT (litgpt/lora.py), not transformers' class the estimator reads the config as:
the point of the comparison. The estimate is the litgpt recipe on the snapshot's config cut to the same layers,
priced with the CPU's kernels (dropout masks in bf16), one micro-batch.

LitGPT's package imports Lightning; only its model code runs here, so every `lightning*` module is an empty stand-in
(nothing of Lightning runs in the step). The checkout is not a dependency of the project: it is read at run time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from framework_checkout import load_package, shrunk_config, write_sweep  # noqa: E402

# LitGPT's package imports Lightning and these at module level; none of them runs in the step
STAND_INS = ("lightning", "lightning_utilities", "lightning_sdk", "litdata", "jsonargparse", "torchmetrics", "tqdm")


def load_litgpt(checkout: Path) -> None:
    """Make `litgpt.*` importable from a checkout without running its package __init__ (which starts its API)."""
    load_package(checkout, "litgpt", STAND_INS)


def simulate(name: str, layers: int, tokens: int, method: str = "lora", bnb: str = "",
             batch: int = 1) -> tuple[int, dict]:
    """Peak tensor bytes of two steps of LitGPT's GPT for its config `name`, and where the peak fell. lora:
    finetune/lora.py's fit loop; qlora: the same with `--quantize bnb.nf4`, every nn.Linear (the head's too) an nf4
    Linear4bit as Lightning's BitsandbytesPrecision makes it, run through bitsandbytes' own code as the harness's
    QLoRA runs (FINDINGS.md F29); full: finetune/full.py's loop (litgpt.model's GPT, every parameter trained,
    `model(input_ids)` then chunked_cross_entropy over the whole logits).

    `bnb` a bitsandbytes release before 0.43.2 (qlora): its MatMul4Bit kept each input on ctx.tensors, outside the
    saved tensors (0.42.0 bitsandbytes/autograd/_functions.py L522-525), which the installed release's forward is
    wrapped to do; and the loop keeps `loss` and `logits` until the next step replaces them, as fit() does
    (litgpt@43c44323 finetune/lora.py L274-281), where the default run drops them after the backward
    (FINDINGS.md F55). `batch`: samples per step, each `tokens` long."""
    import torch
    from litgpt.utils import chunked_cross_entropy
    from torch._subclasses.fake_tensor import FakeTensorMode

    from generator.estimator.memory.storage import saves_matmul_input
    from generator.measure.build import fake_pack_nf4, meta_linear4bit, unwrap_params4bit
    from generator.measure.run import cuda_4bit_step
    from generator.measure.tracker import PeakTracker

    if method in ("lora", "qlora"):
        from litgpt.lora import GPT, Config, mark_only_lora_as_trainable

        config = Config.from_name(name, lora_r=8, lora_alpha=16, lora_dropout=0.05, lora_query=True,
                                  lora_key=False, lora_value=True, lora_projection=False, lora_mlp=False,
                                  lora_head=False, n_layer=layers)
    else:
        from litgpt.model import GPT, Config

        config = Config.from_name(name, n_layer=layers)
    torch.set_default_dtype(torch.bfloat16)  # fabric.init_module under bf16-true
    try:
        with torch.device("meta"):
            model = GPT(config)
    finally:
        torch.set_default_dtype(torch.float32)
    if method != "full":
        mark_only_lora_as_trainable(model)
    if method == "qlora":  # LitGPT's head is a LoRALinear whose `.linear` the quantiser replaces like the rest
        meta_linear4bit(model)
        unwrap_params4bit(model)
    kept_input = method == "qlora" and bnb and saves_matmul_input("nf4", bnb)
    with FakeTensorMode(allow_non_fake_inputs=True), \
            cuda_4bit_step() if method == "qlora" else contextlib.nullcontext(), \
            matmul_keeps_input() if kept_input else contextlib.nullcontext():
        model = model.to_empty(device="cpu")
        states = fake_pack_nf4(model) if method == "qlora" else []
        model.max_seq_length = tokens  # fit(): the longest sample's length (rebuilds the RoPE cache)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=2e-4, foreach=True)
        tracker = PeakTracker()
        tracker.track_external(model, optimizer)
        if states:
            tracker.track_external(*states)
        ids = torch.randint(0, config.padded_vocab_size, (batch, tokens))
        targets = torch.randint(0, config.padded_vocab_size, (batch, tokens))
        with tracker:
            model.train()
            for step in (1, 2):
                tracker.stage = f"step {step}"
                tracker.reset_mod_stats()
                if method != "full":
                    logits = model(ids, lm_head_chunk_size=128)
                    logits[-1] = logits[-1][..., :-1, :]
                    loss = chunked_cross_entropy(logits, targets[..., 1:])
                else:
                    logits = model(ids)
                    loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
                loss.backward()
                if not kept_input:
                    del loss, logits
                tracker.backward_done()
                optimizer.step()
                optimizer.zero_grad()
        return tracker.peak_breakdown()["total"], dict(tracker.peak_where)


@contextlib.contextmanager
def matmul_keeps_input() -> Iterator[None]:
    """bitsandbytes' MatMul4Bit as releases before 0.43.2 ran it: the input kept on ctx.tensors beside the weight
    (#1270 replaced it with None). The installed release's forward runs, then puts the input back."""
    import bitsandbytes.autograd._functions as functions

    forward = functions.MatMul4Bit.forward

    def keeping(ctx, A, B, out=None, bias=None, quant_state=None):
        output = forward(ctx, A, B, out, bias, quant_state)
        if getattr(ctx, "tensors", (None, None))[1] is not None:
            ctx.tensors = (A, ctx.tensors[1])
        return output

    functions.MatMul4Bit.forward = staticmethod(keeping)
    try:
        yield
    finally:
        functions.MatMul4Bit.forward = staticmethod(forward)


def estimate(repo_id: str, layers: int, tokens: int, method: str = "lora", bnb: str = "", batch: int = 1) -> int:
    """The litgpt recipe's peak for `method` for the snapshot's config cut to `layers`, with the CPU's kernels."""
    from generator.estimator.graph.nodes import build_graph
    from generator.estimator.memory.job import job_memory
    from generator.estimator.memory.job_options import Job
    from generator.estimator.normalise import normalise
    from generator.settings import load_settings

    arch = normalise(shrunk_config(repo_id, layers), repo_id)
    job = Job.from_options("litgpt", method=method, tokens=tokens, batch=batch, grad_accum=1, kernels="cpu",
                           bnb_version=bnb)
    return job_memory(arch, build_graph(arch), load_settings().assumptions, job, repo_id).peak_bytes


# The runs behind data/measurements/cpu-sim-litgpt.jsonl: (LitGPT config, snapshot repo, method, layers, tokens)
SWEEP = (
    [(name, repo, "lora", 4, tokens) for name, repo, tokens in (
        ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", 1304), ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B", 2048),
        ("Qwen3-0.6B", "Qwen/Qwen3-0.6B", 2048), ("gemma-2-2b", "google/gemma-2-2b-it", 2048),
        ("gemma-3-1b-it", "google/gemma-3-1b-it", 2048), ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1", 2048),
        ("Phi-3-mini-4k-instruct", "microsoft/Phi-3-mini-4k-instruct", 2048))]
    + [(name, repo, "lora", 2, tokens) for name, repo, tokens in (
        ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B", 512), ("gemma-3-1b-it", "google/gemma-3-1b-it", 256),
        ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1", 1024), ("Qwen3-0.6B", "Qwen/Qwen3-0.6B", 4096),
        ("Phi-3-mini-4k-instruct", "microsoft/Phi-3-mini-4k-instruct", 1024), ("phi-2", "microsoft/phi-2", 2048),
        ("pythia-6.9b", "EleutherAI/pythia-6.9b-deduped", 1024))]
    + [("phi-1_5", "microsoft/phi-1_5", "lora", 4, 1024)]
    + [(name, repo, "qlora", 4, 2048) for name, repo in (
        ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B"), ("Qwen3-0.6B", "Qwen/Qwen3-0.6B"),
        ("gemma-2-2b", "google/gemma-2-2b-it"), ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1"))]
    # bitsandbytes 0.42.0's MatMul4Bit, its inputs held to the next step by fit()'s loss (FINDINGS.md F55)
    + [(name, repo, "qlora", 4, 2048, "0.42.0") for name, repo in (
        ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B"), ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1"))]
    + [(name, repo, "full", 2, 1024) for name, repo in (
        ("Llama-3.2-1B", "meta-llama/Llama-3.2-1B"), ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
        ("Qwen3-0.6B", "Qwen/Qwen3-0.6B"), ("Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1"))]
)


def record(name: str, repo_id: str, method: str, layers: int, tokens: int, bnb: str = "", *, checkout: str) -> dict:
    """One JSON line in the harness's record format (generator.measure.record), for generator.accuracy. Its setup
    is the litgpt recipe's as measure.setup.Setup says it, plus the recipe's `loss`, which public rows carry too and
    generator.accuracy_rows hands to the Job (LitGPT's own model code: frameworks.framework_model)."""
    import time

    from generator.accuracy_rows import estimate_bytes
    from generator.estimator.memory.frameworks import LITGPT_LOSS, framework_attention
    from generator.estimator.normalise import normalise
    from generator.measure.record import versions
    from generator.measure.setup import Setup, config_hash
    from generator.settings import load_settings

    config = shrunk_config(repo_id, layers)
    start = time.perf_counter()
    simulated, where = simulate(name, layers, tokens, method, bnb)
    setup = Setup(method=method, precision="bf16", batch=1, tokens=tokens, lora_rank=8, lora_targets="q,v",
                  lora_dropout=0.05 if method != "full" else 0.0, adapter_dtype="bf16" if method != "full" else "",
                  attention=framework_attention(normalise(config, repo_id), LITGPT_LOSS), bnb_version=bnb)
    row = {"schema": 1, "model": repo_id, "model_type": config.get("model_type"), "config_hash": config_hash(config),
           "config_changes": {"num_hidden_layers": layers}, "config": config,
           "setup": {**setup.to_dict(), "loss": LITGPT_LOSS},
           "framework": f"LitGPT {checkout} (its own GPT, config {name!r}): finetune/"
                        + ("full.py" if method == "full" else "lora.py" + (" --quantize bnb.nf4" if method == "qlora"
                                                                          else ""))
                        + (f", bitsandbytes {bnb}'s MatMul4Bit and fit()'s loss kept to the next step" if bnb else ""),
           "device": {"kind": "cpu-simulated", "name": "FakeTensorMode(cpu)"}, "versions": versions(),
           "measured": {"metric": "memtracker_fake_cpu", "status": "ok", "peak_bytes": simulated},
           "peak": where, "seconds": round(time.perf_counter() - start, 2)}
    estimated = estimate_bytes(row, load_settings().assumptions)
    if estimated != estimate(repo_id, layers, tokens, method, bnb):  # the row's setup is the recipe's
        raise SystemExit(f"{name}: the row's setup prices differently from the litgpt recipe")
    row["estimate"] = {"peak_bytes": estimated}
    return row

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--litgpt", type=Path, required=True, help="a litgpt checkout (the folder holding litgpt/)")
    parser.add_argument("name", nargs="?", help="LitGPT's config name (litgpt/config.py), e.g. Llama-3.2-1B")
    parser.add_argument("repo_id", nargs="?", help="the same model's Hub id in the snapshot, e.g. "
                                                   "meta-llama/Llama-3.2-1B")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1, help="samples per step (default 1)")
    parser.add_argument("--method", choices=("lora", "qlora", "full"), default="lora")
    parser.add_argument("--bnb", default="", metavar="X.Y.Z", help="qlora: a bitsandbytes release before 0.43.2, "
                        "whose MatMul4Bit kept its input, run as fit()'s loop holds it (default: the installed one)")
    parser.add_argument("--sweep", type=Path, metavar="OUT", help="run SWEEP and write its JSON lines to OUT")
    parser.add_argument("--commit", default="2685705", help="the checkout's commit, for the rows (default 2685705)")
    args = parser.parse_args(argv)
    load_litgpt(args.litgpt)
    if args.sweep:
        write_sweep(SWEEP, record, args.sweep, args.commit,
                    lambda run: f"{run[0]:24s} {run[2]:5s} {run[3]} layers {run[4]:5d} tokens")
        return 0
    if not (args.name and args.repo_id):
        parser.error("NAME and REPO_ID are needed without --sweep")
    simulated, where = simulate(args.name, args.layers, args.tokens, args.method, args.bnb, args.batch)
    estimated = estimate(args.repo_id, args.layers, args.tokens, args.method, args.bnb, args.batch)
    print(json.dumps({"name": args.name, "repo_id": args.repo_id, "method": args.method, "layers": args.layers,
                      "tokens": args.tokens, "simulated_bytes": simulated, "estimated_bytes": estimated,
                      "error_pct": round((estimated - simulated) / simulated * 100, 2), "peak": where}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
