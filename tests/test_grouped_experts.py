"""Routed experts transformers runs through grouped_mm (config/transformers_defaults.GROUPED_MM_EXPERTS): grouped_mm
is no autocast op, so integrations/moe.py casts the input to the experts' dtype. Under AMP a full fine-tune's fp32
experts keep their tensors in fp32 and autocast caches no bf16 copy of their weights (FINDINGS.md F98: OLMoE's full
fine-tune at 4,096 tokens read -9.8% against its simulation)."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import CONFIG_MAPPING

from generator.accuracy_rows import estimate_bytes
from generator.estimator.config.transformers_defaults import GROUPED_MM_EXPERTS, TENSOR_EXPERTS
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import regime
from generator.estimator.memory.experts import (
    cast_active_matmul,
    cast_matmul,
    grouped,
    grouped_dtype_bytes,
    routed_transient_bytes,
)
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.recurrence import mixer_tail, scan_backward_terms
from generator.estimator.memory.trained_weights import trained_weights
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs"


def _olmoe():
    a = normalise(json.loads((CONFIGS / "families" / "olmoe.json").read_text()), "olmoe")
    return a, build_graph(a)


def test_the_grouped_types_are_the_decorated_ones() -> None:
    """Every grouped type holds its experts as tensors; Llama 4 (bmm over every expert: autocast caches its copies)
    and DBRX (its own loop) hold tensors but are not grouped. Sarvam's two types have no modeling file of their own:
    the auto mappings build DeepseekV3ForCausalLM and Glm4MoeForCausalLM, both grouped."""
    assert GROUPED_MM_EXPERTS <= TENSOR_EXPERTS
    assert {"olmoe", "qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss", "gemma4_text"} <= GROUPED_MM_EXPERTS
    assert {"sarvam_mla", "sarvam_moe"} <= GROUPED_MM_EXPERTS
    assert not {"llama4_text", "dbrx", "jetmoe"} & GROUPED_MM_EXPERTS
    llama4 = normalise(CONFIG_MAPPING["llama4_text"]().to_dict(), "l4")
    assert not any(grouped(llama4, p) for b in llama4.spec.blocks for p in b.parts)


def test_a_full_fine_tune_keeps_its_grouped_experts_tensors_in_fp32() -> None:
    """Per routed token: the gathered input, the gate-up output (two inter-wide halves), the activation's output,
    the down projection's input and the weighted output, at 4 bytes where the compute dtype takes 2; nothing more
    for frozen experts (LoRA) or pure bf16."""
    a, _ = _olmoe()
    b = a.spec.blocks[0]
    moe = next(p for p in b.parts if p.top_k)
    (_, hidden, inter), k = moe.mats[0], moe.top_k
    assert grouped_dtype_bytes(a, b, regime("full", "amp")) == 2 * k * (4 * inter + 2 * hidden)
    assert grouped_dtype_bytes(a, b, regime("lora", "amp")) == 0
    assert grouped_dtype_bytes(a, b, regime("full", "bf16")) == 0


def test_prepare_model_for_kbit_trainings_upcast_is_priced_once() -> None:
    """Frozen experts upcast by prepare_model_for_kbit_training are priced by layer_bytes' upcast term (F59),
    whatever the quantised storage; an fp32 base's (no upcast) by the grouped term."""
    a, _ = _olmoe()
    b = a.spec.blocks[0]
    upcast = regime("lora", "amp", upcast=True)
    assert grouped_dtype_bytes(a, b, upcast._replace(kbit_upcast=True)) == 0
    assert grouped_dtype_bytes(a, b, upcast) > 0


def test_a_shared_pass_casts_no_grouped_expert() -> None:
    """Inkling-2-Loop's later passes hold no weights; on an fp32 base each casts what it runs, not its experts."""
    a = normalise(CONFIG_MAPPING["inkling2_loop_text"]().to_dict(), "loop")
    first, later = a.spec.blocks[6], a.spec.blocks[18]
    assert later.matmul == 0 and cast_matmul(a, first) == cast_active_matmul(a, later) + sum(
        p.matmul for p in first.parts if p.type == "Message gates") - sum(
        p.active_matmul for p in later.parts if p.type == "Message gates")


def test_a_trained_experts_backward_holds_three_routed_rows() -> None:
    """At the gathered rows' gradient: the reordered output's gradient and the input's scattered gradient (zeros,
    index_put), k x hidden each in the experts' dtype; two at the forward's end (the gathered input is saved)."""
    a, _ = _olmoe()
    b = a.spec.blocks[0]
    moe = next(p for p in b.parts if p.top_k)
    k, hidden = moe.top_k, moe.mats[0][1]
    r = regime("full", "amp")
    assert routed_transient_bytes(b, r, None) == 3 * k * hidden * 4
    assert routed_transient_bytes(b, r, None, backward=False) == 2 * k * hidden * 4


def test_autocast_copies_no_grouped_expert_weight() -> None:
    """A full fine-tune under AMP copies every Linear's weight to bf16 (F2) but the grouped experts'; checkpointed,
    the recomputed layer's copies are its attention's and router's."""
    a, g = _olmoe()
    b = a.spec.blocks[0]
    experts = sum(c * i * o for p in b.parts for c, i, o in p.expert_mats)
    assert experts and cast_matmul(a, b) == b.matmul - experts
    w = trained_weights(a, g, Job(method="full"), regime("full", "amp"), "olmoe", 0)
    assert w.copies == 2 * (g.params_matmul - len(a.spec.blocks) * experts)
    assert w.ckpt_copies[1] == 2 * cast_matmul(a, b)


def test_a_mixers_scan_backward_frees_no_expert_copy() -> None:
    """Jamba's torch scan backward runs after the parts behind its mixer, whose autocast copies it frees: a grouped
    MoE's experts have none to free (recurrence.scan_backward_terms)."""
    a = normalise(json.loads((CONFIGS / "jamba.json").read_text()), "jamba")
    b = next(b for b in a.spec.blocks if any(p.top_k for p in b.parts) and any(p.scan for p in b.parts))
    tail = mixer_tail(b)
    experts = sum(c * i * o for p in tail.parts for c, i, o in p.expert_mats)
    mixer = next(p for p in b.parts if p.scan)
    assert experts and scan_backward_terms(a, b)[2] == tail.matmul - experts + mixer.linears[-1][0] * mixer.linears[-1][1]


def test_the_simulated_steps() -> None:
    """Full fine-tunes with fewer experts, so that the activations make the peak: OLMoE (checkpointed and not) and
    Qwen1.5-MoE (its shared expert and gate) at 4,096 tokens and Inkling-2-Loop at 2,048 within 0.5%; OLMoE's LoRA
    on an fp32 base, its expert tensors adapted, within 0.5% (-17.6% before); DeepSeek-V3 within 3%, whose peak is
    the CPU's math-kernel attention backward (+2.3% before this term too); the QLoRA rows with
    prepare_model_for_kbit_training, whose frozen upcast experts layer_terms.layer_bytes prices (F59), within 1%."""
    s = load_settings().assumptions
    full, kbit, fp32 = [], [], []
    for r in measured_rows("cpu-sim-extra"):
        a = normalise(r["config"], r["model"])
        if not any(grouped(a, p) for b in a.spec.blocks for p in b.parts):
            continue
        error = estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1
        changed = set(r["config_changes"] or ())
        if r["setup"]["method"] == "full" and r["setup"]["precision"] == "amp" and changed & {"num_experts",
                                                                                             "n_routed_experts"}:
            full.append((r["model_type"], error))
        elif r["setup"]["method"] == "qlora" and r["setup"].get("upcast_fp32"):
            kbit.append(error)
        elif r["setup"]["method"] == "lora" and r["setup"]["weights"] == "fp32" and changed:
            fp32.append(error)
    # (DeepSeek-V4's with 8 experts is F103's, test_layer_streams: its peak is the optimizer step's)
    assert sorted(t for t, _ in full) == ["deepseek_v3", "deepseek_v4", "inkling2_loop_text", "olmoe", "olmoe",
                                          "qwen2_moe"], full
    assert all(abs(e) < (0.03 if t == "deepseek_v3" else 0.005) for t, e in full), full
    assert len(kbit) >= 10 and all(abs(e) < 0.01 for e in kbit), kbit
    assert len(fp32) == 1 and abs(fp32[0]) < 0.005, fp32


def test_hunyuans_one_expert_default_is_the_miss() -> None:
    """hunyuan_v1_moe's class default routes over a single expert, whose two expert deltas are live at the forward's
    peak (-7.1%, left: pricing them put every MoE row with several experts over). With 8 experts (top 2) and 16
    (top 4), as its checkpoints have many, LoRA at two layers is within 0.5% (FINDINGS.md F103's note)."""
    s = load_settings().assumptions
    errors = {r["config"]["num_experts"]: estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1
              for r in measured_rows("cpu-sim-extra") if r["model_type"] == "hunyuan_v1_moe"}
    assert sorted(errors) == [1, 8, 16]
    assert -0.08 < errors[1] < -0.06 and abs(errors[8]) < 0.005 and abs(errors[16]) < 0.005, errors
