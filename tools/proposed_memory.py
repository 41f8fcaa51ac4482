#!/usr/bin/env python3
"""A prototype of the memory formulas FINDINGS.md proposes, scored on the same dataset as the current estimator.

    .venv/bin/python tools/proposed_memory.py            # both tables, current vs proposed, per method
    .venv/bin/python tools/proposed_memory.py --rows     # and every compared row

Not the estimator: a stand-alone re-statement of the proposal (P1-P6 in FINDINGS.md) on top of the estimator's
own Arch and layer spec (generator.estimator.config.normalise / graph.build_graph), so that the figures in
FINDINGS.md can be reproduced and the lead can check an implementation against them. Only dense decoders
with SDPA are covered (the setups the estimator has); anything else falls back to the current estimator.
No constant here is fitted to the measurements: every byte count is read off what PyTorch keeps alive
(see the live-tensor tables in FINDINGS.md, tools/findings.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PYTHON_GELU = ("gelu_new", "gelu_fast", "quick_gelu")  # transformers' Python activations: saves ~3 extra tensors


def _readers(part, hidden: int) -> int:
    """How many Linears read a norm's output: the next part's input projections (all but its last Linear)."""
    lins = list(part.linears) if part is not None else []
    return max(len(lins) - 1, 0) if lins else 0


def layer_bytes(a, block, method: str, rank: int) -> int:
    """P2-P4: saved bytes per token of one decoder layer (SDPA, bf16 compute)."""
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    parts = list(block.parts)
    full = method == "full"
    total = 0
    for i, p in enumerate(parts):
        nxt = parts[i + 1] if i + 1 < len(parts) else None
        if p.norm_width:
            w = p.norm_width
            rms = p.type == "RMSNorm"
            if full:  # fp32 residual input + (RMS: fp32 normed output for the weight grad) + one bf16 cast per reader
                total += 4 * w + (4 * w + 4 if rms else 8) + 2 * w * _readers(nxt, a.hidden)
            else:  # frozen norm: only the fp32 upcast of the bf16 input (+ rsqrt / mean, rstd)
                total += 4 * w + (4 if rms else 8)
        elif p.kv or "Attn" in p.type or "Attention" in p.type:
            total += 2 * (2 * q + 2 * kv) + 4 * a.heads  # rope'd q, k (cast or cat copy), v, SDPA output; fp32 LSE
            if a.qk_norm:  # q/k norms over head_dim: fp32 upcast (+ normed output when trained)
                total += (8 if full else 4) * (q + kv)
        elif p.linears and p.type in ("SwiGLU", "GeGLU", "GLU", "MLP"):
            i_ = a.intermediate
            gated = p.type != "MLP"
            n = (4 if gated else 2) if full else (3 if gated else 1)  # LoRA: the down-proj input is the adapter's copy
            if a.act in PYTHON_GELU:
                n += 3
            total += 2 * i_ * n
        if not full and p.linears:
            total += 2 * sum(n_in + rank for n_in, _ in p.linears)  # lora_A's bf16 input copy and its output
    return total


def proposed_bytes(row, s) -> int | None:
    """The proposal's peak for a dataset row (same signature as generator.accuracy.estimate_bytes)."""
    from generator.accuracy import estimate_bytes, setup_of
    from generator.estimator.config import normalise
    from generator.estimator.graph import build_graph

    setup = setup_of(row)
    if setup is None or not row.get("config"):
        return None
    try:
        a = normalise(row["config"], row.get("model") or "model")
        g = build_graph(a)
    except Exception:  # noqa: BLE001
        return None
    spec = g.spec
    if spec is None or spec.kind != "decoder" or getattr(a, "family", "") in ("bloom",):
        return estimate_bytes(row, s)
    B, T = setup.batch, setup.tokens
    P = g.params_total
    V, E = a.vocab, (a.embed_dim or a.hidden)
    if setup.method == "inference":
        return serve_bytes(a, g, s, B, T, setup.new_tokens)
    acts = sum(layer_bytes(a, b, setup.method, setup.lora_rank) for b in spec.blocks)
    head = spec.head[0] if spec.head and spec.head[0].norm_width else None
    if setup.method == "full":
        head_act = (4 * a.hidden + (4 * a.hidden + 4 if head is not None and head.type == "RMSNorm" else 8)
                    + 2 * a.hidden) if head is not None else 2 * a.hidden
        per_token = 4 * a.hidden + acts + head_act + 12 * V  # P1: 12 B per logit (fp32 log-softmax + 2 fp32 grads)
        matmul = g.params_matmul
        loss_phase = (4 + 8) * P + 2 * matmul + B * T * per_token  # P5: no gradient exists at the loss backward
        end_of_backward = (4 + 4 + 8) * P + (8 * V * E if a.tie else 0)  # P6: tied-embedding grad accumulation
        step = (4 + 4 + 8 + 4) * P
        return max(loss_phase, end_of_backward, step)
    adapters = sum(setup.lora_rank * (i + o) for b in spec.blocks for i, o in b.linears)
    head_act = (4 * a.hidden + 4) if head is not None else 0
    per_token = acts + head_act + 12 * V
    return 2 * P + (4 + 8 + 2) * adapters + B * T * per_token


def serve_bytes(a, g, s, B: int, prompt: int, new: int) -> int:
    """P7: HF generate (the harness's serving run): prefill of all B prompts at once, then decode."""
    from generator.estimator.memory import kv_bytes_per_sequence

    spec = g.spec
    weights = 2 * g.params_total
    transient = max((p.transient for b in spec.blocks for p in b.parts), default=0) + 4 * a.hidden
    prefill = weights + B * kv_bytes_per_sequence(a, s, prompt) + B * prompt * 2 * transient
    decode = weights + B * kv_bytes_per_sequence(a, s, prompt + new) + B * (4 + 2) * a.vocab
    return max(prefill, decode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", action="store_true", help="print every compared row")
    ap.add_argument("--families", action="store_true", help="error per model_type, current and proposed")
    args = ap.parse_args()
    from generator import __version__
    from generator.accuracy import compute, estimate_bytes, load_datasets, render, setup_of, tensor_bytes
    from generator.settings import load_settings

    settings = load_settings()
    data = {k: v for k, v in load_datasets().items() if k == "cpu-sim"}
    print("## current estimator\n")
    print(render(compute(data, settings, __version__)))
    print("\n## proposal (tools/proposed_memory.py)\n")
    print(render(compute(data, settings, "proposal", estimate_fn=proposed_bytes)))
    if args.families:
        from collections import defaultdict

        from generator.accuracy import percentile

        s = settings.assumptions
        errs: dict = defaultdict(lambda: ([], []))
        for row in data["cpu-sim"]:
            if setup_of(row) is None:
                continue
            m, e, p = tensor_bytes(row, s.cuda_context_bytes), estimate_bytes(row, s), proposed_bytes(row, s)
            if m and e and p:
                cur, new = errs[row["model_type"]]
                cur.append(abs(e / m - 1) * 100)
                new.append(abs(p / m - 1) * 100)
        print(f"\n{'model_type':<12} {'n':>3} {'current median/max |err|%':>26} {'proposal median/max |err|%':>27}")
        for fam, (cur, new) in sorted(errs.items()):
            print(f"{fam:<12} {len(cur):>3} {percentile(cur, 50):>12.1f} / {max(cur):>5.1f} {percentile(new, 50):>19.1f} / {max(new):>5.1f}")
    if args.rows:
        s = settings.assumptions
        for row in data["cpu-sim"]:
            if setup_of(row) is None:
                continue
            m, e, p = tensor_bytes(row, s.cuda_context_bytes), estimate_bytes(row, s), proposed_bytes(row, s)
            if m and e and p:
                st = row["setup"]
                print(f"{row['model'][:36]:36} {st['method']:9} b{st['batch']:<2} t{st['tokens']:<5} "
                      f"measured {m / 2**30:8.3f} GiB  current {(e / m - 1) * 100:+6.1f}%  proposal {(p / m - 1) * 100:+6.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
