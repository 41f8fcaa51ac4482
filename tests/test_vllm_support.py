"""vLLM 0.19.1's rules for where and how it serves a model over the priced GPUs (estimator/vllm_support.py, the
pipeline stages of setups.serving_job): the quantisations it refuses on a GPU, by compute capability and activation
dtype, and its deprecations; its pipeline cut, the sampler on the last stage, the forward and the hand-off on the
others. Each rule is checked against the line of vLLM's source its docstring names."""

from __future__ import annotations

import dataclasses
import json

import pytest

from generator.cli import main
from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.parallel import PARTS, Setup, per_gpu, tp_phases
from generator.estimator.memory.pipeline import stage_rows, vllm_stage_layers
from generator.estimator.memory.profile import serve_profile
from generator.estimator.memory.serve_weights import model_serve_weight_bytes
from generator.estimator.memory.splits import engine_cut
from generator.estimator.memory.vllm_server import ServerDefaults, residual_bytes, startup_bytes
from generator.estimator.normalise import normalise
from generator.estimator.setups import inference_job, model_shape, serving_jobs, training_job
from generator.estimator.vllm_support import SERVED_NOWHERE
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.settings import load_settings

SETTINGS = load_settings()
S = SETTINGS.assumptions
LARGE = ServerDefaults(8192, 1024)  # an H100's defaults (vllm_server.large_gpu_server)
LLAMA8 = "meta-llama/Llama-3.1-8B"


def _model(mid: str):
    a = normalise(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), mid)
    return a, build_graph(a)


def test_a_quantised_checkpoint_is_served_only_where_vllm_takes_its_quantisation() -> None:
    """gpt-oss's MXFP4 experts read 2× T4 with tensor parallel, 131 tokens/s: vLLM 0.19.1 refuses mxfp4 below compute
    capability 8.0 (Mxfp4Config.get_min_capability, checked in config/vllm.py _get_quantization_config), and the
    T4 is 7.5. The T4 gets no serving plan, speed or card batch, and a warning names it; its training setups stay
    (training does not run vLLM); an FP8 checkpoint (75) and a 16-bit one keep the T4."""
    def report(mid: str):
        cfg = json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json)
        return estimate(cfg, model_id=mid, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)
    gpt_oss = report("openai/gpt-oss-20b")
    assert "T4" not in {p.gpu_model for p in gpt_oss.plans if p.method == "serve"} | \
        {x.gpu_model for x in gpt_oss.serving}
    assert {p.gpu_model for p in gpt_oss.plans if p.method == "lora" and p.fits} >= {"T4"}
    assert next(c for c in gpt_oss.memory.cards if c.name == "T4 16 GB").serve_max_batch == 0
    (warning,) = [x for x in gpt_oss.findings if x.check == "quantised_serving"]
    assert warning.message.startswith("vLLM refuses mxfp4 checkpoints below compute capability 8.0 (the T4) ")
    assert warning.message.endswith("no serving is priced there.")
    assert not any(x.check == "sparse_attention_serving" for x in gpt_oss.findings)
    for mid in ("Qwen/Qwen3-32B-FP8", "meta-llama/Llama-3.1-8B"):
        r = report(mid)
        assert "T4" in {p.gpu_model for p in r.plans if p.method == "serve"}, mid
        assert not any(x.check == "quantised_serving" for x in r.findings), mid

def _quantised(mid: str, quantization: dict):
    """The snapshot's config of `mid` with a quantization_config, as the CLI or the calculator may be given one."""
    cfg = {**json.loads(load_record(DEFAULT_SNAPSHOT_DIR, mid).config_json), "quantization_config": quantization}
    return estimate(cfg, model_id=mid, assumptions=S, cards=SETTINGS.cards, gpus=SETTINGS.gpus)

def test_vllm_refuses_a_quantisation_by_the_configs_own_method_and_its_activations() -> None:
    """Review of the refusals (vLLM 0.19.1, config/vllm.py _get_quantization_config: get_min_capability and
    get_supported_act_dtypes of the config's quant_method; config/model.py: deprecated methods):
    - FBGEMM's FP8 is read as FP8 storage but needs 8.0 (fbgemm_fp8.py), where FP8 needs 7.5: not on a T4; vLLM
      also deprecates it, which a second warning says;
    - an AWQ or FP8 Gemma on a T4 would run float32 activations (no bf16; float16 vLLM refuses for gemma3), which
      neither method takes: not on a T4; a bitsandbytes one, which takes them, is served there in float32;
    - MXFP8 needs 10.0, above every priced GPU: the answer says vLLM serves it nowhere, not that nothing holds it."""
    fbgemm = _quantised("meta-llama/Llama-3.1-8B", {"quant_method": "fbgemm_fp8"})
    assert "T4" not in {p.gpu_model for p in fbgemm.plans if p.method == "serve"}
    assert {x.check for x in fbgemm.findings} >= {"quantised_serving", "deprecated_quantisation"}
    for q in ({"quant_method": "awq", "bits": 4, "group_size": 128}, {"quant_method": "fp8"}):
        r = _quantised("google/gemma-3-1b-it", q)
        assert "T4" not in {p.gpu_model for p in r.plans if p.method == "serve"}, q
        (warning,) = [x for x in r.findings if x.check == "quantised_serving"]
        assert "with float32 activations" in warning.message and "on the T4" in warning.message, q
        assert not any(x.check == "half_precision_serving" for x in r.findings), q
    bnb = _quantised("google/gemma-3-1b-it", {"quant_method": "bitsandbytes", "load_in_4bit": True})
    assert "T4" in {p.gpu_model for p in bnb.plans if p.method == "serve"}
    assert not any(x.check == "quantised_serving" for x in bnb.findings)
    mxfp8 = _quantised("meta-llama/Llama-3.1-8B", {"quant_method": "mxfp8"})
    assert not any(p.method == "serve" for p in mxfp8.plans) and not mxfp8.serving
    assert [u.reason for u in mxfp8.plans_unreachable if u.method == "serve"] == [SERVED_NOWHERE]

def test_a_serving_pipeline_is_cut_as_vllm_cuts_it() -> None:
    """vLLM's get_pp_indices (distributed/utils.py, v0.19.1): layers // stages each, the remainder one each to the
    stages before the last, from the second-to-last back: 5 layers on 3 stages [2, 2, 1] (its own docstring's
    rule), 10 on 4 [2, 3, 3, 2], 61 on 16 [3, 3, 4 x 13, 3]. A serving job's stages take that cut, a training job's
    the one whose largest stage is least."""
    assert vllm_stage_layers(5, 3) == [2, 2, 1] and vllm_stage_layers(10, 4) == [2, 3, 3, 2]
    assert vllm_stage_layers(61, 16) == [3, 3] + [4] * 13 + [3] and vllm_stage_layers(32, 4) == [8] * 4
    a, g = _model("meta-llama/Llama-3.1-8B")
    jobs = serving_jobs(g, S, serve_profile(a, g, S, 4096, server=LARGE), LARGE, model_serve_weight_bytes(a, g, S),
                        model_shape(a, g), 4096)
    for stages in (2, 3, 5, 7):
        assert list(stage_rows(jobs["serve"], jobs["serve"].phases, stages)[0]) == vllm_stage_layers(32, stages)

def test_only_the_last_pipeline_stage_samples_and_every_stage_runs_the_forward() -> None:
    """vLLM's profile run samples on the last pipeline rank only (gpu_model_runner.profile_run:
    get_pp_group().is_last_rank), while every stage runs the step's forward through its own layers, one layer's
    working set at a time, and every stage but the first holds the hidden states and residual handed to it (its
    intermediate tensors, a step's worth: review of F87). On 4 stages of Llama-3.1-8B: the forward on each, the
    hand-off on the middle and last, the sampler on the last; one GPU's figure holds the forward's transient as
    activations and the sampler as overhead."""
    a, g = _model("meta-llama/Llama-3.1-8B")
    startup = startup_bytes(g.spec, S, LARGE, 4096)
    jobs = serving_jobs(g, S, serve_profile(a, g, S, 4096, server=LARGE), LARGE, model_serve_weight_bytes(a, g, S),
                        model_shape(a, g), 4096)
    serve = jobs["serve"]
    residual = residual_bytes(g.spec, S, LARGE, 4096)
    assert serve.engine_cut and serve.handoff_bytes == residual
    layers, rows = stage_rows(serve, serve.phases, 4)
    assert list(layers) == [8] * 4 and len(rows) == 6  # first, middle (two stages alike: listed once), last
    act, overhead = PARTS.index("activations"), PARTS.index("overhead")
    for k, ((_, forward), (_, sampler)) in enumerate(zip(rows[::2], rows[1::2], strict=True)):
        handoff = 0 if k == 0 else residual
        assert (forward[act], forward[overhead]) == (startup.forward_bytes - residual, residual + handoff), k
        assert sampler[act] == 0
        assert sampler[overhead] == handoff + (startup.sampler_bytes if k == 2 else 0), k
    (forward, _) = serve.phases
    alone = per_gpu(dataclasses.replace(serve, phases=(forward,)), Setup())
    assert dict(alone.breakdown)["activations"] == forward.transient == startup.forward_bytes - residual
    (_, sampler) = serve.phases
    alone = per_gpu(dataclasses.replace(serve, phases=(sampler,)), Setup())
    assert dict(alone.breakdown)["overhead"] == startup.sampler_bytes

def test_hf_generate_on_pipeline_stages_keeps_the_balancing_cut() -> None:
    """--method inference prices transformers' generate, not vLLM: its stages are cut to balance them, as a
    training job's are (review of F87, which had given it vLLM's even cut): Llama-3.1-8B on 5 stages."""
    record = load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-3.1-8B")
    a, g = _model("meta-llama/Llama-3.1-8B")
    job = inference_job(a, g, S, Job(method="inference", tokens=4096), model_shape(a, g), record.id)
    assert not job.engine_cut and job.handoff_bytes == 0
    layers, _ = stage_rows(job, job.phases, 5)
    assert sum(layers) == 32 and list(layers) != vllm_stage_layers(32, 5)


def test_a_method_vllm_refuses_everywhere_is_not_said_to_be_served_with_a_flag() -> None:
    """Review of the refusals: fp_quant needs compute capability 10.0, above every priced GPU, and vLLM deprecates it:
    the answer says vLLM serves it nowhere, with no word of serving it with --allow-deprecated-quantization;
    petit_nvfp4 (deprecated too) needs 9.0 (petit.py): not on the A100s or the L4, served on the H100 and H200 with
    the flag."""
    fp_quant = _quantised(LLAMA8, {"quant_method": "fp_quant"})
    assert [u.reason for u in fp_quant.plans_unreachable if u.method == "serve"] == [SERVED_NOWHERE]
    assert not any(x.check == "deprecated_quantisation" for x in fp_quant.findings)
    petit = _quantised(LLAMA8, {"quant_method": "petit_nvfp4"})
    assert {p.gpu_model for p in petit.plans if p.method == "serve"} == {"H100 SXM", "H200 SXM"}
    assert any(x.check == "deprecated_quantisation" for x in petit.findings)


def test_hf_generate_on_pipeline_stages_holds_no_nccl_buffers(capsys) -> None:
    """transformers' generate over several GPUs with --strategy pp is a device_map split in one process: no process
    group, no NCCL buffers beside its peak (parallel.ranks); with tensor parallelism, ranks and buffers."""
    record = load_record(DEFAULT_SNAPSHOT_DIR, LLAMA8)
    for strategy, buffers in (("pp", 0), ("tp", S.nccl_bytes_per_gpu)):
        for metric in ("allocated", "nvidia-smi"):
            m = estimate(json.loads(record.config_json), model_id=LLAMA8, assumptions=S, cards=SETTINGS.cards,
                         gpus=SETTINGS.gpus, job=Job(method="inference", tokens=4096, metric=metric),
                         setup=Setup(strategy, 2), structure=False).memory
            assert m.nccl_bytes == buffers, (strategy, metric)
            assert m.held_nccl_bytes == (buffers if metric == "allocated" else 0), (strategy, metric)
    assert main([LLAMA8, "--method", "inference", "--gpus", "2", "--strategy", "pp"]) == 0
    assert "NCCL" not in capsys.readouterr()[0]
    assert main([LLAMA8, "--method", "inference", "--gpus", "2", "--strategy", "tp"]) == 0
    assert "with 1.56 GB of NCCL buffers beside it on each GPU" in " ".join(capsys.readouterr()[0].split())


def test_the_card_tables_serving_split_is_vllms_cut_and_the_setups_stages() -> None:
    """A card's two-card serving split (card_plans, splits.engine_cut) is cut as vLLM cuts (get_pp_indices, not the
    cut that balances the cards) and holds each stage to what the setups' two-GPU serving plan holds it
    (pipeline.stage_rows): the forward on both, the sampler and the hand-off on the second. Equal to the byte on
    models whose layers are alike (stage_rows spreads the weights evenly over the layers; a split reads each
    layer's own). Before: Llama-3.1-8B's T4 split cut after layer 15 and put the whole startup on the first card."""
    for mid in (LLAMA8, "Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-VL-7B-Instruct"):
        a, g = _model(mid)
        server = ServerDefaults(S.serve_step_tokens, S.serve_max_sequences)  # the T4's, the L4's (reference_server)
        profile = serve_profile(a, g, S, S.serve_tokens, server=server)
        serve = serving_jobs(g, S, profile, server, model_serve_weight_bytes(a, g, S), model_shape(a, g),
                             S.serve_tokens)["serve"]
        layers, rows = stage_rows(serve, serve.phases, 2)
        half = len(rows) // 2
        stages = (max(sum(r) for _, r in rows[:half]), max(sum(r) for _, r in rows[half:]))
        cut = engine_cut(profile)
        assert (cut.layers, (cut.first, cut.second)) == (layers[0], stages), mid
        forward, sampler, handoff, towers = profile.serving
        assert handoff == residual_bytes(g.spec, S, server, S.serve_tokens) and (forward, sampler) == tuple(
            startup_bytes(g.spec, S, server, S.serve_tokens))
        # a middle stage runs the forward beside the hand-off and its own towers; the whole model holds the larger
        # peak alone, and the towers once
        n = profile.layers
        middle = profile.static_prefix[n - 1] - profile.static_prefix[1]
        assert profile.parts(1, n - 1, False, False)[0] == middle + forward + handoff + towers
        assert (towers > 0) == (mid == "Qwen/Qwen2.5-VL-7B-Instruct") and towers == 2 * g.params_towers
        assert profile.parts(0, n, True, True)[0] == profile.total_static
    record = load_record(DEFAULT_SNAPSHOT_DIR, LLAMA8)
    report = estimate(json.loads(record.config_json), model_id=LLAMA8, assumptions=S, cards=SETTINGS.cards,
                      gpus=SETTINGS.gpus, structure=False)
    t4 = next(c for c in report.memory.cards if c.name.startswith("T4"))
    split = next(p for p in t4.split or () if p.method == "serve")
    assert (split.cut_after_layer, split.cards) == (16, 2) and split.stage_bytes_batch1[1] > split.stage_bytes_batch1[0]


def test_vllm_builds_a_models_towers_on_every_pipeline_stage() -> None:
    """vLLM's multimodal wrappers build their vision and audio towers and projectors whatever the pipeline rank
    (_mark_tower_model in qwen2_5_vl.py, qwen3_vl.py, mllama4.py, v0.19.1; only the language model's layers and token
    embedding are cut), and profile_run runs the encoder on every rank: on 4 stages of Qwen2.5-VL-7B every
    stage's weights hold the tower, 16-bit, the first once beside its embedding. A training job's stages do not
    (Megatron-LM and DeepSpeed place the ends on their own stage)."""
    mid = "Qwen/Qwen2.5-VL-7B-Instruct"
    a, g = _model(mid)
    server = ServerDefaults(S.serve_step_tokens, S.serve_max_sequences)
    shape = model_shape(a, g)
    assert shape.tower_params == g.params_towers > 600_000_000  # its 32-layer vision transformer and merger
    serve = serving_jobs(g, S, serve_profile(a, g, S, 4096, server=server), server, model_serve_weight_bytes(a, g, S),
                         shape, 4096)["serve"]
    bare = dataclasses.replace(serve, tower_params=0)
    (_, rows), (_, bare_rows) = stage_rows(serve, serve.phases, 4), stage_rows(bare, bare.phases, 4)
    weights = PARTS.index("weights")
    got = [r[weights] - b[weights] for (_, r), (_, b) in zip(rows, bare_rows, strict=True)]
    assert got[:2] == [0, 0] and set(got[2:]) == {2 * shape.tower_params}  # the first stage's two phases, the rest
    lora = training_job(a, g, S, Job(method="lora", tokens=1024), shape)
    assert lora.tower_params == 0


def _ct(weights: dict | None, activations: dict | None = None, fmt: str = "pack-quantized", **more) -> dict:
    """A compressed-tensors quantization_config of one group over every Linear (llm-compressor's layout)."""
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations}
    return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": group},
            "ignore": ["lm_head"], **more}


def _serves_on(q: dict) -> set[str]:
    return {p.gpu_model for p in _quantised(LLAMA8, q).plans if p.method == "serve"}


ALL_GPUS = {"T4", "L4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H200 SXM"}
W4A16 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
FP8 = ({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
       {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True})
SPARSE = {"format": "sparse-24-bitmask", "sparsity_structure": "2:4", "targets": ["Linear"], "ignore": ["lm_head"]}


def test_compressed_tensors_is_refused_by_its_schemes_own_capability() -> None:
    """compressed-tensors picks a scheme per layer (compressed_tensors.py _get_scheme_from_parts, v0.19.1) and refuses
    one under its get_min_capability: MXFP4 weights (4-bit floats, symmetric groups of 32) need 8.0
    (CompressedTensorsW4A16Mxfp4): no T4, however the group spells it (a strategy left to group_size, numbers as
    strings: QuantizationArgs' defaults and lax parsing). 4-bit weights with dynamic FP8 activations per token in a
    pack-quantized checkpoint take CompressedTensorsW4A8Fp8 on capability 9.0 alone and no scheme elsewhere; in a
    format that quantises activations, W4A8Int elsewhere. W4A16 (WNA16, 7.5) and FP8 W8A8 in float-quantized
    (W8A16's 7.5 under 8.9) keep the T4."""
    mxfp4 = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "symmetric": True}
    loose = {"num_bits": "4", "type": "float", "group_size": "32"}
    for weights in (mxfp4, loose):
        assert _serves_on(_ct(weights)) == ALL_GPUS - {"T4"}, weights
    (warning,) = [x for x in _quantised(LLAMA8, _ct(mxfp4)).findings if x.check == "quantised_serving"]
    assert warning.message.startswith("vLLM refuses compressed-tensors checkpoints below compute capability 8.0 (the "
                                      "T4)")
    w4a8 = ({**W4A16, "group_size": 128}, {**FP8[1]})
    assert _serves_on(_ct(*w4a8)) == {"H100 SXM", "H200 SXM"}
    (warning,) = [x for x in _quantised(LLAMA8, _ct(*w4a8)).findings if x.check == "quantised_serving"]
    assert "other than compute capability 9.0 (the T4, L4, A100" in warning.message
    assert _serves_on(_ct(*w4a8, fmt="float-quantized")) == ALL_GPUS
    for q in (_ct(W4A16), _ct(*FP8, fmt="float-quantized")):
        assert _serves_on(q) == ALL_GPUS, q
        assert not any(x.check == "quantised_serving" for x in _quantised(LLAMA8, q).findings), q


def test_a_2_4_sparse_checkpoint_is_served_where_vllm_still_serves_one() -> None:
    """supports_cutlass_24 (compressed_tensors.py): a sparsity_config of structure "2:4" over its targets takes
    CompressedTensors24, which 0.19.1 no longer serves, on a layer with no quantisation or 8-bit weights and
    activations; a layer of 4-bit weights alone takes WNA16. No targets (vLLM maps none: _parse_sparsity_config) or
    every target ignored: nothing is sparse to vLLM. A layer the quantisation ignores but the sparsity targets is
    unquantised and sparse: refused (review of the first rule)."""
    refused = _quantised(LLAMA8, _ct(*FP8, fmt="float-quantized", sparsity_config=SPARSE))
    assert not any(p.method == "serve" for p in refused.plans) and not refused.serving
    assert [u.reason for u in refused.plans_unreachable if u.method == "serve"] == [SERVED_NOWHERE]
    (warning,) = [x for x in refused.findings if x.check == "quantised_serving"]
    assert "no longer serves 2:4-sparse compressed-tensors checkpoints" in warning.message
    assert _serves_on(_ct(W4A16, sparsity_config=SPARSE)) == ALL_GPUS
    for sparsity in ({**SPARSE, "targets": []}, {k: v for k, v in SPARSE.items() if k != "targets"},
                     {**SPARSE, "ignore": ["Linear"]}):
        assert _serves_on(_ct(*FP8, fmt="float-quantized", sparsity_config=sparsity)) == ALL_GPUS, sparsity
    attention_unquantised = {**_ct(W4A16, sparsity_config=SPARSE), "ignore": ["lm_head", "re:.*self_attn.*"]}
    assert _serves_on(attention_unquantised) == set()


@pytest.mark.parametrize("q", [
    _ct(W4A16, sparsity_config={**SPARSE, "format": ["dense"]}),
    _ct(W4A16, sparsity_config={**SPARSE, "sparsity_structure": {"n": 2}}),
    {"quant_method": "compressed-tensors", "config_groups": [W4A16]},
    {"quant_method": "compressed-tensors", "config_groups": {"g": None, "h": "x"}},
    _ct(None), _ct([4]), _ct({"num_bits": {"four": 4}, "group_size": [32], "type": 4, "symmetric": "yes"}),
    _ct(W4A16, sparsity_config=[SPARSE]),
])
def test_a_malformed_compressed_tensors_config_is_read_without_an_exception(q: dict) -> None:
    """Hostile groups and sparsity configs (a list where a mapping or string belongs, a mapping for a number): the
    serving rules read them as vLLM's defaults would, or not at all, and the estimate goes on (review of the first
    rules, whose sparsity check raised TypeError on a list)."""
    assert _quantised(LLAMA8, q).plans


def test_tensor_and_pipeline_parallel_serving_splits_the_ends_over_the_ranks() -> None:
    """Under tp+pp each pipeline stage is a node of tensor-parallel ranks: the embedding and head are vocab-parallel
    and vLLM splits the towers' weights too (mm_encoder_tp_mode "weights", config/multimodal.py), so a rank holds
    its 1/8 of the ends beside its share of the layers. Review of F87 and the towers: the frozen ends were charged
    whole on one rank and taken whole out of its split layers, leaving Qwen2.5-VL-7B's layers at 0 bytes (each
    stage's weights its ends alone, 2.44 GB). The two stages' weights now add up to one rank's, plus the towers'
    1/8 on the second."""
    a, g = _model("Qwen/Qwen2.5-VL-7B-Instruct")
    server = ServerDefaults(S.serve_step_tokens, S.serve_max_sequences)
    shape = model_shape(a, g)
    serve = serving_jobs(g, S, serve_profile(a, g, S, 4096, server=server), server, model_serve_weight_bytes(a, g, S),
                         shape, 4096)["serve"]
    rank = tp_phases(serve, serve.phases, 8)
    counts, rows = stage_rows(serve, rank, 2, 8)
    weights = PARTS.index("weights")
    first, second = rows[0][1][weights], rows[-1][1][weights]
    layers = rank[0].weights - 2 * (shape.first_stage_params + shape.last_stage_params) / 8  # one rank's layers
    ends = (shape.first_stage_params, shape.last_stage_params + shape.tied_head_params + shape.tower_params)
    for stage, end, n in zip((first, second), ends, counts, strict=True):  # 28 alike layers: n / 28 of them each
        assert abs(stage - 2 * end / 8 - n / 28 * layers) <= 2, n
    assert abs(first + second - rank[0].weights - 2 * (shape.tied_head_params + shape.tower_params) / 8) <= 4


def test_a_quantised_model_served_in_float32_keeps_its_packed_weights_packed() -> None:
    """vLLM serves gemma2 in float32 on a T4 (no bf16, float16 refused), and takes bitsandbytes there: the 16-bit
    parameters load in float32, the 4-bit ones stay packed (a uint8 of two and an fp32 absmax per 64), whatever the
    activations' dtype. Doubling them too (stop 49's left-alone item) put gemma-2-9b's one T4 at 18.25 GB for 13.57.
    Reference: gemma-2-9b's config (hidden 3,584; 42 layers; 16 query and 8 KV heads of 256; MLP 14,336), NF4's
    bytes per weight 0.5 + 4 / 64."""
    q = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    _, g = _model("google/gemma-2-9b")
    a = normalise({**json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "google/gemma-2-9b").config_json),
                   "quantization_config": q}, "google/gemma-2-9b")
    h, layers, inter = 3584, 42, 14336
    linear = layers * (h * 4096 + 2 * h * 2048 + 4096 * h + 3 * h * inter)  # q, k, v, o; gate, up, down
    packed = linear // 2 + 4 * (linear // 64)
    served, in_float32 = (model_serve_weight_bytes(a, g, S, f) for f in (False, True))
    assert abs(served - (2 * (g.params_total - linear) + packed)) <= 2 * layers * 7  # a few blocks' rounding
    assert 2 * in_float32 - served == 2 * (g.params_total - linear)  # only the 16-bit parameters double
    t4 = next(c for c in _quantised("google/gemma-2-9b", q).memory.cards if c.name.startswith("T4"))
    assert t4.serve_dtype == "float32" and 13.5e9 < t4.serve_bytes_batch1 < 13.7e9
