"""A Mamba mixer's torch scan (transformers' path without mamba-ssm and causal-conv1d, always taken on the CPU): its
per-step fp32 states and the backward's whole-sequence select gradients (FINDINGS.md F20), and peft's refusal of
out_proj. Reference values: CPU-simulated steps of transformers' class-default configs
(data/measurements/cpu-sim-extra.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.accuracy_rows import estimate_bytes
from generator.errors import JobError
from generator.estimator.estimate import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import regime
from generator.estimator.memory.job import SCAN_PHASE, job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.lora import adapted_linears, target_roles
from generator.estimator.memory.recurrence import scan_backward_bytes, scan_dims, torch_scan_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements"
S = load_settings().assumptions
SSM_TYPES = ("mamba", "falcon_mamba", "jamba", "zamba")
TARGETS = "in_proj,x_proj,dt_proj"


def _mamba(**changes):
    cfg = json.loads((DATA / "configs" / "mamba.json").read_text(encoding="utf-8"))
    arch = normalise({**cfg, "num_hidden_layers": 2, **changes}, "mamba")
    return arch, build_graph(arch)


def _rows():
    return [r for r in measured_rows("cpu-sim-extra") if r["model_type"] in SSM_TYPES]


def test_the_rows_cover_each_family_and_setup():
    rows = _rows()
    assert {r["model_type"] for r in rows} == set(SSM_TYPES)
    setups = {(r["setup"]["method"], r["setup"]["precision"], r["setup"]["grad_ckpt"]) for r in rows}
    assert {("lora", "amp", False), ("lora", "amp", True), ("full", "amp", False), ("full", "amp", True),
            ("lora", "bf16", False)} <= setups


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['model_type']}-{r['setup']['method']}-"
                                                       f"{r['setup']['precision']}-ckpt{r['setup']['grad_ckpt']}-"
                                                       f"t{r['setup']['tokens']}")
def test_the_torch_scan_matches_the_simulated_steps(row):
    """Each CPU-simulated step of a Mamba-1 model within 1.5% (they were 28-75% under before F20)."""
    est = estimate_bytes(row, S)
    measured = row["measured"]["peak_bytes"]
    assert est is not None
    assert abs(est - measured) / measured < 0.015, (est, measured)


def test_the_scan_terms_per_element():
    """Per token and inner x state element: 12 B of fp32 (discrete_A, discrete_B, each step's state) and the
    state's bf16 cast; the backward's two whole-sequence gradients for discrete_A and deltaB_u, 16 B."""
    _, g = _mamba()
    block = g.spec.blocks[0]
    inner, state, heads = scan_dims(block.parts[1])
    assert (inner, state, heads) == (1536, 16, 1)
    lora = torch_scan_bytes(block, regime("lora", "amp", cpu=True))
    assert lora == inner * state * 14 + inner * 6 + 4 * state
    assert torch_scan_bytes(block, regime("lora", "fp32", cpu=True)) == inner * state * 12 + 4 * state + 4 * inner
    assert scan_backward_bytes(block) == 16 * inner * state


def test_cuda_jobs_price_the_fused_scan():
    """On CUDA the estimate is mamba-ssm's fused path: no torch-scan phase, fewer bytes than the CPU's."""
    a, g = _mamba()
    job = Job(method="lora", tokens=1024, lora_targets=TARGETS)
    cuda = job_phases(a, g, S, job)
    cpu = job_phases(a, g, S, Job(method="lora", tokens=1024, lora_targets=TARGETS, kernels="cpu"))
    assert SCAN_PHASE not in {p.name for p in cuda}
    assert SCAN_PHASE in {p.name for p in cpu}
    assert job_memory(a, g, S, job).peak_bytes < job_memory(
        a, g, S, Job(method="lora", tokens=1024, lora_targets=TARGETS, kernels="cpu")).peak_bytes


@hsettings(max_examples=25, deadline=None)
@given(tokens=st.integers(16, 4096), batch=st.integers(1, 4), method=st.sampled_from(["lora", "full"]),
       ckpt=st.booleans())
def test_the_torch_scan_never_falls_as_tokens_or_batch_grow(tokens, batch, method, ckpt):
    a, g = _mamba()

    def peak(t, b):
        job = Job(method=method, tokens=t, batch=b, grad_ckpt=ckpt, kernels="cpu",
                  lora_targets="all-linear")
        return job_memory(a, g, S, job).peak_bytes

    assert peak(tokens + 1, batch) >= peak(tokens, batch)
    assert peak(tokens, batch + 1) >= peak(tokens, batch)


def test_zamba_runs_one_heads_scan_at_a_time():
    """ZambaMambaMixer: x_proj and dt_proj are per-head parameters (no LoRA target), and each head's scan runs its
    backward alone: a layer's backward holds one head's share of the whole-sequence gradients."""
    cfg = json.loads((DATA / "configs" / "zamba.json").read_text(encoding="utf-8"))
    a = normalise({**cfg, "num_hidden_layers": 2}, "zamba")
    g = build_graph(a)
    block = next(b for b in g.spec.blocks if any(p.scan for p in b.parts))
    part = next(p for p in block.parts if p.scan)
    inner, state, heads = part.scan
    assert heads == cfg["n_mamba_heads"] == 2
    assert scan_backward_bytes(block) == 16 * inner // heads * state
    hidden = cfg["hidden_size"]
    assert [(i, o) for i, o, _ in adapted_linears(block, None)] == [(hidden, 2 * inner), (inner, hidden)]
    with pytest.raises(JobError):
        target_roles(a, g, "x_proj", "zamba")


def test_peft_refuses_out_proj_on_mamba_models():
    """peft's _check_lora_target_modules_mamba: out_proj and conv1d raise for mamba, mamba2, falcon_mamba,
    falcon_h1 and nemotron_h; "all-linear" prices the Linears it accepts."""
    a, g = _mamba()
    assert "ssm_out" not in target_roles(a, g, "all-linear", "mamba")
    assert target_roles(a, g, TARGETS, "mamba") == {"ssm_in", "ssm_x", "ssm_dt"}
    with pytest.raises(JobError, match="out_proj"):
        target_roles(a, g, "out_proj", "mamba")


def test_the_page_names_the_kernels_it_prices():
    """A Mamba-1 model's report says it prices mamba-ssm's fused scan and what the torch scan would add; an
    attention-free model gets no finding about its attention."""
    cfg = json.loads((DATA / "configs" / "mamba.json").read_text(encoding="utf-8"))
    settings = load_settings()
    report = estimate(cfg, model_id="mamba", assumptions=settings.assumptions, cards=settings.cards,
                      gpus=settings.gpus)
    checks = {f.check: f for f in report.findings}
    assert "scan_kernels" in checks and "GB more" in checks["scan_kernels"].message
    assert "lora_targets" in checks
    assert "attention_default" not in checks and "attention_math_kernel" not in checks
