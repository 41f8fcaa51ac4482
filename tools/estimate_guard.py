#!/usr/bin/env python3
"""The estimate guard: a hash of `estimate()`'s whole Report for every snapshot config and every transformers class.

    .venv/bin/python tools/estimate_guard.py           # compare with tests/guard/estimates.json, list changes
    .venv/bin/python tools/estimate_guard.py --write   # rewrite it (after reviewing the changes listed)

Inputs: each committed snapshot record, and each model_type of the installed transformers (CONFIG_MAPPING) in two
forms, its class defaults (`to_dict()`) and its sparse form (`to_diff_dict()`), built as the oracle tests build
them (tests/test_oracle_support.config_forms); then every named recipe on RECIPE_MODELS at two lengths, so that a
recipe's fields are guarded as the default job is. Each case keeps a SHA-256 of the Report's JSON (less
`estimator_version`) plus its headline figures, so that a change says which number moved and by how much; an
input the estimator refuses keeps its error class and message. A restructuring that must not change numbers is
proven by an empty diff; one that should is reviewed case by case from this script's listing.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from generator.errors import TraceError  # noqa: E402
from generator.estimator import estimate  # noqa: E402
from generator.estimator.memory.job_options import Job  # noqa: E402
from generator.estimator.memory.recipes import RECIPES  # noqa: E402
from generator.settings import load_settings  # noqa: E402
from tests.conftest import snapshot_configs  # noqa: E402

GUARD = ROOT / "tests" / "guard" / "estimates.json"
# The headline figures kept in the clear beside each hash (dotted paths into Report.to_dict()).
FIGURES = ("params.graph", "params.active", "memory.train_full_bytes_batch1", "memory.train_lora_bytes_batch1",
           "memory.serve_bytes_batch1", "memory.peak_bytes", "memory.peak_phase", "model.approximate_reason")
# Recipe cases: a dense GQA decoder, a tied small one and a MoE, each recipe at a short and a long length.
RECIPE_MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-30B-A3B")
RECIPE_TOKENS = (2048, 16384)


def _dig(d: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        d = d.get(key) if isinstance(d, dict) else None  # type: ignore[assignment]
    return d


def case_inputs() -> dict[str, dict[str, Any]]:
    """case id -> config dict: the snapshot, then every transformers config class (defaults, sparse)."""
    cases: dict[str, dict[str, Any]] = {f"snapshot/{mid}": cfg for mid, cfg, _ in snapshot_configs()}
    try:
        from transformers import CONFIG_MAPPING
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

        from tests.test_oracle_support import config_forms, quiet
    except ImportError:
        return cases
    quiet()
    for model_type in sorted(CONFIG_MAPPING.keys()):
        for form, cfg in config_forms(model_type, CAUSAL.get(model_type)).items():
            if isinstance(cfg, dict):
                cases[f"transformers/{model_type}/{form}"] = json.loads(json.dumps(cfg, default=repr))
    return cases


def recipe_cases(configs: dict[str, dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Job]]:
    """case id -> (config, job): each recipe on each of RECIPE_MODELS found in the snapshot, at RECIPE_TOKENS."""
    return {f"recipe/{name}/{mid}/{tokens}": (configs[f"snapshot/{mid}"], Job.from_options(name, tokens=tokens))
            for name in sorted(RECIPES) for mid in RECIPE_MODELS if f"snapshot/{mid}" in configs
            for tokens in RECIPE_TOKENS}


def outcome(case: str, cfg: dict[str, Any], settings: Any, job: Job | None = None) -> dict[str, Any]:
    try:
        report = estimate(cfg, model_id=case, assumptions=settings.assumptions, cards=settings.cards,
                          gpus=settings.gpus, job=job)
    except TraceError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    d = report.to_dict()
    d.pop("estimator_version", None)
    return {"sha256": _hash(d), "sections": {k: _hash(v) for k, v in sorted(d.items())},
            **{p: _dig(d, p) for p in FIGURES}}


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def current() -> dict[str, dict[str, Any]]:
    settings = load_settings()
    inputs = case_inputs()
    out = {case: outcome(case, cfg, settings) for case, cfg in inputs.items()}
    out.update({case: outcome(case, cfg, settings, job) for case, (cfg, job) in recipe_cases(inputs).items()})
    return out


def differences(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """One line per case whose outcome changed: the figures that moved (old -> new), or 'hash only'."""
    out = []
    for case in sorted(set(old) | set(new)):
        a, b = old.get(case), new.get(case)
        if a == b:
            continue
        if a is None or b is None:
            out.append(f"{case}: {'added' if a is None else 'removed'}")
            continue
        moved = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
                 if k not in ("sha256", "sections") and a.get(k) != b.get(k)]
        sa, sb = a.get("sections") or {}, b.get("sections") or {}
        sections = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
        where = f" [{', '.join(sections)} changed]" if sections else ""
        out.append(f"{case}: {'; '.join(moved) if moved else 'no headline figure moved'}{where}")
    return out


def main(argv: list[str]) -> int:
    new = current()
    if "--write" in argv:
        GUARD.parent.mkdir(parents=True, exist_ok=True)
        GUARD.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {GUARD.relative_to(ROOT)}: {len(new)} cases", file=sys.stderr)
        return 0
    old = json.loads(GUARD.read_text(encoding="utf-8"))
    diff = differences(old, new)
    print("\n".join(diff) or f"no change in {len(new)} cases")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
