"""estimator.job: one exact setup's peak, phase and breakdown. Reference values with their source, the breakdown
summing to the peak, and the peak never falling as a job grows."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from generator.accuracy import estimate_bytes, tensor_bytes
from generator.errors import ConfigError
from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.activations import recompute_transient_bytes, regime
from generator.estimator.memory.job import DEQUANT_PHASE, job_memory, job_phases
from generator.estimator.memory.job_options import METHODS, Job, JobError
from generator.estimator.memory.job_result import PARTS
from generator.estimator.memory.lora import block_unpaged_lora_params
from generator.estimator.memory.profile import serve_profile, train_profile
from generator.estimator.memory.storage import ADAMW8BIT_STATE_BYTES, weight_bytes
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows, snapshot_configs, tiny_qwen2

S = Assumptions()
# A 2-layer Llama small enough that the optimizer step is the peak at short sequences (vocab 1000).
LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096,
         "tie_word_embeddings": False}


def _ag(cfg):
    a = normalise(cfg, "t")
    return a, build_graph(a)


def mem(cfg=LLAMA, **job):
    a, g = _ag(cfg)
    return job_memory(a, g, S, Job(**job))


def parts(m) -> dict:
    return dict(m.breakdown)


# --- the default jobs are the site's figures --------------------------------------------------------------

@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("tokens, batch", [(16, 1), (512, 1), (2048, 4)])
def test_default_jobs_are_the_site_profiles(method, tokens, batch):
    a, g = _ag(tiny_qwen2())
    assert job_memory(a, g, S, Job(method=method, tokens=tokens, batch=batch)).peak_bytes == \
        train_profile(a, g, S, tokens, method, 16).total(batch)


SNAPSHOT = snapshot_configs()


@pytest.mark.parametrize("model,config", [(m, c) for m, c, _ in SNAPSHOT], ids=[m for m, _, _ in SNAPSHOT])
def test_default_jobs_are_the_site_profiles_on_every_snapshot_model(model, config):
    # job.py prices phase by phase with a breakdown; memory.py prices per stage for the per-card batches and the
    # splits. Both read the same activations.py formulas: their peaks must be one number on every real config.
    try:
        a = normalise(config, model)
        g = build_graph(a)
    except Exception as exc:  # noqa: BLE001 - models the estimator refuses have no figures to compare
        pytest.skip(f"not estimated: {type(exc).__name__}")
    tokens = min(2048, a.max_context)
    # Pixtral's tower keeps one mask over all of a step's images (tower_adapters.SHARED_MASK_TOWERS, F77): the job
    # prices it over the batch's, (batch x rows)^2, the profile each sample's block and each pair's (embed_per_pair)
    for method in ("full", "lora"):
        profile = train_profile(a, g, S, tokens, method, 16)
        for batch in (1, 4):
            peak = job_memory(a, g, S, Job(method=method, tokens=tokens, batch=batch), model).peak_bytes
            assert profile.total(batch) == peak, (method, batch)


# --- reference values per option, each with its source ----------------------------------------------------

def test_full_amp_adamw_step_is_20_bytes_per_parameter():
    # FINDINGS.md F5: Mistral-7B (2 layers) measured 13,320.4 MiB = (4 + 4 + 8 + 4) x P at the AdamW step
    a, g = _ag(LLAMA)
    m = mem(tokens=16)
    assert m.peak_phase == "optimizer step" and m.peak_bytes == 20 * g.params_total
    assert parts(m) == {"weights": 4 * g.params_total, "gradients": 4 * g.params_total,
                        "optimizer_state": 8 * g.params_total, "activations": 0, "logits": 0, "kv_cache": 0,
                        "overhead": 4 * g.params_total}


def test_pure_bf16_and_fp32_states_take_the_parameter_dtype():
    # torch.optim.AdamW: exp_avg / exp_avg_sq = zeros_like(param): bf16 weights -> 2 + 2 + 4 + 2 (foreach temp)
    _, g = _ag(LLAMA)
    P = g.params_total
    assert mem(tokens=16, precision="bf16").peak_bytes == 10 * P
    assert mem(tokens=16, precision="fp32").peak_bytes == 20 * P
    # measured (cpu-sim.jsonl, Qwen2-0.5B, 4 layers, T=512): pure bf16 2.076 GiB vs AMP 3.932 GiB
    assert mem(tokens=16, precision="bf16").peak_bytes / mem(tokens=16).peak_bytes == pytest.approx(0.5)


def test_optimizers():
    _, g = _ag(LLAMA)
    P = g.params_total
    # SGD without momentum: no state, in-place foreach add; the step holds weights + gradients
    assert parts(mem(tokens=16, optimizer="sgd"))["optimizer_state"] == 0
    assert mem(tokens=16, optimizer="sgd").peak_bytes == 8 * P
    # bitsandbytes 8-bit AdamW: 2 uint8 states + 2 fp32 absmax per 256 (Optimizer2State, blocksize 256)
    assert ADAMW8BIT_STATE_BYTES == 2 + 8 / 256
    assert abs(parts(mem(tokens=16, optimizer="adamw8bit"))["optimizer_state"] - ADAMW8BIT_STATE_BYTES * P) < 1
    # paged AdamW: states in CUDA managed memory, outside torch's allocator: only nvidia-smi sees them
    paged = {metric: parts(mem(tokens=16, optimizer="paged-adamw", metric=metric))["optimizer_state"]
             for metric in ("allocated", "reserved", "nvidia-smi")}
    assert paged == {"allocated": 0, "reserved": 0, "nvidia-smi": 8 * P}


# Llama-3.1-8B's widths (hidden 4,096, MLP 14,336, 8 KV heads of 128) on 2 layers
LLAMA_8B_WIDTHS = {**LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                   "num_key_value_heads": 8}


@pytest.mark.parametrize("rank, unpaged_per_layer", [
    # r 16: lora_A of q, k, v, o, gate, up (16 x 4,096 each) and lora_B of q, o, down (4,096 x 16) and of k, v
    # (1,024 x 16); down's lora_A and gate's and up's lora_B (229,376 each) are paged
    (16, 6 * 65_536 + 3 * 65_536 + 2 * 16_384),
    # r 64: only k's and v's lora_B (1,024 x 64 = 65,536) stay under 1e5
    (64, 2 * 65_536),
])
def test_paged_adamw_counts_the_state_of_tensors_it_does_not_page(rank, unpaged_per_layer):
    # bitsandbytes/optim/optimizer.py get_state_buffer: a tensor under 1e5 elements gets torch.zeros_like state, in
    # torch's allocator; the rest cudaMallocManaged. Its two fp32 states are 8 B an element (Optimizer2State).
    job = dict(tokens=16, method="qlora", weights="nf4", optimizer="paged-adamw", lora_rank=rank)
    state = {metric: parts(mem(LLAMA_8B_WIDTHS, metric=metric, **job))["optimizer_state"]
             for metric in ("allocated", "reserved", "nvidia-smi")}
    adapters = 2 * rank * (4 * 4096 + 4096 + 4096 + 2 * 1024 + 3 * 14336 + 3 * 4096)  # r x (in + out) per Linear
    assert state == {"allocated": 2 * 8 * unpaged_per_layer, "reserved": 2 * 8 * unpaged_per_layer,
                     "nvidia-smi": 8 * adapters}


def test_litgpt_fuses_the_attention_adapters_into_one_pair_of_tensors():
    """LitGPT's LoRAQKVLinear (litgpt/lora.py) makes one lora_A of (r x the adapted of q, k, v) x in and one lora_B of
    their outputs x r: on Llama-3.2-1B's widths (2,048, 8 KV heads of 64) with r 32 on q and v, lora_A is 131,072
    elements (paged) and lora_B 81,920 (not); transformers' four separate tensors (65,536 x 3 and 16,384) are all
    under 1e5."""
    cfg = {**LLAMA, "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
           "num_key_value_heads": 8}
    _, g = _ag(cfg)
    block = g.spec.distinct_layers[0][0]
    roles = frozenset({"q", "v"})
    assert block_unpaged_lora_params(block, 32, roles) == 3 * 65_536 + 16_384
    assert block_unpaged_lora_params(block, 32, roles, fused_qkv=True) == (2048 + 512) * 32


def test_metrics():
    base = mem(tokens=512)
    reserved = mem(tokens=512, metric="reserved")
    smi = mem(tokens=512, metric="nvidia-smi")
    # reserved: + the freed bf16 logits block (2 B x T x V) the 4-byte gradients cannot reuse
    assert reserved.peak_bytes - base.peak_bytes == 2 * 512 * 1000
    # nvidia-smi: reserved + the CUDA context (site_config.yaml cuda_context_bytes, 0.5 GiB [ML-PERF])
    assert smi.peak_bytes - reserved.peak_bytes == S.cuda_context_bytes


def test_loss_backward_has_no_gradients_and_12_bytes_per_logit():
    # FINDINGS.md F1/F2: tiny-Qwen2 (vocab 152,064), T=512: 3 fp32 T x V tensors, no gradient yet
    m = mem(tiny_qwen2(), tokens=512)
    assert m.peak_phase == "loss (logits)"
    assert parts(m)["gradients"] == 0 and parts(m)["logits"] == 12 * 512 * 152064


def test_tied_embedding_end_of_backward():
    # FINDINGS.md F6: Qwen2-0.5B (2 layers, tied, T=128) peaks at the end of the backward: 2 x 4 B x V x E more
    cfg = dict(LLAMA, vocab_size=150_000, tie_word_embeddings=True)
    a, g = _ag(cfg)
    m = mem(cfg, tokens=16)
    assert m.peak_phase.startswith("end of backward")
    assert parts(m)["gradients"] == 4 * g.params_total + 2 * 4 * 150_000 * 256


def test_quantised_storage():
    a, g = _ag(LLAMA)
    lin = sum(i * o for b in g.spec.blocks for p in b.parts for _, i, o in p.weight_mats)
    rest = g.params_total - lin
    # NF4 (QLoRA arXiv:2305.14314): 0.5 B per weight + fp32 absmax per 64 = 0.5625 B; the rest stays bf16; and per
    # Linear its QuantState's 16-value fp32 code (bitsandbytes functional.quantize_4bit)
    linears = sum(count for b in g.spec.blocks for p in b.parts for count, _, _ in p.weight_mats)
    assert weight_bytes(g, "nf4") == int(2 * rest + 0.5625 * lin) + 64 * linears
    # double quantisation: absmax as uint8 + fp32 per 256 of them: 0.5 + 1/64 + 4/(64 x 256) B, and per Linear the
    # 256-value fp32 code of its absmax and an fp32 offset
    assert weight_bytes(g, "nf4", True) == pytest.approx(2 * rest + (0.5 + 1 / 64 + 4 / 16384) * lin
                                                         + (64 + 1028) * linears, abs=2)
    # LLM.int8(): 1 B + fp32 row scale; fp8: 1 B + fp32 channel scale
    rows = sum(o for b in g.spec.blocks for p in b.parts for _, _, o in p.weight_mats)
    assert weight_bytes(g, "int8") == 2 * rest + lin + 4 * rows
    assert weight_bytes(g, "fp8") == 2 * rest + lin + 4 * rows
    # GPTQ int4 g128: qweight 0.5 B + per 128 inputs an fp16 scale and a packed zero per column, + int32 g_idx
    gptq = weight_bytes(g, "gptq-int4")
    assert 2 * rest + 0.5 * lin < gptq < 2 * rest + 0.54 * lin
    # QLoRA: the base in NF4, one dequantised Linear (the largest) as a bf16 transient, inside its matmul only
    # (FINDINGS.md F29): the last layer's forward holds it, not the loss
    q = parts(mem(method="qlora", tokens=64))
    assert q["weights"] > weight_bytes(g, "nf4")
    phases = {ph.name: ph for ph in job_phases(a, g, S, Job(method="qlora", tokens=64))}
    assert phases[DEQUANT_PHASE].overhead_fixed == 2 * 688 * 256
    assert phases["backward (activations)"].overhead_fixed == 0


def test_lora_targets_and_rank():
    a, g = _ag(LLAMA)
    qv = mem(method="lora", lora_targets="q_proj,v_proj", tokens=512)
    every = mem(method="lora", tokens=512)
    assert qv.peak_bytes < every.peak_bytes  # measured: 4.182 vs 4.329 GiB (FINDINGS.md F8, Qwen2-0.5B)
    # adapters: r x (in + out) on q (256 -> 256) and v (256 -> 128) of 2 layers; AdamW keeps 8 B each (fp32)
    assert parts(qv)["optimizer_state"] == 8 * 2 * 16 * ((256 + 256) + (256 + 128))
    assert parts(mem(method="lora", lora_targets="q_proj,v_proj", tokens=512, lora_rank=64))["optimizer_state"] == \
        4 * parts(qv)["optimizer_state"]
    assert mem(method="lora", lora_targets="mlp", tokens=512).peak_bytes > \
        mem(method="lora", lora_targets="gate_proj", tokens=512).peak_bytes



def test_mlp_targets_adapt_an_moe_layers_experts():
    """`mlp` is torchtune's apply_lora_to_mlp, which "includes both vanilla MLP layers and MoE layers"
    (torchtune/models/llama4/_component_builders.py lora_llama4_decoder): on a fused-expert MoE it adapts the shared
    expert and the expert tensors, not the router. It had been refused while the refusal listed `mlp` among the names;
    a model with no MLP no longer offers it."""
    from generator.estimator.memory.lora import target_roles

    moe = {"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 688, "moe_intermediate_size": 128,
           "num_experts": 8, "num_experts_per_tok": 2, "head_dim": 32,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000,
           "max_position_embeddings": 4096}
    a, g = _ag(moe)
    assert target_roles(a, g, "mlp", "m") == frozenset({"experts_gate_up", "experts_down"})
    assert mem(moe, method="lora", lora_targets="q_proj,v_proj,mlp", tokens=256).peak_bytes > \
        mem(moe, method="lora", lora_targets="q_proj,v_proj", tokens=256).peak_bytes
    mamba = {"model_type": "mamba", "hidden_size": 256, "state_size": 16, "num_hidden_layers": 2,
             "vocab_size": 1000, "expand": 2, "conv_kernel": 4}
    with pytest.raises(JobError, match=r"its names: [^m]*all-linear") as err:
        target_roles(*_ag(mamba), "up_proj", "m")
    assert "mlp" not in str(err.value).split("its names:")[1]


def test_mla_linears_take_their_modeling_files_names():
    """An MLA layer's Linears (modeling_deepseek_v3.DeepseekV3Attention: q_a_proj, q_b_proj, kv_a_proj_with_mqa,
    kv_b_proj, o_proj; without q_lora_rank one q_proj) are named as there: a LoRA run names them so, and they had
    been offered as qkv_proj and o_proj, the latter adapting q_b_proj's shape. Two CPU-simulated DeepSeek-V3 steps on
    those names (cpu-sim-extra.jsonl) read within 2%."""
    from generator.estimator.memory.lora import target_roles

    mla = {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 688, "moe_intermediate_size": 128,
           "n_routed_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 8,
           "vocab_size": 1000, "kv_lora_rank": 64, "q_lora_rank": 96, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
           "v_head_dim": 32, "first_k_dense_replace": 1}
    a, g = _ag(mla)
    assert target_roles(a, g, "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj", "m") == \
        frozenset({"q_a", "q_b", "kv_a", "kv_b", "o"})
    # o_proj is the (heads x v_head_dim -> hidden) Linear: its adapter is r x (256 + 256)
    assert parts(mem(mla, method="lora", lora_targets="o_proj", tokens=64))["optimizer_state"] == 8 * 16 * 2 * (256 + 256)
    a, g = _ag({**mla, "q_lora_rank": None})
    assert target_roles(a, g, "q_proj", "m") == frozenset({"q"})
    with pytest.raises(JobError, match="kv_a_proj_with_mqa, kv_b_proj"):
        target_roles(a, g, "qkv_proj", "m")
    v4 = next(c for m, c, _ in snapshot_configs() if m == "deepseek-ai/DeepSeek-V4-Flash")
    a, g = _ag(v4)  # modeling_deepseek_v4.DeepseekV4Attention: q_a_proj, q_b_proj, kv_proj, o_a_proj (grouped), o_b_proj
    assert target_roles(a, g, "q_a_proj,q_b_proj,kv_proj,o_b_proj", "m") == frozenset({"q_a", "q_b", "kv", "o_b"})
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"] == "deepseek-ai/DeepSeek-V3"
            and "kv_b_proj" in r["setup"]["lora_targets"]]
    assert len(rows) == 2
    for row in rows:
        assert abs(estimate_bytes(row, load_settings().assumptions) / row["measured"]["peak_bytes"] - 1) < 0.02


def test_peft_default_targets_follow_peft_per_model_type():
    """peft-default: peft's own targets where a run names none (TRL's default, lora_target_modules None;
    peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): q and v for llama, the fused
    query_key_value for gpt_neox, BERT's query and value; a model type peft does not map is refused by name."""
    from generator.estimator.memory.lora import target_roles

    a, g = _ag(LLAMA)
    assert target_roles(a, g, "peft-default", "m") == frozenset({"q", "v"})
    assert mem(method="lora", lora_targets="peft-default", tokens=512) == \
        mem(method="lora", lora_targets="q_proj,v_proj", tokens=512)
    neox = {**LLAMA, "model_type": "gpt_neox", "rotary_pct": 0.25, "use_parallel_residual": True}
    assert target_roles(*_ag(neox), "peft-default", "m") == frozenset({"qkv"})
    bert = {"model_type": "bert", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 512}
    assert target_roles(*_ag(bert), "peft-default", "m") == frozenset({"q", "v"})
    assert target_roles(*_ag(bert), "dense", "m") == frozenset({"o", "up", "down"})  # BERT's three `dense`
    with pytest.raises(JobError, match="peft has no default LoRA targets for a phi3 model"):
        mem({**LLAMA, "model_type": "phi3"}, method="lora", lora_targets="peft-default", tokens=64)

def test_custom_code_types_take_their_own_module_names():
    """A custom-code model (auto_map) is read as its nearest family (config.custom_code), but LoRA targets name the
    Linears of its own modeling file: Qwen-1's c_attn, c_proj, w1 and w2 (modeling_qwen.py QWenAttention, QWenMLP:
    c_proj(w1(x) * silu(w2(x)))), InternLM2's wqkv, wo and w2(act(w1(x)) * w3(x)) (modeling_internlm2.py), Ling
    2.0's query_key_value and dense (modeling_bailing_moe_v2.py). ms-swift's and Qwen's own LoRA scripts name them
    so; the family's names are refused, as peft would find no such module."""
    from generator.estimator.memory.lora import target_roles

    qwen1 = {"model_type": "qwen", "hidden_size": 256, "intermediate_size": 1376, "num_hidden_layers": 2,
             "num_attention_heads": 8, "kv_channels": 32, "vocab_size": 1000, "seq_length": 2048, "no_bias": True}
    a, g = _ag(qwen1)
    assert target_roles(a, g, "c_attn", "m") == frozenset({"q", "k", "v"})
    assert target_roles(a, g, "c_proj", "m") == frozenset({"o", "down"})
    assert target_roles(a, g, "w1,w2", "m") == frozenset({"up", "gate"})
    assert target_roles(a, g, "c_attn,c_proj,w1,w2", "m") == frozenset({"q", "k", "v", "o", "gate", "up", "down"})
    with pytest.raises(JobError, match="its names: c_attn, c_proj, w1, w2"):
        target_roles(a, g, "q_proj", "m")
    internlm2 = {**LLAMA, "model_type": "internlm2", "bias": False}
    a, g = _ag(internlm2)
    assert target_roles(a, g, "wqkv,wo", "m") == frozenset({"q", "k", "v", "o"})
    assert target_roles(a, g, "w1", "m") == frozenset({"gate"}) and target_roles(a, g, "w3", "m") == frozenset({"up"})
    assert target_roles(a, g, "w2", "m") == frozenset({"down"})


def test_peft_default_targets_are_peft_installed_table():
    """lora.PEFT_DEFAULT_TARGETS is peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft/utils/
    constants.py) as installed: the same model types and the same names (gemma4's regex names q_proj and v_proj of
    its language model, the text tower the estimator reads)."""
    constants = pytest.importorskip("peft.utils.constants")
    from generator.estimator.memory.lora import PEFT_DEFAULT_TARGETS

    theirs = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    assert set(PEFT_DEFAULT_TARGETS) == set(theirs)
    for model_type, names in theirs.items():
        if isinstance(names, str):  # a regex
            assert all(n in names for n in PEFT_DEFAULT_TARGETS[model_type].split(",")), model_type
        else:
            assert PEFT_DEFAULT_TARGETS[model_type] == ",".join(names), model_type

def test_gradient_checkpointing_keeps_layer_inputs():
    plain = parts(mem(tiny_qwen2(), tokens=2048, batch=2))
    ckpt = parts(mem(tiny_qwen2(), tokens=2048, batch=2, grad_ckpt=True))
    assert ckpt["activations"] < plain["activations"] and ckpt["logits"] == plain["logits"]


@pytest.mark.parametrize("precision, adapter, per_inter, per_hidden, per_inter0, per_hidden0", [
    # input, fp32 cast, dropped copy (autocast's copy saved); without dropout: input, fp32 cast
    ("amp", "fp32", 2 + 4 + 4, 2 + 2 + 2 + 2 + 2, 2 + 4, 2 + 2 + 2 + 2 + 2),
    # input, fp32 cast (the dropped copy saved); fp32 grad; without dropout: the input (lora_A saves the cast)
    ("bf16", "fp32", 2 + 4, 2 + 2 + 2 + 2 + 4 + 2, 2, 2 + 2 + 2 + 2 + 4 + 2),
    # input (the dropped copy saved); without dropout lora_A saves the input itself: no copy, no extra input
    ("bf16", "bf16", 2, 2 + 2 + 2 + 2 + 2, 0, 2 + 2 + 2 + 2),
])
def test_recomputed_layer_holds_the_dropout_chain(precision, adapter, per_inter, per_hidden, per_inter0,
                                                  per_hidden0):
    """Checkpointing: the recomputed layer's down_proj adapter holds its input's copies beside the layer's saved
    tensors, one copy more with LoRA dropout (activations.recompute_transient_bytes; Mistral-7B rows of
    cpu-sim-matrix.jsonl, FINDINGS.md F12)."""
    a, g = _ag(LLAMA)
    job = Job(method="lora", precision=precision, adapter_dtype=adapter, grad_ckpt=True, batch=2, tokens=512,
              lora_dropout=0.05, kernels="cpu")
    phases = {ph.name: ph.activations for ph in job_phases(a, g, S, job)}
    without = {ph.name: ph.activations for ph in job_phases(a, g, S, dataclasses.replace(job, lora_dropout=0.0))}
    name = "backward (recomputing a checkpointed layer)"
    # beside it the dropout's saved masks (the adapters' dtype on CPU); with bf16 adapters the saved dropped
    # copies replace the input lora_A shared without dropout (fp32 adapters: they replace the fp32 cast)
    ins, shared = 3 * 256 + 256 + 2 * 256 + 688, 256 + 256 + 688
    width = 2 if adapter == "bf16" else 4
    held = 2 * 512 * (688 * (per_inter - per_inter0) + 256 * (per_hidden - per_hidden0))
    # without dropout the chain is priced too, per token
    r0 = regime("lora", precision, 4 if adapter == "fp32" else 2, False, True)
    assert recompute_transient_bytes(g.spec.blocks[0], r0, None) == 688 * per_inter0 + 256 * per_hidden0
    masks = 2 * 512 * ins * width
    copies = 2 * 512 * (ins - shared) * 2 if adapter == "bf16" else 0
    assert phases[name] - without[name] == held + masks + copies
    cuda = {ph.name: ph.activations for ph in job_phases(a, g, S, dataclasses.replace(job, kernels="cuda"))}
    assert phases[name] - cuda[name] == 2 * 512 * ins * (width - 1)  # CUDA's masks are bool


def test_eager_attention_adds_the_score_matrix():
    a, g = _ag(LLAMA)
    sdpa = {ph.name: ph for ph in job_phases(a, g, S, Job(tokens=1024))}
    eager = {ph.name: ph for ph in job_phases(a, g, S, Job(tokens=1024, attention="eager"))}
    # per layer 8 heads x T x T x (4 B fp32 softmax + 2 B bf16 copy), 2 layers; + repeat_kv, - LSE
    delta = 2 * 8 * 1024 * 1024 * 6 + 2 * 1024 * (2 * (2 * 256 - 2 * 128) - 4 * 8)
    loss = eager["backward (activations)"]
    assert loss.activations - sdpa["backward (activations)"].activations == delta
    # the last layer's softmax backward (torch _softmax_backward_data): its fp32 output saved, the fp32 gradients of
    # the probabilities and of the scores; the bf16 probabilities freed: 4 + 4 + 4 - 2 = 6 B per score more than the
    # layer saved. Freed by then: the head's tensors, and what the layer saved after its attention
    late = eager["backward (attention scores' gradients)"]
    # per token: F1's 12 B per logit; the final RMSNorm's fp32 input, fp32 normalised output (its weight trains),
    # bf16 cast for the head and fp32 rsqrt (F3)
    head = 1024 * (1000 * 12 + 256 * 4 + 256 * 4 + 256 * 2 + 4)
    # per token: the post-attention RMSNorm's (as the final one's, with a bf16 cast for gate and up each) and the
    # SwiGLU's gate, up, silu and product outputs in bf16 (F3)
    after = 1024 * (256 * 4 + 4 + 256 * 4 + 2 * 256 * 2 + 4 * 688 * 2)
    assert late.activations == loss.activations + loss.logits - head - after + 8 * 1024 * 1024 * 6
    # the gradients made (fp32): the head's, the final norm's and the post-attention norm's and MLP's of layer 1,
    # whose bf16 autocast copies are freed
    mlp = 3 * 256 * 688
    assert late.gradients == 4 * (256 * 1000 + 256 + 256 + mlp)
    assert loss.overhead_weights - late.overhead_weights == 2 * mlp
    assert "backward (attention scores' gradients)" not in sdpa


def test_inference_prefill_and_decode():
    a, g = _ag(LLAMA)
    m = mem(method="inference", precision="bf16", tokens=512, new_tokens=8, batch=4)
    p = parts(m)
    # KV: 2 layers x 2 (K, V) x 4 kv heads x 32 head_dim x 2 B per token
    per_token = 2 * 2 * 4 * 32 * 2
    assert m.peak_phase in ("prefill", "decode") and p["weights"] == 2 * g.params_total
    assert p["kv_cache"] == 4 * per_token * (512 if m.peak_phase == "prefill" else 520)
    long = mem(method="inference", precision="bf16", tokens=16, new_tokens=4000, batch=4)
    assert long.peak_phase == "decode" and parts(long)["logits"] == 4 * 6 * 1000  # bf16 + fp32 next-token logits


# --- what the estimator cannot price is an error naming the key ------------------------------------------

@pytest.mark.parametrize("job, key", [
    (Job(method="lora", lora_targets="c_attn"), "lora_targets"),
    (Job(method="lora", lora_targets="q_proj,nope"), "lora_targets"),
    (Job(method="full", weights="nf4"), "weights"),
    (Job(method="qlora", weights="bf16"), "weights"),
    (Job(method="sft"), "method"),
    (Job(metric="rss"), "metric"),
    (Job(batch=0), "batch"),
    (Job(new_tokens=3), "new_tokens"),
    (Job(method="lora", weights="bf16", double_quant=True), "double_quant"),
])
def test_what_it_cannot_price_is_a_typed_error(job, key):
    a, g = _ag(LLAMA)
    with pytest.raises(JobError) as exc:
        job_memory(a, g, S, job, "m")
    assert isinstance(exc.value, ConfigError) and exc.value.key == key and "m: key" in str(exc.value)


# --- properties ------------------------------------------------------------------------------------------

JOBS = st.builds(
    Job, method=st.sampled_from(METHODS), precision=st.sampled_from(("amp", "bf16", "fp32")),
    optimizer=st.sampled_from(("adamw", "adamw8bit", "paged-adamw", "sgd")), grad_ckpt=st.booleans(),
    lora_rank=st.integers(1, 128), lora_targets=st.sampled_from(("all-linear", "q_proj,v_proj", "mlp")),
    batch=st.integers(1, 16), tokens=st.integers(1, 4096), attention=st.sampled_from(("sdpa", "eager")),
    metric=st.sampled_from(("allocated", "reserved", "nvidia-smi")))
MODELS = [LLAMA, tiny_qwen2(), dict(LLAMA, tie_word_embeddings=True, vocab_size=50_000),
          {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 5000, "n_positions": 8192}]


def _valid(job: Job) -> Job:
    if job.method == "qlora":
        job = dataclasses.replace(job, weights="nf4")
    if job.method != "inference":
        job = dataclasses.replace(job, new_tokens=0)
    else:  # generate takes no training option (job_options.validate refuses them)
        job = dataclasses.replace(job, grad_ckpt=False, optimizer="adamw")
    if job.method in ("full", "inference"):  # nor a job without adapters an adapter option
        job = dataclasses.replace(job, lora_targets="all-linear", adapter_dtype="", lora_dropout=0.0)
    if job.precision == "fp32" and job.method == "qlora":
        job = dataclasses.replace(job, precision="bf16")
    return job


@given(st.sampled_from(range(len(MODELS))), JOBS, st.integers(1, 8), st.integers(0, 2048), st.integers(0, 512))
@hsettings(max_examples=300, deadline=None)
def test_peak_never_falls_as_the_job_grows(model, job, more_batch, more_tokens, more_new):
    cfg = MODELS[model]
    if cfg["model_type"] == "gpt2" and job.lora_targets == "q_proj,v_proj":
        job = dataclasses.replace(job, lora_targets="c_attn")
    job = _valid(job)
    a, g = _ag(cfg)
    small = job_memory(a, g, S, job)
    bigger = dataclasses.replace(job, batch=job.batch + more_batch, tokens=job.tokens + more_tokens,
                                 new_tokens=job.new_tokens + (more_new if job.method == "inference" else 0))
    big = job_memory(a, g, S, bigger)
    assert big.peak_bytes >= small.peak_bytes
    for m in (small, big):  # the breakdown names every part and sums to the peak
        assert [k for k, _ in m.breakdown] == list(PARTS) and sum(v for _, v in m.breakdown) == m.peak_bytes
        assert all(v >= 0 for _, v in m.breakdown) and m.peak_phase


def test_site_serving_stays_the_chunked_prefill_server():
    # P7: the site's per-card serve figure models a chunked-prefill server (vLLM); `inference` models HF generate,
    # whose batched prefill is larger at batch 8 (FINDINGS.md F7: -55% for the server model on generate's run)
    a, g = _ag(LLAMA)
    site = serve_profile(a, g, S, 2048 + 8).total(8)
    generate = job_memory(a, g, S, Job(method="inference", precision="bf16", tokens=2048, new_tokens=8, batch=8))
    assert generate.peak_bytes > site


def test_site_config_and_assumptions_agree():
    """site_config.yaml is what the site and CLI pass in; Assumptions' defaults mirror it (logits_bytes 12, ...)."""
    from generator.settings import load_settings

    assert load_settings().assumptions == Assumptions()


def test_checkpointed_full_fine_tune_peaks_at_the_first_layer_beside_every_later_gradient():
    # Non-reentrant checkpointing frees each layer's saved input after its backward, while a full fine-tune's
    # gradients accumulate: by the first layer's recomputation every other layer's gradients exist and only the
    # embedding's output and layer 0's input are held (measured: llama 4 layers, AMP, fused AdamW, batch 4,
    # 2,048 tokens: 17,804 MiB, FINDINGS.md F18). Deeper stacks add gradients there, not activations.
    name = "backward (recomputing the first checkpointed layer)"
    job = Job(tokens=256, batch=2, grad_ckpt=True, optimizer="adamw-fused")
    got = {}
    for layers in (4, 8):
        a, g = _ag({**LLAMA, "num_hidden_layers": layers})
        got[layers] = {ph.name: ph for ph in job_phases(a, g, S, job)}[name]
    per_layer = g.spec.blocks[0].params
    assert got[8].activations == got[4].activations
    assert got[8].gradients - got[4].gradients == 4 * 4 * per_layer
    # the head, the final norm, layers 1-3 and layer 0's down_proj (its backward's first weight gradient)
    assert got[4].gradients == 4 * (256 * 1000 + 256 + 3 * per_layer + 688 * 256)


def test_checkpointed_lora_prices_the_adapters_gradients_at_the_first_layer():
    # LoRA's gradients also accumulate down the stack: by the first layer's recomputation every later layer's
    # adapters have theirs (fp32 under AMP), beside the first layer's tensors and only its input. Negligible for a
    # dense model's adapters; LoRA on 512 experts' tensors makes them 820 MiB in a 4-layer qwen3_next step
    # (cpu-sim-extra.jsonl, its measured peak: 821 MiB of gradients).
    name = "backward (recomputing the first checkpointed layer)"
    a, g = _ag({**LLAMA, "num_hidden_layers": 4})
    phases = {ph.name: ph for ph in job_phases(a, g, S, Job(method="lora", tokens=256, grad_ckpt=True))}
    assert phases[name].gradients == phases["optimizer step"].gradients * 3 // 4 > 0
    assert phases[name].activations < phases["backward (recomputing a checkpointed layer)"].activations


def test_checkpointed_full_fine_tunes_are_priced_within_two_percent():
    # FINDINGS.md F18's runs: fused AdamW, SGD, pure bf16, a tied SmolLM and foreach AdamW (was -7.5% to +0.7%)
    # (and F27's four: accumulating, or peaking beside autocast's cached copies at the forward's end; F66's
    # RecurrentGemma, its recurrent layers' recomputation kept through the optimizer step; F73's llava-1.5 fed an
    # image, its CLIP layers checkpointed too; F75's gemma-3 and Llama-3.2-Vision fed one; F95's HRM-Text, every pass
    # of its recurrence a layer; F98's OLMoE, its trained experts' backward)
    mine = [r for r in measured_rows("cpu-sim-extra") if r["setup"]["method"] == "full" and r["setup"]["grad_ckpt"]
            and r["setup"]["attention"] == "sdpa"]
    assert len(mine) == 15
    for r in mine:
        est, measured = estimate_bytes(r, S), r["measured"]["peak_bytes"]
        assert abs(est / measured - 1) < 0.02, (r["model"], r["setup"], est / measured - 1)


def test_generate_before_transformers_4_36_holds_the_previous_steps_cache():
    # transformers 4.35 (modeling_llama: past_key_value = (torch.cat([past, new]), ...)): each decode step builds new
    # tuples while generate still references the previous step's; 4.36's DynamicCache replaces them in place
    per_token = 2 * 2 * 4 * 32 * 2  # 2 layers x K, V x 4 kv heads x 32 head_dim x 2 B
    job = Job(method="inference", precision="bf16", tokens=512, new_tokens=64, batch=4)
    a, g = _ag(LLAMA)
    for version, tokens in (("", 576), ("4.36.0", 576), ("4.35.2", 576 + 575), ("4.32", 576 + 575)):
        phases = job_phases(a, g, S, dataclasses.replace(job, transformers_version=version))
        decode = {ph.name: ph for ph in phases}
        assert decode["decode"].kv_cache == 4 * per_token * tokens, version


def test_public_generate_rows_of_transformers_4_3x_are_priced_within_five_percent():
    # optimum's benchmark_gptq.py on Llama-2-13b-chat (transformers ~4.32 / 4.35, 512 + 512 tokens): -1% to -40%
    # under before the two caches were priced, growing with the batch. The quantised kernels at batch 1 stay ~10%
    # under (their fixed buffers, unpriced: the prefill-only rows M164, M168 miss by the same bytes).
    mine = {r["id"]: r for r in measured_rows("public")
            if (r.get("setup") or {}).get("transformers_version") and not r.get("excluded")
            and r["setup"]["new_tokens"] and (r["setup"]["batch"] > 1 or r["setup"]["weights"] == "fp16")}
    assert len(mine) == 7
    for row_id, r in mine.items():
        est, measured = estimate_bytes(r, S), tensor_bytes(r, S.cuda_context_bytes)
        assert abs(est / measured - 1) < 0.05, (row_id, est / measured - 1)
