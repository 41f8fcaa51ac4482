"""What each architecture family means for memory, cost and the page: MoE, windows, SSM, encoders,
encoder-decoders, VLMs, custom code, unknown model_types and quantised checkpoints."""

from __future__ import annotations

import dataclasses

import pytest

from generator.errors import ConfigError, JobError, UnsupportedArchitecture
from generator.estimator import estimate
from generator.estimator.config.transformers_defaults import CLASS_DEFAULTS
from generator.estimator.normalise import normalise
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.job_options import Job
from generator.estimator.memory.layer_terms import expert_adapters
from generator.estimator.memory.profile import serve_profile, train_profile
from tests.conftest import snapshot_configs, tiny_qwen2

SNAP = {repo_id: (cfg, ck) for repo_id, cfg, ck in snapshot_configs()}


def report(settings, repo_id=None, cfg=None, **kw):
    if repo_id is not None:
        cfg, ck = SNAP[repo_id]
        kw.setdefault("checkpoint_params", ck)
    return estimate(cfg, model_id=repo_id or "cfg", assumptions=settings.assumptions, cards=settings.cards,
                    gpus=settings.gpus, **kw)


def test_moe_holds_every_expert_and_computes_with_the_active_ones(settings):
    r = report(settings, "mistralai/Mixtral-8x7B-v0.1")
    p = r.params
    assert p.experts == 8 and p.experts_per_token == 2
    assert p.graph == 46_702_792_704 and 12e9 < p.active < 13.5e9  # "47B total, 13B active"
    # Training holds all experts: at least the 16 B/parameter of AdamW state for the total, not the active.
    assert r.memory.train_full_bytes_batch1 > 16 * p.graph
    # Cost: FLOPs use the active matmul weights (a dense model of the total size costs ~3.5x more).
    a = normalise(SNAP["mistralai/Mixtral-8x7B-v0.1"][0], "m")
    g = build_graph(a)
    assert g.active_matmul < 0.3 * g.params_matmul
    line = next(c for c in r.cost if c.method == "full")
    assert line.flops == pytest.approx(6 * g.active_matmul * 2048 * 32 * 10 * 1563, rel=0.15)


def test_every_model_with_routed_experts_reports_them(settings):
    """A page's active-parameter line, expert-parallel plans and decode speed read the Arch's experts: every class
    default whose graph has fewer active than total parameters names its experts and top-k. Nemotron-H builds its
    MoE layers as a mixer of its own and named none: its decode read all 31.6B weights per token (25.4 tokens/s on
    an A100 80GB, where the 3.58B active give about ten times that)."""
    missing = []
    for model_type in CLASS_DEFAULTS:
        try:
            a = normalise({"model_type": model_type}, "m")
        except (ConfigError, UnsupportedArchitecture):
            continue
        g = build_graph(a)
        if g.params_active != g.params_total and not (a.experts and a.experts_per_token):
            missing.append(model_type)
    assert missing == []
    r = report(settings, "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert (r.params.experts, r.params.experts_per_token) == (128, 6)
    assert r.params.active == 3_580_073_408
    a100 = next(s for s in r.serving if s.gpu_model == "A100 80GB SXM" and s.gpus == 1)
    assert 200 < a100.decode_tokens_per_s < 300


def test_lora_on_expert_tensors_costs_their_delta_weights_once_per_step(settings):
    """peft's ParamWrapper makes each expert's delta weight (B @ A) once per forward for all experts and the
    experts run on the merged tensor, so those adapters cost 6 x rank x in x out per expert per step, not 6 x their
    parameters per token: Qwen3-30B-A3B's LoRA had cost 99.5% of its full fine-tune (2.106e19 against 2.117e19
    FLOPs), where it skips the frozen base's weight gradients."""
    r = report(settings, "Qwen/Qwen3-30B-A3B")
    full, lora = (next(c.flops for c in r.cost if c.method == m) for m in ("full", "lora"))
    assert 0.68 < lora / full < 0.75  # attention costs the same in both
    a = normalise(SNAP["Qwen/Qwen3-30B-A3B"][0], "q")
    g = build_graph(a)
    params, macs = expert_adapters(a, g, 16)
    # gate_up (E, hidden, 2 x inter) at twice the rank and down (E, inter, hidden), 48 layers of 128 experts
    assert params == 48 * 16 * 128 * (2 * (2048 + 2 * 768) + (768 + 2048)) + 48 * 16 * (2048 + 128)
    assert macs == 48 * 16 * 128 * (2 * 2048 * 2 * 768 + 768 * 2048) + 48 * 16 * 2048 * 128
    dense = report(settings, "meta-llama/Meta-Llama-3-8B")
    assert expert_adapters(normalise(SNAP["meta-llama/Meta-Llama-3-8B"][0], "l"),
                           build_graph(normalise(SNAP["meta-llama/Meta-Llama-3-8B"][0], "l")), 16) == (0, 0)
    assert 0.66 < dense.cost[1].flops / dense.cost[0].flops < 0.70


def test_moe_activations_use_the_routed_top_k(settings):
    a = normalise(SNAP["Qwen/Qwen3-30B-A3B"][0], "q")
    g = build_graph(a)
    moe = next(p for b in g.spec.blocks for p in b.parts if p.name.startswith("MoE_"))
    # per token: top-8 experts x 4 x moe_intermediate (768), each routed token's gathered input and expert output
    # (FINDINGS.md F9) + the fp32 router logits over 128 experts
    assert moe.act == 8 * 768 * 4 + 2 * 8 * a.hidden and moe.act32 == 128


def test_dense_first_layers_and_shared_experts_deepseek(settings):
    a = normalise(SNAP["deepseek-ai/DeepSeek-V3"][0], "d")
    kinds = [any(p.name.startswith("MoE_") for p in b.parts) for b in a.spec.blocks]
    assert kinds[:3] == [False] * 3 and all(kinds[3:])  # first_k_dense_replace = 3
    r = report(settings, "deepseek-ai/DeepSeek-V3")
    assert 36e9 < r.params.active < 39e9  # "671B total, 37B activated"
    # the provenance gives MLA's own head width (128 + 64), not hidden_size // heads (56), which nothing reads
    assert dict(r.provenance)["config_keys"]["head_dim"]["value"] == 192


def test_windowed_layers_cap_the_cache_and_serve_more_sequences(settings):
    cfg, _ = SNAP["mistralai/Mistral-7B-v0.1"]
    long = dataclasses.replace(settings.assumptions, serve_tokens=32768)
    windowed = estimate(cfg, model_id="w", assumptions=long, cards=settings.cards, gpus=settings.gpus)
    full = estimate({**cfg, "sliding_window": None}, model_id="f", assumptions=long, cards=settings.cards,
                    gpus=settings.gpus)
    assert windowed.memory.kv_bytes_per_sequence * 8 == full.memory.kv_bytes_per_sequence
    h200 = -1
    assert windowed.memory.cards[h200].serve_max_batch > 4 * full.memory.cards[h200].serve_max_batch
    assert any(f.check == "sliding_window" for f in windowed.findings)


def test_ssm_state_replaces_the_kv_cache(settings):
    cfg = {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280,
           "state_size": 16, "expand": 2, "conv_kernel": 4, "architectures": ["MambaForCausalLM"]}
    short = report(settings, cfg=cfg)
    long = estimate(cfg, model_id="m", assumptions=dataclasses.replace(settings.assumptions, serve_tokens=65536),
                    cards=settings.cards, gpus=settings.gpus)
    assert short.memory.kv_bytes_per_token == 0
    assert short.memory.kv_bytes_per_sequence == long.memory.kv_bytes_per_sequence == \
        short.memory.state_bytes_per_sequence > 0
    assert short.params.graph == 129_135_360  # state-spaces/mamba-130m-hf


def test_encoder_trains_at_its_context_and_serves_without_cache(settings):
    r = report(settings, "google-bert/bert-base-uncased")
    assert r.model.kind == "encoder" and r.memory.train_tokens == 512
    assert r.memory.kv_bytes_per_token == 0 and r.memory.kv_bytes_per_sequence == 0
    a = normalise(SNAP["google-bert/bert-base-uncased"][0], "b")
    p = serve_profile(a, build_graph(a), settings.assumptions, 512)
    assert sum(p.layer_per_sample) == 0 and p.embed_per_sample > 0  # each sequence: its working set and logits


def test_classification_head_follows_architectures(settings):
    r = report(settings, "BAAI/bge-reranker-large")  # XLMRobertaForSequenceClassification, 1 label
    assert [n.name for n in r.structure][-2:] == ["Classifier", "Output"]
    assert r.structure[-1].output_shape[-1] == 1


def test_encoder_decoder_serves_encoder_output_and_both_caches(settings):
    r = report(settings, "google-t5/t5-small")
    assert r.model.kind == "encoder-decoder"
    assert r.params.layers == 12  # 6 encoder + 6 decoder layers
    a = normalise(SNAP["google-t5/t5-small"][0], "t")
    p = serve_profile(a, build_graph(a), settings.assumptions, 512)
    assert p.embed_per_sample == 512 * 2 * 512  # encoder output, tokens x d_model x 2 B
    assert sum(p.layer_per_sample) == 6 * 2 * 512 * 2 * (512 + 512)  # self + cross K/V per decoder layer


def test_vlm_counts_text_vision_and_projector(settings):
    r = report(settings, "llava-hf/llava-1.5-7b-hf")
    names = [n.name for n in r.structure]
    assert "Vision_Tower" in names and "Projector" in names
    assert r.params.vision > 300e6 and r.params.text + r.params.vision == r.params.graph
    assert r.memory.image_tokens == 576  # (336 / 14)^2 patches, CLS dropped
    assert report(settings, "google/gemma-3-27b-it").memory.image_tokens == 256  # mm_tokens_per_image


def test_vlm_training_carries_the_image(settings):
    cfg, _ = SNAP["llava-hf/llava-1.5-7b-hf"]
    a = normalise(cfg, "l")
    g = build_graph(a)
    with_image = train_profile(a, g, settings.assumptions, 2048, "lora", 16)
    a2 = dataclasses.replace(a, spec=dataclasses.replace(a.spec, image_tokens=0, vision_act=0))
    text_only = train_profile(a2, build_graph(a2), settings.assumptions, 2048, "lora", 16)
    assert with_image.embed_per_sample > text_only.embed_per_sample


def test_unknown_model_type_is_read_as_the_family_of_its_declared_class(settings):
    r = report(settings, cfg=tiny_qwen2(model_type="brand_new_arch"))  # architectures: Qwen2ForCausalLM
    assert r.model.family == "qwen2" and r.params.graph == 2_435_016
    assert r.model.approximate_reason == "an unknown model_type read as qwen2, the family of its declared class"


def test_unknown_model_type_with_standard_keys_is_estimated_approximately(settings):
    r = report(settings, cfg=tiny_qwen2(model_type="brand_new_arch", architectures=["BrandNewForCausalLM"]))
    assert r.model.approximate and "architecture not known" in r.model.approximate_reason
    assert any(f.check == "approximate" and f.severity == "warning" for f in r.findings)
    d = r.to_dict()["model"]
    assert d["approximate"] is True and d["approximate_reason"].startswith("architecture not known")


def test_unknown_model_type_without_standard_keys_is_refused():
    with pytest.raises(UnsupportedArchitecture):
        normalise({"model_type": "nothing_here", "width": 3}, "x")


def test_known_gap_says_why(settings):
    from transformers import CONFIG_MAPPING

    pytest.importorskip("transformers")
    r = report(settings, cfg=CONFIG_MAPPING["zaya"]().to_dict())
    assert r.model.approximate and "CCA" in r.model.approximate_reason


def test_custom_code_reads_the_declared_family(settings):
    r = report(settings, "moonshotai/Kimi-K2-Instruct")  # model_type kimi_k2, DeepseekV3ForCausalLM
    assert r.model.custom_code and r.model.family == "deepseek_v3" and r.model.model_type == "kimi_k2"
    assert r.model.approximate_reason.startswith("custom modeling code (auto_map) read as deepseek_v3")
    assert any(f.check == "custom_code" for f in r.findings)
    phi2 = report(settings, "microsoft/phi-2")  # phi-msft, read as transformers' phi port
    assert phi2.params.match


def test_custom_code_that_the_reading_leaves_something_out_of_says_what_as_a_warning(settings):
    """Phi-3.5-vision's CLIP tower is not counted: the page and the command say so, not only the JSON twin's
    approximate_reason (the custom_code finding says only "read as phi3"). Plain custom code read as its family
    adds no warning beside the custom_code finding."""
    for repo_id, words in (("microsoft/Phi-3.5-vision-instruct", "the CLIP vision tower and its projection are not "
                                                                  "counted"),
                           ("OrionStarAI/Orion-14B-Chat", "Orion's LayerNorm (weight and bias) is read as llama's "
                                                          "RMSNorm")):
        warned = [f for f in report(settings, repo_id).findings if f.check == "approximate"]
        assert len(warned) == 1 and warned[0].severity == "warning", repo_id
        assert warned[0].message.startswith("the estimate is approximate: custom modeling code") and \
            words in warned[0].message, repo_id
    for repo_id in ("moonshotai/Kimi-K2-Instruct", "microsoft/phi-2"):
        assert not any(f.check == "approximate" for f in report(settings, repo_id).findings), repo_id


def test_exact_families_are_not_approximate(settings):
    for repo_id in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "google/gemma-2-9b-it", "openai/gpt-oss-20b"):
        assert not report(settings, repo_id).model.approximate, repo_id


def test_quantised_gptq_stores_packed_int32(settings):
    q = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    cfg = tiny_qwen2(hidden_size=256, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512,
                     quantization_config=q)
    r = report(settings, cfg=cfg)
    # AutoGPTQ QuantLinear(in, out): qweight in*out/8 int32, qzeros (in/128) x out/8, scales (in/128) x out,
    # g_idx in: per layer 4 attention Linears (256 -> 256) and 3 MLP ones (256 <-> 512).
    def lin(i, o):
        return i * o // 8 + (i // 128) * o // 8 + (i // 128) * o + i
    per_layer = 4 * lin(256, 256) + 2 * lin(256, 512) + lin(512, 256)
    logical = 4 * 256 * 256 + 3 * 256 * 512
    assert r.params.stored == r.params.graph - 2 * logical + 2 * per_layer
    assert dict(r.params.quantization)["method"] == "gptq"
    assert any(f.check == "quantization" for f in r.findings)
    plain = report(settings, cfg={k: v for k, v in cfg.items() if k != "quantization_config"})
    assert r.memory.serve_weight_bytes < plain.memory.serve_weight_bytes


def test_mxfp4_checkpoint_count_matches_the_stored_elements(settings):
    r = report(settings, "openai/gpt-oss-20b")
    assert r.params.stored == r.params.checkpoint and r.params.match
    assert r.memory.serve_weight_bytes < 14e9  # 21B parameters, experts in MXFP4


def test_fp8_serves_one_byte_per_quantised_weight(settings):
    r = report(settings, "deepseek-ai/DeepSeek-V3")
    assert dict(r.params.quantization)["method"] == "fp8"
    assert r.params.graph < r.memory.serve_weight_bytes < 1.05 * r.params.graph


def test_a_quantised_name_without_a_quantization_config_is_flagged(settings):
    """NVIDIA's ModelOpt repositories keep their quantisation in hf_quant_config.json, read where the record has it
    (test_quant_config_file.py); the snapshot has no such file for Nemotron-3-Super FP8, whose config.json alone says
    bf16. The page says so, rather than pricing FP8 weights as bf16 without a word; a config that declares its
    quantisation, or a name that claims none, gets no such warning."""
    flagged = {}
    for repo_id in SNAP:
        found = [f for f in report(settings, repo_id).findings if f.check == "quantization" and f.severity == "warning"]
        if found:
            flagged[repo_id] = found[0].message
    assert sorted(flagged) == ["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"]
    assert flagged["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"].startswith(
        "the repository's name says FP8, but no quantization settings were read: its config.json declares no "
        "quantization_config, and no hf_quant_config.json")
    cfg = SNAP["meta-llama/Meta-Llama-3-8B"][0]

    def checks(model_id):
        r = estimate(cfg, model_id=model_id, assumptions=settings.assumptions, cards=settings.cards, gpus=settings.gpus)
        return [f.severity for f in r.findings if f.check == "quantization"]
    assert checks("someone/Llama-3-8B-Instruct-AWQ") == ["warning"]
    assert checks("someone/Llama-3-8B.int4") == ["warning"]
    assert checks("someone/fp8lover-Llama") == []  # not a token of the name


def test_roberta_positions_start_after_the_padding_index(settings):
    """RobertaEmbeddings numbers positions from padding_idx + 1 (create_position_ids_from_input_ids), so XLM-R's
    514-row table takes 512 tokens: the page had served and trained 514 (past the context)."""
    r = report(settings, "intfloat/multilingual-e5-large")
    assert (r.memory.train_tokens, r.memory.serve_tokens) == (512, 512)
    a = normalise(SNAP["intfloat/multilingual-e5-large"][0], "e")
    assert a.max_context == 512 and build_graph(a).params_embedding > 514 * a.hidden  # the table keeps 514 rows
    bert = normalise({**SNAP["intfloat/multilingual-e5-large"][0], "model_type": "bert"}, "b")
    assert bert.max_context == 514  # BERT's positions start at 0
    with pytest.raises(ConfigError, match="pad_token_id"):
        normalise({**SNAP["intfloat/multilingual-e5-large"][0], "pad_token_id": 600}, "hostile")


def test_hostile_values_in_new_families_are_typed_errors():
    bad = [{"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "vocab_size": 100, "intermediate_size": 64, "num_local_experts": "8"},
           {"model_type": "qwen3_next", "layer_types": "oops"},
           {"model_type": "nemotron_h", "hybrid_override_pattern": "MX"},
           {"model_type": "llava", "vision_config": [1, 2]}]
    for cfg in bad:
        with pytest.raises(ConfigError):
            normalise(cfg, "hostile")


def test_report_keeps_every_existing_key(settings):
    d = report(settings, "Qwen/Qwen3-30B-A3B").to_dict()
    assert {"id", "family", "model_type", "architectures", "custom_code", "text_tower_only", "downloads", "sha",
            "approximate", "approximate_reason", "kind"} <= set(d["model"])
    assert {"graph", "checkpoint", "match", "embedding", "lm_head", "per_layer", "layers", "lora_adapter",
            "active", "experts", "experts_per_token", "stored", "quantization", "vision"} <= set(d["params"])
    assert {"kv_bytes_per_token", "kv_bytes_per_sequence", "state_bytes_per_sequence", "image_tokens",
            "serve_weight_bytes"} <= set(d["memory"])


KINDS = ["mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-Next-80B-A3B-Instruct",
         "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "google-bert/bert-base-uncased", "google-t5/t5-small",
         "llava-hf/llava-1.5-7b-hf", "google/gemma-2-9b-it", "openai/gpt-oss-20b", "BAAI/bge-reranker-large"]


@pytest.mark.parametrize("repo_id", KINDS)
def test_memory_is_monotone_and_finite_for_every_kind(settings, repo_id):
    cfg, _ = SNAP[repo_id]
    a = normalise(cfg, repo_id)
    g = build_graph(a)
    s = settings.assumptions
    for tokens in (128, 512):
        profiles = [train_profile(a, g, s, tokens, "full", 16), train_profile(a, g, s, tokens, "lora", 16),
                    serve_profile(a, g, s, tokens)]
        for p in profiles:
            assert 0 < p.total(1) <= p.total(2) <= p.total(8)
    for lo, hi in ((128, 512), (512, 2048)):
        for method in ("full", "lora"):
            assert train_profile(a, g, s, lo, method, 16).total(1) <= train_profile(a, g, s, hi, method, 16).total(1)
        assert serve_profile(a, g, s, lo).total(4) <= serve_profile(a, g, s, hi).total(4)
    r = report(settings, repo_id)
    for line in r.cost:
        assert 0 < line.hours < float("inf")


def test_custom_code_attention_finding_says_which_code_runs_and_why_sdpa(settings):
    """The audit of issue 13 read chatglm3's finding as 'transformers' own class' where transformers has none: the
    repository's code runs, and it is known to call SDPA. A type transformers ships builds its own class unless
    trust_remote_code=True, and the finding says what that flag changes."""
    says = {repo: next(f.message for f in report(settings, repo).findings if f.check == "attention_default")
            for repo in ("THUDM/chatglm3-6b", "deepseek-ai/DeepSeek-V3")}
    assert says["THUDM/chatglm3-6b"].startswith("the repository's own modeling code runs (transformers has no class")
    assert "scaled_dot_product_attention" in says["THUDM/chatglm3-6b"]
    assert says["deepseek-ai/DeepSeek-V3"].startswith("transformers ships this model type, and from_pretrained "
                                                      "builds its own class unless trust_remote_code=True")
    assert "--attention eager prices it keeping its scores" in says["deepseek-ai/DeepSeek-V3"]


def test_images_on_a_reading_that_leaves_the_tower_out_say_so(settings):
    """Phi-3.5-vision reads images; its CLIP tower is not counted here. --images 1 was refused with 'this one reads
    none': the refusal now says the reading has none, and why."""
    with pytest.raises(JobError, match=r"this reading has none \(custom modeling code .* the CLIP vision tower"):
        report(settings, "microsoft/Phi-3.5-vision-instruct", job=Job(method="lora", images=1, tokens=512))


def test_mllama_serving_caches_the_image_cross_attention_k_v_and_drops_the_tower_output(settings):
    """A page review found Llama-3.2-11B-Vision's serving cache without its 8 cross-attention layers' K and V over
    the image, where the page prices the image's prefill: MllamaTextCrossAttention caches them (past_key_values), over
    4 tiles x 1,025 unpadded patches (448 px / 14, with the class token: the tower's output slices its padding off).
    The tower's output itself is not kept through decoding, as an encoder-decoder's encoder output is."""
    r = report(settings, "meta-llama/Llama-3.2-11B-Vision")
    self_attention = 4_096 * 32 * 2 * 8 * 128 * 2  # 4,096 tokens, 32 layers, K and V, 8 heads of 128, bf16
    cross = 4 * 1_025 * 8 * 2 * 8 * 128 * 2  # the image's 4,100 tokens in the 8 cross-attention layers
    assert r.memory.kv_bytes_per_sequence == self_attention + cross
    a = normalise(SNAP["meta-llama/Llama-3.2-11B-Vision"][0], "m")
    assert a.spec.encoder_tokens == 4_100 and not a.spec.encoder_kept


def test_qwen1s_own_code_is_priced_without_a_score_matrix(settings):
    """Qwen-1's modeling_qwen.py runs FlashAttention-2 where flash-attn imports, else torch's SDPA (torch >= 2): it
    keeps no score matrix, and was priced as custom code not read (eager), 22.1 GB for its LoRA at 2,048 tokens.
    The finding names the SDPA path's per-layer mask, which the figures leave out, with its size."""
    r = report(settings, "Qwen/Qwen-1_8B-Chat")
    found = next(f for f in r.findings if f.check == "attention_default")
    assert found.severity == "info" and "FlashAttention-2 where flash-attn is installed" in found.message
    assert "([batch, 1, T, T] where the batch carries" in found.message
    assert "2 B per token pair and layer" in found.message
    eager = report(settings, "Qwen/Qwen-1_8B-Chat", job=Job(method="lora", attention="eager"))
    assert r.memory.train_lora_bytes_batch1 < 0.6 * eager.memory.peak_bytes
    # Qwen-VL and Qwen-Audio share the model_type; their code (a "visual" or "audio" block) keeps the scores
    cfg, _ = SNAP["Qwen/Qwen-1_8B-Chat"]
    for block in ("visual", "audio"):
        vl = report(settings, cfg={**cfg, block: {"layers": 2}})
        found = next(f for f in vl.findings if f.check == "attention_default")
        assert found.severity == "warning" and found.message.startswith("custom modeling code (auto_map) whose "
                                                                        "attention was not read")
