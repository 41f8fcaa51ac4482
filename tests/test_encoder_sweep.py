"""The encoder sweep (data/measurements/cpu-sim-encoders.jsonl, FINDINGS.md F99): LoRA on every masked-LM model type
no other file used, CPU-simulated from its class default. The misses are named, each with its cause, so that a fix
shows here."""

from __future__ import annotations

from pathlib import Path

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.attention import AUTOCAST_SOFTMAX
from generator.estimator.memory.lora import lora_params
from generator.estimator.memory.trained_weights import CONCATENATED_HEAD
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs" / "encoders"
# model type -> (lowest, highest) error; the cause in FINDINGS.md F99
NAMED = {"funnel": (0.30, 0.36),  # every layer priced at the full length; pooling halves it between blocks
         "squeezebert": (0.20, 0.28),  # no adapter in a layer: autograd records nothing in the stack
         "mra": (0.08, 0.14), "yoso": (0.03, 0.08)}  # approximate attention's own kernels, priced as eager


def _errors() -> dict[str, float]:
    s = load_settings().assumptions
    return {r["model_type"]: estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1
            for r in measured_rows("cpu-sim-encoders")}


def test_the_sweep_is_every_type_it_names() -> None:
    rows = measured_rows("cpu-sim-encoders")
    assert len(rows) == 32 == len({r["model_type"] for r in rows}) == len(list(CONFIGS.glob("*.json")))
    assert all(r["setup"]["method"] == "lora" and r["setup"]["tokens"] == 512 for r in rows)


def test_the_encoders_meet_the_floor_but_the_named_misses() -> None:
    """Every type not named within 3%; the named ones where their cause puts them."""
    errors = _errors()
    assert all(abs(e) < 0.03 for t, e in errors.items() if t not in NAMED), errors
    assert all(lo <= errors[t] <= hi for t, (lo, hi) in NAMED.items()), {t: errors[t] for t in NAMED}


def test_mvp_keeps_its_softmax_in_the_dtype_autocast_leaves() -> None:
    """MvpAttention's softmax names no dtype (modeling_mvp.py): +25% when priced as fp32 with a cast."""
    assert "mvp" in AUTOCAST_SOFTMAX and abs(_errors()["mvp"]) < 0.03


def test_mobilebert_saves_its_concatenated_head_weight() -> None:
    """MobileBertLMPredictionHead multiplies by torch.cat of its decoder's and dense weights, hidden x vocab, which
    the matmul saves (-11.8% when priced nowhere)."""
    assert "mobilebert" in CONCATENATED_HEAD and abs(_errors()["mobilebert"]) < 0.03


def test_squeezebert_convolutions_take_no_adapters() -> None:
    """peft's all-linear wraps nn.Linear and Conv1D, not SqueezeBERT's nn.Conv1d projections: the simulated step
    trains 49,152 weights at r 16, the pooler's and the MLM head transform's (two 768 x 768 Linears), which the
    estimate leaves out as for every encoder head; none in the layers (442,368 were priced there)."""
    row = next(r for r in measured_rows("cpu-sim-encoders") if r["model_type"] == "squeezebert")
    a = normalise(row["config"], "squeezebert")
    assert row["params"]["trainable"] == 2 * (768 * 16 + 16 * 768)
    assert lora_params(build_graph(a), a, 16) == 0
