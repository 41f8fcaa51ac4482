"""The model command's setup flags (--tokens ... --metric) → the exact Job and the settings they override.

One place for both sides: the CLI (cli.py) adds these flags to its parser and builds its job here, and the
model pages' calculator (calculator.py, run in the browser by Pyodide) parses the page's URL query with the
same parser and builds the same job, so the page's peak is the CLI's `memory.peak_bytes` for the same flags.
A flag added here is a field of the page's form and a key of its query, with no change to the page's script.

Pure: argparse, the estimator's Job and the typed errors; no file, network, clock or environment.
"""

from __future__ import annotations

import argparse

from .errors import ConfigError
from .estimator.memory import job_options as j
from .estimator.memory import parallel
from .estimator.memory.job_options import Job
from .estimator.memory.parallel import Setup, default_setup
from .estimator.memory.recipes import RECIPES

PROG = "neurarch-trace"


def add_setup_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that say what job is priced: the site's sizes, then the exact setup."""
    p.add_argument("--tokens", type=int, metavar="T", help="tokens per training sample (default from site_config.yaml)")
    p.add_argument("--batch", type=int, metavar="B", help="micro batch of the priced job")
    p.add_argument("--lora-rank", type=int, metavar="R", help="LoRA rank")
    p.add_argument("--serve-tokens", type=int, metavar="T", help="tokens per served sequence")

    ex = p.add_argument_group("exact setup", "memory.peak_bytes / peak_phase / breakdown for one real run "
                                             "(default: full AMP AdamW at batch 1 and the training tokens)")
    ex.add_argument("--recipe", choices=tuple(RECIPES), help="the options of a framework's usual run, read from its "
                                                             "source (explicit flags override it): "
                                                             + "; ".join(f"{r.name}: {r.summary}"
                                                                         for r in RECIPES.values()))
    ex.add_argument("--method", choices=j.METHODS, help="full, lora, qlora or inference (HF generate)")
    ex.add_argument("--precision", choices=j.PRECISIONS,
                    help="amp (fp32 master weights, bf16 autocast), bf16 (pure), fp32")
    ex.add_argument("--weights", choices=j.WEIGHTS, help="how the base is stored (default: follows precision; "
                                                         "nf4 for qlora)")
    ex.add_argument("--optimizer", choices=j.OPTIMIZERS)
    ex.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=None,
                    help="gradient checkpointing (--no-grad-ckpt turns a recipe's off)")
    ex.add_argument("--offload-checkpoints", action=argparse.BooleanOptionalAction, default=None,
                    help="with --grad-ckpt: the layer inputs wait in CPU RAM (Unsloth's checkpointing)")
    ex.add_argument("--padded", action=argparse.BooleanOptionalAction, default=None,
                    help="the batch's samples are padded to its longest (HF Trainer's and TRL's collators): SDPA is "
                         "handed a mask in every layer, which it keeps, with GQA's k and v repeated to every head")
    ex.add_argument("--tower-adapters", action=argparse.BooleanOptionalAction, default=None,
                    help="LoRA's targets reach a vision-language model's tower and projector, as peft's all-linear "
                         "does (default); --no-tower-adapters: the text model's alone (LLaMA-Factory's, ms-swift's)")
    ex.add_argument("--images", type=int, metavar="N",
                    help="images per sample of a vision-language model, a training sample or an inference prompt "
                         "(default 1; 0: text only)")
    ex.add_argument("--grad-accum", type=int, metavar="K",
                    help="micro-batches per optimizer step (gradient_accumulation_steps, default 1): from the second "
                         "on, every trainable parameter's gradient is held through forward and backward")
    ex.add_argument("--adapter-dtype", choices=j.ADAPTER_DTYPES,
                    help="LoRA adapters' dtype (default: peft's autocast_adapter_dtype=True, fp32 on a bf16 base, "
                         "with or without autocast; bf16: autocast_adapter_dtype=False, or LitGPT's and torchtune's "
                         "own LoRA, whose recipes set it)")
    ex.add_argument("--lora-dropout", type=float, metavar="P", help="LoRA dropout probability (default 0)")
    ex.add_argument("--bnb-version", metavar="X.Y.Z",
                    help="the bitsandbytes release of a QLoRA run (default: 0.43.2 or later; before it, each 4-bit "
                         "matmul also saved its input for backward, held as long as the graph: into the next step's "
                         "forward where the loop keeps the loss or the output)")
    ex.add_argument("--transformers-version", metavar="X.Y.Z",
                    help="the transformers release of the run (default: a current one; before 4.36 generate held "
                         "the previous step's KV cache beside the new one; from 5, bitsandbytes leaves Falcon's "
                         "nn.Linear subclasses unquantised, so its QLoRA is LoRA on its base; before 5, an adapter "
                         "job that quantises or adapts an MoE's nn.Linear experts is refused: the estimate prices "
                         "transformers 5's expert tensors)")
    ex.add_argument("--scan", choices=j.SCANS,
                    help="a Mamba or Gated DeltaNet mixer's scan: fused (mamba-ssm's or flash-linear-attention's "
                         "kernels, the default on a GPU) or torch (transformers' own code, which runs without them)")
    ex.add_argument("--lora-targets", metavar="NAMES", help="all-linear, peft-default (peft's own for the model "
                    "type, where a run names none), or comma-separated module names (q_proj,v_proj)")
    ex.add_argument("--new-tokens", type=int, metavar="N", help="tokens generated after the prompt (inference)")
    ex.add_argument("--attention", choices=j.ATTENTIONS,
                    help="default: the model class's (eager where transformers' class has no SDPA, and for custom "
                         "code not known to use it)")
    ex.add_argument("--metric", choices=j.METRICS,
                    help="allocated (tensors), reserved (+ the allocator's cache), nvidia-smi (+ CUDA context, + NCCL's "
                         "buffers on several GPUs)")
    ex.add_argument("--gpus", type=int, metavar="N", default=1, help="GPUs the job runs on (default 1); "
                                                                     "memory.peak_bytes is per GPU")
    ex.add_argument("--strategy", choices=[x for x in parallel.STRATEGIES if x not in ("single", "tp+pp")],
                    help="how the job is spread (default: ddp when --gpus > 1); fsdp+ep: FSDP with a mixture of "
                         "experts' routed experts spread over each node of 8")
    ex.add_argument("--offload", choices=parallel.OFFLOADS, default="none",
                    help="ZeRO-Offload (optimizer) or parameter offload (params) to CPU memory")
    ex.add_argument("--sync-each-batch", action="store_true",
                    help="fsdp with --grad-accum: reduce-scatter the gradients every micro-batch (Accelerate's "
                         "sync_each_batch) instead of no_sync, which keeps them unsharded on every GPU")
    ex.add_argument("--mixed-units", action="store_true",
                    help="fsdp, LoRA: FSDP1 units holding frozen and trainable params (use_orig_params=True, LitGPT's "
                         "Block wrap), whose gradients cover the frozen params too")


def setup_parser() -> argparse.ArgumentParser:
    """A parser of the setup flags alone (the calculator's: no model, no output options)."""
    p = argparse.ArgumentParser(prog=PROG, add_help=False)
    add_setup_arguments(p)
    return p


def setup_actions(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The setup flags of a parser, in its order (what add_setup_arguments added)."""
    names = {a.dest for a in setup_parser()._actions}
    return [a for a in p._actions if a.dest in names and a.option_strings]


def check(args: argparse.Namespace, where: str = "command line") -> None:
    """The flags' own bounds, named as typed (the job's are checked by estimator.memory.job_options.validate);
    `where`: the model the command names, where it names one."""
    for flag, value in (("--tokens", args.tokens), ("--batch", args.batch), ("--lora-rank", args.lora_rank),
                        ("--serve-tokens", args.serve_tokens), ("--grad-accum", args.grad_accum)):
        if value is not None and value < 1:
            raise ConfigError(where, flag, value, "must be a positive integer")
    for flag, value in (("--new-tokens", args.new_tokens), ("--images", args.images)):
        if value is not None and value < 0:
            raise ConfigError(where, flag, value, "must be >= 0")
    if args.gpus < 1:
        raise ConfigError(where, "--gpus", args.gpus, "must be a positive integer")


def overrides(args: argparse.Namespace) -> dict[str, int | None]:
    """The assumptions (settings.load_settings keyword overrides) the flags replace; None: not given."""
    return {"train_tokens": args.tokens, "job_tokens": args.tokens, "job_batch": args.batch,
            "lora_rank": args.lora_rank, "serve_tokens": args.serve_tokens}


def setup(args: argparse.Namespace) -> Setup:
    """The GPUs and the strategy the job is spread over (memory.peak_bytes is per GPU)."""
    return default_setup(args.gpus, args.strategy, args.offload, sync_each_batch=args.sync_each_batch,
                         mixed_units=args.mixed_units)


def asked(args: argparse.Namespace) -> bool:
    """Whether the command line names an exact setup (then the summary leads with it)."""
    return any(v is not None for v in (args.recipe, args.method, args.precision, args.weights, args.optimizer,
                                       args.lora_targets, args.new_tokens, args.attention, args.metric, args.strategy,
                                       args.grad_ckpt, args.adapter_dtype, args.lora_dropout, args.bnb_version,
                                       args.transformers_version, args.scan, args.offload_checkpoints,
                                       args.images, args.padded, args.tower_adapters)) \
        or args.gpus != 1 or args.offload != "none" or args.grad_accum is not None or args.sync_each_batch \
        or args.mixed_units


def job(args: argparse.Namespace) -> Job:
    """The exact setup the options name; tokens 0 = the site's training tokens (capped at the context)."""
    given = {k: v for k, v in (("method", args.method), ("precision", args.precision), ("weights", args.weights),
                                ("optimizer", args.optimizer), ("lora_rank", args.lora_rank),
                                ("lora_targets", args.lora_targets), ("batch", args.batch), ("tokens", args.tokens),
                                ("new_tokens", args.new_tokens), ("attention", args.attention),
                                ("metric", args.metric), ("grad_ckpt", args.grad_ckpt), ("grad_accum", args.grad_accum),
                                ("adapter_dtype", args.adapter_dtype), ("lora_dropout", args.lora_dropout),
                                ("bnb_version", args.bnb_version),
                                ("transformers_version", args.transformers_version), ("scan", args.scan),
                                ("offload_checkpoints", args.offload_checkpoints), ("images", args.images),
                                ("padded", args.padded), ("tower_adapters", args.tower_adapters))
             if v is not None}
    return Job.from_options(args.recipe or "", **{"tokens": 0, **given})
