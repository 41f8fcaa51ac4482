"""QLoRA on bitsandbytes' own code (FINDINGS.md F29): the harness runs an nf4 base on the CPU simulation, and the
estimator's QLoRA terms are checked against it: the packed weights and their absmax, the dequantised weight that
lives only inside a matmul, prepare_model_for_kbit_training's fp32 upcast. Checked on tiny configs here and on the
families of cpu-sim-qlora.jsonl."""

from __future__ import annotations

import functools
import json

import pytest

from generator.accuracy import estimate_bytes, tensor_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import recompute_transient_bytes, regime
from generator.estimator.memory.job import DEQUANT_PHASE
from generator.estimator.memory.storage import dequant_meeting_bytes, dequant_transient_bytes
from generator.estimator.normalise import normalise
from tests.conftest import measured_rows
from tests.test_grad_accum import LLAMA, S
from tests.test_grad_accum import phases_of as _phases

torch = pytest.importorskip("torch")
pytest.importorskip("bitsandbytes")

from generator.measure.setup import Setup, estimate_for  # noqa: E402

# batch x tokens >= 2,048 rows: CUDA dequantises the weight for the matmul (generator/measure/run.py)
TOKENS, BATCH = 1024, 2


@functools.lru_cache(maxsize=None)
def _run(setup: Setup):
    from generator.measure.run import run_cpu

    return run_cpu(json.loads(json.dumps(LLAMA)), setup)


def test_the_dequantised_weight_lives_inside_a_matmul_only():
    """bitsandbytes dequantises a 4-bit weight into a fresh buffer for each matmul and frees it after: the loss and
    the final norm's backward hold none, the last layer's forward (and a recomputed layer) holds the largest."""
    a = normalise(LLAMA, "m")
    dequant = dequant_transient_bytes(build_graph(a), "nf4", 2)
    assert dequant == 2 * 256 * 688  # gate/up/down, bf16
    plain = {ph.name: ph for ph in _phases(LLAMA, method="qlora")}
    assert plain["backward (activations)"].overhead_fixed == 0
    assert plain[DEQUANT_PHASE].overhead_fixed == dequant
    # checkpointed: peft runs the base matmul before the adapters, so a recomputed layer holds the larger of the
    # dequantised weight and its last Linear's adapter forward; with down_proj not adapted, the larger of the frozen
    # MLP's backward gradients (FINDINGS.md F32) and the weight beside down_proj's input gradient and the
    # hidden-wide tensors that meet it (F59; at 1 token the weight)
    recompute = "backward (recomputing a checkpointed layer)"
    for targets, tokens, expected in (("q_proj,v_proj", 512, 0),
                                      ("q_proj,v_proj", 1, dequant + meeting_of(1) - frozen_mlp_of(1)),
                                      ("all-linear", 512, 0),
                                      ("all-linear", 1, dequant - recompute_transient_bytes_of(1))):
        phases = {ph.name: ph for ph in _phases(LLAMA, method="qlora", grad_ckpt=True, lora_targets=targets,
                                                tokens=tokens)}
        assert phases["loss (logits)"].overhead_fixed == 0 and DEQUANT_PHASE not in phases
        assert phases[recompute].overhead_fixed == expected, (targets, tokens)
    # a bf16 LoRA base dequantises nothing
    assert DEQUANT_PHASE not in {ph.name for ph in _phases(LLAMA, method="lora")}


def frozen_mlp_of(tokens: int) -> int:
    """The llama's recomputed frozen MLP's backward gradients (q and v adapted, AMP), per `tokens`."""
    a = normalise(LLAMA, "m")
    return tokens * recompute_transient_bytes(build_graph(a).spec.distinct_layers[0][0], regime("lora", "amp", 4,
                                                                                                input_cast=False),
                                              frozenset({"q", "v"}))


def meeting_of(tokens: int) -> int:
    """What meets the llama's dequantised gate/up weight when down_proj has no adapter (q and v), per `tokens`."""
    a = normalise(LLAMA, "m")
    r = regime("lora", "amp", 4, input_cast=False)
    return tokens * dequant_meeting_bytes(a, build_graph(a).spec.distinct_layers[0][0], r, frozenset({"q", "v"}))


def recompute_transient_bytes_of(tokens: int) -> int:
    """The llama's recomputed down_proj adapter forward (all-linear, AMP, nf4's uncast adapter input), per `tokens`."""
    a = normalise(LLAMA, "m")
    g = build_graph(a)
    r = regime("lora", "amp", 4, input_cast=False)
    return tokens * recompute_transient_bytes(g.spec.distinct_layers[0][0], r, None)


def test_the_upcast_heads_copy_is_freed_before_a_layer_is_recomputed():
    """prepare_model_for_kbit_training leaves an fp32 LM head; under autocast its bf16 copy is saved for its input's
    gradient and freed by its backward, which runs before any checkpointed layer is recomputed."""
    head = 256 * 1000
    up = {ph.name: ph for ph in _phases(LLAMA, method="qlora", grad_ckpt=True, upcast_fp32=True)}
    plain = {ph.name: ph for ph in _phases(LLAMA, method="qlora", grad_ckpt=True)}
    assert up["loss (logits)"].overhead_weights - plain["loss (logits)"].overhead_weights == 2 * head
    name = "backward (recomputing a checkpointed layer)"
    assert up[name].overhead_weights == plain[name].overhead_weights


def test_the_families_nf4_weights_are_the_estimators_weight_bytes():
    """At each family run's peak the packed uint8 weights, the 16-bit (or upcast fp32) rest and the adapters
    (tracked as parameters) and the QuantState tensors (absmax; nested: the uint8 absmax, its fp32 absmax per 256,
    code and offset; tracked as other) are the estimator's weight bytes."""
    rows = measured_rows("cpu-sim-qlora")
    for r in rows:
        est = estimate_for(r["config"], r["model"], Setup.from_dict(r["setup"]), kernels="cpu")
        assert est is not None
        cats = r["measured"]["categories"]
        # but the biases of the quantised Linears, which Linear4bit.forward casts back from the upcast's fp32 to
        # its compute dtype (bias.data = bias.data.to(x.dtype)): 2 B each
        biases = 2 * _quantised_biases(r["config"]) if r["setup"]["upcast_fp32"] else 0
        # (and the nested absmax's blocks of 256, rounded up per Linear: at most 4 B each)
        assert abs(cats["param"] + cats["other"] - (est["breakdown"]["weights"] - biases)) <= 4 * 14, r["model"]


def _quantised_biases(config) -> int:
    """Bias elements of the Linears the harness quantises (every nn.Linear but lm_head), from transformers' own
    class built on the meta device."""
    from transformers import AutoModelForCausalLM

    from generator.measure.build import hf_config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(config, "sdpa"))
    return sum(m.bias.numel() for name, m in model.named_modules()
               if type(m) is torch.nn.Linear and m.bias is not None and not name.endswith("lm_head"))


@pytest.mark.parametrize("setup", [
    Setup("qlora", tokens=TOKENS, batch=BATCH, lora_rank=16, lora_dropout=0.05, grad_ckpt=True, double_quant=True,
          upcast_fp32=True),
    Setup("qlora", tokens=TOKENS, batch=BATCH, lora_rank=16, double_quant=True, upcast_fp32=True),
    Setup("qlora", tokens=TOKENS, batch=BATCH, lora_rank=8),
    Setup("qlora", precision="bf16", tokens=TOKENS, batch=BATCH, lora_rank=8, lora_targets="q_proj,v_proj"),
], ids=["trl-ckpt", "trl", "plain", "bf16-qv"])
def test_qlora_simulations_match_the_estimate(setup):
    """A tiny llama's QLoRA steps, simulated with bitsandbytes' own kernels, against estimator.job's QLoRA."""
    measured = _run(setup)["measured"]["peak_bytes"]
    est = estimate_for(LLAMA, "m", setup, kernels="cpu")
    assert est is not None
    assert abs(est["peak_bytes"] / measured - 1) < 0.02, (est["peak_bytes"], measured, est["phase"])


def test_the_families_qlora_runs_are_within_two_percent():
    """cpu-sim-qlora.jsonl (tools/sweep_qlora.py): eight families, six QLoRA setups each."""
    rows = measured_rows("cpu-sim-qlora")
    assert len(rows) >= 40 and {r["setup"]["method"] for r in rows} == {"qlora"}
    errors = [estimate_bytes(r, S) / tensor_bytes(r, S.cuda_context_bytes) - 1 for r in rows]
    assert max(abs(e) for e in errors) < 0.02
    assert sorted(abs(e) for e in errors)[len(errors) // 2] < 0.01
