"""Measure each rank's peak of one FSDP2 / DDP training step on CPU (gloo), for estimator.parallel's tests.

    .venv/bin/python tools/measure_fsdp_cpu.py --out data/measurements/parallel-cpu.json

For each (strategy, world size) in fsdp x {2, 4} and ddp x {2, 4}: spawn that many gloo processes on this machine,
build a tiny llama (transformers LlamaForCausalLM from a config, random init, nothing downloaded, fp32 weights, no
mixed precision), wrap it (FSDP2: `fully_shard` on every decoder layer, then on the root; DDP: default options), and
run one step: forward on one sequence per rank (labels = inputs), backward, AdamW (foreach=True), under PyTorch's
trackers (torch/distributed/_tools): FSDP, FSDPMemTracker over forward + backward, then a fresh one over the
step (each phase's own peak and categories: sharded / unsharded params, all-gather and reduce-scatter buffers,
grads, optimizer state); DDP, MemTracker over the whole step with DDP built inside it (its gradient buckets show
as ACT). Real tensors, a few MB: seconds on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = {"hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256, "tie_word_embeddings": False,
          "attention_dropout": 0.0}
TOKENS = 64
RUNS = (("fsdp", 2), ("fsdp", 4), ("ddp", 2), ("ddp", 4), ("fsdp-accumulating", 2), ("fsdp-accumulating", 4))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model():
    torch.manual_seed(0)
    cfg = LlamaConfig(**CONFIG)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def _categories(snapshot: dict) -> dict[str, int]:
    """{category: bytes} of the tracker's CPU device, without the total."""
    for dev, cats in snapshot.items():
        if torch.device(dev).type == "cpu":
            return {str(k): int(v) for k, v in cats.items() if str(k) != "Total" and v}
    return {}


def _rank(rank: int, world: int, strategy: str, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = _model()
    if strategy.startswith("fsdp"):
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    torch.manual_seed(1 + rank)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, TOKENS))
    phases = {}
    if strategy == "fsdp":  # one tracker for forward + backward, a fresh one for the step: each phase's own peak
        tracker = FSDPMemTracker(model, opt)
        with tracker:
            model(input_ids=ids, labels=ids).loss.backward()
        phases["forward+backward"] = _categories(tracker.get_tracker_snapshot("peak"))
        tracker = FSDPMemTracker(model, opt)
        with tracker:
            opt.step()
            opt.zero_grad(set_to_none=True)
        phases["optimizer step"] = _categories(tracker.get_tracker_snapshot("peak"))
    elif strategy == "fsdp-accumulating":  # two micro-batches, the first without a reduce-scatter
        # (set_requires_gradient_sync(False), FSDP1's no_sync): the second runs beside the unsharded gradients
        tracker = FSDPMemTracker(model, opt)  # one tracker over both, which sees the first one's gradients made
        with tracker:
            model.set_requires_gradient_sync(False)
            model(input_ids=ids, labels=ids).loss.backward()
            model.set_requires_gradient_sync(True)
            tracker.reset_mod_stats()  # per-module stats only: the peak so far stays
            model(input_ids=ids, labels=ids).loss.backward()
        phases["two micro-batches"] = _categories(tracker.get_tracker_snapshot("peak"))
    else:  # DDP built inside the tracker, so the Reducer's gradient buckets are seen being made
        tracker = MemTracker()
        tracker.track_external(model, opt)
        with tracker:
            wrapped = DistributedDataParallel(model)
            wrapped(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        phases["whole step"] = _categories(tracker.get_tracker_snapshot("peak"))
    peak = max(phases.values(), key=lambda cats: sum(cats.values()))
    row = {"rank": rank, "peak_bytes": sum(peak.values()), "phase_peaks": phases}
    Path(out_dir, f"{strategy}-{world}-{rank}.json").write_text(json.dumps(row))
    dist.destroy_process_group()


def _structure() -> dict[str, int]:
    """The tiny model's counts the estimator takes: total params, the largest FSDP unit (a decoder layer, or the
    root's own params: embeddings, final norm, head), and the ends."""
    m = _model()
    layer = sum(p.numel() for p in m.model.layers[0].parameters())
    total = sum(p.numel() for p in m.parameters())
    embed = m.model.embed_tokens.weight.numel()
    head = m.lm_head.weight.numel() + m.model.norm.weight.numel()
    return {"params_total": total, "layer_params": layer, "root_params": total - layer * len(m.model.layers),
            "embed_params": embed, "head_params": head, "layers": len(m.model.layers)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("data/measurements/parallel-cpu.json"))
    args = ap.parse_args(argv)
    runs = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for strategy, world in RUNS:
            t0 = time.monotonic()
            mp.spawn(_rank, args=(world, strategy, _free_port(), tmp), nprocs=world, join=True)
            ranks = [json.loads(Path(tmp, f"{strategy}-{world}-{r}.json").read_text()) for r in range(world)]
            runs.append({"strategy": strategy, "gpus": world, "seconds": round(time.monotonic() - t0, 2),
                         "ranks": ranks})
    doc = {
        "schema": 1,
        "made_by": ".venv/bin/python tools/measure_fsdp_cpu.py --out " + str(args.out),
        "how": ("gloo process group on one CPU machine, real tensors; FSDP2 fully_shard per decoder layer then the "
                "root (reshard_after_forward=True, no mixed precision: fp32 params, grads, AdamW state); DDP default "
                "(gradient_as_bucket_view=False, built inside the tracker); one step: forward + loss, backward, "
                "AdamW(foreach=True) step, zero_grad(set_to_none=True); per rank, the peak (total and categories) of "
                "torch.distributed._tools FSDPMemTracker on the cpu device for forward+backward and, with a fresh "
                "tracker, for the optimizer step; DDP: MemTracker over the whole step; fsdp-accumulating: one "
                "FSDPMemTracker over two micro-batches' forward + backward, the first under "
                "set_requires_gradient_sync(False), the second syncing"),
        "config": CONFIG, "tokens": TOKENS, "batch_per_rank": 1,
        "structure": _structure(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "seconds": round(time.monotonic() - start, 2),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp_out.replace(args.out)
    print(f"wrote {args.out} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
