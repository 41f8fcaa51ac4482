"""A Mamba mixer's torch scan (transformers' path without mamba-ssm and causal-conv1d, always taken on the CPU): a
Mamba-1 mixer's per-step fp32 states and the backward's whole-sequence select gradients (FINDINGS.md F20), a Mamba-2
mixer's chunked scan (F21), and peft's refusal of out_proj. Reference values: CPU-simulated steps of transformers'
class-default configs (data/measurements/cpu-sim-extra.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.accuracy_rows import estimate_bytes
from generator.cli import main
from generator.errors import JobError
from generator.estimator.estimate import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.activations import regime
from generator.estimator.memory.job import SCAN_PHASE, job_memory, job_phases
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.lora import EXPERT_ROLES, adapted_linears, all_linear_roles, target_roles
from generator.estimator.memory.recurrence import chunk_scan_bytes, scan_backward_bytes, scan_dims, torch_scan_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements"
S = load_settings().assumptions
SSM_TYPES = ("mamba", "falcon_mamba", "jamba", "zamba")
SSD_TYPES = ("mamba2", "zamba2", "falcon_h1", "bamba", "granitemoehybrid", "nemotron_h")
TARGETS = "in_proj,x_proj,dt_proj"


def _mamba(**changes):
    cfg = json.loads((DATA / "configs" / "mamba.json").read_text(encoding="utf-8"))
    arch = normalise({**cfg, "num_hidden_layers": 2, **changes}, "mamba")
    return arch, build_graph(arch)


def _rows():
    return [r for r in measured_rows("cpu-sim-extra") if r["model_type"] in SSM_TYPES + SSD_TYPES]


def test_the_rows_cover_each_family_and_setup():
    rows = _rows()
    assert {r["model_type"] for r in rows} == set(SSM_TYPES + SSD_TYPES)
    setups = {(r["setup"]["method"], r["setup"]["precision"], r["setup"]["grad_ckpt"]) for r in rows}
    assert {("lora", "amp", False), ("lora", "amp", True), ("full", "amp", False), ("full", "amp", True),
            ("lora", "bf16", False)} <= setups


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['model_type']}-{r['setup']['method']}-"
                                                       f"{r['setup']['precision']}-ckpt{r['setup']['grad_ckpt']}-"
                                                       f"t{r['setup']['tokens']}")
def test_the_torch_scan_matches_the_simulated_steps(row):
    """Each CPU-simulated step of a Mamba model within 1.5%, a checkpointed Mamba-2 step within 2.5% (they were
    20-90% under before F20 and F21)."""
    est = estimate_bytes(row, S)
    measured = row["measured"]["peak_bytes"]
    assert est is not None
    bound = 0.025 if row["model_type"] in SSD_TYPES and row["setup"]["grad_ckpt"] else 0.015
    assert abs(est - measured) / measured < bound, (est, measured)


def test_the_scan_terms_per_element():
    """Per token and inner x state element: 12 B of fp32 (discrete_A, discrete_B, each step's state) and the
    state's bf16 cast; the backward's two whole-sequence gradients for discrete_A and deltaB_u, 16 B."""
    _, g = _mamba()
    block = g.spec.blocks[0]
    inner, state, heads = scan_dims(block.parts[1])
    assert (inner, state, heads) == (1536, 16, 1)
    lora = torch_scan_bytes(block, regime("lora", "amp", cpu=True), 1)
    assert lora == inner * state * 14 + inner * 6 + 4 * state
    assert torch_scan_bytes(block, regime("lora", "fp32", cpu=True), 1) == inner * state * 12 + 4 * state + 4 * inner
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
    _, inner, state, heads = part.scan
    assert heads == cfg["n_mamba_heads"] == 2
    assert scan_backward_bytes(block) == 16 * inner // heads * state
    hidden = cfg["hidden_size"]
    assert [(i, o) for i, o, _ in adapted_linears(block, None)] == [(hidden, 2 * inner), (inner, hidden)]
    with pytest.raises(JobError):
        target_roles(a, g, "x_proj", "zamba")


def test_all_linear_on_a_peft_mamba_type_adapts_no_expert_tensor():
    """Nemotron-H has MoE layers, but peft converts no expert tensor for it (lora.FUSED_EXPERTS): refusing out_proj
    must not turn all-linear into "every role", expert tensors included."""
    cfg = json.loads((DATA / "configs" / "nemotron_h.json").read_text(encoding="utf-8"))
    a = normalise(cfg, "nemotron_h")
    roles = all_linear_roles(a)
    assert roles is not None and "ssm_out" not in roles and "ssm_in" in roles
    assert not roles & EXPERT_ROLES


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
    assert "scan_kernels" in checks and "GB to LoRA at 2,048 tokens" in checks["scan_kernels"].message
    assert "attention_default" not in checks and "attention_math_kernel" not in checks


def _mamba2(**changes):
    cfg = json.loads((DATA / "configs" / "mamba2.json").read_text(encoding="utf-8"))
    arch = normalise({**cfg, "num_hidden_layers": 2, **changes}, "mamba2")
    return arch, build_graph(arch)


def test_the_chunked_scan_pads_to_whole_chunks():
    """mamba2_chunk_scan pads the sequence to whole chunks: its chunk-sized terms are the same for every length in
    one chunk and step up with the next; the total never falls as tokens grow."""
    a, g = _mamba2()
    block = g.spec.blocks[0]
    part = next(p for p in block.parts if p.scan)
    assert part.scan == (2, 8192, 128, 128, 8, 256, 4)
    lora = regime("lora", "amp", cpu=True)
    total = [t * chunk_scan_bytes(part, lora, t) for t in (250, 256, 257, 512)]
    assert total == sorted(total)
    step = total[2] - total[1]  # one more chunk: its L, G, M, B and C, per padded token x 256
    assert step > 256 * (8 * 128 * 256 + 12 * 128 * 128)


def test_cuda_jobs_price_the_fused_chunk_scan():
    a, g = _mamba2()
    names = {p.name for p in job_phases(a, g, S, Job(method="lora", tokens=1024, lora_targets="in_proj"))}
    cpu = {p.name for p in job_phases(a, g, S, Job(method="lora", tokens=1024, lora_targets="in_proj",
                                                   kernels="cpu"))}
    assert not any("torch scan" in n for n in names)
    assert "forward (the torch scan's chunks)" in cpu and SCAN_PHASE in cpu
    ckpt = {p.name for p in job_phases(a, g, S, Job(method="lora", tokens=1024, lora_targets="in_proj",
                                                    kernels="cpu", grad_ckpt=True))}
    assert "backward (recomputing the torch scan's chunks)" in ckpt


@hsettings(max_examples=25, deadline=None)
@given(tokens=st.integers(16, 2048), batch=st.integers(1, 3), precision=st.sampled_from(["amp", "bf16", "fp32"]),
       ckpt=st.booleans())
def test_the_chunked_scan_never_falls_as_tokens_or_batch_grow(tokens, batch, precision, ckpt):
    a, g = _mamba2(hidden_size=256, num_heads=8, head_dim=64, state_size=32, n_groups=2, chunk_size=64,
                   vocab_size=1024)

    def peak(t, b):
        job = Job(method="lora", precision=precision, tokens=t, batch=b, grad_ckpt=ckpt, kernels="cpu",
                  lora_targets="in_proj")
        return job_memory(a, g, S, job).peak_bytes

    assert peak(tokens + 1, batch) >= peak(tokens, batch)
    assert peak(tokens, batch + 1) >= peak(tokens, batch)


def test_the_cli_prices_the_torch_scan_on_request(capsys):
    """--scan torch: a GPU without mamba-ssm runs transformers' torch scan; the job, the exit code and the finding
    (the difference of the two jobs) say so. --scan fused with the CPU's kernels is refused (mamba-ssm's kernels are CUDA's)."""
    config = str(DATA / "configs" / "mamba.json")
    peaks = {}
    for scan in ("fused", "torch"):
        assert main([config, "--json", "--method", "lora", "--tokens", "2048", "--scan", scan]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["memory"]["job"]["scan"] == scan
        peaks[scan] = report["memory"]["peak_bytes"]
    finding = next(f for f in report["findings"] if f["check"] == "scan_kernels")["message"]
    added = finding.split("adds ")[1].split(" GB")[0]
    assert peaks["torch"] > 5 * peaks["fused"]
    assert added == f"{(peaks['torch'] - peaks['fused']) / 1e9:,.1f}"  # the finding's figure is the two jobs
    a, g = _mamba()
    with pytest.raises(JobError, match="CUDA only"):
        job_memory(a, g, S, Job(method="lora", kernels="cpu", scan="fused", lora_targets=TARGETS))
