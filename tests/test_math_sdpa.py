"""SDPA's math kernel (at::_scaled_dot_product_attention_math): where torch cannot run a fused kernel it casts q, k
and v to fp32 and keeps the scores, like eager attention but in fp32. On every device that is falcon's multi-query
attention (one K/V head for 71 query heads, no enable_gqa); on the CPU (the simulation) also attention dropout,
multi-head latent attention's unequal q/k and v head dims and a mask that needs a gradient, which CUDA's
memory-efficient kernel takes. Reference
values: CPU-simulated steps of transformers' class-default configs (data/measurements/cpu-sim-extra.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import regime
from generator.estimator.memory.attention import attention_dropout
from generator.estimator.memory.math_sdpa import math_backward_bytes, math_layer_terms, math_scores_bytes, math_sdpa
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements"


def _config(name: str, **changes) -> dict:
    cfg = json.loads((DATA / "configs" / f"{name}.json").read_text(encoding="utf-8"))
    return {**cfg, **changes}


def _model(name: str, **changes):
    arch = normalise(_config(name, **changes), name)
    return arch, build_graph(arch)


def test_where_torch_runs_the_math_kernel():
    falcon, _ = _model("falcon")  # multi_query, no new_decoder_architecture: 71 query heads, one K/V head
    assert math_sdpa(falcon, cpu=False, training=True) and math_sdpa(falcon, cpu=False, training=False)
    grouped, _ = _model("falcon", new_decoder_architecture=True, num_kv_heads=71)  # K/V broadcast to every head
    assert not math_sdpa(grouped, cpu=False, training=True)
    mla, _ = _model("deepseek_v3")  # q/k 192, v 128
    assert not math_sdpa(mla, cpu=False, training=True) and math_sdpa(mla, cpu=True, training=False)
    dropout, _ = _model("seed_oss")  # attention_dropout 0.1
    assert attention_dropout(dropout) == pytest.approx(0.1)
    assert math_sdpa(dropout, cpu=True, training=True) and not math_sdpa(dropout, cpu=True, training=False)
    assert not math_sdpa(dropout, cpu=False, training=True)
    assert attention_dropout(falcon) == 0.0  # its SDPA call passes dropout_p=0.0 without alibi
    assert not math_sdpa(_model("seed_oss", attention_dropout=0.0)[0], cpu=True, training=True)


def test_a_mask_made_from_the_layers_values_takes_the_math_kernel_on_the_cpu():
    """torch 2.13's CPU SDPA runs _scaled_dot_product_attention_math for a mask that requires grad (its profile,
    FINDINGS.md F101). Doge's dynamic mask is exp(A x softplus(dt_proj(values))): a training step's needs one, so the
    CPU keeps fp32 scores; serving, and CUDA's memory-efficient kernel, do not. Its simulated step (2 layers, 1,024
    tokens, LoRA) read -10.0% priced with the flash kernel's terms."""
    cfg = json.loads((DATA / "configs" / "families" / "doge.json").read_text(encoding="utf-8"))
    doge = normalise({**cfg, "num_hidden_layers": 2}, "doge")
    assert math_sdpa(doge, cpu=True, training=True) and not math_sdpa(doge, cpu=True, training=False)
    assert not math_sdpa(doge, cpu=False, training=True)
    s = load_settings().assumptions
    rows = [r for r in measured_rows("cpu-sim-families") if r["model_type"] == "doge"]
    assert len(rows) == 2 and all(abs(estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1) < 0.01 for r in rows)


def test_falcon_layer_terms_by_hand():
    """Per token of one layer, LoRA under AMP (compute bf16, frozen base): math keeps fp32 q x scale (71 x 64),
    K^T x scale and V of the one K/V head (64 each); the fused kernel kept bf16 q, k, v and its output and an fp32
    logsumexp per head; the squared term is the fp32 softmax per head."""
    arch, g = _model("falcon")
    r = regime("lora", "amp")
    block = g.spec.blocks[0]
    math = 4 * (71 * 64 + 1 * (64 + 64))
    fused = 2 * (71 * 64 + 1 * (64 + 64) + 71 * 64) + 4 * 71
    assert math_layer_terms(arch, block, r) == (math - fused, 71 * 4)
    saved, grads = math_backward_bytes(arch, g, r, 1024)
    assert saved == 1024 * math + 1024 * 1024 * 71 * 4 and grads == 8 * 71 * 1024 * 1024
    assert math_backward_bytes(arch, g, r, 1024, "eager") == (0, 0)
    # serving: scores and masked scores (8 B), the [T, T] fp32 mask, fp32 q, q x scale, k, v
    assert math_scores_bytes(arch, g, 1024, cpu=False) == 71 * 1024 * 1024 * 8 + 4 * 1024 * 1024 \
        + 4 * 1024 * (2 * 71 * 64 + 64 + 64)
    assert math_scores_bytes(_model("falcon", new_decoder_architecture=True, num_kv_heads=71)[0], g, 1024,
                             cpu=False) == 0


def test_the_kernel_only_adds_memory():
    """Same model, same job: the math kernel's estimate is never below the fused kernel's (the dropout-free
    config runs fused), and the gap grows with the tokens (scores: heads x T x T)."""
    s = load_settings().assumptions
    gaps = []
    for tokens in (512, 1024, 2048):
        job = Job(method="lora", tokens=tokens, kernels="cpu")
        math = job_memory(*_model("seed_oss", num_hidden_layers=2), s, job).peak_bytes
        fused = job_memory(*_model("seed_oss", num_hidden_layers=2, attention_dropout=0.0), s, job).peak_bytes
        gaps.append(math - fused)
    assert 0 < gaps[0] < gaps[1] < gaps[2]


def _extra_rows(config_names: set[str]) -> list[dict]:
    rows = measured_rows("cpu-sim-extra")
    return [r for r in rows if Path(r["model"]).stem in config_names and r["measured"]["status"] == "ok"]


def test_math_kernel_runs_are_priced_within_five_percent():
    """The CPU-simulated steps of falcon, DeepSeek-V3, MiniCPM3, Seed-OSS and gpt_bigcode (LoRA, checkpointed
    LoRA, full fine-tunes, a prefill) were 10-37% under before the math kernel was priced."""
    s = load_settings().assumptions
    rows = _extra_rows({"falcon", "deepseek_v3", "minicpm3", "seed_oss", "gpt_bigcode"})
    assert len(rows) >= 10
    for row in rows:
        estimate = estimate_bytes(row, s)  # the row-to-job mapping /accuracy/ uses
        assert estimate is not None, row["setup"]
        measured = row["measured"]["peak_bytes"]
        assert abs(estimate - measured) / measured < 0.05, (row["model"], row["setup"], estimate, measured)
