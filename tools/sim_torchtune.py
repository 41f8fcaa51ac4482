#!/usr/bin/env python3
"""torchtune's own LoRA step, simulated on fake CPU tensors, beside the estimator's `--recipe torchtune` (F32).

    git clone https://github.com/pytorch/torchtune /tmp/torchtune && git -C /tmp/torchtune checkout bd2a0fc
    .venv/bin/python tools/sim_torchtune.py --torchtune /tmp/torchtune llama3_2 lora_llama3_2_3b \
        meta-llama/Llama-3.2-3B-Instruct --layers 2

The step is recipes/lora_finetune_single_device.py's as that commit runs it: the model built by torchtune's own
builder (its TransformerDecoder, MultiHeadAttention, RoPE modules and LoRALinear) under dtype bf16, cut to `--layers`
layers; get_adapter_params and set_trainable_params; activation checkpointing per TransformerSelfAttentionLayer
(`--ckpt`); LinearCrossEntropyLoss with set_model_output; `outputs = model(tokens)`, `loss_fn(outputs, labels) *
num_tokens`, `del outputs`, backward; torch AdamW fused, zero_grad(set_to_none=True); two steps. The estimate is
the torchtune recipe on the snapshot's config cut to the same layers, priced with the CPU's kernels, one micro-batch.

Two things are made for the fake tensors, neither changing a byte: LinearCrossEntropyLoss finds the valid tokens with
torch.where, which reads values fake tensors do not have (every target is valid here, so it is every index), and
Llama 3's RoPE scaling branches on its frequencies' values (the caches are built for real, then made fake).
torchtune's package imports torchao and its data stack; a LoRA step runs neither, so they are empty stand-ins.
`--method qlora` (quantize_base=True, as torchtune's qlora_* builders) runs torchao's NF4Tensor itself, from
`--torchao DIR`, a folder holding the torchao package (`pip download torchao==0.18.0 --no-deps`, the wheel
unzipped; its compiled kernels are not needed). The checkouts are not dependencies of the project: they are read at
run time. `--sweep` writes data/measurements/cpu-sim-torchtune.jsonl and needs both.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from framework_checkout import load_package, shrunk_config, write_sweep  # noqa: E402

# What torchtune's modules import at module level that the step never runs
STAND_INS = ("torchao", "torchdata", "datasets", "kagglehub", "omegaconf", "sentencepiece", "tiktoken", "blobfile",
             "huggingface_hub", "safetensors", "PIL", "torchvision", "tqdm", "wandb", "comet_ml", "tensorboard",
             "lm_eval", "psutil", "regex", "tokenizers", "liger_kernel")
ALL_TARGETS = "q,v,o,mlp"  # the 3B_lora_single_device config's lora_attn_modules and apply_lora_to_mlp


def build(package: str, builder: str, layers: int, **lora):
    """torchtune's model builder `package.builder` (its own hyperparameters) with `layers` layers: the component
    builder it calls gets num_layers replaced."""
    models = importlib.import_module(f"torchtune.models.{package}._model_builders")
    components = {name: c for name in dir(models) if name.startswith("lora_")
                  and getattr(c := getattr(models, name), "__module__", "").endswith("_component_builders")}
    try:
        for name, c in components.items():
            setattr(models, name, functools.partial(lambda c, *a, **k: c(*a, **{**k, "num_layers": layers}), c))
        return getattr(models, builder)(**lora)
    finally:  # the next build reads the builders as torchtune wrote them
        for name, c in components.items():
            setattr(models, name, c)


def simulate(package: str, builder: str, layers: int, tokens: int, batch: int = 1, ckpt: bool = True, rank: int = 64,
             targets: str = ALL_TARGETS, method: str = "lora") -> tuple[int, dict]:
    """Peak tensor bytes of two steps of torchtune's LoRA recipe on its own model, and where the peak fell.
    qlora: the same builder with quantize_base=True (torchtune's qlora_* builders), its Linears FrozenNF4Linear on
    torchao's NF4Tensor; built straight on fake tensors (to_nf4 runs there), which a RoPE whose cache branches on
    values (Llama 3's) cannot be."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune import modules, training
    from torchtune.modules.loss import LinearCrossEntropyLoss, cross_entropy_loss
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    from generator.measure.tracker import PeakTracker

    attn = ["q_proj", "v_proj"] + (["output_proj"] if "o" in targets.split(",") else [])
    lora = dict(lora_attn_modules=attn, apply_lora_to_mlp="mlp" in targets, lora_rank=rank, lora_alpha=2 * rank,
                lora_dropout=0.0)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    if method == "qlora":
        with fake, training.set_default_dtype(torch.bfloat16):
            model = build(package, builder, layers, quantize_base=True, **lora)
    else:
        with training.set_default_dtype(torch.bfloat16), torch.device("meta"):
            model = build(package, builder, layers, **lora)
    set_trainable_params(model, get_adapter_params(model))
    if ckpt:
        training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    loss_fn = LinearCrossEntropyLoss()
    loss_fn.set_model_output(model)
    every = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    every.where = lambda cond, *a: (torch.arange(cond.numel()),) if not a else torch.where(cond, *a)
    cross_entropy_loss.torch = every  # type: ignore[attr-defined]
    if method != "qlora":
        with fake:
            model = model.to_empty(device="cpu")
    for m in model.modules() if method != "qlora" else ():
        if hasattr(m, "rope_init"):
            m.rope_init()
            for name, b in list(m.named_buffers(recurse=False)):
                m.register_buffer(name, fake.from_tensor(b), persistent=False)
    with fake:
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=3e-4, weight_decay=0.01, fused=True)
        tracker = PeakTracker()
        tracker.track_external(model, optimizer)
        vocab = model.tok_embeddings.num_embeddings
        ids = torch.randint(0, vocab, (batch, tokens))
        labels = torch.randint(0, vocab, (batch, tokens))
        with tracker:
            model.train()
            for step in (1, 2):
                tracker.stage = f"step {step}"
                tracker.reset_mod_stats()
                num_tokens = (labels != loss_fn.ignore_index).sum()
                outputs = model(ids)
                loss = loss_fn(outputs, labels) * num_tokens
                del outputs
                loss.backward()
                del loss
                tracker.backward_done()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return tracker.peak_breakdown()["total"], dict(tracker.peak_where)


def setup_of(repo_id: str, layers: int, tokens: int, batch: int, ckpt: bool, rank: int, targets: str,
             method: str = "lora"):
    """The run's measure.setup.Setup: the torchtune recipe's options at one micro-batch (qlora: torchao's NF4, whose
    scalers are quantised again, as bitsandbytes' double quantisation)."""
    from generator.estimator.memory.frameworks import TORCHTUNE_LOSS, framework_attention
    from generator.estimator.normalise import normalise
    from generator.measure.setup import Setup

    attention = framework_attention(normalise(shrunk_config(repo_id, layers), repo_id), TORCHTUNE_LOSS)
    return Setup(method=method, precision="bf16", batch=batch, tokens=tokens, lora_rank=rank, lora_targets=targets,
                 adamw_impl="fused", grad_ckpt=ckpt, adapter_dtype="bf16", attention=attention,
                 double_quant=method == "qlora")  # qlora's base is nf4 (measure.setup.job_of)


def estimate(repo_id: str, layers: int, tokens: int, batch: int = 1, ckpt: bool = True, rank: int = 64,
             targets: str = ALL_TARGETS, method: str = "lora") -> int:
    """The torchtune recipe's peak for the snapshot's config cut to `layers`, with the CPU's kernels."""
    from generator.estimator.graph.nodes import build_graph
    from generator.estimator.memory.job import job_memory
    from generator.estimator.memory.job_options import Job
    from generator.estimator.normalise import normalise
    from generator.settings import load_settings

    arch = normalise(shrunk_config(repo_id, layers), repo_id)
    quantised = {"weights": "nf4", "double_quant": True} if method == "qlora" else {}
    job = Job.from_options("torchtune", method=method, tokens=tokens, batch=batch, grad_accum=1, grad_ckpt=ckpt,
                           lora_rank=rank, lora_targets=targets, kernels="cpu", **quantised)
    return job_memory(arch, build_graph(arch), load_settings().assumptions, job, repo_id).peak_bytes


# The runs behind data/measurements/cpu-sim-torchtune.jsonl:
# (package, builder, snapshot repo, layers, tokens, batch, checkpointing, rank, targets[, method])
SWEEP = (
    ("llama3_2", "lora_llama3_2_3b", "meta-llama/Llama-3.2-3B-Instruct", 28, 2048, 4, True, 64, ALL_TARGETS),
    ("llama3_2", "lora_llama3_2_3b", "meta-llama/Llama-3.2-3B-Instruct", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("llama3_2", "lora_llama3_2_1b", "meta-llama/Llama-3.2-1B", 4, 2048, 1, False, 64, ALL_TARGETS),
    ("llama3_1", "lora_llama3_1_8b", "meta-llama/Llama-3.1-8B", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("llama2", "lora_llama2_7b", "meta-llama/Llama-2-7b-hf", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("llama2", "lora_llama2_7b", "meta-llama/Llama-2-7b-hf", 2, 512, 2, True, 8, "q,v"),
    ("llama2", "lora_llama2_7b", "meta-llama/Llama-2-7b-hf", 4, 1024, 1, True, 8, "q,v"),
    ("qwen2_5", "lora_qwen2_5_3b", "Qwen/Qwen2.5-3B-Instruct", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("qwen2_5", "lora_qwen2_5_3b", "Qwen/Qwen2.5-3B-Instruct", 2, 1024, 1, True, 64, ALL_TARGETS),
    ("qwen2_5", "lora_qwen2_5_7b_instruct", "Qwen/Qwen2.5-7B-Instruct", 2, 1024, 1, True, 64, ALL_TARGETS),
    ("qwen3", "lora_qwen3_4b_instruct", "Qwen/Qwen3-4B", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("mistral", "lora_mistral_7b", "mistralai/Mistral-7B-v0.1", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("mistral", "lora_mistral_7b", "mistralai/Mistral-7B-v0.1", 2, 2048, 1, True, 8, "q,v"),
    ("gemma", "lora_gemma_2b", "google/gemma-2b", 2, 1024, 1, False, 64, ALL_TARGETS),
    ("phi3", "lora_phi3_mini", "microsoft/Phi-3-mini-4k-instruct", 2, 1024, 1, False, 64, ALL_TARGETS),
    # 7B_qlora_single_device: r 8 on q, v, the output projection and the MLP; torchao's NF4 decoded in torch ops
    ("llama2", "lora_llama2_7b", "meta-llama/Llama-2-7b-hf", 2, 1024, 1, True, 8, ALL_TARGETS, "qlora"),
    ("llama2", "lora_llama2_7b", "meta-llama/Llama-2-7b-hf", 2, 1024, 1, False, 8, ALL_TARGETS, "qlora"),
    ("llama2", "lora_llama2_7b", "meta-llama/Llama-2-7b-hf", 2, 512, 2, True, 8, ALL_TARGETS, "qlora"),
)


def record(package: str, builder: str, repo_id: str, layers: int, tokens: int, batch: int, ckpt: bool, rank: int,
           targets: str, method: str = "lora", *, checkout: str) -> dict:
    """One JSON line in the harness's record format (generator.measure.record), for generator.accuracy: its setup
    is the torchtune recipe's as measure.setup.Setup says it, plus the recipe's `loss`, which marks torchtune's own
    model code for generator.accuracy_rows (frameworks.runs_torchtune)."""
    from generator.accuracy_rows import estimate_bytes
    from generator.estimator.memory.frameworks import TORCHTUNE_LOSS
    from generator.measure.record import versions
    from generator.measure.setup import config_hash
    from generator.settings import load_settings

    config = shrunk_config(repo_id, layers)
    start = time.perf_counter()
    simulated, where = simulate(package, builder, layers, tokens, batch, ckpt, rank, targets, method)
    setup = setup_of(repo_id, layers, tokens, batch, ckpt, rank, targets, method)
    row = {"schema": 1, "model": repo_id, "model_type": config.get("model_type"), "config_hash": config_hash(config),
           "config_changes": {"num_hidden_layers": layers}, "config": config,
           "setup": {**setup.to_dict(), "loss": TORCHTUNE_LOSS},
           "framework": f"torchtune {checkout} (its own model, {package}.{builder}"
                        + (", quantize_base=True on torchao's NF4" if method == "qlora" else "")
                        + "): recipes/lora_finetune_single_device.py",
           "device": {"kind": "cpu-simulated", "name": "FakeTensorMode(cpu)"}, "versions": versions(),
           "measured": {"metric": "memtracker_fake_cpu", "status": "ok", "peak_bytes": simulated},
           "peak": where, "seconds": round(time.perf_counter() - start, 2)}
    estimated = estimate_bytes(row, load_settings().assumptions)
    if estimated != estimate(repo_id, layers, tokens, batch, ckpt, rank, targets, method):  # the recipe's setup
        raise SystemExit(f"{builder}: the row's setup prices differently from the torchtune recipe")
    row["estimate"] = {"peak_bytes": estimated}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torchtune", type=Path, required=True, help="a torchtune checkout (the folder holding "
                                                                        "torchtune/)")
    parser.add_argument("package", nargs="?", help="torchtune's model package, e.g. llama3_2")
    parser.add_argument("builder", nargs="?", help="its LoRA model builder, e.g. lora_llama3_2_3b")
    parser.add_argument("repo_id", nargs="?", help="the same model's Hub id in the snapshot")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--ckpt", action="store_true", help="activation checkpointing (the recipe's default is on)")
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--targets", default=ALL_TARGETS, help="q,v or q,v,o,mlp")
    parser.add_argument("--method", choices=("lora", "qlora"), default="lora")
    parser.add_argument("--torchao", type=Path, help="a folder holding torchao/ (its wheel unpacked: QLoRA's NF4); "
                                                     "without it torchao is a stand-in and qlora cannot run")
    parser.add_argument("--sweep", type=Path, metavar="OUT", help="run SWEEP and write its JSON lines to OUT")
    parser.add_argument("--commit", default="bd2a0fc", help="the checkout's commit, for the rows (default bd2a0fc)")
    args = parser.parse_args(argv)
    if args.torchao:
        sys.path.insert(0, str(args.torchao))
    elif args.method == "qlora" or args.sweep:
        parser.error("--method qlora and --sweep need --torchao")
    load_package(args.torchtune, "torchtune", tuple(n for n in STAND_INS if not (args.torchao and n == "torchao")))
    if args.sweep:
        write_sweep(SWEEP, record, args.sweep, args.commit, lambda run: f"{run[1]:26s} "
                    f"{run[-1] if len(run) > 9 else 'lora':5s} {run[3]:2d} layers {run[4]:5d} tokens x {run[5]}")
        return 0
    if not (args.package and args.builder and args.repo_id):
        parser.error("PACKAGE, BUILDER and REPO_ID are needed without --sweep")
    run = (args.package, args.builder, args.layers, args.tokens, args.batch, args.ckpt, args.rank, args.targets,
           args.method)
    simulated, where = simulate(*run)
    estimated = estimate(args.repo_id, *run[2:])
    print(json.dumps({"builder": args.builder, "repo_id": args.repo_id, "layers": args.layers, "tokens": args.tokens,
                      "batch": args.batch, "ckpt": args.ckpt, "simulated_bytes": simulated,
                      "estimated_bytes": estimated, "error_pct": round((estimated - simulated) / simulated * 100, 2),
                      "peak": where}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
