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

from generator.cli import main
from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.profile import kv_bytes_per_sequence, serve_profile, serve_token_bytes, step_tokens
from generator.estimator.normalise import normalise
from generator.estimator.setups import vllm_max_num_seqs
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


@pytest.mark.parametrize(("mid", "warned"), [("google/gemma-3-27b-it", True), ("google/gemma-2-9b", True),
                                             ("meta-llama/Llama-3.1-8B", False)])
def test_a_model_vllm_will_not_serve_in_float16_is_flagged_where_a_card_has_no_bf16(mid: str, warned: bool) -> None:
    """vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS: gemma2, gemma3, gemma3_text, plamo2 and glm4 are refused
    in float16 ("Numerical instability. Please use bfloat16 or float32 instead."); the T4 has no bf16, so its serving
    rows (16-bit) are flagged; with no such GPU priced, nothing is."""
    record = load_record(DEFAULT_SNAPSHOT_DIR, mid)
    cfg = json.loads(record.config_json)

    def found(gpus) -> list:
        r = estimate(cfg, model_id=mid, assumptions=S, cards=SETTINGS.cards, gpus=gpus)
        return [x for x in r.findings if x.check == "half_precision_serving"]
    got = found(SETTINGS.gpus)
    assert bool(got) == warned
    if warned:
        assert got[0].severity == "warning" and "the T4 has no bf16" in got[0].message
        assert "float32" in got[0].message
    all_bf16 = {k: dataclasses.replace(g, bf16_tflops=g.bf16_tflops or g.fp16_tflops) for k, g in SETTINGS.gpus.items()}
    assert found(all_bf16) == []


def test_a_gpu_that_serves_the_model_in_float32_is_priced_in_float32() -> None:
    """A review found gemma-2-9b's headline serving on "2× T4 with tensor parallel" beside the warning that vLLM
    serves gemma2 in float32 on a T4: 18.5 GB of weights per T4 there, over its memory. Every serving byte doubles in
    float32 (weights, KV cache, the step's working set), so the T4's serving plan is searched at half its budget and
    its per-GPU peak doubled back, its card cell holds what half its budget holds, and no serving speed is given
    (the priced TFLOPS are 16-bit). A model vLLM serves in float16 keeps its T4 rows as they were."""
    def report(mid: str, gpus=SETTINGS.gpus):
        cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json)
        return estimate(cfg, model_id=mid, assumptions=S, cards=SETTINGS.cards, gpus=gpus)
    r = report("google/gemma-2-9b")
    all_bf16 = {k: dataclasses.replace(g, bf16_tflops=g.bf16_tflops or g.fp16_tflops) for k, g in SETTINGS.gpus.items()}
    bf16 = report("google/gemma-2-9b", all_bf16)  # as though the T4 ran bf16: the 16-bit plan
    t4, t4_16 = ([p for p in x.plans if p.method == "serve" and p.gpu_model == "T4"][0] for x in (r, bf16))
    budget = next(c.budget_bytes for c in r.memory.cards if c.name == t4.gpu)
    assert t4.fits and t4.per_gpu_peak_bytes <= budget < 2 * t4_16.per_gpu_peak_bytes
    assert t4.gpus > t4_16.gpus == 2 and t4.per_gpu_peak_bytes % 2 == 0
    assert all(x.gpu_model != "T4" for x in r.serving) and any(x.gpu_model == "T4" for x in bf16.serving)
    card, card16 = (next(c for c in x.memory.cards if c.name == t4.gpu) for x in (r, bf16))
    assert card.serve_max_batch == 0 and not any(sp.method == "serve" for sp in card.split or ())
    assert any(sp.method == "serve" and sp.max_batch > 0 for sp in card16.split or ())
    llama = report("meta-llama/Llama-3.2-3B")
    assert any(x.gpu_model == "T4" for x in llama.serving)


def test_a_sparse_attention_model_is_served_only_where_vllm_has_its_kernels() -> None:
    """A page review found DeepSeek-V3.2's serving headline on 16 A100s, and rows on T4s and L4s: vLLM runs its
    sparse attention (a config with index_topk) only with sparse MLA kernels, FlashMLA's on compute capability 9.x
    and 10.x (v1/attention/backends/mla/flashmla_sparse.py, v0.19.1). Those GPUs get no serving plan, speed or
    card batch, and a warning names them; DeepSeek-V3, without the indexer, keeps every GPU."""
    def report(mid: str):
        cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json)
        return estimate(cfg, model_id=mid, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    v32 = report("deepseek-ai/DeepSeek-V3.2")
    served = {p.gpu_model for p in v32.plans if p.method == "serve"}
    assert served == {"H100 SXM", "H200 SXM"} == {x.gpu_model for x in v32.serving}
    assert [c.serve_max_batch for c in v32.memory.cards if c.name in ("T4 16 GB", "L4 24 GB", "A100 40 GB")] == [0] * 3
    (warning,) = [x for x in v32.findings if x.check == "sparse_attention_serving"]
    assert warning.message.endswith("no serving is priced on the T4, L4, A100 40GB SXM, A100 80GB SXM.")
    v3 = report("deepseek-ai/DeepSeek-V3")
    assert {p.gpu_model for p in v3.plans if p.method == "serve"} > served
    assert not any(x.check == "sparse_attention_serving" for x in v3.findings)


def test_a_server_runs_at_most_vllms_default_number_of_sequences() -> None:
    """A page review found gemma-3-1b-it priced at 2,420 sequences at once on an A100 80GB: `vllm serve` runs at
    most max_num_seqs of them unless told, 256 by default, 1,024 on a GPU of 70 GiB or more that is not an A100
    (EngineArgs.get_batch_defaults, v0.19.1). The card table's batch is still what memory holds."""
    assert vllm_max_num_seqs(85_899_345_920, "H100 SXM") == 1024 == vllm_max_num_seqs(150_754_820_096, "H200 SXM")
    assert vllm_max_num_seqs(85_899_345_920, "A100 80GB SXM") == 256 == vllm_max_num_seqs(23_034_347_520, "L4")
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "google/gemma-3-1b-it").config_json)
    r = estimate(cfg, model_id="google/gemma-3-1b-it", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    seqs = {x.gpu_model: x.max_concurrency for x in r.serving}
    assert seqs["A100 80GB SXM"] == 256 and seqs["H100 SXM"] == seqs["H200 SXM"] == 1024
    assert next(c for c in r.memory.cards if c.name == "A100 / H100 80 GB").serve_max_batch > 1024


def test_a_card_serving_in_float32_says_so_in_its_cell(capsys) -> None:
    """A page review found gemma-3-1b-it's T4 cell "batch 142" under the column "Serve bf16": the card's figure is in
    float32 (CardPlan.serve_dtype), and its cell now says so; other cards and models say nothing more."""
    assert main(["google/gemma-3-1b-it", "--plan"]) == 0
    t4 = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ T4 16 GB"))
    assert "batch 142, float32" in t4
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "google/gemma-3-1b-it").config_json)
    r = estimate(cfg, model_id="google/gemma-3-1b-it", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    assert [c.serve_dtype for c in r.memory.cards] == ["float32", "", "", "", ""]
    assert all(c.serve_dtype == "" for c in report_of_llama().memory.cards)


def report_of_llama():
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-3.2-3B").config_json)
    return estimate(cfg, model_id="meta-llama/Llama-3.2-3B", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
