#!/usr/bin/env python3
"""The evidence tables of data/measurements/FINDINGS.md: what is live at the peak, next to the estimator's terms.

    .venv/bin/python tools/findings.py > /tmp/findings.md        # about 1 minute on 2 cores

For each CASE, the harness runs the CPU simulation twice (`--explain`): once to find the peak, once to list
every live storage when the total reaches it (op, shape, dtype, module). The storages are put in buckets
(weights, optimizer states, foreach temporaries, gradients, autocast weight copies, logits-sized tensors,
per-layer activations, KV cache, the rest), and per-layer activations are also given per token. The
estimator's own terms for the same setup are printed beside them (generator/estimator/memory.py).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [  # (model, max layers, harness options)
    ("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5", None, "--method full --tokens 2048"),
    ("Qwen/Qwen2-0.5B-Instruct", 2, "--method full --tokens 2048"),
    ("Qwen/Qwen2-0.5B-Instruct", 2, "--method full --tokens 128"),
    ("mistralai/Mistral-7B-v0.1", 2, "--method full --tokens 2048"),
    ("meta-llama/Meta-Llama-3-8B", 2, "--method full --tokens 8192 --batch 2"),
    ("Qwen/Qwen2-0.5B-Instruct", 2, "--method lora --tokens 2048"),
    ("meta-llama/Meta-Llama-3-8B", 2, "--method lora --tokens 8192 --batch 4"),
    ("openai-community/gpt2", 2, "--method lora --tokens 1024 --set attn_pdrop=0.0"),
    ("google/gemma-2b", 2, "--method full --tokens 2048"),
    ("Qwen/Qwen3-0.6B", 2, "--method lora --tokens 2048"),
    ("Qwen/Qwen2-0.5B-Instruct", 2, "--method inference --tokens 2048 --new-tokens 8"),
    ("Qwen/Qwen2-0.5B-Instruct", 2, "--method inference --tokens 2048 --new-tokens 8 --batch 8"),
    ("meta-llama/Meta-Llama-3-8B", 2, "--method inference --tokens 4000 --new-tokens 96"),
]
MIB = 2**20


def bucket(t: dict, vocab: int, tokens: int) -> str:
    shape, cat, op, module = t["shape"], t["category"], t["op"], t["module"]
    numel = 1
    for d in shape:
        numel *= d
    if cat == "param":
        return "weights"
    if cat == "opt":
        return "optimizer states" if op in ("zeros_like.default", "lift_fresh.default", "(before tracking)") else "optimizer-step temporaries"
    if cat == "grad":
        return "gradients"
    if shape and shape[-1] == vocab and numel % tokens == 0 and numel // vocab >= tokens // 2 and len(shape) >= 2 \
            and (len(shape) == 3 or shape[0] != vocab):
        return f"logits-sized ({t['dtype']})"
    if cat == "temp":
        return "backward temporaries (weight-shaped grads in flight, ...)"
    if op == "_to_copy.default" and len(shape) == 2 and numel % tokens != 0 or (op == "_to_copy.default" and len(shape) == 2 and shape[0] not in (tokens,)):
        return "autocast bf16 weight copies"
    if op == "cat.default":
        return "KV cache (DynamicCache cat)"
    if re.search(r"\.(layers|h|blocks)\.\d+", module):
        return "per-layer activations"
    return "other activations (embedding, final norm, head input, rope)"


def per_layer_per_token(live: list[dict], tokens: int, layer: int = 1) -> list[tuple[str, float]]:
    out = []
    for t in live:
        if re.search(rf"\.(layers|h|blocks)\.{layer}\.|\.(layers|h|blocks)\.{layer}$", t["module"]) \
                and t["category"] == "act" and not (t["op"] == "_to_copy.default" and len(t["shape"]) == 2
                                                    and t["shape"][0] != tokens):
            what = t["module"].split(f".{layer}")[-1].lstrip(".") or "(layer)"
            out.append((f"{t['op'].split('.')[0]} {t['shape']} {t['dtype']} @{what}", t["bytes"] / tokens))
    return out


def estimator_terms(config: dict, model: str, setup) -> dict[str, float]:
    """The estimator's profile for the setup, in MiB (per-layer activations also in bytes per token)."""
    from generator.estimator.normalise import normalise
    from generator.estimator.graph.nodes import build_graph
    from generator.estimator.memory.profile import serve_profile, train_profile
    from generator.settings import load_settings

    s = dataclasses.replace(load_settings().assumptions, train_tokens=setup.tokens, lora_rank=setup.lora_rank,
                            serve_tokens=setup.tokens + setup.new_tokens)
    a = normalise(config, model)
    g = build_graph(a)
    B = setup.batch
    if setup.method == "inference":
        p = serve_profile(a, g, s, s.serve_tokens)
    else:
        p = train_profile(a, g, s, setup.tokens, setup.method, setup.lora_rank)
    layer_static = p.layer_static if isinstance(p.layer_static, (tuple, list)) else (p.layer_static,) * p.layers
    layer_act = p.layer_per_sample if isinstance(p.layer_per_sample, (tuple, list)) else (p.layer_per_sample,) * p.layers
    terms = {
        "static: embeddings (+ serving's prefill transient)": p.embed_static / MIB,
        "static at the loss: layers (weights, AdamW, autocast copies / adapters)": sum(layer_static) / MIB,
        "static: head": p.head_static / MIB,
        "optimizer step (weights, grads, AdamW, foreach temporary)": (p.step_prefix[-1] + p.embed_step + p.head_step) / MIB,
        "per batch: embedding output": B * p.embed_per_sample / MIB,
        "per batch: layers (activations / KV cache)": B * sum(layer_act) / MIB,
        "per batch: head (final norm, head input, logits / decode logits)": B * p.head_per_sample / MIB,
    }
    if setup.method != "inference":
        terms["layer 1 activations per token (B)"] = layer_act[min(1, len(layer_act) - 1)] / setup.tokens * MIB / MIB
    return terms


def main() -> int:
    from generator.measure.cli import _quiet, measure
    from generator.measure.setup import parse_overrides, parser, setup_from_args

    _quiet()
    for model, layers, opts in CASES:
        argv = [model, *opts.split()]
        args = parser().parse_args(argv)
        setup = setup_from_args(args)
        rec = measure(model, setup, device="cpu", max_layers=layers, overrides=parse_overrides(args.set), explain=True)
        cfg = rec["config"]
        vocab = cfg.get("vocab_size")
        T = setup.tokens if setup.method != "inference" else setup.tokens
        m, est = rec["measured"], rec["estimate"]
        print(f"\n### {model}{f' ({layers} layers)' if layers else ''}: {opts}\n")
        print(f"measured peak {m['peak_bytes'] / MIB:,.1f} MiB at {rec['peak']['stage']} / {rec['peak']['phase']} "
              f"({rec['peak']['module'] or '-'}); estimate "
              + (f"{est['peak_bytes'] / MIB:,.1f} MiB ({est['phase']}), {(est['peak_bytes'] / m['peak_bytes'] - 1) * 100:+.1f}%"
                 if est else "none") + f"; phase peaks: " + ", ".join(
                  f"{k} {v / MIB:,.1f}" for k, v in sorted(rec["peak"].get("phase_peaks", {}).items())) + " MiB\n")
        groups: dict[str, float] = defaultdict(float)
        for t in rec.get("live_at_peak") or []:
            groups[bucket(t, vocab, setup.batch * T)] += t["bytes"] / MIB
        print("| live at the peak | MiB |\n|---|---:|")
        for k, v in sorted(groups.items(), key=lambda kv: -kv[1]):
            print(f"| {k} | {v:,.1f} |")
        try:
            terms = estimator_terms(cfg, model, setup)
            print("\n| estimator term (same setup) | MiB |\n|---|---:|")
            for k, v in terms.items():
                print(f"| {k} | {v:,.1f} |" if "per token" not in k else f"| {k} | {v:,.0f} B |")
        except Exception as exc:  # noqa: BLE001
            print(f"\n(estimator terms unavailable: {type(exc).__name__}: {exc})")
        if setup.method != "inference":
            rows = per_layer_per_token(rec.get("live_at_peak") or [], setup.batch * T)
            print(f"\nlayer 1, saved per token: {sum(b for _, b in rows):,.0f} B")
            for what, b in sorted(rows, key=lambda x: -x[1]):
                print(f"    {b:8,.0f} B  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
