"""fsdp+ep (estimator.memory.parallel): FSDP with a mixture of experts' routed experts spread over each node of 8, as
torchtitan builds it. Worked by hand on a toy MoE job, refused by name where it cannot run, never above plain FSDP,
and tried by the site's plan search only for models whose experts divide over a node."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.parallel import ParallelError, Phase, Setup, SingleGpuJob, per_gpu
from generator.estimator.memory.sharding import EXPERT_PARALLEL
from generator.estimator.normalise import normalise
from generator.estimator.setups import model_shape
from generator.settings import load_settings
from tests.conftest import snapshot_configs

P, UNIT, EXPERTS_IN_UNIT, EMBED, HEAD = 10**11, 4 * 10**9, 3_600_000_000, 10**9, 10**9


def _job(experts: int = 64, unit_experts: int = EXPERTS_IN_UNIT, method: str = "full") -> SingleGpuJob:
    backward = Phase("backward", weights=2 * P, gradients=2 * P, optimizer_state=4 * P, activations=10**10)
    return SingleGpuJob(method, (backward,), P, P, 2, 2, 2, 25, UNIT, EMBED, HEAD, 0, 0, 32, 8,
                        phases_ckpt=(backward,), unit_expert_params=unit_experts, experts=experts)


def test_a_gathered_unit_holds_an_eighth_of_its_experts():
    """FSDP on 16 GPUs: W, G, O / 16, plus two gathered units (computed, prefetched), the root, and one unit's
    gradient for its reduce-scatter, in bf16. fsdp+ep gathers the unit's 0.4 B other params and 3.6 B / 8 of its
    experts instead of all 4 B."""
    fsdp = dict(per_gpu(_job(), Setup("fsdp", 16, True)).breakdown)
    ep = dict(per_gpu(_job(), Setup("fsdp+ep", 16, True)).breakdown)
    unit_ep = UNIT - EXPERTS_IN_UNIT + EXPERTS_IN_UNIT // EXPERT_PARALLEL  # 850,000,000
    assert fsdp["weights"] == 2 * P // 16 + 2 * (2 * UNIT + EMBED + HEAD)
    assert ep["weights"] == 2 * P // 16 + 2 * (2 * unit_ep + EMBED + HEAD)
    assert (fsdp["gradients"], ep["gradients"]) == (2 * P // 16 + 2 * UNIT, 2 * P // 16 + 2 * unit_ep)
    assert ep["optimizer_state"] == fsdp["optimizer_state"] == 4 * P // 16
    assert ep["activations"] == fsdp["activations"] == 10**10  # each rank runs its own micro-batch's tokens


def test_a_rank_keeps_only_its_own_experts_effective_weights():
    """LoRA on fused expert tensors keeps each adapted tensor's effective weight per layer (FINDINGS.md F10), a
    per-expert tensor: under expert parallelism a rank builds them for its own eighth of the experts only."""
    per_expert = 8 * 10**9
    phase = Phase("backward (recomputing a checkpointed layer)", weights=2 * P, activations=10**10 + per_expert,
                  expert_activations=per_expert)
    job = SingleGpuJob("lora", (phase,), P, 10**8, 2, 4, 4, 25, UNIT, EMBED, HEAD, 0, 0, 32, 8,
                       phases_ckpt=(phase,), unit_expert_params=EXPERTS_IN_UNIT, experts=64)
    fsdp = dict(per_gpu(job, Setup("fsdp", 16, True)).breakdown)["activations"]
    ep = dict(per_gpu(job, Setup("fsdp+ep", 16, True)).breakdown)["activations"]
    assert (fsdp, ep) == (10**10 + per_expert, 10**10 + per_expert // EXPERT_PARALLEL)


@pytest.mark.parametrize("job, setup, key, value, why", [
    (_job(experts=0, unit_experts=0), Setup("fsdp+ep", 16, True), "strategy", "fsdp+ep",
     "spreads routed experts over 8 GPUs; this model has no routed experts"),
    (_job(experts=60), Setup("fsdp+ep", 16, True), "strategy", "fsdp+ep",
     "spreads routed experts over 8 GPUs; this model has 60 routed experts"),
    (_job(), Setup("fsdp+ep", 12, True), "gpus", 12, "fsdp+ep spans whole nodes of 8"),
    (_job(), Setup("fsdp+ep", 16, True, "params"), "offload", "params", "needs sharded params (zero3 or fsdp)"),
    (_job(method="serve"), Setup("fsdp+ep", 16), "strategy", "fsdp+ep", "shards training state"),
])
def test_fsdp_ep_is_refused_by_name_where_it_cannot_run(job, setup, key, value, why):
    with pytest.raises(ParallelError) as e:
        per_gpu(job, setup, "m")
    assert (e.value.key, e.value.value) == (key, value) and why in str(e.value)


@hsettings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 64), share=st.floats(0.0, 0.99), ckpt=st.booleans())
def test_fsdp_ep_never_holds_more_than_fsdp_nor_more_on_more_gpus(nodes, share, ckpt):
    job = _job(unit_experts=max(1, int(UNIT * share)))
    n = nodes * EXPERT_PARALLEL
    ep = per_gpu(job, Setup("fsdp+ep", n, ckpt)).per_gpu_peak_bytes
    assert ep <= per_gpu(job, Setup("fsdp", n, ckpt)).per_gpu_peak_bytes
    assert per_gpu(job, Setup("fsdp+ep", n + EXPERT_PARALLEL, ckpt)).per_gpu_peak_bytes <= ep


def _configs() -> dict[str, tuple]:
    return {mid: (cfg, counted) for mid, cfg, counted in snapshot_configs()}


def test_the_largest_layers_routed_experts_are_read_off_the_graph():
    """DeepSeek-V3: 256 routed experts of gate, up (7,168 x 2,048) and down (2,048 x 7,168) in each MoE layer
    (config.json n_routed_experts, hidden_size, moe_intermediate_size), as many as transformers' own experts module
    holds (built on the meta device, 4 layers: the 4th is the first MoE layer); a dense Llama has none."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    cfg, _ = _configs()["deepseek-ai/DeepSeek-V3"]
    arch = normalise(cfg, "deepseek-ai/DeepSeek-V3")
    shape = model_shape(arch, build_graph(arch))
    assert (shape.unit_expert_params, shape.experts) == (256 * 3 * 7168 * 2048, 256)
    keys = {k: v for k, v in cfg.items() if k not in ("model_type", "auto_map", "quantization_config")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(CONFIG_MAPPING["deepseek_v3"](**{**keys, "num_hidden_layers": 4}))
    built = sum(p.numel() for name, p in model.named_parameters() if name.startswith("model.layers.3.mlp.experts."))
    assert built == shape.unit_expert_params
    assert shape.unit_expert_params < shape.unit_params
    cfg, _ = _configs()["meta-llama/Llama-3.1-8B"]
    arch = normalise(cfg, "meta-llama/Llama-3.1-8B")
    assert model_shape(arch, build_graph(arch)).unit_expert_params == 0


def _report(model: str):
    s = load_settings()
    cfg, counted = _configs()[model]
    return estimate(cfg, model_id=model, assumptions=s.assumptions, cards=s.cards, gpus=s.gpus,
                    checkpoint_params=counted)


def test_deepseek_lora_runs_on_80_gb_cards_with_its_experts_spread():
    """Plain FSDP gathers whole MoE layers (11.5 B params, two at a time): no 80 GB card held DeepSeek-V3's LoRA
    without offloading its base to the CPU. With the experts spread over each node it fits on tens of GPUs."""
    plans = {(p.method, p.gpu_model): p for p in _report("deepseek-ai/DeepSeek-V3").plans}
    lora = plans[("lora", "H100 SXM")]
    assert lora.fits and lora.strategy == "fsdp+ep" and lora.offload == "none" and lora.gpus % 8 == 0
    assert plans[("full", "H100 SXM")].fits  # full fine-tune too: no count of plain FSDP held it


def test_a_dense_model_never_tries_expert_parallel():
    assert all(p.strategy != "fsdp+ep" for p in _report("meta-llama/Llama-3.1-70B").plans)
