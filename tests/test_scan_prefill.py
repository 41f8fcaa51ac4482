"""HF generate's prefill of a recurrent mixer's torch path (estimator.memory.scan_prefill, FINDINGS.md F79): Mamba's
sequential scan, Mamba-2's chunked scan, the Gated DeltaNet and Kimi Delta Attention chunked rules, each in a forward
without gradients. Reference values: CPU-simulated generate runs of transformers 5.24 (data/measurements/cpu-sim-extra.jsonl),
the formulas read off five of them and held out on the others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.accuracy_rows import estimate_bytes, tensor_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.scan_prefill import PREFILL_SCANS, prefill_scan_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

DATA = Path(__file__).resolve().parent.parent / "data" / "measurements"
S = load_settings().assumptions
CONFIGS = {1: "mamba.json", 2: "mamba2.json", 3: "families/qwen3_5_text.json", 4: "kimi_linear.json"}


def _model(config: str, layers: int = 4):
    cfg = json.loads((DATA / "configs" / config).read_text(encoding="utf-8"))
    cfg = {**cfg, "num_hidden_layers": layers}
    if "layer_types" in cfg:
        cfg["layer_types"] = cfg["layer_types"][:layers]
    a = normalise(cfg, config)
    return a, build_graph(a)


def _kinds(row) -> set[int]:
    """The torch-path scan kinds of a row's model (PREFILL_SCANS' keys), as the estimator builds it."""
    a = normalise(row["config"], row["model"])
    return {p.scan[0] for b in build_graph(a).spec.blocks for p in b.parts if p.scan and p.scan[0] in PREFILL_SCANS}


def _rows():
    return [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "inference" and _kinds(r)]


ROWS = _rows()


def test_the_rows_cover_every_kind_batches_and_padding():
    kinds = set().union(*map(_kinds, ROWS))
    assert kinds == set(PREFILL_SCANS) and len(ROWS) >= 30
    assert {r["model_type"] for r in ROWS} >= {"mamba", "falcon_mamba", "jamba", "mamba2", "falcon_h1", "bamba",
                                               "granitemoehybrid", "zamba2", "nemotron_h", "qwen3_5_text",
                                               "qwen3_next", "olmo_hybrid", "qwen3_5", "qwen3_5_moe", "kimi_linear",
                                               "bailing_hybrid"}
    assert max(r["setup"]["batch"] for r in ROWS) >= 3
    assert any(r["setup"]["tokens"] % 64 for r in ROWS)  # a sequence padded to whole chunks


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model_type']}-b{r['setup']['batch']}-t{r['setup']['tokens']}")
def test_a_recurrent_prefill_matches_the_simulated_run(row):
    """Each generate run within 1.5% (they were 0.2% to 84% under before F79: the torch paths' fp32 chunk tensors
    were not priced)."""
    measured = tensor_bytes(row, S.cuda_context_bytes)
    assert abs(estimate_bytes(row, S) / measured - 1) < 0.015


def test_cuda_generate_prices_the_fused_kernels():
    """On CUDA the estimate is mamba-ssm's and flash-linear-attention's kernels unless the torch path is asked for;
    on the CPU it is always the torch path."""
    for kind, config in CONFIGS.items():
        a, g = _model(config)
        fused = job_memory(a, g, S, Job(method="inference", tokens=2048, new_tokens=2, precision="bf16"))
        torch_path = job_memory(a, g, S, Job(method="inference", tokens=2048, new_tokens=2, precision="bf16",
                                             scan="torch"))
        cpu = job_memory(a, g, S, Job(method="inference", tokens=2048, new_tokens=2, precision="bf16",
                                      kernels="cpu"))
        scan = max(prefill_scan_bytes(b, 2048, 2) for b in g.spec.blocks)
        assert scan > 0, kind
        assert fused.peak_bytes < torch_path.peak_bytes == cpu.peak_bytes, kind


def test_recurrent_gemma_has_no_fused_path():
    """RG-LRU runs transformers' torch code on any device: its prefill term is the same on CUDA and on the CPU."""
    cfg = json.loads((DATA / "configs" / "families" / "recurrent_gemma.json").read_text(encoding="utf-8"))
    a = normalise({**cfg, "num_hidden_layers": 3}, "recurrent_gemma")
    g = build_graph(a)
    block = g.spec.blocks[0]
    assert prefill_scan_bytes(block, 1024, 2, torch_path=False) == prefill_scan_bytes(block, 1024, 2) \
        == 12 * 1024 * 2 * a.raw["lru_width"]
    jobs = [job_memory(a, g, S, Job(method="inference", tokens=1024, new_tokens=2, precision="bf16", **k))
            for k in ({}, {"kernels": "cpu"})]
    assert jobs[0].peak_bytes == jobs[1].peak_bytes


def test_a_padded_sequence_holds_its_whole_chunks():
    # Mamba-2's chunks are 256 tokens, Gated DeltaNet's 64: one token past a chunk pads a whole one more
    for kind, config, chunk in ((2, "mamba2.json", 256), (3, "families/qwen3_5_text.json", 64)):
        _, g = _model(config)
        block = next(b for b in g.spec.blocks if any(p.scan and p.scan[0] == kind for p in b.parts))
        full, past = prefill_scan_bytes(block, 4 * chunk, 2), prefill_scan_bytes(block, 4 * chunk + 1, 2)
        assert past - full > (prefill_scan_bytes(block, 5 * chunk, 2) - full) // 2


@hsettings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(sorted(CONFIGS)), tokens=st.integers(1, 5000), batch=st.integers(1, 4))
def test_a_recurrent_prefill_never_falls_as_tokens_or_batch_grow(kind, tokens, batch):
    a, g = _model(CONFIGS[kind])

    def peak(t: int, b: int) -> int:
        return job_memory(a, g, S, Job(method="inference", tokens=t, batch=b, new_tokens=2, precision="bf16",
                                       kernels="cpu")).peak_bytes

    assert peak(tokens + 1, batch) >= peak(tokens, batch)
    assert peak(tokens, batch + 1) >= peak(tokens, batch)
