#!/usr/bin/env python3
"""The family sweep behind data/measurements/cpu-sim-families.jsonl: CPU-simulated LoRA steps of the class-default
config of every decoder model type below, none of which the other measured files use, so each row is an
out-of-sample check of the estimator on a family it was never read off (FINDINGS.md F15).

    nice .venv/bin/python tools/sweep_families.py          # ~15 min on 2 cores
    .venv/bin/python tools/sweep_families.py --list

Per model type: transformers' class-default config (`CONFIG_MAPPING[type]()`, written to
data/measurements/configs/families/), shrunk to its first layers (`--max-layers`: 2, or 4 for hybrids whose first
attention layer comes later), then LoRA r=16 on all Linears under AMP at 1,024 tokens, and with gradient
checkpointing at 2,048 tokens. Eager attention where the model's class has no SDPA (the estimator's own table,
sdpa_table.NO_SDPA), as transformers runs it. Every run is `neurarch-trace measure CONFIG --device cpu ...`
(tools/sweep_cpu.py's loop).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from sweep_cpu import sweep_main  # noqa: E402
from transformers import CONFIG_MAPPING  # noqa: E402

from generator.estimator.memory.sdpa_table import NO_SDPA  # noqa: E402

CONFIGS = ROOT / "data" / "measurements" / "configs" / "families"

# Model types that run in the harness from their class defaults, by the layers kept.
TWO_LAYERS = (
    "afmoe", "apertus1p5_text", "axk1", "bitnet", "codegen", "cohere2", "cwm", "doge", "ernie4_5", "ernie4_5_moe",
    "exaone", "exaone4", "flex_olmo", "flint", "glm", "glm4", "glm4_moe", "glm4_moe_lite", "gpt_oss", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoeshared", "helium", "hy_v3", "internlm3",
    "iquestcoder", "jais2", "kolibri1", "lara_mini", "lfm2", "minimax", "minimax_m2", "ministral3",
    "modernbert-decoder", "mpt", "nanochat", "olmo", "olmo3", "olmoe", "persimmon", "phi", "qwen2_moe",
    "sarvam_mla", "sarvam_moe", "smollm3", "solar_open", "vaultgemma", "youtu", "zaya",
)
FOUR_LAYERS = (  # a layer_types pattern whose first full attention layer is among the first four
    "axk2", "beam", "deepseek_v32", "exaone_moe", "glm_moe_dsa", "inkling_text", "laguna", "lfm3", "mellum",
    "minimax_m3_vl_text", "olmo_hybrid", "qwen3_5_moe_text", "qwen3_5_text", "qwen3_next", "recurrent_gemma",
)
RUNS = (["--method", "lora", "--tokens", "1024"], ["--method", "lora", "--tokens", "2048", "--grad-ckpt"])


def _finite(value):
    """transformers' to_json_string writes an infinite float (mamba2's time_step_limit) as
    {'__float__': 'Infinity'}, which its own config classes then refuse: written as 1e30, a float they take."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return 1e30 if math.isinf(float(value["__float__"])) else float(value["__float__"])
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_config(model_type: str) -> Path:
    """transformers' class-default config of `model_type` (the pinned release), as data/measurements/configs'
    other files are written."""
    path = CONFIGS / f"{model_type}.json"
    data = _finite(json.loads(CONFIG_MAPPING[model_type]().to_json_string(use_diff=False)))
    CONFIGS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def plan(only: str | None = None) -> list[tuple[str, int | None, list[str]]]:
    out = []
    for layers, types in ((2, TWO_LAYERS), (4, FOUR_LAYERS)):
        for model_type in types:
            if only and only not in model_type:
                continue
            model = str((CONFIGS / f"{model_type}.json").relative_to(ROOT))
            eager = ["--attention", "eager"] if model_type in NO_SDPA else []
            out += [(model, layers, [*run, *eager]) for run in RUNS]
    return out


def _write_configs(runs: list[tuple[str, int | None, list[str]]]) -> None:
    os.chdir(ROOT)  # the rows name their configs relative to the repository
    for model_type in sorted({Path(m).stem for m, _, _ in runs}):
        write_config(model_type)


def main() -> int:
    return sweep_main(__doc__ or "", ROOT / "data" / "measurements" / "cpu-sim-families.jsonl", plan,
                      "run only model types containing this text", _write_configs)

if __name__ == "__main__":
    raise SystemExit(main())
