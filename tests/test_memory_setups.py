"""Issue 13: the default attention per model class, recipes, and the terms each option adds (estimator.job)."""

from __future__ import annotations

import dataclasses

import pytest

from generator.errors import JobError
from generator.estimator.checks import check_scope
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.attention import default_attention
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job, optimizer_bytes
from generator.estimator.memory.recipes import RECIPES
from generator.estimator.memory.sdpa_table import NO_SDPA
from generator.estimator.normalise import normalise
from tests.conftest import measured_rows, snapshot_configs
from generator.settings import load_settings

S = load_settings().assumptions
LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096}


def peak(config, **job):
    a = normalise(config, "m")
    return job_memory(a, build_graph(a), S, Job(**{"tokens": 512, **job}), "m").peak_bytes


def test_models_without_sdpa_default_to_eager_and_are_priced_so():
    assert {"gpt_neo", "xglm", "mpt", "vaultgemma", "granite_swa", "bloom", "gemma2"} <= set(NO_SDPA)
    gpt_neo = {"model_type": "gpt_neo", "hidden_size": 256, "num_heads": 4, "num_layers": 2, "vocab_size": 1000,
               "max_position_embeddings": 2048, "attention_types": [[["global", "local"], 1]], "window_size": 256}
    a = normalise(gpt_neo, "m")
    assert default_attention(a)[0] == "eager"
    assert peak(gpt_neo) == peak(gpt_neo, attention="eager") > peak(gpt_neo, attention="sdpa")
    assert default_attention(normalise(LLAMA, "m"))[0] == "sdpa"


def test_custom_code_of_an_unknown_type_keeps_its_scores():
    a = dataclasses.replace(normalise(LLAMA, "m"), model_type="my_own", custom_code=True)
    assert default_attention(a)[0] == "eager"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_prices_and_cites(name):
    r = RECIPES[name]
    assert r.sources and r.summary
    job = Job.from_options(name, tokens=512, method="lora" if name != "trl-sft-qlora" else "qlora")
    assert job.recipe == name
    a = normalise(LLAMA, "m")
    assert job_memory(a, build_graph(a), S, job, "m").peak_bytes > 0


def test_only_unsloth_keeps_its_checkpoints_in_cpu_ram():
    """Offloaded checkpoints are Unsloth's (use_gradient_checkpointing='unsloth'). TRL's activation_offloading
    defaults to False (trl/trainer/sft_config.py), and the other frameworks keep torch's checkpoints on the GPU: a
    recipe that set the offload would price trl-sft 16% low at 16k tokens (tests/guard/estimates.json keeps every
    recipe's figures on three models)."""
    assert {n for n, r in RECIPES.items() if dict(r.fields).get("offload_checkpoints")} == {"unsloth"}
    a = normalise(LLAMA, "m")
    trl = job_memory(a, build_graph(a), S, Job.from_options("trl-sft", tokens=4096, lora_targets="all-linear"), "m")
    torch_ckpt = Job(method="lora", precision="amp", weights="fp32", adapter_dtype="fp32", lora_dropout=0.05,
                     grad_ckpt=True, optimizer="adamw-fused", loss="trl-chunked", tokens=4096)
    assert trl.peak_bytes == job_memory(a, build_graph(a), S, torch_ckpt, "m").peak_bytes


def test_trl_loads_a_named_model_in_fp32_and_casts_a_quantised_models_adapters_to_bf16():
    """TRL's SFTTrainer loads a model given by name in float32 unless model_init_kwargs say otherwise
    (trl/trainer/utils.py create_model_from_path, since huggingface/trl#4778), and on a 4-bit base casts every
    trainable parameter to bfloat16 after get_peft_model (sft_trainer.py, since 2af35fb); bitsandbytes' 32-bit paged
    AdamW keeps float32 states whatever the parameter's dtype (optim/optimizer.py Optimizer2State.init_state)."""
    assert dict(RECIPES["trl-sft"].fields)["weights"] == "fp32"
    qlora = dict(RECIPES["trl-sft-qlora"].fields)
    assert qlora["adapter_dtype"] == "bf16" and qlora["optimizer"] == "paged-adamw"
    assert optimizer_bytes("paged-adamw", 1_000, 2) == (8_000, 0) == optimizer_bytes("paged-adamw", 1_000, 4)
    assert optimizer_bytes("adamw-fused", 1_000, 2) == (4_000, 0)
    a = normalise(LLAMA, "m")
    named = job_memory(a, build_graph(a), S, Job.from_options("trl-sft", tokens=512), "m")
    loaded_bf16 = job_memory(a, build_graph(a), S, Job.from_options("trl-sft", tokens=512, weights="bf16"), "m")
    assert dict(named.breakdown)["weights"] > 1.9 * dict(loaded_bf16.breakdown)["weights"]


def test_unknown_recipe_is_an_error():
    with pytest.raises(JobError):
        Job.from_options("no-such-recipe")


def test_outputs_kept_and_upcast_cost_more():
    assert peak(LLAMA, keep_outputs=True) > peak(LLAMA)
    base = dict(method="qlora", weights="nf4")
    assert peak(LLAMA, **base, upcast_fp32=True) > peak(LLAMA, **base)


def test_checkpointing_does_not_charge_every_layers_autocast_copies():
    deep = {**LLAMA, "num_hidden_layers": 8}
    a = normalise(deep, "m")
    mem = job_memory(a, build_graph(a), S, Job(tokens=64, grad_ckpt=True), "m")
    layer_matmul = max(b.matmul for b in build_graph(a).spec.blocks)
    assert dict(mem.breakdown)["overhead"] < 2 * 2 * layer_matmul + 2 * 1000 * 256 * 2 or \
        mem.peak_phase == "optimizer step"


F9_MODELS = ("data/measurements/configs/", "Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1")


def test_f9_terms_hold_their_measured_rows():
    """FINDINGS.md F9: xIELU, relu² at generate, differential attention, xglm's clamped eager scores and routed
    experts' gathered inputs and outputs, each within 2% of its CPU-simulated run (cpu-sim-extra.jsonl)."""
    from generator.accuracy import estimate_bytes
    rows = measured_rows("cpu-sim-extra")
    f9 = {"apertus", "arcee", "diffllama", "xglm", "qwen3_moe", "mixtral"}  # F15's rows: tests/test_math_sdpa.py
    mine = [r for r in rows if r["model"].startswith(F9_MODELS) and r["model_type"] in f9
            and not (r["setup"]["attention"] == "eager" and r["setup"]["tokens"] >= 2048)  # F17's: test_eager_backward
            and r["setup"]["lora_targets"] != "q_proj,v_proj"  # F61's frozen experts: test_frozen_experts
            and not r["setup"]["grad_ckpt"]  # F68's checkpointed experts: test_shipped_classes
            and not (r["model_type"] == "xglm" and r["setup"]["method"] == "inference")]  # F81's generate, named there
    assert {r["model_type"] for r in mine} == f9 and len(mine) == 14
    for r in mine:
        est, measured = estimate_bytes(r, S), r["measured"]["peak_bytes"]
        assert abs(est / measured - 1) < 0.02, (r["model_type"], r["setup"]["method"], est / measured - 1)


def test_xielu_and_relu_squared_terms():
    xielu = {**LLAMA, "model_type": "apertus", "hidden_act": "xielu", "num_key_value_heads": 4}
    silu = {**xielu, "hidden_act": "relu"}
    # full AMP: 9 B more per MLP element (alpha_p x x in fp32, expm1, expm1 - x, the bool condition), and the
    # two xIELU scalars per layer at 12 B each (fp32 weight, AdamW)
    more = peak(xielu, tokens=512, batch=64) - peak(silu, tokens=512, batch=64)
    assert more == 9 * 688 * 2 * 512 * 64 + 12 * 2 * 2
    relu2 = {**LLAMA, "model_type": "arcee", "hidden_act": "relu2"}
    relu = {**relu2, "hidden_act": "relu"}
    assert peak(relu2, method="inference", tokens=4096) - peak(relu, method="inference", tokens=4096) == 2 * 688 * 4096


def test_python_gelus_hold_their_temporaries_at_generate():
    """FINDINGS.md F80: a plain MLP's Python GELU at generate holds, beside its input, each temporary of
    transformers' activations.py while the next is made: gelu_new 4 MLP-wide tensors, gelu_fast 5, quick_gelu 3,
    the fused gelu 2. Per token and layer, in bf16, over a gpt2 of 4 x 256 = 1,024 MLP width."""
    gpt2 = {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 4096}
    fused = peak({**gpt2, "activation_function": "gelu"}, method="inference", tokens=4096)
    for act, wide in (("gelu_new", 4), ("gelu_fast", 5), ("quick_gelu", 3)):
        more = peak({**gpt2, "activation_function": act}, method="inference", tokens=4096) - fused
        assert more == (wide - 2) * 1024 * 4096 * 2, act
    from generator.accuracy import estimate_bytes
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "inference"
            and (r["config"].get("activation_function") or r["config"].get("hidden_act")) in (
                "gelu_new", "gelu_fast", "quick_gelu", "gelu")
            and r["model_type"] in ("gpt2", "phi", "codegen")]
    assert len(rows) == 5  # distilgpt2 with gelu_fast, quick_gelu and gelu; phi and codegen (gelu_new)
    for r in rows:
        assert abs(estimate_bytes(r, S) / r["measured"]["peak_bytes"] - 1) < 0.01, r["model"]


def test_eager_scores_at_generate_follow_each_family_code():
    """FINDINGS.md F81: per score element at generate's prefill, BLOOM keeps 14 B (two fp32 tensors and three bf16,
    the previous layer's probabilities among them), GPT-NeoX-Japanese 8 (four bf16), Flint 12 (three fp32), HY-V4 12
    (two of each) and xglm 4 (its masked scores and their torch.max); eager_attention_forward's softmax and cast, 6. Each class default's run at 1,024 tokens
    within 2.5% (HY-V4's since its fp32 LM head is priced: -11.8% before, test_fp32_head.py)."""
    from generator.accuracy import estimate_bytes
    from generator.estimator.memory.attention import GENERATE_SCORES, generate_scores_bytes
    expect = {"bloom": 14, "gpt_neox_japanese": 8, "flint": 12, "hy_v4": 12, "xglm": 4}
    assert {t: 4 * f + 2 * c for t, (f, c) in GENERATE_SCORES.items()} == expect
    llama = normalise(LLAMA, "m")
    assert generate_scores_bytes(llama, build_graph(llama), 1024, 2) == 4 * 1024 * 1024 * 6  # 4 heads
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "inference"
            and r["model_type"] in expect and r["setup"]["attention"] == "eager"]
    assert {r["model_type"] for r in rows} == set(expect)
    for r in rows:
        error = estimate_bytes(r, S) / r["measured"]["peak_bytes"] - 1
        assert abs(error) < 0.025, (r["model_type"], error)


def test_xglm_keeps_its_clamped_scores():
    from generator.estimator.memory.activations import regime
    from generator.estimator.memory.attention import score_bytes
    a = normalise({"model_type": "xglm", "d_model": 256, "ffn_dim": 1024, "num_layers": 2, "attention_heads": 4,
                   "vocab_size": 1000, "max_position_embeddings": 2048}, "m")
    assert score_bytes(a, 2, regime("full", "amp")) == 10
    assert score_bytes(a, 2, regime("lora", "amp", cpu=True)) == 4
    assert score_bytes(a, 2) == 6  # serving's one layer: softmax(dtype=float32) and its cast


def test_routed_experts_keep_each_tokens_input_and_output():
    moe = {"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 688, "moe_intermediate_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
           "num_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 4096}
    part = next(p for p in build_graph(normalise(moe, "m")).spec.blocks[0].parts if p.type.startswith("MoE"))
    assert part.act == 2 * 64 * 4 + 2 * 2 * 256 and part.frozen_act == 2 * 64 * 3 + 2 * 256


def test_axolotl_changes_checkpointing_optimizer_and_dropout_from_hf_trainer():
    hf, ax = Job.from_options("hf-trainer", method="lora"), Job.from_options("axolotl", method="lora")
    moved = {f for f in Job.__dataclass_fields__ if getattr(hf, f) != getattr(ax, f)}
    assert moved == {"recipe", "grad_ckpt", "optimizer", "lora_dropout", "attention", "lora_rank", "lora_targets"}
    assert (hf.lora_rank, hf.lora_targets, ax.lora_rank, ax.lora_targets) == (8, "peft-default", 16, "all-linear")
    assert (ax.grad_ckpt, ax.optimizer, ax.lora_dropout, ax.attention) == (True, "adamw8bit", 0.05, "sdpa")
    q = Job.from_options("axolotl-qlora")
    assert (q.method, q.storage, q.double_quant, q.upcast_fp32, q.lora_rank) == ("qlora", "nf4", True, False, 32)
    u = Job.from_options("unsloth")
    assert (u.method, u.storage, u.lora_dropout, u.lora_rank, u.optimizer) == ("qlora", "nf4", 0.0, 16, "adamw8bit")


def test_llama_factory_recipes_are_its_defaults_and_price_its_simulated_steps():
    """FINDINGS.md F38: LLaMA-Factory's LoRA example under its argument defaults, and quantization_bit 4. Its eight
    CPU-simulated steps (reentrant checkpointing, cpu-sim-extra.jsonl) are priced within 0.5% by the recipe's own
    job at each row's model, batch and tokens; the reentrant run peaks where its non-reentrant twin does."""
    lf, q = Job.from_options("llama-factory"), Job.from_options("llama-factory-qlora")
    assert (lf.method, lf.precision, lf.storage, lf.adapter_dtype, lf.lora_rank, lf.lora_targets, lf.lora_dropout,
            lf.grad_ckpt, lf.optimizer, lf.grad_accum) == ("lora", "amp", "bf16", "fp32", 8, "all-linear", 0.0, True,
                                                          "adamw-fused", 8)
    moved = {f for f in Job.__dataclass_fields__ if getattr(lf, f) != getattr(q, f)}
    assert moved == {"recipe", "method", "weights", "double_quant"} and (q.storage, q.upcast_fp32) == ("nf4", False)
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"].get("reentrant")
            and r["setup"].get("grad_accum") == 8]
    assert len(rows) == 7
    for row in rows:
        a = normalise(row["config"], row["model"])
        recipe = q if row["setup"]["method"] == "qlora" else lf
        job = dataclasses.replace(recipe, batch=row["setup"]["batch"], tokens=row["setup"]["tokens"], kernels="cpu",
                                  attention=row["setup"]["attention"])
        priced = job_memory(a, build_graph(a), S, job, row["model"]).peak_bytes
        assert abs(priced / row["measured"]["peak_bytes"] - 1) < 0.005, row["model"]
    twins = [r["measured"]["peak_bytes"] for r in measured_rows("cpu-sim-extra")
             if r["model"].endswith("configs/llama.json") and r["setup"].get("grad_accum") == 8]
    assert len(twins) == 2 and twins[0] == twins[1]


def test_ms_swift_recipes_are_its_defaults_and_price_its_simulated_steps():
    """ms-swift's `swift sft --train_type lora` defaults (swift/arguments/tuner_args.py, swift/trainers/arguments.py
    at 3602360): r 8 on all-linear with dropout 0.05, reentrant checkpointing on one GPU, 16 micro-batches; with
    --quant_bits 4 an nf4 base with double quantisation and no fp32 upcast. Its three CPU-simulated steps (Qwen3-0.6B
    LoRA and QLoRA, Llama-3.1-8B's shape) are priced within 0.5% by the recipe's job; the logits are every token's
    (an upper bound where ms-swift's use_logits_to_keep skips the prompt's)."""
    sw, q = Job.from_options("ms-swift"), Job.from_options("ms-swift-qlora")
    assert (sw.method, sw.precision, sw.storage, sw.adapter_dtype, sw.lora_rank, sw.lora_targets, sw.lora_dropout,
            sw.grad_ckpt, sw.optimizer, sw.loss, sw.grad_accum) == ("lora", "amp", "bf16", "fp32", 8, "all-linear",
                                                                    0.05, True, "adamw-fused", "hf", 16)
    moved = {f for f in Job.__dataclass_fields__ if getattr(sw, f) != getattr(q, f)}
    assert moved == {"recipe", "method", "weights", "double_quant"} and (q.storage, q.upcast_fp32) == ("nf4", False)
    rows = [r for r in measured_rows("cpu-sim-extra") if r["setup"].get("grad_accum") == 16]
    assert len(rows) == 3
    for row in rows:
        a = normalise(row["config"], row["model"])
        job = dataclasses.replace(q if row["setup"]["method"] == "qlora" else sw, batch=row["setup"]["batch"],
                                  tokens=row["setup"]["tokens"], kernels="cpu")
        priced = job_memory(a, build_graph(a), S, job, row["model"]).peak_bytes
        assert abs(priced / row["measured"]["peak_bytes"] - 1) < 0.005, (row["model"], row["setup"]["method"])

def test_moe_pages_say_their_lora_adapts_the_expert_tensors():
    """peft 0.21's all-linear wraps the fused expert tensors of these types (memory.lora.FUSED_EXPERTS): the page
    says so, with the flag that prices attention-only adapters; a dense model and qwen2_moe (not converted) do not."""
    seen = {}
    for repo, cfg, _ in snapshot_configs():
        if repo in ("Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1", "openai-community/gpt2",
                    "Qwen/Qwen1.5-MoE-A2.7B-Chat"):
            checks = [f.check for f in check_scope(normalise(cfg, repo), 2048, 2048)]
            seen[repo] = "lora_expert_tensors" in checks
    assert seen == {"Qwen/Qwen3-30B-A3B": True, "mistralai/Mixtral-8x7B-v0.1": True,
                    "openai-community/gpt2": False, "Qwen/Qwen1.5-MoE-A2.7B-Chat": False}


def test_pages_warn_where_peft_all_linear_fails_on_a_tuple_router():
    """Llama 4's and PhiMoE's routers are nn.Linear subclasses returning a tuple: peft's all-linear wraps them and
    the step fails (both CPU simulations did); their pages say so, naming the flag, and a routed MoE's do not. The
    table is the installed transformers' (each class an nn.Linear whose forward returns several values)."""
    import importlib
    import inspect

    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from generator.estimator.checks import TUPLE_ROUTERS

    for path in set(TUPLE_ROUTERS.values()):
        module, name = path.rsplit(".", 1)
        package = f"transformers.models.{module.removeprefix('modeling_')}.{module}"
        cls = getattr(importlib.import_module(package), name)
        assert issubclass(cls, torch.nn.Linear)
        lines = inspect.getsource(cls.forward).splitlines()
        assert any(line.strip().startswith("return") and "," in line for line in lines)
    for repo, cfg, _ in snapshot_configs():
        if repo in ("microsoft/Phi-mini-MoE-instruct", "Qwen/Qwen3-30B-A3B"):
            checks = [f.check for f in check_scope(normalise(cfg, repo), 2048, 2048)]
            assert ("lora_all_linear_fails" in checks) == (repo == "microsoft/Phi-mini-MoE-instruct"), repo
    llama4 = {"model_type": "llama4_text", "hidden_size": 512, "intermediate_size": 1024,
              "intermediate_size_mlp": 2048, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "num_local_experts": 8, "num_hidden_layers": 4, "vocab_size": 8192}
    message = next(f.message for f in check_scope(normalise(llama4, "m"), 2048, 2048)
                   if f.check == "lora_all_linear_fails")
    assert "Llama4Router" in message and "--lora-targets" in message


def test_peft_keeps_its_adapters_fp32_on_a_bf16_base_without_autocast_and_the_default_prices_it_so():
    """Issue 13: "peft's default fp32 adapters on a bf16 base without autocast (23% under)". get_peft_model's
    autocast_adapter_dtype=True upcasts them whatever the base (peft tuners_utils.cast_adapter_dtype): the model
    here is bf16 and trained with no autocast, and its adapters come out fp32. LitGPT's recipe keeps its own bf16."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = transformers.LlamaConfig(**{k: v for k, v in LLAMA.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules="all-linear"))
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.float32}
    assert peak(LLAMA, method="lora", precision="bf16") == peak(LLAMA, method="lora", precision="bf16",
                                                                adapter_dtype="fp32") \
        > peak(LLAMA, method="lora", precision="bf16", adapter_dtype="bf16")
    assert Job.from_options("litgpt").adapter_dtype == "bf16"


def test_a_config_that_names_its_attention_is_priced_with_it():
    """A page review found Phi-3.5-vision priced eager (custom code) though its config.json says
    flash_attention_2, and ERNIE-4.5 priced SDPA though its config says eager. transformers builds the model with
    the config's _attn_implementation (checked here on the meta device), and the default follows it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    eager_llama = {**LLAMA, "_attn_implementation": "eager"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**eager_llama))
    assert model.config._attn_implementation == "eager"
    assert default_attention(normalise(eager_llama, "m"))[0] == "eager"
    assert peak(eager_llama) == peak(LLAMA, attention="eager") > peak(LLAMA)
    flash = {**LLAMA, "auto_map": {"AutoModelForCausalLM": "m.M"}, "_attn_implementation": "flash_attention_2"}
    assert default_attention(normalise(flash, "m")) == ("sdpa", "config.json sets _attn_implementation to "
                                                                "flash_attention_2, which keeps no score matrix")
    assert default_attention(normalise({**LLAMA, "attn_implementation": "eager"}, "m"))[0] == "eager"
