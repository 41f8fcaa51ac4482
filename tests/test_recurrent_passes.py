"""Models that run one set of layer weights more than once (families/shared_layer_encoders.shared_pass): HRM-Text's
H/L recurrence, ALBERT's shared layer group. Every pass is a layer of the graph, its compute and activations
counted, its weights once; HRM-Text's early L passes run under torch.no_grad (Spec.no_grad) and keep nothing.

CPU-simulated (data/measurements/cpu-sim-extra.jsonl, FINDINGS.md F95): HRM-Text's LoRA without checkpointing read
-37.2% at 1,024 tokens when one pass of each stack was priced; ALBERT-xxlarge's full fine-tune +84% when every pass
held its own autocast copy of the shared weights."""

from __future__ import annotations

import pytest
from transformers import CONFIG_MAPPING

from generator.accuracy_rows import estimate_bytes
from generator.errors import ConfigError
from generator.estimator import estimate
from generator.estimator.cost import training_flops_per_token
from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.job import job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.layer_terms import skipped_layers
from generator.estimator.memory.lora import lora_params
from generator.estimator.memory.parallel import ParallelError, Setup, per_gpu
from generator.estimator.normalise import normalise
from generator.estimator.setups import model_shape, training_job
from generator.settings import load_settings
from tests.conftest import measured_rows

S = Assumptions()


def _hrm(**changes):
    a = normalise({**CONFIG_MAPPING["hrm_text"]().to_dict(), **changes}, "hrm")
    return a, build_graph(a)


def test_every_pass_is_a_layer_and_the_early_l_passes_keep_nothing() -> None:
    """The class defaults: 16 layers a stack, H_cycles 2, L_cycles 3, L_bp_cycles [2] padded to [1, 2]
    (HrmTextModel.L_bp_cycles_padded): 2 x (3 + 1) x 16 = 128 passes (num_hidden_layers, a cache slot each), of
    which the first cycle's first two L passes and the second cycle's first run without gradients: 48."""
    a, g = _hrm()
    spec = g.spec
    assert len(spec.blocks) == a.raw["num_hidden_layers"] == 128
    assert sorted(spec.no_grad) == [*range(0, 32), *range(64, 80)]
    assert sum(b.params > 0 for b in spec.blocks) == 32  # each stack's weights once
    assert sum(skipped_layers(a, spec)[i] * n for i, (_, n) in enumerate(spec.distinct_layers)) == 48
    one = _hrm(H_cycles=1, L_cycles=1, L_bp_cycles=[1])[1]
    assert g.params_total == one.params_total  # the passes hold no parameters of their own
    assert lora_params(g, a, 16) == lora_params(one, normalise({**a.raw, "H_cycles": 1, "L_cycles": 1}, "hrm"), 16)


def test_activations_follow_the_passes_with_gradients() -> None:
    """LoRA without checkpointing keeps every pass run with gradients (80 of 128); more of them with every L
    pass run with gradients, none more for passes without."""
    a, g = _hrm()
    job = Job(method="lora", tokens=1024)
    base = job_memory(a, g, S, job).breakdown
    every = _hrm(L_bp_cycles=[3, 3])
    more = job_memory(*every, S, job).breakdown
    assert dict(more)["activations"] > dict(base)["activations"]
    assert not every[1].spec.no_grad


def test_training_compute_skips_the_backward_of_passes_without_gradients() -> None:
    a, g = _hrm()
    full, lora = training_flops_per_token(a, g, S, 0, 1024)
    every = _hrm(L_bp_cycles=[3, 3])
    full_every, lora_every = training_flops_per_token(*every, S, 0, 1024)
    assert full < full_every and lora < lora_every
    # one pass's full fine-tune work, from two models with every pass trained (128 and 64 passes): the 48 passes
    # without gradients do a third of it, their forward
    half = training_flops_per_token(*_hrm(H_cycles=1, L_bp_cycles=[3]), S, 0, 1024)[0]
    per_pass = (full_every - half) / 64
    assert full_every - full == pytest.approx(2 / 3 * 48 * per_pass, rel=1e-9)


def test_a_published_config_runs_a_cycle_without_gradients() -> None:
    """HRM-Text-1B's L_bp_cycles [0, 3]: its first cycle's L passes all run under torch.no_grad (HrmTextModel's
    threshold L_cycles - 0); a negative entry is one clear error."""
    a, g = _hrm(L_bp_cycles=[0, 3])
    assert sorted(g.spec.no_grad) == list(range(0, 48))
    with pytest.raises(ConfigError) as err:
        _hrm(L_bp_cycles=[-1, 2])
    assert err.value.key == "L_bp_cycles"


def test_the_cache_keeps_the_passes_without_gradients_keys_and_values() -> None:
    """A training forward's DynamicCache (use_cache) keeps every pass's K and V; SDPA saved those of the passes with
    gradients already, not those without: 6,144 B a token for each of them (2 x 12 heads x 128 x 2 B), alive at
    the loss, gone under checkpointing (F95: the simulation's forward peak)."""
    job = Job(method="lora", tokens=1024)
    phases = {}
    for cache in (True, False):
        a, g = _hrm(use_cache=cache, num_layers_per_stack=2)
        phases[cache] = {p.name: p.activations for p in job_phases(a, g, S, job)}
    assert phases[True]["loss (logits)"] - phases[False]["loss (logits)"] == 6 * 1024 * 6144
    a, g = _hrm(num_layers_per_stack=2)
    ckpt = Job(method="lora", tokens=1024, grad_ckpt=True)
    assert job_memory(a, g, S, ckpt).peak_bytes == job_memory(*_hrm(use_cache=False, num_layers_per_stack=2), S,
                                                              ckpt).peak_bytes


def test_no_pipeline_stage_holds_another_stages_weights() -> None:
    """Every pass of HRM-Text's stacks runs their first pass's weights: a contiguous cut would leave a stage running
    weights another holds, so pipeline setups are one clear error and the card table offers no two-card split."""
    a, g = _hrm()
    job = training_job(a, g, S, Job(method="lora", tokens=1024), model_shape(a, g))
    with pytest.raises(ParallelError) as err:
        per_gpu(job, Setup("pp", 2), "hrm")
    assert err.value.key == "strategy"
    st = load_settings()
    report = estimate(a.raw, model_id="hrm", assumptions=st.assumptions, cards=st.cards, gpus=st.gpus)
    assert report.memory.cards and not any(c.split for c in report.memory.cards)


def test_the_simulated_steps() -> None:
    """HRM-Text within 3% (LoRA and full fine-tunes, checkpointed or not, bf16 and fp32 bases: a frozen fp32 weight
    is copied at each use, once a pass); ALBERT's LoRA within 1%, its full fine-tune within 1.5% (-6.6% before its
    shared weights' bf16 gradient buffers were priced, F104)."""
    s = load_settings().assumptions
    errors: dict[str, list[float]] = {"hrm_text": [], "albert": []}
    for r in measured_rows("cpu-sim-extra"):
        if r["model_type"] in errors:
            errors[r["model_type"]].append(estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1)
    assert len(errors["hrm_text"]) == 7 and len(errors["albert"]) == 3, errors
    assert all(abs(e) < 0.03 for e in errors["hrm_text"]), errors
    assert sorted(abs(e) < 0.01 for e in errors["albert"]) == [False, True, True] and max(map(abs, errors["albert"])) < 0.015


def test_a_shared_layers_weight_gradients_are_summed_in_bf16() -> None:
    """ALBERT-xxlarge's full AMP step without checkpointing (cpu-sim-extra.jsonl; F104's listing at its peak, in
    the second-last pass's backward): one bf16 gradient buffer per shared weight (q, k, v, dense 4,096 x 4,096; ffn
    and ffn_output 4,096 x 16,384: 402,653,184 B), and for the largest the newest contribution and the out-of-place
    sum (2 x 134,217,728 B); the tied decoder's fp32 gradient waits in the engine's buffer (30,000 x 128 x 4 B, the
    embedding's width, not the hidden size). Checkpointing's recomputation casts the weights anew: no such phase."""
    from generator.estimator.graph.nodes import tied_weight_params
    from generator.estimator.memory.activations import regime
    from generator.estimator.memory.late_backward import SHARED_PHASE, shared_weight_gradient_bytes

    row = next(r for r in measured_rows("cpu-sim-extra") if r["model_type"] == "albert"
               and r["setup"]["method"] == "full")
    a = normalise(row["config"], row["model"])
    g = build_graph(a)
    assert shared_weight_gradient_bytes(g.spec, regime("full", "amp")) == 402_653_184 + 2 * 134_217_728
    assert shared_weight_gradient_bytes(g.spec, regime("lora", "amp")) == 0
    assert tied_weight_params(a) == 30_000 * 128
    s = load_settings().assumptions
    assert job_memory(a, g, s, Job(method="full", tokens=512)).peak_phase == SHARED_PHASE
    # ALBERT's classes cannot checkpoint; HRM-Text's can, and its checkpointed full fine-tune has no such phase
    hrm = normalise(CONFIG_MAPPING["hrm_text"]().to_dict(), "hrm")
    names = [{p.name for p in job_phases(hrm, build_graph(hrm), s, Job(method="full", tokens=512, grad_ckpt=ckpt))}
             for ckpt in (False, True)]
    assert SHARED_PHASE in names[0] and SHARED_PHASE not in names[1]
