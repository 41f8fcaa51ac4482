"""Checks on the reconstructed graph: each finding has a check name, a severity and a message."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .checkpoint import explain
from .config.arch import Arch
from .graph.nodes import Graph
from .inputs import Assumptions
from .memory.attention import custom_sdpa, default_attention
from .memory.experts import runs_every_expert
from .memory.job import job_memory
from .memory.job_options import Job, checkpoints
from .memory.lora import FUSED_EXPERTS
from .memory.math_sdpa import math_sdpa
from .memory.storage import bnb_keeps_experts, bnb_leaves_linears
from .normalise import plainly_custom

# Routers written as an nn.Linear subclass whose forward returns a tuple (transformers 5.24): peft 0.21's
# all-linear wraps them, and the wrapped layer fails at its first forward (peft/tuners/lora/layer.py Linear.forward
# reads result.dtype). Seen in the CPU simulation of both (FINDINGS.md F42).
TUPLE_ROUTERS = {"llama4": "modeling_llama4.Llama4Router", "llama4_text": "modeling_llama4.Llama4Router",
                 "phimoe": "modeling_phimoe.PhimoeTopKRouter"}
# Linears whose forward regroups their input, which peft 0.21's all-linear wraps as plain Linears: the LoRA output
# does not add to the base's and the step fails (a real step on a tiny config, FINDINGS.md F100). The estimate's
# LoRA adapts every other Linear of the model (families/latent_attention._v4_part leaves it out).
GROUPED_LINEARS = {"deepseek_v4": ("o_a_proj", "modeling_deepseek_v4.DeepseekV4GroupedLinear")}
# Fused expert tensors that peft's all-linear adapts (lora.FUSED_EXPERTS) and that the model's own loop indexes
# expert by expert, whose backward holds full-size gradients of the adapted tensors (experts.expert_grad_transient,
# F100, F101): priced, and said, being the largest term of such a job.
LOOPED_FUSED_EXPERTS = {"longcat_flash": "modeling_longcat_flash.LongcatFlashExperts"}
# Expert loops of transformers 5.24 that misread their router's output (F101): NllbMoeSparseMLP hands
# NllbMoeExperts.forward the router's one-hot top-1 mask ([tokens, experts]), which it one-hots again as if it held
# expert indices: expert 0 runs on every (token, expert) entry that is 0, (experts - 1) x tokens rows, expert 1 on
# the top-1 entries, the other experts on none, and the second expert is lost. A real step at 16 experts, two
# sparse layers and 512 tokens: expert 0's rows 7,966 and 7,833 (of 8,192), the step 13.9% above the top-2 figure.
MISROUTED_EXPERTS = {"nllb-moe": "modeling_nllb_moe.NllbMoeExperts"}
# Each table above, with the finding its model types get ({cls}: the class it names; {name}: its module's name).
CLASS_NOTES: tuple[tuple[Mapping[str, str | tuple[str, str]], str, str, str], ...] = (
    (LOOPED_FUSED_EXPERTS, "lora_expert_loop", "info",
     "{cls} runs its experts one by one, indexing the fused tensors peft's all-linear adapts; the backward then sums "
     "full-size gradients of each adapted tensor, three gate+up-sized ones at once (the zero experts' rows included) "
     "beside the down tensor's, which the LoRA and QLoRA figures include. Attention-only targets (--lora-targets "
     "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj) avoid them."),
    (MISROUTED_EXPERTS, "misrouted_experts", "warning",
     "transformers 5.24's {cls} reads the router's one-hot mask as expert indices: expert 0 runs on (experts - 1) x "
     "tokens rows, expert 1 on the top-1 tokens, no other expert on any. A training step there holds far more than "
     "the top-2 routing these figures price (and computes something else); serving and training figures are those of "
     "the routing the config defines."),
    (TUPLE_ROUTERS, "lora_all_linear_fails", "warning",
     "peft 0.21's target_modules='all-linear' wraps {cls}, an nn.Linear whose forward returns a tuple, and the step "
     "fails ('tuple' object has no attribute 'dtype'): the LoRA figures price all-linear as if it ran; a run names "
     "its targets (--lora-targets q_proj,k_proj,v_proj,o_proj)."),
    (GROUPED_LINEARS, "lora_all_linear_fails", "warning",
     "peft 0.21's target_modules='all-linear' wraps {name} ({cls}, an nn.Linear whose forward splits its input into "
     "groups) as a plain Linear, and the step fails on a size mismatch: the LoRA figures adapt every other Linear, "
     "which a run names in its target_modules to run (--lora-targets prices a subset)."),
)


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # "error", "warning" or "info"
    message: str


def _token_ids(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def check_shapes(a: Arch) -> list[Finding]:
    out = []
    if a.heads * a.head_dim != a.hidden:
        out.append(Finding("heads_divide_hidden", "info",
                           f"num_attention_heads {a.heads} x head_dim {a.head_dim} = {a.heads * a.head_dim:,} "
                           f"differs from hidden_size {a.hidden:,}; attention projects to that width."))
    if a.kv_heads > a.heads or a.heads % a.kv_heads:
        out.append(Finding("kv_heads_divide_heads", "error",
                           f"num_key_value_heads {a.kv_heads} does not divide num_attention_heads {a.heads}: "
                           "grouped-query attention cannot share K/V heads evenly."))
    if a.rotary_dims > a.head_dim:
        out.append(Finding("rope_dims", "error", f"rotary dims {a.rotary_dims} exceed head_dim {a.head_dim}."))
    return out


def check_special_tokens(a: Arch) -> list[Finding]:
    out = []
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        for tid in _token_ids(a.raw.get(key)):
            if tid is None:
                continue
            if isinstance(tid, bool) or not isinstance(tid, int) or not 0 <= tid < a.vocab:
                out.append(Finding("special_token_ids", "warning",
                                   f"{key} {str(tid)[:40]} is not an id below vocab_size {a.vocab:,}: the embedding "
                                   "has no row for it."))
    return out


# The keys that set a model's size: one config.json leaves out is read at its transformers class's default, as
# from_pretrained builds the model (config/transformers_defaults.py), and the page says so rather than stay silent
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def check_defaults(a: Arch) -> list[Finding]:
    """An info finding naming the size keys (SIZE_KEYS) config.json leaves out and the class defaults read."""
    used = a.used()
    taken = [(k, used[k]) for k in SIZE_KEYS if k in used and str(used[k]["source"]).startswith("default:")]
    if not taken:
        return []
    model_type = str(taken[0][1]["source"]).split(":", 1)[1]
    keys = ", ".join(f"{k} ({v['value']:,})" if isinstance(v["value"], int) else k for k, v in taken)
    return [Finding("config_defaults", "info",
                    f"config.json leaves out {keys}: read at transformers' defaults for {model_type}, as "
                    "from_pretrained builds the model; check that they are this model's.")]


def check_rope(a: Arch) -> list[Finding]:
    if a.position != "rope":
        return []
    out = []
    scaling = a.raw.get("rope_scaling") or a.raw.get("rope_parameters")
    if isinstance(scaling, dict):
        orig, factor = scaling.get("original_max_position_embeddings"), scaling.get("factor")
        kind = scaling.get("rope_type", scaling.get("type"))
        # Only linear and YaRN scaling stretch the trained context by `factor` (transformers
        # modeling_rope_utils.py); llama3 and longrope rescale frequencies without that bound.
        if (kind in ("linear", "yarn") and isinstance(orig, (int, float)) and isinstance(factor, (int, float))
                and not isinstance(orig, bool) and not isinstance(factor, bool) and orig * factor < a.max_context):
            out.append(Finding("rope_context", "warning",
                               f"rope scaling covers {orig:,} x {factor} = {int(orig * factor):,} tokens, below "
                               f"max_position_embeddings {a.max_context:,}."))
        theta = scaling.get("rope_theta")
    else:
        theta = a.raw.get("rope_theta")
    theta = a.raw.get("rope_theta", theta)
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0):
        out.append(Finding("rope_context", "error", f"rope_theta {str(theta)[:40]} is not a positive number."))
    return out


def explain_checkpoint_gap(a: Arch, g: Graph, checkpoint: int, stored: int | None = None) -> tuple[str, str]:
    """Severity and message for graph != checkpoint, naming the known cause where the numbers say so."""

    return explain(a, g, checkpoint, stored)


def check_checkpoint(a: Arch, g: Graph, checkpoint: int | None, stored: int | None = None) -> list[Finding]:
    if checkpoint is None or checkpoint == g.params_total or (stored is not None and checkpoint == stored):
        return []
    severity, why = explain_checkpoint_gap(a, g, checkpoint, stored)
    return [Finding("checkpoint_count", severity,
                    f"graph counts {g.params_total:,} parameters, checkpoint holds {checkpoint:,}: {why}")]


# Repository-name tokens of a quantised checkpoint's format (split on "-", "_" and "."): NVIDIA ModelOpt exports
# (-FP8, -NVFP4), whose settings older versions keep in hf_quant_config.json (read where the record has it); AutoAWQ,
# GPTQ, llm-compressor (W4A16, W8A8, FP8-Dynamic), bitsandbytes (bnb-4bit), MLX and GGUF repositories are named the
# same way.
QUANTISED_NAME_TOKENS = frozenset({"fp8", "nvfp4", "fp4", "mxfp4", "int4", "int8", "awq", "gptq", "w4a16", "w8a8",
                                   "w4a8", "4bit", "8bit", "nf4", "gguf", "exl2"})


def check_quantization(a: Arch, g: Graph, stored: int | None, model_id: str = "") -> list[Finding]:
    if a.quant is None:
        name = model_id.rsplit("/", 1)[-1]
        named = sorted({t for t in re.split(r"[-_.]", name.lower()) if t in QUANTISED_NAME_TOKENS})
        if not named:
            return []
        return [Finding("quantization", "warning",
                        f"the repository's name says {', '.join(t.upper() for t in named)}, but no quantization "
                        "settings were read: its config.json declares no quantization_config, and no "
                        "hf_quant_config.json (where NVIDIA ModelOpt up to 0.29 keeps them) came with it. Its "
                        "weights are counted and priced as bf16, which is more than the quantised checkpoint "
                        "holds.")]
    if stored is None:
        return [Finding("quantization", "info", f"quantization_config {a.quant.method!r}: {a.quant.describes}; "
                                                "weights are counted and served as bf16.")]
    return [Finding("quantization", "info",
                    f"quantised checkpoint: {a.quant.describes}. {g.params_total:,} logical parameters are stored as "
                    f"{stored:,} elements; serving memory uses the stored format.")]


# The encoder-decoders vLLM 0.19.1 serves: Whisper, Cohere's ASR and Nemotron-Parse in its registry, BART, mBART and
# Florence-2 through its out-of-tree bart-plugin; the others were removed with its V0 engine
# (model_executor/models/registry.py: _MULTIMODAL_MODELS' "[Encoder-decoder]" entries, _OOT_SUPPORTED_MODELS, and
# _PREVIOUSLY_SUPPORTED_MODELS' "encoder-decoder models except whisper have been removed")
VLLM_ENCODER_DECODERS = frozenset({"WhisperForConditionalGeneration", "CohereAsrForConditionalGeneration",
                                   "NemotronParseForConditionalGeneration", "BartForConditionalGeneration",
                                   "BartModel", "MBartForConditionalGeneration", "Florence2ForConditionalGeneration"})
# Classes vLLM served and 0.19.1 refuses, with the last version that served them (_PREVIOUSLY_SUPPORTED_MODELS)
VLLM_REMOVED = {"MotifForCausalLM": "0.10.2", "Phi3SmallForCausalLM": "0.9.2", "Phi4FlashForCausalLM": "0.10.2",
                "Phi4MultimodalForCausalLM": "0.12.0", "DonutForConditionalGeneration": "0.10.2",
                "MllamaForConditionalGeneration": "0.10.2"}


def check_vllm_support(a: Arch) -> list[Finding]:
    """A class vLLM 0.19.1 does not serve, though its serving figures price it as served: one it removed
    (VLLM_REMOVED), or an encoder-decoder outside VLLM_ENCODER_DECODERS. transformers' generate (--method inference)
    is what runs it."""
    removed = next((x for x in a.architectures if x in VLLM_REMOVED), None)
    if removed is not None:
        why = f"vLLM 0.19.1 no longer serves {removed} (its last version that did: {VLLM_REMOVED[removed]})"
    elif a.spec.kind == "encoder-decoder" and not set(a.architectures) & VLLM_ENCODER_DECODERS:
        why = (f"vLLM 0.19.1 does not serve {a.architectures[0] if a.architectures else a.model_type}: of "
               "encoder-decoders it serves Whisper, Cohere's ASR and Nemotron-Parse, and BART, mBART and Florence-2 "
               "through its bart-plugin")
    else:
        return []
    return [Finding("vllm_support", "warning",
                    f"{why} (model_executor/models/registry.py). The serving figures price vLLM's accounting as it "
                    "would be; `--method inference` prices transformers' generate, which runs it.")]


def check_tower_adapters(g: Graph) -> list[Finding]:
    """A vision tower whose Linears families/tower_linears.py does not itemise: peft's all-linear adapts them too,
    and the LoRA figures leave those adapters out."""
    if not g.towers_matmul or g.spec.tower_linears is not None:
        return []
    return [Finding("tower_adapters", "info",
                    f"peft's all-linear LoRA also adapts the towers' Linears ({g.towers_matmul:,} weights); this "
                    "model's are not itemised, so the LoRA and QLoRA figures leave their adapters out and price the "
                    "towers' saved tensors as if they trained.")]


def check_scope(a: Arch, train_tokens: int, requested_tokens: int, serve_tokens: int | None = None,
                requested_serve: int | None = None, kind: str = "decoder", attends: bool = True) -> list[Finding]:
    """Findings on what the estimate covers; `attends`: some layer has attention (an SSM has none to default)."""
    out = []
    if a.custom_code:
        out.append(Finding("custom_code", "info",
                           f"config.json declares auto_map (custom modeling code); read under transformers "
                           f"semantics as {a.family}, which is not necessarily what the repo's own code builds."))
    if a.text_tower_only:
        out.append(Finding("text_tower_only", "warning",
                           f"model_type {a.model_type[:40]!r} is read through its text_config ({a.family}); "
                           "the vision tower and projector are not counted, so memory is understated."))
    if a.model_type in FUSED_EXPERTS:
        out.append(Finding("lora_expert_tensors", "info",
                           "LoRA is priced as peft 0.21's target_modules='all-linear' runs on transformers 5: it also "
                           "adapts the fused expert tensors and the router (target_parameters) and keeps each adapted "
                           "tensor's effective weight, about a second copy of the experts; --lora-targets "
                           "q_proj,k_proj,v_proj,o_proj prices attention-only adapters."))
    for table, check, severity, text in CLASS_NOTES:  # what a framework's class does that the figures say
        if a.model_type in table:
            value = table[a.model_type]
            name, cls = value if isinstance(value, tuple) else ("", value)
            out.append(Finding(check, severity, text.format(cls=cls, name=name)))
    if any(runs_every_expert(p) for b, _ in a.spec.distinct_layers for p in b.parts):
        out.append(Finding("every_expert_compute", "info",
                           "transformers runs every expert of this MoE on every token (a repeated copy of each token "
                           "weighed by the router's scores): memory here prices that, while the compute, and so the "
                           "cost, counts the routed experts' as frameworks that route (vLLM, torchtune, Megatron) "
                           "run them; a fine-tune through transformers computes all of them."))
    if a.quant is None and a.experts > 1 and bnb_keeps_experts(a, "nf4"):
        out.append(Finding("qlora_experts", "info",
                           "QLoRA keeps the routed experts in bf16: transformers 5 holds them as 3-D tensors, and "
                           "bitsandbytes quantises nn.Linear only (bitsandbytes#1849)."))
    if not checkpoints(a):
        out.append(Finding("no_grad_ckpt", "info",
                           f"transformers' {a.model_type} classes cannot checkpoint their layers "
                           "(supports_gradient_checkpointing is False): every training figure and setup here runs "
                           "without gradient checkpointing, QLoRA's too (prepare_model_for_kbit_training with "
                           "use_gradient_checkpointing=False; its default raises ValueError)."))
    if a.quant is None and (cls := bnb_leaves_linears(a, "nf4")):
        out.append(Finding("qlora_unquantised", "warning",
                           f"under transformers 5, QLoRA here is LoRA on a bf16 base (fp32 after "
                           f"prepare_model_for_kbit_training): it quantises only modules whose type is nn.Linear, and "
                           f"this model's layers are {cls}, a subclass, so bitsandbytes leaves every one as it loads. "
                           f"Priced so; transformers 4 quantised them (--transformers-version)."))
    attention, why = default_attention(a) if attends else ("sdpa", "")
    kernel = math_sdpa(a, False, True) if attention != "eager" and attends else ""
    if kernel:
        out.append(Finding("attention_math_kernel", "warning",
                           f"{kernel[0].upper()}{kernel[1:]}. Training and prefill memory here include those scores "
                           "(they grow with the square of the tokens)."))
    if attention == "eager":
        out.append(Finding("attention_default", "warning",
                           f"{why}. Training memory here includes the attention scores and, at a layer's softmax "
                           "backward, their gradients (they grow with the square of the tokens); --attention sdpa "
                           "prices a run that asks for SDPA or FlashAttention."))
    elif why and attends:  # the config's own kernel (memory.attention.DECLARED_ATTENTION_KEYS)
        out.append(Finding("attention_default", "info", f"{why}; priced so."))
    elif a.custom_code and attends and (known := custom_sdpa(a)):
        out.append(Finding("attention_default", "info",
                           "the repository's own modeling code runs (transformers has no class of this type), and "
                           f"{known}."))
    elif a.custom_code and attends:
        out.append(Finding("attention_default", "info",
                           "transformers ships this model type, and from_pretrained builds its own class unless "
                           "trust_remote_code=True is passed: priced so (SDPA: no score matrix kept). With "
                           "trust_remote_code=True the repository's own modeling code runs, whose attention was not "
                           "read: --attention eager prices it keeping its scores."))
    windowed = [w for w in a.layer_windows if 0 < w < a.max_context]
    if windowed:
        out.append(Finding("sliding_window", "info",
                           f"{len(windowed)} of {len(a.layer_windows)} layers attend to a sliding window of "
                           f"{max(windowed):,} tokens: their KV cache is capped at the window."))
    # custom code read as a family with nothing more to say is the custom_code finding's; a reason that says more
    # (a tower not counted, a layout read as another's, an architecture not known) is a warning of its own
    if a.approximate is not None and not plainly_custom(a) and not a.text_tower_only:
        out.append(Finding("approximate", "warning", f"the estimate is approximate: {a.approximate}."))
    if train_tokens < requested_tokens:
        out.append(Finding("context", "info",
                           f"training is sized at the model's context, {train_tokens:,} tokens, not {requested_tokens:,}."))
    if serve_tokens is not None and requested_serve is not None and serve_tokens < requested_serve:
        why = {"encoder": "an encoder reads whole sequences of at most its context; no KV cache grows",
               "encoder-decoder": "its encoder reads at most its context, and its decoder writes at most as many "
                                  "tokens, whose KV cache stops there"}.get(
            kind, "prompt and generated tokens together never pass the context the model was trained for, so its "
                  "KV cache stops there")
        out.append(Finding("context", "info",
                           f"serving is sized at the model's context, {serve_tokens:,} tokens per sequence, not "
                           f"{requested_serve:,} ({why})."))
    return out


# Per kind of Part.scan (mamba_part 1, mamba2_part 2, gdn_part 3, Kimi Delta Attention 4, RWKV 6): the kernels
# training is priced with, what provides them, and what transformers runs without it.
SCAN_KERNELS = {1: ("mamba-ssm's fused scan", "mamba-ssm", "torch scan"),
                2: ("mamba-ssm's fused scan", "mamba-ssm", "torch scan"),
                3: ("flash-linear-attention's chunk kernel", "flash-linear-attention", "torch delta rule"),
                4: ("flash-linear-attention's chunk kernel", "flash-linear-attention", "torch delta rule"),
                6: ("transformers' wkv CUDA kernel", "ninja to compile it", "torch loop")}


def check_scan_kernels(a: Arch, g: Graph, s: Assumptions, train_tokens: int) -> list[Finding]:
    """Recurrent mixers with a fused kernel (SCAN_KERNELS: Mamba, Gated DeltaNet, Kimi Delta Attention, RWKV):
    training is priced with it; transformers' torch code, which runs without it (and always on the CPU), keeps
    fp32 states per step or chunk (memory.recurrence). What it adds to the page's LoRA step is the difference of
    the two jobs --scan prices. (peft's refusal of out_proj, lora.PEFT_MAMBA_TYPES, is priced silently and named
    by --lora-targets out_proj's error.)"""
    kinds = sorted({p.scan[0] for b, _ in g.spec.distinct_layers for p in b.parts if p.scan} & SCAN_KERNELS.keys())
    if not kinds:
        return []
    fused, torch = (job_memory(a, g, s, Job(method="lora", tokens=train_tokens, scan=scan)).peak_bytes
                    for scan in ("fused", "torch"))
    kernels, package, fallback = SCAN_KERNELS[kinds[-1]]
    return [Finding("scan_kernels", "warning",
                    f"priced with {kernels}; without {package} (or on a CPU) transformers' {fallback} "
                    f"adds {(torch - fused) / 1e9:,.1f} GB to LoRA at {train_tokens:,} tokens (--scan torch).")]
