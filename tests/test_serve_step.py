"""A served decoder's working set is one serving step of vLLM's max_num_batched_tokens, whatever the prompts' length.

Sources: vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults (commit 99d7eb5d): `vllm serve` defaults
max_num_batched_tokens to 8,192 on cards of 70 GiB or more but the A100 and 2,048 on the rest (site_config.yaml
takes the larger: job.serve_step_tokens); vllm/v1/worker/gpu_model_runner.py, profile_run: vLLM sizes its memory by
`self._dummy_run(self.max_num_tokens, is_profile=True)`, max_num_tokens being max_num_batched_tokens, and chunked
prefill fills each step up to it. An encoder's input is not chunked; HF generate (--method inference) is not vLLM.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.profile import kv_bytes_per_sequence, serve_profile, serve_token_bytes, step_tokens
from generator.estimator.normalise import normalise
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import DEFAULT_CONFIG, load_settings

SETTINGS = load_settings()
S = SETTINGS.assumptions


def _model(mid: str):
    a = normalise(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), mid)
    return a, build_graph(a)


def test_the_packaged_step_is_read_from_site_config(tmp_path) -> None:
    assert yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))["job"]["serve_step_tokens"] == 8192
    assert S.serve_step_tokens == 8192
    override = tmp_path / "site_config.yaml"
    override.write_text("job:\n  serve_step_tokens: 2048\n", encoding="utf-8")
    assert load_settings(override).assumptions.serve_step_tokens == 2048  # a T4's or an L4's vLLM default


@pytest.mark.parametrize(("mid", "kind", "stepped"), [
    ("meta-llama/Llama-3.1-70B", "decoder", True),
    ("google/flan-t5-base", "encoder-decoder", False),
    ("BAAI/bge-reranker-large", "encoder", False),
])
def test_only_a_decoder_runs_in_steps(mid: str, kind: str, stepped: bool) -> None:
    _, g = _model(mid)
    assert g.spec.kind == kind
    for tokens in (512, 4096, 131_072):
        assert step_tokens(g.spec, S, tokens) == (8192 if stepped else tokens)


def test_llama_70b_holds_one_step_of_8192_tokens_at_any_length() -> None:
    a, g = _model("meta-llama/Llama-3.1-70B")
    assert (a.hidden, a.intermediate) == (8192, 28672)  # its config.json
    # the working set: the largest layer transient (the MLP's gate, up and their product, 3 x 28,672 wide) and
    # two 8,192-wide residuals, 8,192 tokens at 2 B
    assert max(b.transient for b, _ in g.spec.distinct_layers) == 3 * 28672
    step = 8192 * 2 * (3 * 28672 + 2 * 8192)
    assert step == 1_677_721_600
    # so the profiles at two lengths differ by the KV cache alone, below the step as above it
    for short, long in ((512, 4096), (8192, 131_072)):
        assert serve_profile(a, g, S, long).total(1) - serve_profile(a, g, S, short).total(1) \
            == kv_bytes_per_sequence(a, S, long) - kv_bytes_per_sequence(a, S, short)
    # the step's own share: a step of 4,096 tokens holds half of it
    half = dataclasses.replace(S, serve_step_tokens=4096)
    assert serve_profile(a, g, S, 4096).total(1) - serve_profile(a, g, half, 4096).total(1) == step // 2


def test_the_curve_reads_the_same_step_as_the_profile() -> None:
    a, g = _model("meta-llama/Llama-3.1-8B")
    base = serve_profile(a, g, S, 1024).total(1) - serve_token_bytes(g, S, 1024)
    for tokens in (512, 4096, 8192, 8193, 65_536, 131_072):
        assert serve_profile(a, g, S, tokens).total(1) == base + serve_token_bytes(g, S, tokens)


def test_hf_generate_runs_its_prompt_whole() -> None:
    """--method inference prices transformers' generate, which prefills a prompt in one forward: no step applies."""
    record = load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-3.1-8B")
    job = Job(method="inference", tokens=32_768)

    def peak(s) -> int:
        return estimate(json.loads(record.config_json), model_id=record.id, assumptions=s, cards=SETTINGS.cards,
                        gpus=SETTINGS.gpus, job=job).memory.peak_bytes
    assert peak(S) == peak(dataclasses.replace(S, serve_step_tokens=1 << 30)) == peak(
        dataclasses.replace(S, serve_step_tokens=16))
