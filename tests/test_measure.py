"""The measurement harness (generator/measure): CPU-simulated steps of tiny configs against the estimator."""

from __future__ import annotations

import functools
import hashlib
import json

import pytest

from tests.conftest import snapshot_configs, snapshot_model, tiny_qwen2

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from generator.measure.setup import (Setup, config_hash, context_of, estimate_for, estimator_supports,  # noqa: E402
                                     parse_overrides, parser, setup_from_args, shrink)

# |estimate / measured - 1| for a tiny config, CPU simulation (exact tensor bytes, no allocator). The estimator
# reproduces these to within 0.1% (FINDINGS.md P1-P7); 2% leaves room for CPU-only terms (gpt2's dropout masks).
TOLERANCE = 0.02

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
TINY_GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
             "vocab_size": 50257, "n_positions": 1024, "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0}



@functools.lru_cache(maxsize=None)
def _run(config_text: str, setup: Setup):
    from generator.measure.run import run_cpu

    return run_cpu(json.loads(config_text), setup)


def _peak(config, setup):
    """One CPU-simulated run per (config, setup) for the whole module (about a second each)."""
    return _run(json.dumps(config, sort_keys=True), setup)


def _estimate(config, setup) -> int:
    from generator.settings import load_settings

    return estimate_for(config, "tiny", setup, load_settings().assumptions)["peak_bytes"]


def _within(measured: int, estimate: int) -> bool:
    return abs(estimate / measured - 1) <= TOLERANCE


# --- tiny configs against the estimate ---------------------------------------------------------------------

def test_tiny_qwen2_full_amp_peaks_in_the_loss_backward():
    result = _peak(tiny_qwen2(), Setup("full", tokens=512))
    assert result["peak"]["phase"] == "backward" and result["peak"]["stage"] == "step 2"
    assert result["measured"]["categories"]["grad"] == 0  # before any gradient exists
    assert set(result["peak"]["phase_peaks"]) == {"last step forward", "last step backward", "last step optimizer"}
    logit = 512 * 152064
    assert 3 * 4 * logit <= result["measured"]["categories"]["act"] + result["measured"]["categories"]["temp"]


def test_tiny_qwen2_full_amp_within_tolerance():
    # measured 966,542,556 B (loss backward: 3 fp32 B x T x V tensors); estimated 966,546,528 B (+0.0%)
    setup = Setup("full", tokens=512)
    assert _within(_peak(tiny_qwen2(), setup)["measured"]["peak_bytes"], _estimate(tiny_qwen2(), setup))


def test_tiny_qwen2_lora_within_tolerance():
    # measured 939,966,736 B; estimated 939,977,616 B (+0.0%)
    pytest.importorskip("peft")
    setup = Setup("lora", tokens=512)
    assert _within(_peak(tiny_qwen2(), setup)["measured"]["peak_bytes"], _estimate(tiny_qwen2(), setup))


def test_tiny_qwen2_lora_trains_only_the_adapters():
    pytest.importorskip("peft")
    result = _peak(tiny_qwen2(), Setup("lora", tokens=512))
    assert result["params"]["trainable"] == 5632  # r=16 on q, k, v, o, gate, up, down of 2 layers
    assert result["params"]["total"] == 2435016 + 5632


def test_tiny_qwen2_serving_within_tolerance():
    # measured 5,803,168 B (decode: weights + KV cache + logits); estimated 5,799,056 B (-0.1%; HF generate).
    setup = Setup("inference", precision="bf16", tokens=512, new_tokens=8)
    result = _peak(tiny_qwen2(), setup)
    assert _within(result["measured"]["peak_bytes"], _estimate(tiny_qwen2(), setup))


def test_tiny_llama_full_amp_within_tolerance():
    # measured 255,113,116 B; estimated 255,174,400 B (+0.0%)
    setup = Setup("full", tokens=512)
    assert _within(_peak(TINY_LLAMA, setup)["measured"]["peak_bytes"], _estimate(TINY_LLAMA, setup))


def test_tiny_llama_serving_within_tolerance():
    # measured 9,351,872 B (prefill); estimated 9,310,848 B (-0.4%).
    setup = Setup("inference", precision="bf16", tokens=512, new_tokens=8)
    result = _peak(TINY_LLAMA, setup)
    assert set(result["peak"]["phase_peaks"]) == {"prefill", "decode"}
    assert _within(result["measured"]["peak_bytes"], _estimate(TINY_LLAMA, setup))


def test_tiny_gpt2_lora_within_tolerance():
    # measured 320,222,920 B; estimated 320,364,160 B (+0.0%)
    pytest.importorskip("peft")
    setup = Setup("lora", tokens=512)
    assert _within(_peak(TINY_GPT2, setup)["measured"]["peak_bytes"], _estimate(TINY_GPT2, setup))


TINY_T5 = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 64, "d_ff": 256, "d_kv": 16,
           "num_heads": 4, "num_layers": 2, "vocab_size": 1000, "dropout_rate": 0.1, "decoder_start_token_id": 0,
           "pad_token_id": 0}
TINY_BERT = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 64, "intermediate_size": 256,
             "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512,
             "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}


@pytest.mark.parametrize("config, built, refused, priced", [
    (TINY_T5, "T5ForConditionalGeneration", "an encoder-decoder's generate is not simulated", True),
    (TINY_BERT, "BertForMaskedLM", "a masked LM's generate is not simulated", True),
    # priced at full size in test_encoder_dropouts (bge-reranker): at 64 wide the pooler and classifier weigh in
    ({**TINY_BERT, "architectures": ["BertForSequenceClassification"], "id2label": {"0": "score"}},
     "BertForSequenceClassification", "a sequence classifier's generate is not simulated", False),
    # an embedding model (Snowflake's arctic-embed, e5): the bare encoder, its pooler, a contrastive loss
    ({**TINY_BERT, "architectures": ["BertModel"]}, "BertModel", "an embedding model's generate is not simulated",
     True),
])
def test_encoder_decoders_and_masked_lms_run_their_own_class(config, built, refused, priced):
    """config.is_encoder_decoder: AutoModelForSeq2SeqLM (labels = the input ids, so the decoder runs as many tokens
    as the encoder); architectures ending in ForMaskedLM: AutoModelForMaskedLM (every token a label; peft's plain
    PeftModel, as no task type wraps a masked LM); in ForSequenceClassification: that class (one float label per
    sequence where num_labels is 1); a bare encoder (BertModel): AutoModel, trained on run.embedding_loss. Each is
    priced with the CPU's kernels within the tolerance, and its generate is refused by name (the harness's prefill
    feeds a decoder alone)."""
    pytest.importorskip("peft")
    from generator.measure.build import MeasureError, build_on_meta
    from generator.settings import load_settings

    assert type(build_on_meta(config, Setup("full", tokens=64))).__name__ == built
    setup = Setup("lora", tokens=256)
    run = _peak(config, setup)
    assert run["measured"]["status"] == "ok"
    if priced:
        estimate = estimate_for(config, "tiny", setup, load_settings().assumptions, kernels="cpu")["peak_bytes"]
        assert _within(run["measured"]["peak_bytes"], estimate)
    with pytest.raises(MeasureError, match=refused):
        build_on_meta(config, Setup("inference", tokens=64, new_tokens=4))


TINY_LLAVA = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "image_token_index": 999,
              "text_config": {**TINY_LLAMA, "vocab_size": 1000},
              "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14,
                                "projection_dim": 32}}


def test_a_vision_language_checkpoint_is_built_whole_and_fed_text():
    """A ForConditionalGeneration of an image-text-to-text class is built with AutoModelForImageTextToText, its
    vision tower and projector included (the estimate counts their weights), where the causal-LM mapping names the
    text model alone for some types (qwen3_5: Qwen3_5ForCausalLM; mllama); the step is text-only and priced
    within the tolerance; its generate is not refused."""
    pytest.importorskip("peft")
    from generator.measure.build import build_on_meta, hf_config, model_kind
    from generator.settings import load_settings

    model = build_on_meta(TINY_LLAVA, Setup("full", tokens=64))
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert model_kind(hf_config(TINY_LLAVA, "sdpa")) == "vision"
    assert model_kind(hf_config({**TINY_LLAVA, "architectures": ["LlavaForCausalLM"]}, "sdpa")) == "causal"
    assert type(build_on_meta(TINY_LLAVA, Setup("inference", tokens=64, new_tokens=4))) is type(model)
    setup = Setup("lora", tokens=256, images=0)
    run = _peak(TINY_LLAVA, setup)
    assert run["measured"]["status"] == "ok"
    estimate = estimate_for(TINY_LLAVA, "tiny", setup, load_settings().assumptions, kernels="cpu")["peak_bytes"]
    assert _within(run["measured"]["peak_bytes"], estimate)


def test_images_are_fed_as_the_processor_writes_them():
    """--images N (training): llava's pixel_values and its grid's patches as image tokens at the start of every
    sample (image_size 28 / patch 14: 4 tokens, the class token dropped); the step with an image holds more than the
    text-only one and is priced within the tolerance (tower_adapters.image_bytes); the flag is refused for
    inference, for a model the harness cannot feed, and where the images do not fit in the tokens."""
    pytest.importorskip("peft")
    from generator.errors import MeasureError
    from generator.measure.build import hf_config
    from generator.measure.images import check_images, image_inputs, image_tokens
    from generator.settings import load_settings

    config = hf_config(TINY_LLAVA, "sdpa")
    ids, extra = image_inputs(config, torch.ones(2, 16, dtype=torch.long), 2, torch.bfloat16)
    assert ids[:, :8].eq(999).all() and not ids[:, 8:].eq(999).any()
    assert extra["pixel_values"].shape == (4, 3, 28, 28) and extra["pixel_values"].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="do not fit"):
        image_inputs(config, torch.ones(1, 8, dtype=torch.long), 2, torch.bfloat16)
    with pytest.raises(MeasureError, match="model_type = 'qwen2': the harness feeds images to llava"):
        check_images({"model_type": "qwen2"}, 1)
    check_images({"model_type": "qwen2"}, 0)  # text only: any model
    with pytest.raises(ValueError, match="--images must be >= 0"):
        setup_from_args(parser().parse_args(["m", "--images", "-1"]))
    assert setup_from_args(parser().parse_args(["m", "--method", "inference", "--images", "2"])).images == 2
    # gemma-3: 256 soft tokens and the token_type_ids its processor returns; mllama: one <|image|> token, four tiles
    # of 1,025 patches padded to 1,032, its aspect ratio and cross-attention masks
    configs = {m: cfg for m, cfg, _ in snapshot_configs()}
    gemma, mllama = (hf_config(configs[m], "sdpa") for m in ("google/gemma-3-27b-it", "meta-llama/Llama-3.2-11B-Vision"))
    ids, extra = image_inputs(gemma, torch.ones(1, 300, dtype=torch.long), 1, torch.bfloat16)
    assert extra["token_type_ids"].sum() == 256 and extra["pixel_values"].shape == (1, 3, 896, 896)
    ids, extra = image_inputs(mllama, torch.ones(2, 16, dtype=torch.long), 1, torch.bfloat16)
    assert ids[:, 0].eq(mllama.image_token_index).all() and extra["pixel_values"].shape == (2, 1, 4, 3, 448, 448)
    assert extra["cross_attention_mask"].shape == (2, 16, 1, 4) and extra["aspect_ratio_ids"].tolist() == [[6], [6]]
    # Qwen3.5: a 448 x 448 image of 16-pixel patches, 28 x 28 merged 2 x 2 to 196 tokens, which its processor marks in
    # mm_token_type_ids (the M-RoPE positions read them: images.mrope_positions)
    qwen35 = hf_config(configs["Qwen/Qwen3.5-27B"], "sdpa")
    ids, extra = image_inputs(qwen35, torch.ones(2, 300, dtype=torch.long), 1, torch.bfloat16)
    assert extra["image_grid_thw"].tolist() == [[1, 28, 28]] * 2 and extra["pixel_values"].shape == (2 * 784, 1536)
    assert extra["mm_token_type_ids"].tolist() == [[1] * 196 + [0] * 104] * 2
    # two images: each closed by a text token (its <|vision_end|>), or get_rope_index reads one run of marks as one
    ids, extra = image_inputs(qwen35, torch.ones(1, 400, dtype=torch.long), 2, torch.bfloat16)
    assert extra["mm_token_type_ids"].tolist() == [([1] * 196 + [0]) * 2 + [0] * 6]
    assert ids[0].eq(qwen35.image_token_id).tolist() == extra["mm_token_type_ids"][0].bool().tolist()
    # Magistral (Pixtral, patch 14, merge 2): a 1,024-pixel square made 1,036 (whole 28-pixel tokens, rounded up),
    # 74 x 74 patches, 37 rows of 37 [IMG] tokens each closed by a break token (a text token), and the image_sizes
    # its tower and patch merger read; the estimate prices the same tokens
    magistral = hf_config(configs["mistralai/Magistral-Small-2509"], "sdpa")
    assert image_tokens(magistral) == (37 * 38, 74 * 74)
    ids, extra = image_inputs(magistral, torch.ones(1, 1500, dtype=torch.long), 1, torch.bfloat16)
    marked = ids[0].eq(magistral.image_token_id)
    assert int(marked.sum()) == 37 * 37 and not marked[37::38][:37].any() and not marked[37 * 38:].any()
    assert extra["pixel_values"].shape == (1, 3, 1036, 1036) and extra["image_sizes"].tolist() == [[1036, 1036]]
    assert snapshot_model("mistralai/Magistral-Small-2509")[1].spec.image_tokens == 37 * 38
    setup = setup_from_args(parser().parse_args(["m", "--method", "lora", "--tokens", "256", "--images", "1"]))
    assert setup.images == 1 and setup.to_dict()["images"] == 1
    runs = [_peak(TINY_LLAVA, Setup("lora", tokens=256, images=n)) for n in (0, 1)]
    assert runs[1]["measured"]["peak_bytes"] > runs[0]["measured"]["peak_bytes"]
    estimate = estimate_for(TINY_LLAVA, "tiny", Setup("lora", tokens=256, images=1), load_settings().assumptions,
                            kernels="cpu")["peak_bytes"]
    assert _within(runs[1]["measured"]["peak_bytes"], estimate)


def test_generate_feeds_the_prompts_images_to_the_prefill():
    """--method inference --images N: the prefill runs the tower over every prompt's images before the text layers,
    which the estimate prices as a phase of its own (generate.tower_phase, FINDINGS.md F78): a tiny llava's prefill
    with images peaks above its text-only one, both within the tolerance of their estimates."""
    pytest.importorskip("peft")
    from generator.settings import load_settings

    setups = [Setup("inference", precision="bf16", tokens=64, new_tokens=2, batch=2, images=n) for n in (0, 8)]
    runs = [_peak(TINY_LLAVA, setup) for setup in setups]
    assert runs[1]["measured"]["peak_bytes"] > runs[0]["measured"]["peak_bytes"]
    for setup, run in zip(setups, runs, strict=True):
        estimate = estimate_for(TINY_LLAVA, "tiny", setup, load_settings().assumptions, kernels="cpu")["peak_bytes"]
        assert _within(run["measured"]["peak_bytes"], estimate), setup


TINY_QWEN_VL = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
                "image_token_id": 999, "video_token_id": 998, "vision_start_token_id": 997,
                "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
                                "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
                "vision_config": {"hidden_size": 32, "intermediate_size": 64, "depth": 1, "num_heads": 2,
                                  "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                                  "temporal_patch_size": 2, "in_channels": 3, "fullatt_block_indexes": [0]}}


def test_qwen_vl_images_are_flattened_patches_and_a_grid():
    """Qwen2.5-VL's nominal 448 x 448 image as Qwen2VLImageProcessor flattens it: 32 x 32 patches of 2 frames x 3
    channels x 14^2, image_grid_thw (1, 32, 32), 256 tokens after the 2 x 2 merge; a real step (random weights)
    runs forward and backward on them. The CPU simulation runs it too (its tower reads the grid's values:
    images.ValuedFakeTensorMode), and the image costs it memory. (At this width an image's pixels and rotary table
    weigh as much as its tower's layers: tests/test_vision_blocks.py prices the layers, and the snapshot's
    Qwen2.5-VL steps.)"""
    from generator.measure.build import hf_config
    from generator.measure.images import image_inputs, image_tokens
    from generator.measure.run import run_cpu

    transformers = pytest.importorskip("transformers")
    config = hf_config(TINY_QWEN_VL, "sdpa")
    assert image_tokens(config) == (256, 1024)
    ids, extra = image_inputs(config, torch.randint(0, 990, (2, 300)), 1, torch.float32)
    assert extra["pixel_values"].shape == (2048, 1176) and extra["image_grid_thw"].tolist() == [[1, 32, 32]] * 2
    assert ids[:, :256].eq(999).all() and not ids[:, 256:].eq(999).any()
    model = transformers.AutoModelForImageTextToText.from_config(config)
    out = model(input_ids=ids, labels=ids, **extra)
    out.loss.backward()
    assert model.model.visual.blocks[0].attn.qkv.weight.grad is not None  # the tower is on the gradient's path
    for method in ("lora", "full"):
        measured = run_cpu(TINY_QWEN_VL, Setup(method, tokens=300, images=1))["measured"]["peak_bytes"]
        assert measured > run_cpu(TINY_QWEN_VL, Setup(method, tokens=300))["measured"]["peak_bytes"]


def test_the_valued_fake_mode_computes_small_integer_tensors_only():
    """images.value_mode: for a tower that reads its inputs' values, small integer tensors are computed for real
    (a grid's .tolist(), an index built from torch.arange), while a float tensor and one that mixes in a fake stay
    fake; for any other model, or without images, plain FakeTensorMode, where such a read fails."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor

    from generator.measure.images import ValuedFakeTensorMode, value_mode

    with value_mode({"model_type": "qwen2_5_vl"}, 1) as mode:
        assert isinstance(mode, ValuedFakeTensorMode)
        grid = torch.tensor([[1, 4, 6]])
        index = torch.arange(int(grid[0].prod()))
        assert isinstance(index, FakeTensor) and index[index % 2 == 0].tolist() == list(range(0, 24, 2))
        x = torch.randn(24, 8)
        assert x[index].shape == (24, 8) and x[index].constant is None and torch.ones(3).constant is None
    for config, images in (({"model_type": "qwen2_5_vl"}, 0), ({"model_type": "llava"}, 1)):
        with value_mode(config, images) as mode:
            assert not isinstance(mode, ValuedFakeTensorMode)
            with pytest.raises(DataDependentOutputException):
                torch.arange(6).tolist()


def test_a_dotted_override_sets_a_nested_config_key():
    """--set text_config.num_hidden_layers=2 reaches a key --max-layers cannot (llava's text_config leaves its layer
    count to the class default), recorded as any change; a path through a value that is not a config is refused."""
    config, changes = shrink(TINY_LLAVA, None, {"text_config.num_hidden_layers": 1, "vision_config.new.key": 3})
    assert config["text_config"]["num_hidden_layers"] == 1 and config["vision_config"]["new"] == {"key": 3}
    assert changes == {"text_config.num_hidden_layers": [2, 1], "vision_config.new.key": [None, 3]}
    assert TINY_LLAVA["text_config"]["num_hidden_layers"] == 2  # a copy
    with pytest.raises(ValueError, match="model_type is not a nested config"):
        shrink(TINY_LLAVA, None, {"model_type.x": 1})


def test_the_embedding_loss_scores_in_batch_negatives():
    """run.embedding_loss: CLS states normalised, 20 x their cosine similarities, cross-entropy on the diagonal;
    identical sequences score log(batch)."""
    from types import SimpleNamespace

    from generator.measure.run import embedding_loss

    same = SimpleNamespace(last_hidden_state=torch.ones(4, 3, 8))
    assert abs(embedding_loss(same).item() - torch.log(torch.tensor(4.0)).item()) < 1e-6
    apart = SimpleNamespace(last_hidden_state=torch.eye(4).unsqueeze(1).expand(4, 3, 4).contiguous())
    assert embedding_loss(apart).item() < 1e-6


# --- harness pieces ----------------------------------------------------------------------------------------

def test_real_cpu_tensors_count_what_the_simulation_counts(tmp_path, capsys):
    """--device cpu-real runs the step on real CPU tensors (for a model whose step reads values fake tensors lack:
    Longformer's global-attention test): the tracker counts the same storages, so a step both can run gives the
    same figures, LoRA and full; the record says which ran. QLoRA is refused (its packing is fake-only)."""
    from generator.measure.cli import run_measure
    from generator.measure.run import run_cpu

    for method in ("lora", "full"):
        setup = Setup(method, tokens=128)
        fake, real = run_cpu(TINY_LLAMA, setup), run_cpu(TINY_LLAMA, setup, real=True)
        assert real["measured"]["peak_bytes"] == fake["measured"]["peak_bytes"] > 0
        assert real["measured"]["categories"] == fake["measured"]["categories"]
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    out = tmp_path / "runs.jsonl"
    assert run_measure([str(folder), "--method", "lora", "--tokens", "64", "--device", "cpu-real", "--out",
                        str(out)], None) == 0
    rec = json.loads(out.read_text(encoding="utf-8"))
    assert rec["device"] == {"kind": "cpu-simulated", "name": "real tensors (cpu)"}
    assert rec["measured"]["metric"] == "memtracker_cpu" and rec["estimate"]["peak_bytes"] > 0
    assert run_measure([str(folder), "--method", "qlora", "--tokens", "64", "--device", "cpu-real"], None) == 2
    assert "cpu-real" in capsys.readouterr().err


def test_cli_writes_one_json_line(tmp_path, capsys):
    from generator.measure.cli import run_measure

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    out = tmp_path / "runs.jsonl"
    argv = [str(folder), "--method", "inference", "--tokens", "64", "--new-tokens", "2", "--device", "cpu", "--out", str(out)]
    assert run_measure(argv, None) == 0
    assert run_measure(argv, None) == 0  # appends
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    rec = json.loads(lines[0])
    for key in ("model", "config_hash", "config", "setup", "device", "versions", "measured", "peak", "estimate", "params"):
        assert key in rec, key
    assert rec["config_hash"] == hashlib.sha256(
        json.dumps(TINY_LLAMA, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert rec["device"]["kind"] == "cpu-simulated" and rec["measured"]["metric"] == "memtracker_fake_cpu"
    assert rec["setup"] == Setup("inference", precision="bf16", tokens=64, new_tokens=2, images=0).to_dict()
    assert rec["versions"]["torch"] and rec["versions"]["transformers"]
    assert rec["estimate"]["peak_bytes"] > 0
    assert "peak" in capsys.readouterr().err  # the one-line summary goes to stderr


def test_the_attention_defaults_to_the_model_class_own(tmp_path, capsys):
    """No --attention: transformers' own pick for the class, SDPA only where the class has it (sdpa_table); a Mamba
    class has none, and asking it for SDPA is transformers' error, not a run."""
    from generator.measure.cli import run_measure

    mamba = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 64, "intermediate_size": 128,
             "state_size": 8, "num_hidden_layers": 1, "vocab_size": 256, "time_step_rank": 4}
    for name, config, attention in (("mamba", mamba, "eager"), ("llama", TINY_LLAMA, "sdpa")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        out = tmp_path / f"{name}.jsonl"
        argv = [str(folder), "--method", "inference", "--tokens", "64", "--new-tokens", "2", "--device", "cpu",
                "--out", str(out)]
        assert run_measure(argv, None) == 0
        assert json.loads(out.read_text(encoding="utf-8"))["setup"]["attention"] == attention, name
    assert run_measure([str(tmp_path / "mamba"), "--method", "inference", "--tokens", "64", "--device", "cpu",
                        "--attention", "sdpa"], None) != 0
    assert "mamba" in capsys.readouterr().err


@pytest.mark.parametrize("config", [
    {"model_type": "rwkv", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256, "attention_hidden_size": 64,
     "intermediate_size": 128, "context_length": 256},
    {"model_type": "recurrent_gemma", "hidden_size": 64, "lru_width": 64, "num_attention_heads": 4,
     "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 192, "num_hidden_layers": 3, "vocab_size": 256,
     "attention_window_size": 32, "block_types": ["recurrent", "recurrent", "attention"]},
], ids=["rwkv", "recurrent_gemma"])
def test_generate_hands_each_class_its_own_cache(tmp_path, config):
    """RWKV returns its cache as `state`, RecurrentGemma keeps its own and reads it by cache_position: the decode
    steps run as generate runs them (they had stopped on a missing `.cache`)."""
    from generator.measure.cli import run_measure

    folder = tmp_path / config["model_type"]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "runs.jsonl"
    argv = [str(folder), "--method", "inference", "--tokens", "48", "--new-tokens", "3", "--device", "cpu",
            "--out", str(out)]
    assert run_measure(argv, None) == 0
    rec = json.loads(out.read_text(encoding="utf-8"))
    assert rec["measured"]["status"] == "ok" and set(rec["peak"]["phase_peaks"]) == {"prefill", "decode"}


def test_cli_allocator_line_and_summary(tmp_path, capsys):
    """--allocator: the JSON line carries both allocators' figures, and the summary says them over the live peak."""
    from generator.measure.cli import run_measure

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    assert run_measure([str(cfg), "--method", "lora", "--tokens", "128", "--device", "cpu", "--allocator"], None) == 0
    out, err = capsys.readouterr()
    m = json.loads(out)["measured"]
    for key in ("reserved_bytes", "minimum_capacity_bytes", "reserved_bytes_expandable",
                "minimum_capacity_bytes_expandable"):
        assert m[key] >= m["peak_bytes"], key
    r, c, xr, xc = ((m[key] / m["peak_bytes"] - 1) * 100 for key in (
        "reserved_bytes", "minimum_capacity_bytes", "reserved_bytes_expandable", "minimum_capacity_bytes_expandable"))
    assert f"; reserved {r:+.1f}%, least card {c:+.1f}% (expandable segments: {xr:+.1f}%, {xc:+.1f}%)" in err


def test_cli_refuses_what_it_cannot_run(tmp_path, capsys):
    from generator.measure.cli import run_measure

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GPT2), encoding="utf-8")
    assert run_measure([str(cfg), "--optimizer", "adamw8bit", "--device", "cpu"], None) == 2
    assert "adamw8bit's CUDA kernels are not simulated" in capsys.readouterr().err
    assert run_measure([str(cfg), "--tokens", "2048", "--device", "cpu"], None) == 2  # n_positions is 1024
    assert "1024 positions" in capsys.readouterr().err
    assert run_measure([str(cfg), "--batch", "0"], None) == 2
    assert "command line: key '--batch' = 0: must be a positive integer, not 0" in capsys.readouterr().err


def _measure_cli(capsys, *argv):
    """`neurarch-trace measure ARGV` through the real command: (exit code, stdout, stderr)."""
    from generator.cli import main

    code = main(["measure", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_measure_errors_name_the_key_and_the_value(tmp_path, capsys):
    """Every refusal of `neurarch-trace measure` is one line naming the model or the command line, the key and
    the value, exit 2, nothing on stdout and no traceback."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GPT2), encoding="utf-8")
    model = str(tmp_path)
    cases = [
        (["--batch", "0"], "command line: key '--batch' = 0: must be a positive integer"),
        (["--lora-dropout", "1.5"], "command line: key '--lora-dropout' = 1.5: must be in [0, 1)"),
        (["--set", "novalue"], "command line: key '--set' = ['novalue']: takes KEY=VALUE"),
        (["--memory-fraction", "2"], "command line: key '--memory-fraction' = 2.0: must be in (0, 1]"),
        (["--card", "No Such Card"], "command line: key '--card' = 'No Such Card': is not a card of site_config.yaml"),
        (["--device", "cpu", "--memory-fraction", "0.5"], f"{model}: key '--memory-fraction' = 0.5: needs a CUDA"),
        (["--double-quant"], "command line: key '--double-quant' = True: is for --method qlora"),
        (["--method", "lora", "--kbit-prep"], "command line: key '--kbit-prep' = True: is for --method qlora"),
        (["--device", "cpu", "--optimizer", "adamw8bit"], f"{model}: --optimizer = 'adamw8bit': adamw8bit's CUDA "
                                                          "kernels are not simulated on the CPU"),
        (["--device", "cpu", "--tokens", "2048"], f"{model}: key '--tokens + --new-tokens' = 2048: is over the "
                                                 "model's 1024 positions"),
        (["--device", "cpu", "--out", str(tmp_path)], f"command line: key '--out' = {str(tmp_path)!r}: cannot write"),
    ]
    for argv, message in cases:
        code, out, err = _measure_cli(capsys, str(cfg), *argv)
        assert (code, err.count("\n")) == (2, 1) and message in err, (argv, code, err)
        assert err.startswith("neurarch-trace measure: ") and "Traceback" not in err
        assert out == "" or argv[-2] == "--out", (argv, out)
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({**TINY_GPT2, "model_type": "not-a-transformers-type"}))
    code, out, err = _measure_cli(capsys, str(unknown), "--device", "cpu")
    assert code == 2 and out == ""
    assert f"{unknown}: model_type = 'not-a-transformers-type': transformers has no such model_type" in err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is here")
def test_measure_on_cuda_without_one_names_the_device(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(TINY_GPT2), encoding="utf-8")
    code, out, err = _measure_cli(capsys, str(tmp_path), "--device", "cuda")
    assert (code, out) == (2, "") and f"{tmp_path}: --device = 'cuda': no CUDA device here" in err
    code, out, err = _measure_cli(capsys, str(tmp_path), "--card", "T4 16 GB")
    assert code == 2 and "command line: --card = 'T4 16 GB': emulating a card needs a CUDA device" in err


def test_a_torch_failure_is_reported_as_a_failed_run_not_as_bad_input(tmp_path, capsys, monkeypatch):
    """A run torch stops with its own error exits 1 and says so (the model, the setup, the library's error);
    it is not a usage error (exit 2) and not an internal error (exit 70)."""
    from generator.measure import run

    def fails(config, setup, explain=False, allocator=False, real=False):
        raise RuntimeError("Expected all tensors to be on the same device\nsecond line")

    monkeypatch.setattr(run, "run_cpu", fails)
    (tmp_path / "config.json").write_text(json.dumps(TINY_GPT2), encoding="utf-8")
    code, out, err = _measure_cli(capsys, str(tmp_path), "--device", "cpu", "--batch", "2")
    assert (code, out) == (1, "")
    assert err == (f"neurarch-trace measure: {tmp_path}: the run (--method full --batch 2 --tokens 512) failed in "
                   "torch: RuntimeError: Expected all tensors to be on the same device\n")


def test_setup_options_and_support():
    args = parser().parse_args(["m", "--method", "lora", "--lora-targets", "q_proj,v_proj", "--grad-ckpt"])
    setup = setup_from_args(args)
    assert setup.precision == "amp" and setup.lora_targets == "q_proj,v_proj" and setup.grad_ckpt
    assert Setup.from_dict(setup.to_dict()) == setup
    assert estimator_supports(setup)  # estimator.job prices LoRA targets and checkpointing
    assert estimator_supports(Setup("lora")) and estimator_supports(Setup("full"))
    assert estimator_supports(Setup("inference", precision="bf16"))
    assert estimator_supports(Setup("full", precision="bf16"))
    assert estimator_supports(Setup("lora", lora_dropout=0.1))  # peft's dropped input copies and masks: priced
    assert estimator_supports(Setup("full", adamw_impl="fused"))  # Trainer's adamw_torch_fused
    assert not estimator_supports(Setup("full", adamw_impl="forloop"))
    assert not estimator_supports(Setup("full", weights="nf4"))  # a quantised base does not train
    assert Setup.from_dict({"method": "full", "unknown_key": 1}) == Setup("full")  # old and future lines read
    assert setup_from_args(parser().parse_args(["m", "--method", "inference"])).new_tokens == 16
    with pytest.raises(ValueError):
        setup_from_args(parser().parse_args(["m", "--new-tokens", "4"]))  # training has no decode
    reentrant = setup_from_args(parser().parse_args(["m", "--method", "lora", "--grad-ckpt", "--reentrant"]))
    assert reentrant.reentrant and Setup.from_dict(reentrant.to_dict()) == reentrant
    with pytest.raises(ValueError, match="--reentrant"):
        setup_from_args(parser().parse_args(["m", "--method", "lora", "--reentrant"]))


def test_varied_lengths_are_seeded_and_run_the_priced_length_once():
    setup = setup_from_args(parser().parse_args(["m", "--method", "lora", "--tokens", "2048", "--min-tokens", "256",
                                                 "--steps", "12"]))
    lengths = setup.lengths()
    assert len(lengths) == 12 and lengths[6] == 2048 and all(256 <= n <= 2048 for n in lengths)
    assert len(set(lengths)) > 6  # drawn, not repeated
    assert lengths == Setup.from_dict(setup.to_dict()).lengths()  # the same setup, the same lengths
    assert Setup("lora", tokens=512, steps=3).lengths() == [512, 512, 512]
    for argv in (["--min-tokens", "4096"], ["--method", "inference", "--min-tokens", "8"], ["--min-tokens", "-1"]):
        with pytest.raises(ValueError, match="--min-tokens"):
            setup_from_args(parser().parse_args(["m", "--tokens", "2048", *argv]))


def test_shrink_overrides_and_hash():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 6, "layer_types": ["a"] * 6, "attn_pdrop": 0.1}
    out, changes = shrink(cfg, 2, parse_overrides(["attn_pdrop=0.0", "name=x"]))
    assert out["num_hidden_layers"] == 2 and out["layer_types"] == ["a", "a"] and out["attn_pdrop"] == 0.0
    assert changes == {"num_hidden_layers": [6, 2], "attn_pdrop": [0.1, 0.0], "name": [None, "x"]}
    assert cfg["num_hidden_layers"] == 6  # the source is not touched
    # every per-layer list transformers validates against the count shrinks with it; layer indices are filtered
    hybrid = {"num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
              "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"], "hybrid_override_pattern": "M-M*",
              "moe_layers": [1, 3], "rope_scaling": {"long_factor": [1.0] * 4}}
    small, _ = shrink(hybrid, 2)
    assert small["layer_types"] == ["linear_attention"] * 2 and small["mlp_layer_types"] == ["dense", "sparse"]
    assert small["hybrid_override_pattern"] == "M-" and small["moe_layers"] == [1]
    assert small["rope_scaling"] == hybrid["rope_scaling"]  # not a per-layer key
    assert shrink(cfg, None) == (cfg, None)
    assert config_hash({"b": 1, "a": "é"}) == config_hash({"a": "é", "b": 1})
    assert context_of({"n_positions": 1024}) == 1024 and context_of({}) is None
    with pytest.raises(ValueError):
        parse_overrides(["novalue"])


def test_tracker_handles_a_frozen_base():
    """MemTracker's own hooks raise on a frozen parameter; PeakTracker hooks only trainable ones."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from generator.measure.tracker import PeakTracker

    with FakeTensorMode(allow_non_fake_inputs=True):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        model[0].weight.requires_grad_(False)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], foreach=True)
        tracker = PeakTracker()
        tracker.track_external(model, opt)
        with tracker:
            tracker.stage = "step 1"
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    peak = tracker.peak_breakdown()
    assert peak["total"] > 0 and peak["grad"] > 0
    assert tracker.peak_where["stage"] == "step 1"


@pytest.mark.parametrize("releasing", [True, False])
def test_the_tracker_keeps_no_step_alive_past_its_backward(releasing):
    """A real (not fake) CPU step of a peft model whose embedding output is a leaf that requires grad (what
    enable_input_require_grads makes for checkpointing and prepare_model_for_kbit_training): without the tracker
    the leaf dies with its graph. torch's ModTracker kept it and its .grad into every later step (a hook cycle gc
    cannot see); PeakTracker's module tracker drops its hooks after each backward (FINDINGS.md F29)."""
    import gc
    import weakref

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from generator.measure.build import hf_config
    from generator.measure.tracker import PeakTracker

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config({**TINY_LLAMA, "vocab_size": 100}, "sdpa"))
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    leaves: list = []
    model.get_input_embeddings().register_forward_hook(lambda mod, args, out: leaves.append(weakref.ref(out)))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    ids = torch.randint(0, 100, (2, 16))
    tracker = PeakTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(2):
            tracker.reset_mod_stats()
            model(input_ids=ids, labels=ids).loss.backward()
            if releasing:
                tracker.backward_done()
            opt.step()
            opt.zero_grad(set_to_none=True)
    gc.collect()
    alive = [ref() is not None for ref in leaves]
    # without the release both steps' leaves outlive them: the leak this guards against is still torch's
    assert alive == ([False, False] if releasing else [True, True])


def test_a_padded_batch_masks_every_sample_but_the_first_on_its_last_quarter():
    """--padded (training, batch 2 or more): the model gets an attention_mask, the padded tokens' labels are -100,
    as a collator that pads to the batch's longest leaves them (F72)."""
    from generator.measure.run import _masked, _padding

    setup = setup_from_args(parser().parse_args(["m", "--method", "lora", "--batch", "3", "--tokens", "8",
                                                 "--padded"]))
    assert setup.padded and setup.to_dict()["padded"] is True
    ids = torch.zeros(3, 8, dtype=torch.long)
    mask = _padding(ids, setup)["attention_mask"]
    assert mask.tolist() == [[1] * 8, [1] * 6 + [0] * 2, [1] * 6 + [0] * 2]
    assert (_masked(ids, {"attention_mask": mask}) == -100).sum().item() == 4
    assert _padding(ids, Setup("lora", batch=3, tokens=8)) == {}
    for argv in (["--batch", "1", "--padded"], ["--method", "inference", "--batch", "2", "--padded"]):
        with pytest.raises(ValueError, match="--padded"):
            setup_from_args(parser().parse_args(["m", *argv]))


def test_a_causal_lm_registered_among_image_text_to_text_models_is_built_through_them():
    """transformers 5.24 registers Mistral4ForCausalLM in the image-text-to-text mapping alone (no
    AutoModelForCausalLM entry): the harness builds it through that mapping, as a causal LM; a type with its own
    causal-LM entry keeps it (FINDINGS.md F96)."""
    from transformers import CONFIG_MAPPING

    from generator.measure.build import build_on_meta, causal_only_as_multimodal, hf_config, model_kind

    config = {**CONFIG_MAPPING["mistral4"]().to_dict(), "architectures": ["Mistral4ForCausalLM"]}
    assert causal_only_as_multimodal("mistral4") and not causal_only_as_multimodal("llama")
    assert not causal_only_as_multimodal("qwen3_vl")  # its image-text-to-text class is a ForConditionalGeneration
    small = {**config, "num_hidden_layers": 1}
    assert model_kind(hf_config(small, "sdpa")) == "causal"
    assert type(build_on_meta(small, Setup("full", tokens=64))).__name__ == "Mistral4ForCausalLM"
