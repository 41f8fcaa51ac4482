#!/usr/bin/env python3
"""Map the public measured figures (data/measurements/public.tsv) onto our setup fields: writes public.jsonl.

    python3 tools/import_public.py [--tsv PATH] [--amendments PATH] [--out data/measurements/public.jsonl]

One JSON line per TSV row, in TSV order. Every row is kept; a row that cannot be compared with an estimate
carries `excluded` (why). A kept row has `setup` in the harness's vocabulary (method, precision, batch, tokens,
new_tokens, lora_rank, lora_targets, optimizer, grad_ckpt, attention) plus `weights` and `grad_accum`, the
measured bytes and the metric, the config it is compared with (snapshot/ or a vouched stand-in), its source
URL and trust. Which rows the current estimator can be compared with is decided later (generator/accuracy.py).

What a TSV row says too little of (the script a framework ran, read at a cited commit; how a multi-GPU run was
spread) is in data/measurements/public-amendments.json, applied here on top of each row's import, so that the
output is always this script's: tests/test_public_import.py rebuilds it and compares bytes.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# A copy of shared/research/measured-memory-calibration.tsv (each row with its source URL and trust).
DEFAULT_TSV = ROOT / "data" / "measurements" / "public.tsv"
DEFAULT_AMENDMENTS = ROOT / "data" / "measurements" / "public-amendments.json"

# Hub ids whose config.json is not in snapshot/, but whose shapes equal a snapshot model's (vouched here).
VOUCHED = {
    "meta-llama/Llama-2-13b-chat-hf": ("meta-llama/Llama-2-13b-hf", {}, "chat release of the same network: config.json equal in every shape key"),
    "meta-llama/Llama-2-70b-chat-hf": ("meta-llama/Llama-2-70b-hf", {}, "chat release of the same network: config.json equal in every shape key"),
    "huggyllama/llama-7b": ("meta-llama/Llama-2-7b-hf", {"max_position_embeddings": 2048},
                            "LLaMA-1 7B: Llama-2-7B's shapes (4096 x 32 layers, 32 heads, MLP 11008, vocab 32000), 2048 positions"),
    "huggyllama/llama-13b": ("meta-llama/Llama-2-13b-hf", {"max_position_embeddings": 2048},
                             "LLaMA-1 13B: Llama-2-13B's shapes (5120 x 40 layers, 40 heads, MLP 13824, vocab 32000), 2048 positions"),
    "codellama/CodeLlama-34b-hf": ("codellama/CodeLlama-13b-hf",
                                   {"hidden_size": 8192, "intermediate_size": 22016, "num_attention_heads": 64,
                                    "num_key_value_heads": 8, "num_hidden_layers": 48, "vocab_size": 32000},
                                   "CodeLlama-13B's config with the 34B's shapes (8192 x 48 layers, 64 heads, 8 KV "
                                   "heads, MLP 22016, vocab 32000; the same 16384 positions and rope_theta 1e6) as "
                                   "litgpt@26857050 litgpt/config.py L1430-1449 copies them from the Hub's config.json"),
    "EleutherAI/pythia-410m-deduped": ("EleutherAI/pythia-6.9b-deduped",
                                       {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
                                        "num_hidden_layers": 24, "vocab_size": 50304},
                                       "Pythia-6.9B-deduped's config with the 410M's shapes (1024 x 24 layers, 16 "
                                       "heads, MLP 4096, vocab 50254 padded to a multiple of 128: 50304) as "
                                       "litgpt@26857050 litgpt/config.py L414-423 gives them; the deduped and "
                                       "standard runs share one architecture (Biderman et al. 2023, Table 1)"),
    "facebook/opt-350m": ("facebook/opt-125m",
                          {"hidden_size": 1024, "ffn_dim": 4096, "num_attention_heads": 16, "num_hidden_layers": 24,
                           "word_embed_proj_dim": 512, "do_layer_norm_before": False},
                          "OPT-125M's config with the 350M's shapes (1024 x 24 layers, 16 heads, FFN 4096, 512-wide "
                          "embeddings projected in and out, post-norm without a final norm) as print(model) of "
                          "facebook/opt-350m lists its modules (github:if001/alpaca-lora gomi.md)"),
    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T": ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", {},
                                                            "the chat model is this checkpoint fine-tuned: same config shapes"),
}
UNITS = {"GiB": 2**30, "MiB": 2**20, "GB": 10**9, "MB": 10**6}
GPU_GB = re.compile(r"(\d+)\s*GB")
GPU_COUNT = re.compile(r"^\s*(\d+)\s*[xX]\s")  # "2x A100-40GB", "2x 24GB GPUs (stated)"
BNB_RELEASE = re.compile(r"\b(?:bitsandbytes|bnb)\s+(\d+\.\d+(?:\.\d+)?)")
# The transformers release a generate row ran, as its attention or framework column states it ("transformers ~4.32",
# "transformers 4.35"): before 4.36 generate held two KV caches at the end of a decode step (Job.transformers_version)
TRANSFORMERS_RELEASE = re.compile(r"transformers ~?(\d+\.\d+(?:\.\d+)?)")
# What an amendment may set: a setup key the TSV has no column for or states too loosely, a note, the spread.
AMENDABLE_SETUP = ("lora_dropout", "loss", "grad_accum", "bnb_version")
PARALLEL_KEYS = ("strategy", "offload")
PARALLEL_CHOICES = ("mixed_units", "sync_each_batch")  # FSDP's, true when given (memory.parallel.Setup)


def _snapshot_config(model_id: str) -> tuple[dict | None, str | None, str | None]:
    """(config, where it came from, note) or (None, None, None)."""
    from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record

    target, overrides, note = VOUCHED.get(model_id, (model_id, {}, None))
    record = load_record(DEFAULT_SNAPSHOT_DIR, target)
    if record is None or not record.config_json:
        return None, None, None
    config = dict(record.config(), **overrides)
    return config, f"snapshot/models/{target}.json" + (f" with {overrides}" if overrides else ""), note


def _method(r: dict) -> str | None:
    w, m = r["workload"], r["method"].lower()
    if w.startswith("inference"):
        return "inference"
    if not w.startswith("train"):
        return None
    if "qlora" in m or (m.startswith("lora") and re.search(r"nf4|int4|int8|4bit|4-bit|8-bit", r["weights_dtype"] + m)):
        return "qlora"
    if m.startswith("lora"):
        return "lora"
    if m.startswith("full"):
        return "full"
    return m.split()[0]  # other PEFT methods (ia3, prompt_tuning, ...): kept, never estimated


def _precision(r: dict, method: str) -> str:
    c, w = r["compute"].lower(), r["weights_dtype"].lower()
    if c.startswith("fp32") or (w.startswith("fp32") and "amp" not in c and "mixed" not in c):
        return "fp32"
    if "amp" in c or "mixed" in c or "fp32 master" in w or w.startswith("fp32"):
        return "amp"
    if method in ("lora", "qlora") and "trainer" in c:
        return "amp"  # HF Trainer --bf16 on a bf16 base: autocast on, peft's adapters fp32
    return "bf16"  # pure bf16 / fp16 (fp16 has bf16's bytes; `precision_as_published` keeps the text)


def _optimizer(text: str) -> str:
    t = text.lower()
    if t.startswith("none"):
        return "none"
    if "paged" in t:
        return "paged_adamw8bit" if "8bit" in t else "paged_adamw"
    if "8bit" in t or "8-bit" in t:
        return "adamw8bit"
    if "in_bwd" in t or "into backward" in t:
        return "adamw_in_backward"
    if "sgd" in t:
        return "sgd"
    if "adafactor" in t:
        return "adafactor"
    if "adamw" in t or t.startswith("adam"):
        return "adamw"
    return "unknown"


def _lora(adapter: str) -> tuple[int | None, str | None]:
    """(rank, targets) in the harness's words: all-linear, all-linear+lm_head, q_proj,v_proj[,o_proj,mlp], c_attn."""
    m = re.search(r"r=(\d+)", adapter)
    a = adapter.lower()
    if "all linear" in a or "q,k,v,o,gate,up,down" in a or "q,k,v,proj,mlp" in a:
        targets = "all-linear+lm_head" if "head" in a else "all-linear"
    elif "output_proj + mlp" in a:
        targets = ("q_proj,k_proj,v_proj" if "q,k,v" in a else "q_proj,v_proj") + ",o_proj,mlp"
    elif re.search(r"query\+value|q_proj,v_proj|\bq,v\b|q,v,", a):
        targets = "q_proj,v_proj"
    elif "c_attn" in a:
        targets = "c_attn"
    else:
        targets = None
    return (int(m.group(1)) if m else None), targets


def _int(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*", text or "")
    return int(m.group(1)) if m else None


def _metric(text: str) -> str:
    t = text.lower()
    if "non-torch" in t or "nvml peak" in t:
        return "allocated_plus_non_torch"
    if "nvml" in t or "nvidia-smi" in t:
        return "nvml_used"
    if "active" in t:
        return "active_peak"
    if "reserved" in t:
        return "max_memory_reserved"
    if "allocated" in t:
        return "max_memory_allocated"
    if "oom" in t or "outofmemory" in t or "fit" in t:
        return "outcome"
    return "not_stated"


def load_amendments(path: Path) -> dict[str, list[dict]]:
    """{row id: its amendments, in file order}. Each amendment names its rows (`ids`) and sets any of: `setup`
    (keys of AMENDABLE_SETUP), `notes` (appended to the row's, after "; "), `parallel` (`strategy`, `offload`,
    any of PARALLEL_CHOICES; the GPU count is the row's own "Nx"), `inexact: true` (the stated length is a cap the
    run need not reach: the notes say why), `cause` (what the source itself shows differs from the step the
    estimator prices: /accuracy/ names it beside the row's miss). Anything else is refused, naming the amendment and
    the key."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, list[dict]] = {}
    for n, amendment in enumerate(data["amendments"], 1):
        where = f"{path.name}: amendment {n}"
        unknown = set(amendment) - {"ids", "setup", "notes", "parallel", "inexact", "cause"}
        if unknown or not amendment.get("ids"):
            raise SystemExit(f"{where}: key {sorted(unknown)[0] if unknown else 'ids'!r}: "
                             "must name its rows (ids) and set only setup, notes, parallel, inexact or cause")
        if amendment.get("inexact", True) is not True:
            raise SystemExit(f"{where}: inexact {amendment['inexact']!r}: only true (say why in notes)")
        for key in set(amendment.get("setup", {})) - set(AMENDABLE_SETUP):
            raise SystemExit(f"{where}: setup key {key!r}: an amendment sets only {', '.join(AMENDABLE_SETUP)}")
        if "parallel" in amendment and (set(amendment["parallel"]) - set(PARALLEL_CHOICES) != set(PARALLEL_KEYS)
                                        or any(amendment["parallel"].get(k, True) is not True
                                               for k in PARALLEL_CHOICES)):
            raise SystemExit(f"{where}: parallel {amendment['parallel']!r}: must give exactly "
                             f"{', '.join(PARALLEL_KEYS)}, and may set {', '.join(PARALLEL_CHOICES)} true")
        for row_id in amendment["ids"]:
            out.setdefault(row_id, []).append(amendment)
    return out


def _spread(r: dict, amendments: Sequence[dict]) -> dict | None:
    """How a multi-GPU (or offloading) row was spread: the amendment's strategy and offload, the row's GPU count."""
    given = [a["parallel"] for a in amendments if "parallel" in a]
    if not given:
        return None
    if len(given) > 1:
        raise SystemExit(f"{r['id']}: parallel: {len(given)} amendments set it; one may")
    n = _gpu_count(r["gpus"])
    if n is None:
        raise SystemExit(f"{r['id']}: gpus {r['gpus']!r}: an amended spread needs the row's GPU count (\"Nx ...\")")
    return {"gpus": n, **given[0]}


def _gpu_count(gpus: str) -> int | None:
    """The N of the row's "Nx <GPU>", or None where the row does not give it."""
    m = GPU_COUNT.match(gpus)
    return int(m.group(1)) if m else None


def _single_gpu(parallelism: str) -> bool:
    return parallelism.startswith("single GPU") or re.match(r"TP=1\b(?!.*offload)", parallelism) is not None


def convert(r: dict, amendments: Sequence[dict] = ()) -> dict:
    """One TSV row → one JSON line (see the module docstring); `amendments`: the row's (load_amendments)."""
    method = _method(r)
    spread = _spread(r, amendments)
    status = r["status"].split()[0].lower().rstrip(":")
    out: dict = {"id": r["id"], "model": r["model_id"], "family": r["family"], "source": r["source"],
                 "trust": r["trust"], "workload": r["workload"], "status": status, "gpus": r["gpus"],
                 "framework": r["framework"], "notes": r["notes"] or None, "excluded": None}
    gb = GPU_GB.search(r["gpus"])
    out["gpu_memory_gb"] = int(gb.group(1)) if gb else None
    reasons = []
    if method is None:
        reasons.append(f"workload {r['workload']!r} is not a training step or a generate run")
    if spread is None:  # a spread the estimator can price (parallel) is compared per GPU, as memory.parallel does
        if not _single_gpu(r["parallelism"]):
            reasons.append(f"multi-GPU or offload ({r['parallelism']}): not one card's peak")
        if (_gpu_count(r["gpus"]) or 1) > 1:
            reasons.append(f"run on {r['gpus']}")
    if r["peak_unit"] == "GB-ambiguous":
        reasons.append("unit ambiguous (GB or GiB, +-7%)")
    if r["trust"] == "C":
        reasons.append("trust C (ambiguous or inconsistent in the source)")
    if status not in ("measured", "oom", "fits", "boundary"):
        reasons.append(f"status {r['status']!r}")
    if method not in (None, "inference") and _optimizer(r["optimizer"]) == "none":
        reasons.append("no optimizer step (a forward-and-backward benchmark loop, its loss logits.sum())")
    metric = _metric(r["metric"])
    if metric == "not_stated" and status == "measured":
        reasons.append("the measuring tool is not stated")
    config, config_source, vouch = _snapshot_config(r["model_id"])
    if config is None:
        reasons.append("no config.json for this model in snapshot/ (nor a vouched stand-in)")
    tokens = _int(r["seq_len"])
    seq_note = r["seq_note"].lower()
    inexact = any(k in seq_note for k in ("padded to longest", "dynamic padding", "not padded", "upper bound",
                                          "not stated", "untruncated"))
    if method not in ("inference",) and "longest sample" in seq_note:
        inexact = False  # LitGPT forces the longest sample first: the peak is at the stated length
    inexact = inexact or any(a.get("inexact") for a in amendments)
    new_tokens = 0
    if method == "inference":
        m = re.search(r"(\d+) new tokens|max_new_tokens=(\d+)|generate (\d+) tokens|(\d+) generated", r["seq_note"] + " " + r["seq_len"])
        new_tokens = next((int(g) for g in m.groups() if g), 0) if m else 0
        if "prefill" in r["workload"]:
            new_tokens = 0
        prompt = re.search(r"prompt (\d+)", r["seq_note"])
        total = re.match(r"~(\d+)$", r["seq_len"].strip())
        if prompt:
            tokens = int(prompt.group(1))  # optimum: seq_len is prompt + new tokens
        elif total and new_tokens:
            tokens = int(total.group(1)) - new_tokens  # LitGPT: "~56" = a short prompt + 50 new tokens
    if tokens is None or (inexact and status == "measured"):
        reasons.append(f"sequence length not exact ({r['seq_len']!r}; {r['seq_note'][:80]})")
    batch = _int(r["micro_batch"])
    if batch is None:
        reasons.append(f"micro batch not a number ({r['micro_batch']!r})")
    # gradient accumulation: stated with the sequence or in the notes ("GA 4")
    ga = re.search(r"(?:grad(?:ient)? accumulation|GA) (\d+)", f"{r['seq_note']} {r['notes']}", re.IGNORECASE)
    rank, targets = _lora(r["adapter"]) if method in ("lora", "qlora") else (None, None)
    setup = None
    if method is not None:
        setup = {"method": method, "precision": _precision(r, method), "batch": batch, "tokens": tokens,
                 "new_tokens": new_tokens, "lora_rank": rank, "lora_targets": targets,
                 "lora_dropout": 0.0, "optimizer": _optimizer(r["optimizer"]), "adamw_impl": "foreach",
                 "grad_ckpt": r["grad_ckpt"].startswith("on"), "attention": _attention(r["attention"]),
                 "steps": 2, "train_mode": True,
                 "weights": r["weights_dtype"], "grad_accum": int(ga.group(1)) if ga else 1,
                 "precision_as_published": r["compute"]}
        release = BNB_RELEASE.search(r["framework"])
        if method == "qlora" and release:  # before 0.43.2 MatMul4Bit saved its input: Job.bnb_version prices it
            setup["bnb_version"] = release.group(1)
        stack = TRANSFORMERS_RELEASE.search(f"{r['attention']} {r['framework']}")
        if method == "inference" and stack:
            setup["transformers_version"] = stack.group(1)
    for amendment in (a for a in amendments if "setup" in a):
        if setup is None:
            raise SystemExit(f"{r['id']}: setup: amended, but the row is not a training step or a generate run")
        setup.update(amendment["setup"])
    value = r["peak_gib"]
    peak = int(round(float(value) * 2**30)) if value and status == "measured" else None
    if r["peak_value"] and r["peak_unit"] in UNITS and status == "measured":
        peak = int(round(float(r["peak_value"]) * UNITS[r["peak_unit"]]))
    out.update({"setup": setup, "config": config, "config_source": config_source, "config_vouched": vouch,
                "measured": {"metric": metric, "metric_as_published": r["metric"], "status": status,
                             "peak_bytes": peak, "value": r["peak_value"] or None, "unit": r["peak_unit"] or None}})
    out["excluded"] = "; ".join(reasons) if reasons else None
    out["notes"] = "; ".join([n for n in [out["notes"]] + [a["notes"] for a in amendments if "notes" in a] if n]) or None
    causes = [a["cause"] for a in amendments if a.get("cause")]
    if causes:
        out["cause"] = "; ".join(causes)
    if spread is not None:
        out["parallel"] = spread
    return out


def _attention(text: str) -> str:
    t = text.lower()
    if "eager" in t:
        return "eager"
    if "flash" in t:
        return "flash_attention_2"
    if "sdpa" in t:
        return "sdpa"
    return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tsv", type=Path, default=DEFAULT_TSV)
    ap.add_argument("--amendments", type=Path, default=DEFAULT_AMENDMENTS)
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "measurements" / "public.jsonl")
    args = ap.parse_args()
    with open(args.tsv, encoding="utf-8", newline="") as fh:
        records = list(csv.DictReader(fh, delimiter="\t"))
    amendments = load_amendments(args.amendments)
    for row_id in sorted(set(amendments) - {r["id"] for r in records}):
        raise SystemExit(f"{args.amendments.name}: id {row_id!r}: no such row in {args.tsv.name}")
    rows = [convert(r, amendments.get(r["id"], ())) for r in records]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    kept = [r for r in rows if not r["excluded"]]
    print(f"{len(rows)} rows, {len(kept)} kept, {len(rows) - len(kept)} excluded -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
