"""What one measured run is (Setup), its command line, the config hash, shrinking, and the estimator's figure for it."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

METHODS = ("full", "lora", "qlora", "inference")
PRECISIONS = ("amp", "bf16", "fp32")
OPTIMIZERS = ("adamw", "adamw8bit", "sgd")
ADAPTER_DTYPES = ("", "fp32", "bf16")
ADAMW_IMPLS = ("foreach", "forloop", "fused")
# Shrink keys: the config keys a --max-* option caps, by what transformers reads for each family.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
# Per-layer lists and strings (one entry per layer) that shrink with the count, keeping the first entries, as
# transformers 5.24's configs name them (its validate_layer_type refuses a length other than the layer count):
# gemma3's layer_types, mellum's mlp_layer_types, smollm3's no_rope_layers, zamba2's layers_block_type, gemma3n's
# intermediate_size and activation_sparsity_pattern, nemotron_h's hybrid_override_pattern...
PER_LAYER_KEYS = ("layer_types", "mlp_layer_types", "no_rope_layers", "indexer_types", "activation_sparsity_pattern",
                  "intermediate_size", "layers_block_type", "layer_rope_theta", "attention_layers",
                  "num_attention_heads_per_layer", "hybrid_override_pattern", "block_types")
# Lists of layer indices (llama4's moe_layers, lfm2's full_attn_idxs, zamba2's hybrid_layer_ids): those kept.
LAYER_INDEX_KEYS = ("moe_layers", "full_attn_idxs", "hybrid_layer_ids")


@dataclass(frozen=True)
class Setup:
    """Every option of a run; the JSON line's `setup` object is exactly this, as a dict."""

    method: str = "full"
    precision: str = "amp"  # amp: bf16 autocast over fp32 trainable weights (LoRA: bf16 base); bf16: pure bf16; fp32
    batch: int = 1
    tokens: int = 512  # training: tokens per sample; inference: prompt tokens
    new_tokens: int = 0  # inference: tokens decoded after the prompt, one at a time with the KV cache
    lora_rank: int = 16
    lora_targets: str = "all-linear"  # or a comma list of module names, e.g. q_proj,v_proj
    lora_dropout: float = 0.0
    optimizer: str = "adamw"
    adamw_impl: str = "foreach"  # torch's CUDA default; CPU's default would be the for-loop
    grad_ckpt: bool = False
    reentrant: bool = False  # grad_ckpt with use_reentrant=True and the inputs made to require grads (LLaMA-Factory)
    attention: str = "sdpa"  # "": the model class's own (cli.measure resolves it from the config)
    steps: int = 2  # the peak is taken over all steps; step 2 is the first with optimizer state
    train_mode: bool = True  # model.train(): dropout layers active as in a real fine-tune
    # How the base is stored ("" = follows precision) and what the peak is read as; the harness runs bf16/fp32
    # bases and reports allocated tensors (CUDA: also reserved); public rows carry other values.
    weights: str = ""
    metric: str = "allocated"
    adapter_dtype: str = ""  # "" = fp32 under amp/fp32, bf16 under pure bf16; fp32 = peft's autocast_adapter_dtype
    keep_outputs: bool = False  # a loop that keeps the model's output alive through backward (recipe custom-loop)
    bnb_version: str = ""  # public QLoRA rows: the bitsandbytes release they ran ("" = current or not stated)
    transformers_version: str = ""  # public generate rows: the transformers release they ran ("" = current)
    grad_accum: int = 1  # training: micro-batches (forward + backward of the loss / grad_accum) per optimizer step
    double_quant: bool = False  # qlora: bnb_4bit_use_double_quant (the absmax quantised again, blocks of 256)
    upcast_fp32: bool = False  # qlora: peft prepare_model_for_kbit_training (non-quantised parameters to fp32)
    images: int | None = None  # images per sample the harness feeds (measure/images.py); None = not stated (public rows)
    # training: 0 = every step at `tokens`; else each step's length is drawn from [min_tokens, tokens] (lengths()),
    # as a padded-per-batch loader feeds samples of every length, and one step runs at `tokens` itself
    min_tokens: int = 0
    padded: bool = False  # training, batch > 1: every sample but the first padded on its last quarter (attention_mask)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lengths(self) -> list[int]:
        """Each training step's tokens per sample: `tokens` throughout, or with `min_tokens`, drawn uniformly from
        [min_tokens, tokens] by a generator seeded with the step count (the same setup, the same lengths), the
        middle step at `tokens`, the length the estimate prices."""
        if not self.min_tokens:
            return [self.tokens] * self.steps
        rng = random.Random(self.steps)
        out = [rng.randint(self.min_tokens, self.tokens) for _ in range(self.steps)]
        out[self.steps // 2] = self.tokens
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Setup:
        names = {f.name for f in dataclasses.fields(Setup)}
        return Setup(**{k: v for k, v in data.items() if k in names})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neurarch-trace measure",
        description="Measure the peak memory of one real training step or serving run of MODEL, built from its "
                    "config.json with random weights (nothing is downloaded). On a CUDA device: the allocator's peak; "
                    "elsewhere: PyTorch MemTracker on fake CPU tensors (simulated, no memory used). Writes one JSON line.")
    p.add_argument("model", metavar="MODEL", help="a folder holding config.json, a config.json path, or a Hub repo id")
    p.add_argument("--method", choices=METHODS, default="full")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="amp (bf16 autocast, fp32 trainable weights; LoRA keeps a bf16 base), bf16 (pure), fp32; "
                        "default amp for training, bf16 for inference")
    p.add_argument("--batch", type=int, default=1, metavar="B")
    p.add_argument("--tokens", type=int, default=512, metavar="T", help="tokens per sample (inference: prompt)")
    p.add_argument("--new-tokens", type=int, default=None, metavar="N",
                   help="inference: tokens decoded with the KV cache after the prompt (default 16)")
    p.add_argument("--lora-rank", type=int, default=16, metavar="R")
    p.add_argument("--lora-targets", default="all-linear", metavar="T", help="all-linear or a comma list (q_proj,v_proj)")
    p.add_argument("--lora-dropout", type=float, default=0.0, metavar="P")
    p.add_argument("--weights", choices=("bf16", "fp32"), default="",
                   help="lora: the frozen base's dtype (default bf16; fp32 = from_pretrained without a dtype before "
                        "transformers 5)")
    p.add_argument("--adapter-dtype", choices=ADAPTER_DTYPES[1:], default="",
                   help="LoRA adapters' dtype (default fp32 under amp, bf16 under --precision bf16)")
    p.add_argument("--double-quant", action="store_true",
                   help="qlora: quantise the 4-bit base's absmax again (bnb_4bit_use_double_quant)")
    p.add_argument("--kbit-prep", action="store_true",
                   help="qlora: peft's prepare_model_for_kbit_training (every non-quantised parameter upcast to fp32)")
    p.add_argument("--padded", action="store_true",
                   help="training, --batch 2 or more: every sample but the first padded on its last quarter, as a "
                        "collator pads to the batch's longest (an attention mask, those tokens' labels -100)")
    p.add_argument("--images", type=int, default=0, metavar="N",
                   help="N synthetic images per sample fed to a vision-language model (llava, gemma-3, gemma-4, "
                        "mllama, Mistral-3, Qwen2.5-VL and Qwen3.5), their tokens at the start of the sample, among "
                        "--tokens (measure/images.py); inference: fed to the prefill")
    p.add_argument("--keep-outputs", action="store_true",
                   help="keep the model's output object alive through backward (a hand-written loop)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--adamw-impl", choices=ADAMW_IMPLS, default="foreach")
    p.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing (non-reentrant)")
    p.add_argument("--reentrant", action="store_true",
                   help="with --grad-ckpt: torch's reentrant checkpoint, the embeddings' output made to require "
                        "grads (LLaMA-Factory's use_reentrant_gc, its default)")
    p.add_argument("--attention", choices=("sdpa", "eager"), default="",
                   help="default: the model class's own, as transformers picks it (eager where the class has no SDPA)")
    p.add_argument("--steps", type=int, default=2, metavar="S", help="training steps (the peak is over all of them)")
    p.add_argument("--min-tokens", type=int, default=0, metavar="T",
                   help="training: draw each step's length from [T, --tokens] (seeded; the middle step at --tokens), "
                        "as batches padded to their own longest sample run")
    p.add_argument("--grad-accum", type=int, default=1, metavar="K",
                   help="micro-batches per training step, their gradients accumulated before the optimizer step")
    p.add_argument("--eval-mode", action="store_true", help="train with dropout off (model.eval())")
    p.add_argument("--max-layers", type=int, default=None, metavar="L",
                   help="shrink the config to at most L layers (recorded in the JSON line's config_changes)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, e.g. attn_pdrop=0.0, or a nested config's by a dotted key, e.g. "
                        "text_config.num_hidden_layers=2 (recorded in the JSON line)")
    p.add_argument("--device", choices=("auto", "cpu", "cpu-real", "cuda"), default="auto",
                   help="auto: cuda when available, else the CPU simulation (fake tensors); cpu-real: the same step "
                        "on real CPU tensors, for a model whose step reads its values (small configs: it computes)")
    p.add_argument("--memory-fraction", type=float, default=None, metavar="F",
                   help="CUDA: torch.cuda.set_per_process_memory_fraction(F), to emulate a smaller card")
    p.add_argument("--card", default=None, metavar="NAME",
                   help="CUDA: emulate this card of site_config.yaml (its driver-reported memory) via the memory fraction")
    p.add_argument("--explain", action="store_true",
                   help="CPU: run twice and list the live tensors at the peak (op, shape, dtype) in the JSON line")
    p.add_argument("--allocator", action="store_true",
                   help="CPU: replay the step through the CUDA caching allocator: max_memory_reserved on a card with "
                        "room (reserved_bytes) and the least memory the step runs in (minimum_capacity_bytes), by "
                        "default and with expandable segments (..._expandable)")
    p.add_argument("--snapshot", default=None, metavar="DIR", help="snapshot folder to look repo ids up in")
    p.add_argument("--out", default=None, metavar="FILE", help="append the JSON line to FILE (default: print it)")
    return p


def setup_from_args(args: argparse.Namespace) -> Setup:
    """Validated Setup from parsed arguments; raises ValueError with the flag's name."""
    precision = args.precision or ("bf16" if args.method == "inference" else "amp")
    new_tokens = args.new_tokens if args.new_tokens is not None else (16 if args.method == "inference" else 0)
    for flag, value in (("--batch", args.batch), ("--tokens", args.tokens), ("--lora-rank", args.lora_rank),
                        ("--steps", args.steps), ("--grad-accum", args.grad_accum)):
        if value < 1:
            raise ValueError(f"{flag} must be a positive integer, not {value}")
    if new_tokens < 0 or (args.method != "inference" and new_tokens):
        raise ValueError("--new-tokens is for --method inference, and must be >= 0")
    if not 0.0 <= args.lora_dropout < 1.0:
        raise ValueError("--lora-dropout must be in [0, 1)")
    for flag, given in (("--double-quant", args.double_quant), ("--kbit-prep", args.kbit_prep)):
        if given and args.method != "qlora":
            raise ValueError(f"{flag} is for --method qlora")
    if args.min_tokens and (args.method == "inference" or not 0 < args.min_tokens <= args.tokens):
        raise ValueError("--min-tokens is for training, between 1 and --tokens")
    if args.padded and (args.method == "inference" or args.batch < 2):
        raise ValueError("--padded is for training with --batch 2 or more")
    if args.images < 0:
        raise ValueError("--images must be >= 0")
    if args.reentrant and not args.grad_ckpt:
        raise ValueError("--reentrant is for --grad-ckpt")
    if args.weights and args.method != "lora":
        raise ValueError("--weights is for --method lora (a full fine-tune's weights follow --precision)")
    targets = args.lora_targets.strip()
    if targets != "all-linear" and not all(t.strip().replace("_", "").replace(".", "").isalnum()
                                           for t in targets.split(",")):
        raise ValueError(f"--lora-targets must be all-linear or a comma list of module names, not {targets!r}")
    return Setup(method=args.method, precision=precision, batch=args.batch, tokens=args.tokens, new_tokens=new_tokens,
                 lora_rank=args.lora_rank, lora_targets=targets, lora_dropout=args.lora_dropout,
                 optimizer=args.optimizer, adamw_impl=args.adamw_impl, grad_ckpt=args.grad_ckpt,
                 reentrant=args.reentrant, attention=args.attention, steps=args.steps, grad_accum=args.grad_accum,
                 train_mode=not args.eval_mode,
                 adapter_dtype=args.adapter_dtype, keep_outputs=args.keep_outputs, weights=args.weights,
                 double_quant=args.double_quant, upcast_fp32=args.kbit_prep, images=args.images, min_tokens=args.min_tokens,
                 padded=args.padded)


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a config dict (sorted keys, no spaces, UTF-8)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def context_of(config: Mapping[str, Any]) -> int | None:
    """The positions the model is built for (max_position_embeddings / n_positions / seq_length), if declared."""
    text = config.get("text_config")
    cfg: Mapping[str, Any] = text if isinstance(text, dict) else config
    for key in ("max_position_embeddings", "n_positions", "seq_length"):
        if isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
            return cfg[key]
    return None


def shrink(config: Mapping[str, Any], max_layers: int | None = None,
           overrides: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A copy of config with at most max_layers layers (also inside text_config) and `overrides` applied (top-level
    keys, or a nested config's by a dotted key); returns it and the changes as {key: [old, new]}, or None when nothing
    changed."""
    out = json.loads(json.dumps(config))
    changes: dict[str, Any] = {}
    for where, cfg in (("", out), ("text_config.", out.get("text_config"))):
        if not isinstance(cfg, dict) or not max_layers:
            continue
        for key in LAYER_KEYS:
            value = cfg.get(key)
            if isinstance(value, int) and value > max_layers:
                changes[where + key] = [value, max_layers]
                cfg[key] = max_layers
                # Per-layer lists and layer indices must shrink with the count.
                for name in PER_LAYER_KEYS:
                    per_layer = cfg.get(name)
                    if isinstance(per_layer, (list, str)) and len(per_layer) == value:
                        cfg[name] = per_layer[:max_layers]
                for name in LAYER_INDEX_KEYS:
                    indices = cfg.get(name)
                    if isinstance(indices, list) and all(isinstance(i, int) for i in indices):
                        cfg[name] = [i for i in indices if i < max_layers]
    for key, value in (overrides or {}).items():  # a dotted key sets a nested config's (text_config.hidden_size)
        *path, last = key.split(".")
        node: dict[str, Any] = out
        for part in path:
            nested = node.setdefault(part, {})
            if not isinstance(nested, dict):
                raise ValueError(f"--set {key}: {part} is not a nested config")
            node = nested
        if node.get(last) != value:
            changes[key] = [node.get(last), value]
            node[last] = value
    return out, changes or None


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """--set KEY=VALUE items (VALUE read as JSON, else as a string) → dict."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set takes KEY=VALUE, not {item!r}")
        try:
            out[key.strip()] = json.loads(text)
        except ValueError:
            out[key.strip()] = text
    return out


def job_of(setup: Setup, kernels: str = "cuda"):
    """The estimator's Job for this setup, or (None, why) where it has none; returns (job, reason). kernels "cpu":
    the run was simulated on the CPU, whose kernels keep some tensors in other dtypes (estimator.job KERNELS)."""
    from ..estimator.memory.job_options import READ_BY, Job

    if setup.optimizer == "adamw" and setup.adamw_impl == "forloop":
        return None, "AdamW for-loop step (FINDINGS.md P4, optional): not modelled"
    if setup.method in ("lora", "qlora") and setup.lora_rank is None:
        return None, "LoRA rank not given"
    optimizer = "adamw-fused" if setup.optimizer == "adamw" and setup.adamw_impl == "fused" else setup.optimizer
    job = Job(method=setup.method, precision=setup.precision, weights=setup.weights, optimizer=optimizer,
              grad_ckpt=setup.grad_ckpt, lora_rank=setup.lora_rank, batch=setup.batch, tokens=setup.tokens,
              new_tokens=setup.new_tokens, attention=setup.attention, metric=setup.metric,
              keep_outputs=setup.keep_outputs, kernels=kernels, bnb_version=setup.bnb_version or "",
              transformers_version=setup.transformers_version or "", grad_accum=setup.grad_accum or 1,
              double_quant=bool(setup.double_quant), upcast_fp32=bool(setup.upcast_fp32), images=setup.images,
              padded=bool(setup.padded))
    if setup.method not in READ_BY["lora_targets"]:  # a record holds its harness's adapter defaults whatever the method
        return job, ""  # (LitGPT's "q,v"): only the adapter methods read them
    # the harness's default under pure bf16 made bf16 adapters (build.dtypes), where the estimator's is peft's fp32
    adapter = setup.adapter_dtype or ("bf16" if setup.precision == "bf16" else "")
    return dataclasses.replace(job, lora_targets=setup.lora_targets, adapter_dtype=adapter,
                               lora_dropout=setup.lora_dropout or 0.0), ""


def estimator_supports(setup: Setup) -> bool:
    """The setups estimator.job prices: every method, precision, optimizer, checkpointing and attention the
    harness runs, except LoRA dropout and the for-loop / fused AdamW step."""
    from ..errors import ConfigError
    from ..estimator.memory.job_options import validate

    job, _ = job_of(setup)
    if job is None:
        return False
    try:
        validate(job, "setup")
    except ConfigError:
        return False
    return True


def estimate_for(config: Mapping[str, Any], model_id: str, setup: Setup, assumptions: Any = None,
                 kernels: str = "cuda") -> dict[str, Any] | None:
    """estimator.job's peak bytes, phase and breakdown for this exact setup, or None where it has no such setup.

    Training: `batch` samples of `tokens`; inference: HF generate, `batch` prompts of `tokens` then `new_tokens`
    decoded (FINDINGS.md F7). Raises the estimator's own errors (ConfigError, UnsupportedArchitecture, JobError)
    for configs or options it refuses.
    """
    if not estimator_supports(setup):
        return None
    from ..estimator.graph.nodes import build_graph
    from ..estimator.memory.job import job_memory
    from ..estimator.normalise import normalise

    if assumptions is None:
        from ..settings import load_settings

        assumptions = load_settings().assumptions
    job, _ = job_of(setup, kernels)
    arch = normalise(config, model_id)
    graph = build_graph(arch)
    mem = job_memory(arch, graph, assumptions, job, model_id)
    return {"peak_bytes": int(mem.peak_bytes), "phase": mem.peak_phase, "breakdown": dict(mem.breakdown),
            "params": int(graph.params_total)}
