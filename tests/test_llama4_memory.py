"""Llama 4's MoE runs every expert on every token (FINDINGS.md F42), and weight-less q/k norms save their fp32 input
(F43): CPU-simulated steps of Llama 4's and nanochat's class defaults hold the estimate to them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.accuracy_rows import estimate_bytes
from generator.errors import ConfigError
from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.activations import regime
from generator.estimator.memory.experts import every_expert_backward_terms
from generator.estimator.memory.job import EXPERTS_PHASE, job_memory
from generator.estimator.memory.job_options import Job
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

S = load_settings().assumptions
# Llama4TextConfig's shape, shrunk: 4 layers (the 4th NoPE), 8 experts top-1, a shared expert as wide as each
LLAMA4 = {"model_type": "llama4_text", "hidden_size": 512, "intermediate_size": 1024, "intermediate_size_mlp": 2048,
          "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 8,
          "num_experts_per_tok": 1, "num_hidden_layers": 4, "vocab_size": 8192, "max_position_embeddings": 8192}


def _rows(name: str) -> list[dict]:
    return [r for r in measured_rows("cpu-sim-extra") if r["model"].endswith(f"configs/{name}.json")]


def test_llama4_steps():
    """LoRA on q, k, v, o (checkpointed or not, AMP and pure bf16, 16 and 32 experts), full fine-tunes and a prefill,
    all within 1%; they read -6.0% to -30.9% when the MoE was priced as routed to its top-1 expert."""
    rows = _rows("llama4_text")
    assert len(rows) == 7
    for row in rows:
        error = estimate_bytes(row, S) / row["measured"]["peak_bytes"] - 1
        assert abs(error) < 0.01, (row["setup"], row["config_changes"], error)


def test_nanochat_steps():
    """nanochat's weight-less q/k norms (F43): LoRA and a full fine-tune within 1% (were -1.8% and -0.6%)."""
    rows = _rows("nanochat")
    assert len(rows) == 2
    for row in rows:
        assert abs(estimate_bytes(row, S) / row["measured"]["peak_bytes"] - 1) < 0.01, row["setup"]


def test_every_expert_part_terms():
    """Per token, frozen: 8 experts x (3 x 1,024 + 512) + the shared expert's 3 x 1,024 + the router's clone and
    sigmoid (8) and topk's int64 index (4 units); trained: 8 x (4 x 1,024 + 3 x 512) + 4 x 1,024 + the same. The
    part runs every expert (top_k 8) while its active parameters stay the top-1's."""
    a = normalise(LLAMA4, "m")
    moe = next(p for p in build_graph(a).spec.blocks[0].parts if p.type.startswith("MoE"))
    assert moe.frozen_act == 8 * (3 * 1024 + 512) + 3 * 1024 + 8 + 4
    assert moe.act == 8 * (4 * 1024 + 3 * 512) + 4 * 1024 + 8 + 4
    assert moe.top_k == 8
    assert moe.active_matmul_params == 512 * 8 + 3 * 512 * 1024 * 2  # the router, one expert, the shared expert
    rope, nope = (next(p for p in build_graph(a).spec.blocks[i].parts if p.attends) for i in (0, 3))
    assert rope.act32 - nope.act32 == (8 + 2) * (64 + 1)  # the L2 q/k norm on RoPE layers only


def test_the_every_expert_backward_is_a_lora_peak_and_only_llama4s():
    """With frozen experts the last MoE's backward (three experts x inter gradients beside every saved tensor) is
    the step's peak at a small vocabulary; a routed MoE (qwen3_moe) and one whose top-k is unknown and counted whole
    (DeepseekV2Config's default) have no such phase."""
    a = normalise({**LLAMA4, "vocab_size": 1024}, "m")
    mem = job_memory(a, build_graph(a), S, Job(method="lora", lora_targets="q_proj,v_proj", tokens=1024))
    assert mem.peak_phase == EXPERTS_PHASE
    frozen = regime("lora", "amp")
    assert every_expert_backward_terms(build_graph(a).spec.blocks[0], frozen) == (3 * 8 * 1024 * 2 + 2 * 512 * 2, 0)
    qwen = {"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 688, "moe_intermediate_size": 128,
            "num_experts": 8, "num_experts_per_tok": 2, "head_dim": 32, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096}
    deepseek = {"model_type": "deepseek_v2", "hidden_size": 256, "intermediate_size": 688,
                "moe_intermediate_size": 128, "n_routed_experts": 8, "num_hidden_layers": 2,
                "num_attention_heads": 8, "vocab_size": 1000, "kv_lora_rank": 64, "q_lora_rank": None,
                "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32, "first_k_dense_replace": 0}
    for cfg in (qwen, deepseek):
        b = build_graph(normalise(cfg, "m")).spec.blocks[-1]
        assert every_expert_backward_terms(b, frozen) == (0, 0), cfg["model_type"]


@settings(max_examples=15, deadline=None)
@given(experts=st.sampled_from([2, 4, 8, 16]), tokens=st.sampled_from([256, 1024]),
       method=st.sampled_from(["lora", "full"]))
def test_memory_grows_with_the_expert_count_not_the_active_parameters(experts, tokens, method):
    """Doubling the experts at top-1 adds every expert's tensors to each token: the peak rises, though the active
    parameters do not."""
    small, large = ({**LLAMA4, "num_local_experts": n} for n in (experts, 2 * experts))
    job = Job(method=method, lora_targets="q_proj,v_proj" if method == "lora" else "all-linear", tokens=tokens)
    peaks, active = [], []
    for cfg in (small, large):
        a = normalise(cfg, "m")
        g = build_graph(a)
        peaks.append(job_memory(a, g, Assumptions(), job).peak_bytes)
        active.append(sum(n * p.active_params for b, n in g.spec.distinct_layers for p in b.parts))
    assert peaks[1] > peaks[0]
    assert active[1] - active[0] == 4 * 512 * experts  # only the router grows: hidden x the added experts, 4 layers



def test_a_per_layer_top_k_that_routes_every_expert_serves_as_dense():
    """A per-layer top-k list (modeling_hunyuan_v1_moe.py reads one) whose largest entry is the expert count left
    serving's routed share to divide by 1 - k/E = 0 (found by a fuzz of Llama 4's configs): such a model reads
    every expert, so its decode reads the whole weights, and the estimate is a report, not a ZeroDivisionError."""
    from generator.estimator import estimate

    s = load_settings()
    cfg = {**LLAMA4, "num_experts_per_tok": [8, 1, 1, 1]}
    report = estimate(cfg, model_id="m", assumptions=s.assumptions, cards=s.cards, gpus=s.gpus)
    assert report.params.graph > 0 and report.serving


def test_the_page_says_transformers_computes_every_expert():
    """The memory prices transformers' every-expert MoE; the cost counts the routed experts' compute, as the
    frameworks that route run it. A finding says which (Llama 4 only: a routed MoE has none)."""
    from generator.estimator.checks import check_scope

    checks = {f.check for f in check_scope(normalise(LLAMA4, "m"), 2048, 2048)}
    assert "every_expert_compute" in checks
    qwen = {"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 688, "moe_intermediate_size": 128,
            "num_experts": 8, "num_experts_per_tok": 2, "head_dim": 32, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096}
    assert "every_expert_compute" not in {f.check for f in check_scope(normalise(qwen, "m"), 2048, 2048)}


def test_rope_layers_follow_the_config_and_refuse_a_short_list():
    """Which layers apply RoPE (every_expert_moe.rope_layers, read by Llama 4 and MistralLarge4): no_rope_layers
    where written, else a NoPE layer every no_rope_layer_interval-th; the L2 q/k norm runs on the RoPE layers only.
    A list shorter than the stack is one ConfigError naming the key (transformers would index past its end)."""
    def qk_layers(cfg):
        blocks = build_graph(normalise(cfg, "m")).spec.blocks
        return [next(p for p in b.parts if p.attends).act32 > 8 for b in blocks]  # beyond SDPA's statistics

    assert qk_layers(LLAMA4) == [True, True, True, False]
    assert qk_layers({**LLAMA4, "no_rope_layer_interval": 2}) == [True, False, True, False]
    assert qk_layers({**LLAMA4, "no_rope_layers": [0, 1, 1, 1]}) == [False, True, True, True]
    with pytest.raises(ConfigError, match="no_rope_layers"):
        normalise({**LLAMA4, "no_rope_layers": [1]}, "m")
