"""`vllm serve` holds, beside its weights and KV caches, the peak it measures at startup: the larger of one step's
forward (max_num_batched_tokens, whatever the prompts' length) and its sampler's run over max_num_seqs rows.

Sources (vLLM v0.19.1): engine/arg_utils.py EngineArgs.get_batch_defaults (OPENAI_API_SERVER: 8,192 tokens and 1,024
sequences on a GPU of 70 GiB or more but the A100, 2,048 and 256 on the rest); v1/worker/gpu_model_runner.py
profile_run (`self._dummy_run(self.max_num_tokens, is_profile=True)`, then `_dummy_sampler_run` on its last hidden
states, one row per request of min(max_num_tokens, max_num_seqs)); v1/sample/sampler.py forward
(`logits.to(torch.float32)`), ops/topk_topp_sampler.py forward_native (`logits.softmax(dim=-1, dtype=torch.float32)`)
and random_sample (`torch.empty_like(probs)`); model_executor/layers/logits_processor.py (every tensor-parallel rank
all-gathers the logits: Platform.use_all_gather). An encoder's input is not chunked; HF generate (--method inference)
is not vLLM.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import yaml

from generator.cli import main
from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.parallel import tp_phases
from generator.estimator.memory.profile import kv_bytes_per_sequence, serve_profile, serve_token_bytes
from generator.estimator.memory.serve_weights import model_serve_weight_bytes
from generator.estimator.memory.vllm_server import (
    ServerDefaults,
    large_gpu_server,
    reference_server,
    residual_bytes,
    server_defaults,
    startup_bytes,
    step_tokens,
    widest,
)
from generator.estimator.normalise import normalise
from generator.estimator.setups import model_shape, serving_jobs
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import DEFAULT_CONFIG, load_settings
from generator.site import listing

SETTINGS = load_settings()
S = SETTINGS.assumptions
SMALL, LARGE = ServerDefaults(2048, 256), ServerDefaults(8192, 1024)


def _model(mid: str):
    a = normalise(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), mid)
    return a, build_graph(a)


def test_the_packaged_defaults_are_read_from_site_config(tmp_path) -> None:
    job = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))["job"]
    assert (job["serve_step_tokens"], job["serve_max_sequences"]) == SMALL == reference_server(S)
    assert (job["serve_step_tokens_large_gpus"], job["serve_max_sequences_large_gpus"]) == LARGE == large_gpu_server(S)
    override = tmp_path / "site_config.yaml"
    override.write_text("job:\n  serve_step_tokens: 4096\n  serve_max_sequences: 128\n", encoding="utf-8")
    assert reference_server(load_settings(override).assumptions) == (4096, 128)


def test_each_gpu_takes_vllm_serves_defaults_there() -> None:
    """70 GiB or more and not an A100: the larger defaults (the cards' usable bytes: 79.15 GiB for the 80 GB card,
    140.4 GiB for the H200; the L4's 22.03)."""
    assert server_defaults(S, 84_986_665_369, "H100 SXM") == LARGE == server_defaults(S, 150_754_820_096, "H200 SXM")
    assert server_defaults(S, 84_986_665_369, "A100 80GB SXM") == SMALL == server_defaults(S, 23_654_532_383, "L4")
    assert server_defaults(S, 70 * 2**30 - 1, "H100 PCIe") == SMALL


@pytest.mark.parametrize(("mid", "kind"), [
    ("meta-llama/Llama-3.1-70B", "decoder"),
    ("google/flan-t5-base", "encoder-decoder"),
    ("BAAI/bge-reranker-large", "encoder"),
])
def test_a_decoder_steps_in_chunks_an_encoder_decoder_at_least_whole(mid: str, kind: str) -> None:
    """A decoder's step is max_num_batched_tokens whatever the length (chunked prefill); vLLM turns chunked prefill
    off for an encoder-decoder (config/model.py) and steps max(max_model_len, the default) (arg_utils.py
    EngineArgs.__post_init__); every step is capped at max_num_seqs x max_model_len. An encoder is priced one
    sequence at a time (its batch: profile.serve_profile)."""
    _, g = _model(mid)
    assert g.spec.kind == kind
    for tokens in (512, 4096, 131_072):
        for server in (SMALL, LARGE):
            want = {"decoder": server.step_tokens, "encoder-decoder": max(tokens, server.step_tokens),
                    "encoder": tokens}[kind]
            assert step_tokens(g.spec, server, tokens) == want
    assert step_tokens(g.spec, ServerDefaults(2048, 4), 8) == (8 if kind == "encoder" else 32)  # 4 x 8 tokens


def test_llama_8b_startup_by_hand() -> None:
    """Llama-3.1-8B (hidden 4,096, MLP 14,336, vocabulary 128,256): the forward's working set is the MLP's gate, up
    and product (3 x 14,336) and two residuals, 2 B per element per token of the step; the sampler's run is 38 B per
    row and vocabulary entry (measured: test_the_startup_matches_vllms_logged_activation_peaks) beside the step's
    output and two copies of the rows' hidden states. On an H100 the sampler is the larger."""
    a, g = _model("meta-llama/Llama-3.1-8B")
    assert (a.hidden, a.intermediate, g.spec.vocab) == (4096, 14336, 128_256)
    assert widest(g.spec) == 3 * 14336
    large = startup_bytes(g.spec, S, LARGE, 4096)
    assert large.forward_bytes == 8192 * 2 * (3 * 14336 + 2 * 4096) == 838_860_800
    assert large.sampler_bytes == 1024 * 128_256 * 38 + 2 * 4096 * (8192 + 2 * 1024) == 5_074_583_552
    small = startup_bytes(g.spec, S, SMALL, 4096)
    assert (small.forward_bytes, small.sampler_bytes) == (209_715_200, 256 * 128_256 * 38 + 2 * 4096 * (2048 + 512))
    # in float32 (a GPU without bf16 serving a model vLLM refuses in float16) the logits take 4 B and need no fp32
    # copy: 38 + 2 - 4 B an entry
    fp32 = startup_bytes(g.spec, S, SMALL, 4096, float32=True)
    assert (fp32.forward_bytes, fp32.sampler_bytes) == (2 * 209_715_200, 256 * 128_256 * 36 + 4 * 4096 * (2048 + 512))
    # the model's own figure: the weights, the larger startup peak and one sequence's cache at the reference defaults
    served = model_serve_weight_bytes(a, g, S)
    assert serve_profile(a, g, S, 4096).total(1) == served + max(small) + kv_bytes_per_sequence(a, S, 4096)
    assert serve_profile(a, g, S, 4096, server=LARGE).total(1) == served + max(large) + kv_bytes_per_sequence(a, S,
                                                                                                              4096)


# vLLM's logged startup activation peak on one H100 at its defaults (8,192-token steps, 1,024 sequences), GiB:
# llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (vLLM V1, 2025; max-model-len 16,000)
LOGGED_ACTIVATION_GIB = {"meta-llama/Llama-3.1-8B-Instruct": 4.76, "Qwen/Qwen3-0.6B": 5.56, "Qwen/Qwen3-32B": 5.64,
                         "openai/gpt-oss-20b": 7.38}


def test_the_startup_matches_vllms_logged_activation_peaks() -> None:
    """Truth for the startup: vLLM logs its profile run's activation peak. Four models of vocabularies from 128,256
    to 201,088 read 38.2-38.3 B per sampler row and vocabulary entry, the figure priced
    (Assumptions.serve_sampler_bytes_per_entry), so each is within 1% with its hidden states and forward. Held out:
    Llama-3-8B on vLLM V0 (public.jsonl M170: 1.26 GiB over 256 rows and an 8,192-token step) within 3%."""
    for mid, logged in LOGGED_ACTIVATION_GIB.items():
        a, g = _model(mid)
        assert max(startup_bytes(g.spec, S, LARGE, 16_000)) == pytest.approx(logged * 2**30, rel=0.01), mid
    a, g = _model("meta-llama/Meta-Llama-3-8B")
    assert max(startup_bytes(g.spec, S, ServerDefaults(8192, 256), 8192)) == pytest.approx(1.26 * 2**30, rel=0.03)


def test_llama_70b_holds_its_startup_at_any_length() -> None:
    a, g = _model("meta-llama/Llama-3.1-70B")
    assert (a.hidden, a.intermediate) == (8192, 28672)  # its config.json
    # the working set: the largest layer transient (the MLP's gate, up and their product, 3 x 28,672 wide) and
    # two 8,192-wide residuals, 8,192 tokens at 2 B; the sampler's 1,024 rows of 128,256 and the hidden states
    # beside them hold more
    assert widest(g.spec) == 3 * 28672
    startup = startup_bytes(g.spec, S, LARGE, 4096)
    assert startup.forward_bytes == 8192 * 2 * (3 * 28672 + 2 * 8192) == 1_677_721_600
    assert startup.sampler_bytes == 1024 * 128_256 * 38 + 2 * 8192 * (8192 + 2048) == 5_158_469_632
    # so the profiles at two lengths differ by the KV cache alone, below the step as above it
    for short, long in ((512, 4096), (8192, 131_072)):
        assert serve_profile(a, g, S, long, server=LARGE).total(1) - serve_profile(a, g, S, short, server=LARGE).total(
            1) == kv_bytes_per_sequence(a, S, long) - kv_bytes_per_sequence(a, S, short)
    # a step of 32,768 tokens makes the forward (6.7 GB) the larger: the sampler beside it holds 5.6 GB
    wide = ServerDefaults(32_768, 1024)
    assert serve_profile(a, g, S, 4096, server=wide).total(1) - serve_profile(a, g, S, 4096, server=LARGE).total(
        1) == 4 * startup.forward_bytes - startup.sampler_bytes


def test_a_tensor_parallel_rank_splits_the_forward_and_samples_the_whole_vocabulary() -> None:
    """Every rank all-gathers the logits and runs the sampler (LogitsProcessor, use_all_gather); of the step's
    forward, its column-parallel outputs are split over the ranks and its two copies of the hidden states are held
    whole on each (RowParallelLinear all-reduces its output; vLLM has no sequence parallelism). Llama-3.1-8B on an
    H100's defaults: the forward 838,860,800 B, of which 2 x 8,192 x 4,096 x 2 B = 134,217,728 B of residuals."""
    a, g = _model("meta-llama/Llama-3.1-8B")
    startup = startup_bytes(g.spec, S, LARGE, 4096)
    jobs = serving_jobs(g, S, serve_profile(a, g, S, 4096, server=LARGE), LARGE, model_serve_weight_bytes(a, g, S),
                        model_shape(a, g), 4096)
    residual = 2 * 8192 * 4096 * 2
    assert residual_bytes(g.spec, S, LARGE, 4096) == residual == 134_217_728
    forward, sampler = tp_phases(jobs["serve"], jobs["serve"].phases, 2)
    assert forward.overhead_fixed == residual and forward.transient == math.ceil((startup.forward_bytes - residual) / 2)
    assert forward.activations == 0 and forward.last_stage == 0
    assert sampler.last_stage == startup.sampler_bytes and sampler.activations == sampler.transient == 0
    assert jobs["serve2"].phases[0].kv_cache == 2 * jobs["serve"].phases[0].kv_cache


def test_the_curve_reads_the_same_startup_as_the_profile() -> None:
    for mid in ("meta-llama/Llama-3.1-8B", "google/flan-t5-base"):
        a, g = _model(mid)
        base = serve_profile(a, g, S, 1024).total(1) - serve_token_bytes(g, S, 1024)
        for tokens in (512, 4096, 8192, 8193, 65_536, 131_072):
            assert serve_profile(a, g, S, tokens).total(1) == base + serve_token_bytes(g, S, tokens)


def test_hf_generate_runs_its_prompt_whole() -> None:
    """--method inference prices transformers' generate, which prefills a prompt in one forward: no vLLM default
    applies."""
    record = load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-3.1-8B")
    job = Job(method="inference", tokens=32_768)

    def peak(s) -> int:
        return estimate(json.loads(record.config_json), model_id=record.id, assumptions=s, cards=SETTINGS.cards,
                        gpus=SETTINGS.gpus, job=job).memory.peak_bytes
    assert peak(S) == peak(dataclasses.replace(S, serve_step_tokens=1 << 30, serve_max_sequences=1 << 20)) == peak(
        dataclasses.replace(S, serve_step_tokens=16, serve_step_tokens_large_gpus=16))


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
    float32 (weights, KV cache, the startup's forward; its sampler's run takes float32 logits without a copy:
    vllm_server.startup_bytes), so the T4's serving plan is searched at half its budget and
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
    # the 16-bit card's two-card split is worked out, the float32 one's not; at vLLM's even cut its second stage
    # (gemma-2's 256,000-entry head and sampler beside it) is over a T4's budget, so it holds no batch and no page
    # shows it (splits.engine_cut)
    (split,) = [sp for sp in card16.split or () if sp.method == "serve"]
    assert split.cut_after_layer == 21 and split.max_batch == 0 and split.stage_bytes_batch1[1] > card16.budget_bytes
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
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "google/gemma-3-1b-it").config_json)
    r = estimate(cfg, model_id="google/gemma-3-1b-it", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    seqs = {x.gpu_model: x.max_concurrency for x in r.serving}
    assert seqs["A100 80GB SXM"] == 256 and seqs["H100 SXM"] == seqs["H200 SXM"] == 1024
    assert next(c for c in r.memory.cards if c.name == "A100 / H100 80 GB").serve_max_batch > 1024


def test_each_gpu_is_searched_at_its_own_defaults() -> None:
    """gemma-3-1b-it's vocabulary (262,144) makes the sampler's run the startup peak: 0.94 GB over 256 rows, 3.76 GB
    over an H100's 1,024. The setups price each GPU at its own defaults; the model's own figure takes the reference
    defaults; the card that lists the A100 80GB beside the H100 takes the H100's, whose startup holds more (the row
    says a card holds the model only where each of its GPUs does), as the H200's card does."""
    mid = "google/gemma-3-1b-it"
    a, g = _model(mid)
    small, large = (max(startup_bytes(g.spec, S, d, 4096)) for d in (SMALL, LARGE))
    assert small == startup_bytes(g.spec, S, SMALL, 4096).sampler_bytes > 256 * 262_144 * 14
    r = estimate(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), model_id=mid, assumptions=S,
                 cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    peaks = {p.gpu_model: p.per_gpu_peak_bytes for p in r.plans if p.method == "serve"}
    assert peaks["H100 SXM"] - peaks["A100 80GB SXM"] == large - small == peaks["H200 SXM"] - peaks["L4"]
    assert r.memory.serve_bytes_batch1 == peaks["L4"] == serve_profile(a, g, S, r.memory.serve_tokens).total(1)
    for name, server in (("L4 24 GB", SMALL), ("A100 / H100 80 GB", LARGE), ("H200 141 GB", LARGE)):
        card = next(c for c in r.memory.cards if c.name == name)
        assert card.serve_bytes_batch1 == serve_profile(a, g, S, r.memory.serve_tokens, server=server).total(1)


def test_a_card_serving_in_float32_says_so_in_its_cell(capsys) -> None:
    """A page review found gemma-3-1b-it's T4 cell "batch 142" under the column "Serve bf16": the card's figure is in
    float32 (CardPlan.serve_dtype), and its cell now says so; other cards and models say nothing more. (142 before
    the sampler's startup run was priced at its measured bytes: 118.)"""
    assert main(["google/gemma-3-1b-it", "--plan"]) == 0
    t4 = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ T4 16 GB"))
    assert "batch 118, float32" in t4
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "google/gemma-3-1b-it").config_json)
    r = estimate(cfg, model_id="google/gemma-3-1b-it", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    assert [c.serve_dtype for c in r.memory.cards] == ["float32", "", "", "", ""]
    assert all(c.serve_dtype == "" for c in report_of_llama().memory.cards)


def report_of_llama():
    cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-3.2-3B").config_json)
    return estimate(cfg, model_id="meta-llama/Llama-3.2-3B", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)


def test_a_card_past_max_num_seqs_pays_a_sampler_row_for_each_sequence() -> None:
    """A page review found gemma-3-1b-it's L4 cell at 606 sequences, which a server holds only once raised past its
    256 (max_num_seqs), and then its sampler's run covers each of them: 14 B x 262,144 more per sequence, against
    its 28 MB of cache. The cell is the most sequences a server raised to run them all holds: each count checked
    by pricing the startup at that many rows."""
    mid = "google/gemma-3-1b-it"
    a, g = _model(mid)
    r = estimate(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), model_id=mid, assumptions=S,
                 cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    tokens = r.memory.serve_tokens
    for name, step in (("L4 24 GB", 2048), ("H200 141 GB", 8192)):
        card = next(c for c in r.memory.cards if c.name == name)
        n = card.serve_max_batch
        assert n > {2048: 256, 8192: 1024}[step]

        def held(b: int, step: int = step, budget: int = card.budget_bytes) -> bool:  # steps >= seqs: scheduler.py
            return serve_profile(a, g, S, tokens, server=ServerDefaults(max(step, b), b)).total(b) <= budget
        assert held(n) and not held(n + 1)
    # past the step too: tiny-Qwen2 on an H200 (57,795 sequences, each stepping a token more), checked the same way
    a, g = _model("trl-internal-testing/tiny-Qwen2ForCausalLM-2.5")
    tiny = estimate(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5")
                               .config_json), model_id="tiny", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    h200 = next(c for c in tiny.memory.cards if c.name == "H200 141 GB")
    n = h200.serve_max_batch
    assert n > 8192
    for b, ok in ((n, True), (n + 1, False)):
        at = serve_profile(a, g, S, tiny.memory.serve_tokens, server=ServerDefaults(b, b)).total(b)
        assert (at <= h200.budget_bytes) == ok
    # where the default holds more than the cache does, nothing changes: Llama-3.1-8B on an H200, at a fixed startup
    a, g = _model("meta-llama/Llama-3.1-8B")
    llama = estimate(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-3.1-8B").config_json),
                     model_id="meta-llama/Llama-3.1-8B", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    h200 = next(c for c in llama.memory.cards if c.name == "H200 141 GB")
    assert h200.serve_max_batch < 1024
    assert h200.serve_max_batch == serve_profile(a, g, S, llama.memory.serve_tokens, server=LARGE).max_batch(
        h200.budget_bytes)


@pytest.mark.parametrize(("mid", "warned"), [("google/flan-t5-base", True), ("google/mt5-small", True),
                                             ("meta-llama/Llama-3.2-11B-Vision", True),
                                             ("meta-llama/Llama-3.1-8B", False), ("BAAI/bge-reranker-large", False)])
def test_a_class_vllm_does_not_serve_is_said_so(mid: str, warned: bool) -> None:
    """A page review found flan-t5-base priced as `vllm serve` with "start vLLM with --max-model-len 512": vLLM
    0.19.1 serves no T5 (model_executor/models/registry.py: encoder-decoders but Whisper, Cohere's ASR and
    Nemotron-Parse removed with V0; BART, mBART and Florence-2 through a plugin), nor Mllama (removed after 0.10.2).
    The figures stay vLLM's accounting, and a warning says it does not run."""
    r = estimate(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), model_id=mid, assumptions=S,
                 cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    got = [x for x in r.findings if x.check == "vllm_support"]
    assert bool(got) == warned
    if warned:
        assert got[0].severity == "warning" and "serve" in got[0].message and "--method inference" in got[0].message
    bart = {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "vocab_size": 50265,
            "d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
            "decoder_attention_heads": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128}
    served = estimate(bart, model_id="t/bart", assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    assert served.model.kind == "encoder-decoder"
    assert not any(x.check == "vllm_support" for x in served.findings)


def test_the_listings_give_the_named_cards_serving_figure_and_its_dtype() -> None:
    """The family tables and the search summary give the serving figure of the smallest card that holds one
    sequence (Memory.serve_named_bytes), marked where vLLM serves it in float32 there; where no card holds it, the
    model's own figure beside "no single card" (a review found the H200's tight figure there)."""
    def entry(mid: str):
        record = load_record(DEFAULT_SNAPSHOT_DIR, mid)
        report = estimate(json.loads(record.config_json), model_id=mid, assumptions=S, cards=SETTINGS.cards,
                          gpus=SETTINGS.gpus)
        return report, listing.entry_for(record, report, None)
    report, gemma = entry("google/gemma-3-1b-it")
    t4 = next(c for c in report.memory.cards if c.name == "T4 16 GB")
    assert t4.serve_dtype == "float32" and gemma.serve_float32 and gemma.serve_bytes == t4.serve_bytes_batch1
    assert listing.family_rows([gemma], "../")[0]["serve"] == "6.48 GB in float32"
    assert "serving 6.48 GB in float32 (T4 16 GB)" in listing.search_text(gemma)["summary"]
    report, llama = entry("meta-llama/Llama-3.1-70B")
    assert report.memory.smallest_card_serve is None and report.memory.tight_card_serve == "H200 141 GB"
    assert llama.serve_bytes == report.memory.serve_bytes_batch1 and not llama.serve_float32
    assert "(no single card)" in listing.search_text(llama)["summary"].split("serving")[1]
