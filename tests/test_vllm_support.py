"""vLLM 0.19.1's rules for where and how it serves a model over the priced GPUs (estimator/vllm_support.py, the
pipeline stages of setups.serving_job): the quantisations it refuses on a GPU, by compute capability and activation
dtype, and its deprecations; its pipeline cut, the sampler on the last stage, the forward and the hand-off on the
others. Each rule is checked against the line of vLLM's source its docstring names."""

from __future__ import annotations

import dataclasses
import json

from generator.cli import main
from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.parallel import PARTS, Setup, per_gpu
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
    for mid in (LLAMA8, "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-11B-Vision"):
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
        assert (towers > 0) == (mid == "meta-llama/Llama-3.2-11B-Vision") and towers == 2 * g.params_towers
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
    embedding are cut), and profile_run runs the encoder on every rank: on 4 stages of Llama-3.2-11B-Vision every
    stage's weights hold the tower, 16-bit, the first once beside its embedding. A training job's stages do not
    (Megatron-LM and DeepSpeed place the ends on their own stage)."""
    mid = "meta-llama/Llama-3.2-11B-Vision"
    a, g = _model(mid)
    server = ServerDefaults(S.serve_step_tokens, S.serve_max_sequences)
    shape = model_shape(a, g)
    assert shape.tower_params == g.params_towers > 800_000_000  # Mllama's 32 + 8 layer vision encoder
    serve = serving_jobs(g, S, serve_profile(a, g, S, 4096, server=server), server, model_serve_weight_bytes(a, g, S),
                         shape, 4096)["serve"]
    bare = dataclasses.replace(serve, tower_params=0)
    (_, rows), (_, bare_rows) = stage_rows(serve, serve.phases, 4), stage_rows(bare, bare.phases, 4)
    weights = PARTS.index("weights")
    got = [r[weights] - b[weights] for (_, r), (_, b) in zip(rows, bare_rows, strict=True)]
    assert got[:2] == [0, 0] and set(got[2:]) == {2 * shape.tower_params}  # the first stage's two phases, the rest
    lora = training_job(a, g, S, Job(method="lora", tokens=1024), shape)
    assert lora.tower_params == 0


def _ct(weights: dict, activations: dict | None = None, **more) -> dict:
    """A compressed-tensors quantization_config of one group over every Linear (llm-compressor's layout)."""
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": group},
            "ignore": ["lm_head"], **more}


def test_compressed_tensors_is_refused_by_its_schemes_own_capability() -> None:
    """compressed-tensors picks a scheme per layer (compressed_tensors.py _get_scheme_from_parts, v0.19.1) and refuses
    one under its get_min_capability: MXFP4 weights (4-bit floats, symmetric groups of 32) need 8.0
    (CompressedTensorsW4A16Mxfp4): no T4; W4A16 int weights (WNA16, 7.5) and FP8 W8A8 (falling back to W8A16's 7.5
    under 8.9) keep it. A 2:4-sparse FP8 checkpoint takes CompressedTensors24, which vLLM no longer serves: nowhere,
    said so, where a 2:4 checkpoint of 4-bit weights alone (not Cutlass 2:4's) is served."""
    mxfp4 = _quantised(LLAMA8, _ct({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                                    "symmetric": True}))
    assert "T4" not in {p.gpu_model for p in mxfp4.plans if p.method == "serve"}
    (warning,) = [x for x in mxfp4.findings if x.check == "quantised_serving"]
    assert warning.message.startswith("vLLM refuses compressed-tensors checkpoints below compute capability 8.0 (the "
                                      "T4)")
    w4a16 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    fp8 = ({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
           {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True})
    for q in (_ct(w4a16), _ct(*fp8)):
        r = _quantised(LLAMA8, q)
        assert "T4" in {p.gpu_model for p in r.plans if p.method == "serve"}, q
        assert not any(x.check == "quantised_serving" for x in r.findings), q
    sparse = {"sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4", "targets": ["Linear"]}}
    refused = _quantised(LLAMA8, _ct(*fp8, **sparse))
    assert not any(p.method == "serve" for p in refused.plans) and not refused.serving
    assert [u.reason for u in refused.plans_unreachable if u.method == "serve"] == [SERVED_NOWHERE]
    (warning,) = [x for x in refused.findings if x.check == "quantised_serving"]
    assert "no longer serves 2:4-sparse compressed-tensors checkpoints" in warning.message
    weight_only = _quantised(LLAMA8, _ct(w4a16, **sparse))
    assert "T4" in {p.gpu_model for p in weight_only.plans if p.method == "serve"}


def test_the_terminal_says_where_vllm_cuts_a_two_card_split(capsys) -> None:
    """The CLI's per-card lines give the serving split at vLLM's cut, and the sentence above them says whose cut each
    method's is: Llama-3.1-8B's two T4s cut after layer 16, the second card the larger (its head and sampler)."""
    assert main([LLAMA8, "--plan"]) == 0
    out = " ".join(capsys.readouterr()[0].split())
    assert "T4 16 GB, Serve bf16: 2 cards, cut after layer 16: 8.51 GB + 9.60 GB at batch 1; batch 14." in out
    assert "training's cut balances the cards, serving's is vLLM's: the layers halved" in out
