"""The score matrices an attention part makes are counted by its query heads (Part.heads), apart from act32, the
fp32 elements it saves: Gemma 4's and Gemma-3n's head norms, Llama 4's q/k norms and Inkling's tensors keep fp32
elements beside the heads' logsumexp, and were counted as heads by the eager, math-SDPA and masked-SDPA terms
(FINDINGS.md F96: Gemma 4's LoRA under eager attention read 6,827 GB at 2,048 tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.accuracy_rows import estimate_bytes
from generator.estimator.memory.activations import block_activation_bytes, regime
from generator.estimator.memory.attention import eager_layer_terms, score_bytes
from generator.estimator.memory.layer_terms import layer_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs"


def _configs() -> list[Path]:
    return sorted(CONFIGS.rglob("*.json"))


@pytest.mark.parametrize("path", _configs(), ids=lambda p: p.stem)
def test_every_attention_part_carries_its_score_heads(path: Path) -> None:
    """Eager, math-SDPA and masked-SDPA terms count score matrices by Part.heads; act32 may hold a family's fp32
    tensors besides the heads' logsumexp (Gemma 4's and Gemma-3n's head norms, Llama 4's q/k norms, Inkling's),
    so it is not a head count. Every attending part says its heads, at most act32."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    try:
        a = normalise(cfg, path.stem)
    except Exception as exc:  # noqa: BLE001 - a config the estimator refuses has no parts to check
        pytest.skip(f"refused: {exc}")
    parts = [p for b in a.spec.blocks for p in b.parts if p.attends and p.type != "Merged Cross Attn"]
    assert all(0 < p.heads <= p.act32 for p in parts), [(p.name, p.heads, p.act32) for p in parts if not p.heads]


def test_gemma4_eager_scores_count_its_heads() -> None:
    """Gemma 4 under eager attention read 6,827 GB for a LoRA at 2,048 tokens (its head norms' fp32 elements
    counted as heads); its scores now count its 16 heads."""
    a = normalise(json.loads((CONFIGS / "gemma4_text.json").read_text()), "g4")
    r = regime("lora", "amp")
    b = a.spec.blocks[0]
    heads = next(p.heads for p in b.parts if p.attends)
    assert heads == a.heads and eager_layer_terms(a, b, 2, False, r)[1] == heads * score_bytes(a, 2, r)
    assert layer_bytes(a, b, r, "eager", 2048, False, False, block_activation_bytes(a, b, r)) < 100 * 2 ** 20



SIMULATED = ("gemma4_text", "mistral4", "muse_spark", "muse_glimmer", "unlimited_ocr", "ernie4_5_vl_moe")


def test_the_simulated_steps() -> None:
    """Gemma 4's text stack under eager attention, LoRA at 1,024 tokens, within 1%; and the types F96's sweep added,
    none of which a run had covered (mistral4, built as transformers registers it, among image-text-to-text models;
    four vision-language checkpoints fed text), within 1.5%."""
    s = load_settings().assumptions
    errors: dict[str, list[float]] = {}
    for r in measured_rows("cpu-sim-extra"):
        if r["model_type"] in SIMULATED and (r["model_type"] != "gemma4_text" or r["setup"]["attention"] == "eager"):
            errors.setdefault(r["model_type"], []).append(estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1)
    assert set(errors) == set(SIMULATED), errors
    assert all(abs(e) < 0.015 for es in errors.values() for e in es) and abs(errors["gemma4_text"][0]) < 0.01, errors
