"""Stored bytes of weights a job holds: the bases a job may quantise to (QUANTS), the dequantised transient, what a
4-bit matmul saves, and bitsandbytes' 8-bit optimizer state (a checkpoint's own formats: stored_formats.py)."""

from __future__ import annotations

from collections.abc import Sequence

from ..config.arch import Arch, Quant
from ..config.transformers_defaults import TENSOR_EXPERTS
from ..graph.nodes import Graph
from ..graph.parts import Block, Part
from .activations import (
    MLP_TYPES,
    PYTHON_GELU,
    Regime,
    adapter_input_bytes,
    forward_locals_bytes,
    last_linear_part,
    mlp_act,
    python_gelu_bytes,
)
from .dropouts import layer_dropouts
from .ends import parallel_mlp
from .frameworks import runs_litgpt
from .lora import held_input_width, linear_roles
from .stored_formats import mat_elements

# bitsandbytes 8-bit optimizers: two uint8 states + one fp32 absmax per 256-element block each
# (bitsandbytes/optim/optimizer.py Optimizer2State.init_state, blocksize 256; Dettmers et al. 2022,
# arXiv:2110.02861). Tensors under 4,096 elements stay 32-bit (min_8bit_size); their share is ignored.
ADAMW8BIT_STATE_BYTES = 2 + 2 * 4 / 256


# Storage of a quantised base, per nn.Linear inside the layers (embeddings, norms and the LM head stay 16-bit:
# bitsandbytes skips lm_head, transformers' get_keys_to_not_convert). Read with mat_elements.
QUANTS = {
    # bnb NF4: 2 weights per uint8 + fp32 absmax per 64 (Dettmers et al. 2023, QLoRA, arXiv:2305.14314 §2)
    "nf4": Quant("bitsandbytes", 4, 2, 64, 4.0, "bnb NF4, blocksize 64"),
    # LLM.int8(): int8 weight + fp32 scale per output row (bitsandbytes Int8Params SCB)
    "int8": Quant("bitsandbytes", 8, 1, 0, 4.0, "bnb LLM.int8()"),
    # GPTQ int4 (AutoGPTQ / gptqmodel): packed int32 qweight, qzeros, fp16 scales per 128 inputs, g_idx
    "gptq-int4": Quant("gptq", 4, 8, 128, 2.0, "GPTQ int4, group 128"),
    # fp8 e4m3 weight + fp32 scale per output channel (transformers FbgemmFp8Linear)
    "fp8": Quant("fp8", 8, 1, 0, 4.0, "fp8 e4m3, per-channel scale"),
}


# QLoRA's double quantisation: the fp32 absmax per 64 becomes uint8 + an fp32 absmax per 256 of them
# (QLoRA §2 "Double Quantization": 0.5 -> 0.127 bits per parameter): 1/64 + 4/(64 x 256) bytes per weight.
DOUBLE_QUANT_SAVING = 4 / 64 - (1 / 64 + 4 / (64 * 256))

# Each nf4 Linear's QuantState also holds its 16-value fp32 code (bitsandbytes/functional.py quantize_4bit:
# get_4bit_type), and with double quantisation the 256-value fp32 code of its absmax, copied per state
# (quantize_blockwise: code.to(A.device, copy=True)), and the fp32 offset subtracted before it: measured per Linear
# on the CPU simulation's QuantState tensors (F29).
NF4_STATE_BYTES, NESTED_STATE_BYTES = 16 * 4, 256 * 4 + 4


def weight_bytes(g: Graph, storage: str, double_quant: bool = False, mats: dict | None = None) -> int:
    """Bytes of the whole model's weights stored as `storage` (quantised: the layers' Linears, and a bitsandbytes
    base's towers, quantised_tower_params; the rest 16-bit, but for those the class keeps in fp32: params_fp32)."""
    if storage in ("bf16", "fp16", "fp32"):
        return 4 * g.params_total if storage == "fp32" else 2 * (g.params_total + g.params_fp32)
    q = QUANTS[storage]
    total = 2.0 * (g.params_total + g.params_fp32)
    towers = quantised_tower_params(g, storage)
    if towers:  # one aggregate: nf4's bytes follow the elements alone (int8's row scales are left out)
        total += mat_elements(q, 1, towers, 1)[1] - 2 * towers - (DOUBLE_QUANT_SAVING * towers if double_quant else 0)
    for (count, i, o), times in (layer_mats(g) if mats is None else mats).items():
        total += times * _packed_delta(q, storage, double_quant, count, i, o)
    return int(total)


def _packed_delta(q: Quant, storage: str, double_quant: bool, count: int, n_in: int, n_out: int) -> float:
    """What `count` matrices n_in x n_out add to their 2 bytes a weight when packed as `storage` (negative: less):
    the packed elements and scales, double quantisation's nested absmax, and nf4's quant_state tensors."""
    delta = mat_elements(q, count, n_in, n_out)[1] - 2 * count * n_in * n_out
    if double_quant:
        delta -= DOUBLE_QUANT_SAVING * count * n_in * n_out
    if storage == "nf4":
        delta += count * (NF4_STATE_BYTES + (NESTED_STATE_BYTES if double_quant else 0))
    return delta


def gathered_unit_bytes(a: Arch, g: Graph, storage: str, double_quant: bool = False) -> int:
    """SingleGpuJob.unit_bytes: the largest layer (parallel's unit) as a quantised `storage` packs it (the job's,
    resolved: a base bitsandbytes leaves unpacked is 16-bit); 0 for a 16/32-bit base, gathered in compute dtype."""
    largest = g.largest_layer
    return 0 if storage not in QUANTS or largest is None else unit_stored_bytes(a, largest, storage, double_quant)


def unit_stored_bytes(a: Arch, b: Block, storage: str, double_quant: bool = False) -> int:
    """One layer's weights as a quantised base stores them, which ZeRO-3 and FSDP gather as they are: FSDP-QLoRA
    flattens the packed 4-bit data in bnb_4bit_quant_storage's dtype and all-gathers it before each Linear
    dequantises its own weight (bitsandbytes docs, FSDP-QLoRA; peft docs, "Use PEFT QLoRA and FSDP"), so a
    gathered unit is the packed layer, not a 16-bit one. 16-bit parts (norms) at 2 bytes; experts bitsandbytes
    leaves unpacked (bnb_keeps_experts) too."""
    total = 2.0 * b.params
    if storage in QUANTS:
        q, loose = QUANTS[storage], bnb_keeps_experts(a, storage)
        for p in b.parts:
            for count, i, o in p.weight_mats[len(p.expert_mats):] if loose else p.weight_mats:
                total += _packed_delta(q, storage, double_quant, count, i, o)
    return int(total)


def layer_mats(g: Graph, fused_experts: bool = False) -> dict[tuple[int, int, int], int]:
    """Every weight matrix (count, in, out) of the layers' parts and how often it occurs, in the order of first
    occurrence: each distinct layer (Spec.distinct_layers) is walked once, times the layers it stands for.
    fused_experts: leave out the routed experts' tensors (Part.expert_mats), which bitsandbytes does not quantise
    where transformers holds them outside nn.Linear (bnb_keeps_experts)."""
    tally: dict[tuple[int, int, int], int] = {}
    for b, copies in g.spec.distinct_layers:
        for p in b.parts:
            for m in p.weight_mats[len(p.expert_mats):] if fused_experts else p.weight_mats:
                tally[m] = tally.get(m, 0) + copies
    return tally


def bnb_keeps_experts(a: Arch, storage: str) -> bool:
    """Whether a bitsandbytes base (`storage` nf4 or int8, loaded with load_in_4bit / load_in_8bit) keeps this
    model's routed experts in the dtype it loads in: transformers' conversion replaces nn.Linear and Conv1D only
    (integrations/bitsandbytes.py replace_with_bnb_linear), and transformers 5 holds most MoE experts as 3-D
    parameters of an experts module (config/transformers_defaults.TENSOR_EXPERTS; bitsandbytes issue #1849)."""
    return storage in QUANTS and QUANTS[storage].method == "bitsandbytes" and a.model_type in TENSOR_EXPERTS


def dequant_transient_bytes(g: Graph, storage: str, c: int, mats: dict | None = None, nested: bool = False) -> int:
    """A 4-bit or int8 base's largest Linear dequantised to the compute dtype for a matmul (bitsandbytes
    MatMul4Bit: dequantize_4bit(W) @ x, freed after; its backward does the same); GPTQ and fp8 kernels read the
    packed weight: 0. `nested` (double quantisation): bitsandbytes/functional.py dequantize_4bit first decodes the
    absmax, one fp32 value per block of 64 weights (dequantize_blockwise, then += offset), held beside the weight it
    scales (F59: the CPU simulation's live tensors, [704512] fp32 beside Llama-2-7B's [11008, 4096] up_proj)."""
    if storage not in ("nf4", "int8"):
        return 0
    largest = max((i * o for _, i, o in (layer_mats(g) if mats is None else mats)), default=0)
    return c * largest + (4 * largest // QUANTS["nf4"].group_size if nested and storage == "nf4" else 0)


def beside_held(dequant: int, held: int, meets: bool = False, meeting: int = 0, meeting_dequant: int = 0) -> int:
    """What a quantised base's dequantised weight adds to a recomputed layer's peak beyond `held`, the adapter forward
    of its last Linear (activations.recompute_transient_bytes). peft's 4-bit layer runs the base matmul first and
    the adapter after (peft/tuners/lora/bnb.py Linear4bit.forward: result = self.base_layer(x), then lora_B(lora_A(
    dropout(x)))), and bitsandbytes frees the dequantised weight when its matmul returns: the two never meet, so the
    peak holds the larger of them (F29: the CPU simulation's live tensors at the recomputed down_proj). `meets`:
    torchtune's LoRALinear backward decodes torchao's NF4 weight while the adapter chain's tensors live, so both
    count (F34: its simulated checkpointed QLoRA). `meeting`: what lives beside the weight the recomputation
    dequantises where the last Linear has no adapter (dequant_meeting_bytes); `meeting_dequant`: that weight's bytes
    where it is not the largest (dequant_meeting: the last Linear's, F64)."""
    if meets:
        return dequant
    return max(0, ((meeting_dequant or dequant) + meeting if dequant and meeting else dequant) - max(held, 0))


def dequant_meeting(a: Arch, g: Graph, b: Block, r: Regime, roles: frozenset[str] | None, upcast: bool, tokens: int,
                    storage: str, bytes_per_weight: int, nested: bool) -> tuple[int, int]:
    """The moment dequant_meeting_bytes prices, over `tokens`: (its bytes, the met weight's dequantised bytes where
    that is not the layer's largest weight, else 0). Where the recomputation runs on through the last Linear (a
    dropout or a norm after the MLP), the weight it meets is that Linear's: GLM-4's post_mlp_layernorm meets
    down_proj's [4096, 13696], not its fused gate_up_proj's twice as large (F64: +17.6% with the larger)."""
    per_token = dequant_meeting_bytes(a, b, r, roles, upcast)
    part = last_linear_part(b)
    if not per_token or part is None or not runs_through(a, b, r, part):
        return tokens * per_token, 0
    width, hidden = part.linears[-1]
    return tokens * per_token, dequant_transient_bytes(g, storage, bytes_per_weight, {(0, width, hidden): 1}, nested)


def runs_through(a: Arch, b: Block, r: Regime, part: Part) -> bool:
    """Whether a checkpointed layer's recomputation runs on through its MLP's last Linear: a norm after the MLP
    (OLMo-2's and Gemma-2's post_feedforward_layernorm) or a dropout on its output (dropouts.DROPOUTS) saves its
    input after it (F59)."""
    post_norm = any(p.type.endswith("Norm") for p in b.parts[b.parts.index(part) + 1:])
    return post_norm or (r.dropout and layer_dropouts(a, b)[0] > 0)


def dequant_meeting_bytes(a: Arch, b: Block, r: Regime, roles: frozenset[str] | None, upcast: bool = False) -> int:
    """Per token, what a checkpointed layer whose last Linear (down_proj, fc2) is a bitsandbytes matmul without an
    adapter holds beside its saved tensors while its recomputation dequantises the MLP's first weights (gate/up,
    fc1; 0 for other layers). MatMul4Bit keeps its weight on ctx.tensors, not through save_for_backward
    (bitsandbytes/autograd/_functions.py), so torch/utils/checkpoint.py's saved-tensor hooks never see it: the
    backward makes down_proj's input gradient first, and only the next op's saved tensor (the product's, the
    activation's) starts the recomputation. Beside the dequantised weight, then: that gradient (MLP-wide, in the
    MLP's dtype), the layer output's gradient and the post-attention residual (a parallel block's attention
    output) in the residual's dtype, and the MLP's input. Read off the CPU simulation's live tensors at this peak
    (F59: Llama-2-7B, Mistral-7B, Qwen3-8B and Pythia-6.9B on q and v or query_key_value, checkpointed). After
    prepare_model_for_kbit_training (`upcast`) the stream and the MLP are fp32, the first norm reads the
    checkpointed input itself (as in recompute_transient_bytes), and the matmul at the peak has not yet cast its
    output to fp32, where the layer's saved tensors count it: the fp32 gradient less that difference is
    MLP-wide in the compute dtype (Pythia-6.9B's plain MLP, +9.6% without it).
    A dropout on the MLP's output (the residual dropouts, dropouts.DROPOUTS) saves its mask after down_proj, so
    the recomputation runs on through down_proj: under the upcast its fp32 input then lives beside the bf16 copy
    bitsandbytes makes of it (Linear4bit.forward: x.to(compute_dtype)), unless the activation saves its output
    anyway (relu). F59: StarCoder2-7B's and SantaCoder's steps, -5.7% and -8.3% without it. Without such a
    dropout a plain MLP (fc1, act, fc2) is at fc1's matmul, before its activation: what that saves beyond its input
    is not made yet (relu's output; a Python GELU's three tensors: GPT-J-6B's step read +17.9% with them)."""
    part = last_linear_part(b)
    if part is None or part.type not in MLP_TYPES or (roles is None or linear_roles(part)[-1] in roles):
        return 0
    fp32_stream = upcast and r.amp
    width, hidden = part.linears[-1]
    mlp = r.residual_bytes if fp32_stream else r.compute_bytes
    # a norm on the MLP's output saves its input after down_proj too: OLMo-2-7B's upcast step read -4.5% without it
    act, through = mlp_act(a), runs_through(a, b, r, part)
    out = width * r.compute_bytes + hidden * (2 * r.residual_bytes + mlp) - (4 * hidden if fp32_stream else 0)
    if through:
        return out + (4 * width if fp32_stream and act != "relu" else 0)
    if part.type == "MLP":
        out -= python_gelu_bytes(b, mlp) if act in PYTHON_GELU else width * mlp if act == "relu" else 0
    return out


def dequant_forward_bytes(a: Arch, g: Graph, b: Block, r: Regime, roles: frozenset[str] | None,
                          upcast: bool = False) -> int:
    """Per token, what the last layer holds beyond its saved tensors at its last Linear's matmul in a forward without
    checkpointing, where that Linear (down_proj, fc2) is a bitsandbytes matmul without an adapter (0 for others):
    its input (the MLP's product or activation: a frozen weight's MatMul4Bit saves none), in the MLP's dtype, and
    under the upcast its bf16 copy (Linear4bit.forward: x.to(compute_dtype)); the matmul's output; the MLP's input
    (the normed hidden state: frozen gate/up save none) in the residual's dtype; and where the stream is bf16 the
    post-attention residual and the model's locals (forward_locals_bytes), whose norms saved fp32 casts, not them
    (under the upcast they are the norms' saved inputs). A parallel block's MLP input is its attention's: saved
    already where that attention's adapters read it uncopied (adapter_activation_bytes). Read off CPU-simulated
    QLoRA steps on q and v, 2 layers and a 1,024-token vocabulary, which peak here (F63: Llama-2-7B, Mistral-7B,
    Gemma-7B, Qwen2.5-7B, GPT-J-6B, OPT-125M; Llama-2-7B -8.7% and -8.5% without it)."""
    part = last_linear_part(b)
    if part is None or part.type not in MLP_TYPES or roles is None or linear_roles(part)[-1] in roles:
        return 0
    fp32_stream, c = upcast and r.amp, r.compute_bytes
    width, hidden = part.linears[-1]
    shared = parallel_mlp(b) is part and not r.lora_dropout and adapter_input_bytes(r) == c
    out = width * (4 + c if fp32_stream else c) + hidden * (c + (0 if shared else r.residual_bytes))
    return out if fp32_stream else out + hidden * r.residual_bytes + forward_locals_bytes(g, r)


# transformers 5 quantises a module for bitsandbytes only where its type is nn.Linear, or it is a Conv1D
# (integrations/bitsandbytes.py replace_with_bnb_linear: `isinstance(module, Conv1D) or type(module) is nn.Linear`,
# 5.24); transformers 4 took isinstance(module, nn.Linear). A model whose layers build their projections from a
# subclass of it keeps them in the dtype it loads in (FINDINGS.md F60). model_type -> that subclass:
BNB_UNCONVERTED = {
    "falcon": "FalconLinear",  # modeling_falcon.py: query_key_value, dense, dense_h_to_4h and dense_4h_to_h
}


# transformers 4 (4.57.3, its last release line) built these model types' routed experts as an nn.ModuleList of MLP
# modules, each its own nn.Linear layers (models/<type>/modeling_<type>.py: `self.experts = nn.ModuleList(...)`, e.g.
# mixtral's MixtralBlockSparseTop2MLP at L97, qwen3_moe's Qwen3MoeMLP at L222). bitsandbytes quantised them
# (isinstance(module, nn.Linear)) and peft's "all-linear" adapted each, where transformers 5 holds the experts as 3-D
# tensors (TENSOR_EXPERTS) that bitsandbytes leaves in bf16 and peft adapts through ParamWrapper. model_type -> the
# Linears of one expert. Other MoE types kept 3-D experts in 4.57.3 too (dbrx, gpt_oss, granitemoe, jetmoe, llama4,
# qwen3_vl_moe, aria's grouped GEMM) or did not exist yet.
LINEAR_EXPERTS_V4 = {
    **dict.fromkeys(("mixtral", "minimax", "phimoe"), ("w1", "w2", "w3")),
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "dots1", "ernie4_5_moe", "flex_olmo", "glm4_moe", "glm4v_moe",
                     "hunyuan_v1_moe", "jamba", "longcat_flash", "olmoe", "qwen2_moe", "qwen3_moe", "qwen3_next",
                     "qwen3_omni_moe", "qwen3_omni_moe_thinker", "qwen3_omni_moe_text"),
                    ("gate_proj", "up_proj", "down_proj")),  # (Qwen3-Omni's thinker: L1304)
}


def before_v5(transformers_version: str) -> bool:
    """Whether the run's transformers (`--transformers-version`, "" = a current release) is a 4.x or older one."""
    return bool(transformers_version) and int(transformers_version.split(".")[0]) < 5


def bnb_leaves_linears(a: Arch, storage: str, transformers_version: str = "") -> str:
    """The nn.Linear subclass whose layers a bitsandbytes `storage` (nf4, int8) leaves unquantised on this model
    under transformers 5 or later ("" = a current release), or "" where it quantises them."""
    if storage not in QUANTS or QUANTS[storage].method != "bitsandbytes" or before_v5(transformers_version):
        return ""
    return BNB_UNCONVERTED.get(a.model_type, "")


def stored_mats(a: Arch, g: Graph, storage: str) -> dict[tuple[int, int, int], int] | None:
    """The layer_mats a quantised `storage` packs (None for a 16/32-bit base): every layer matrix, less the routed
    experts where bitsandbytes keeps them (bnb_keeps_experts)."""
    return layer_mats(g, bnb_keeps_experts(a, storage)) if storage in QUANTS else None


def quantised_tower_params(g: Graph, storage: str) -> int:
    """The towers' matmul weights (Graph.towers_matmul) that a bitsandbytes base packs as well: transformers 5.24
    converts every nn.Linear but the output embedding, tied weights and the last parameter (quantizers/base.py
    get_keys_to_not_convert), a tower's too (FINDINGS.md F69); a pre-quantised checkpoint's are as its file holds."""
    return g.towers_matmul if storage in QUANTS and QUANTS[storage].method == "bitsandbytes" else 0


def quantised_params(mats: dict[tuple[int, int, int], int] | None) -> int:
    """Parameters a quantised base stores packed: the elements of its stored_mats (0 for a 16/32-bit base)."""
    return sum(times * count * i * o for (count, i, o), times in (mats or {}).items())


# bitsandbytes 0.43.2 (July 2024, PR #1270 "delete useless buffered activation") stopped MatMul4Bit saving its
# input for backward: before it, bitsandbytes/autograd/_functions.py MatMul4Bit.forward set ctx.tensors = (A, B).
BNB_INPUT_FREED = (0, 43, 2)


def saves_matmul_input(storage: str, bnb_version: str) -> bool:
    """Whether a quantised base's matmul saves its input for backward, as nn.Linear on a frozen weight would not:
    bitsandbytes' int8 MatMul8bitLt always (ctx.tensors = (CAt, subA, A)); its 4-bit MatMul4Bit before 0.43.2
    (`bnb_version` "" = a current release)."""
    if storage == "int8":
        return True
    return storage == "nf4" and bool(bnb_version) and tuple(int(x) for x in bnb_version.split(".")) < BNB_INPUT_FREED


def carried_input_bytes(a: Arch, blocks: Sequence[tuple[Block, int]], loss: str, keep_outputs: bool, saves: bool,
                        c: int) -> int:
    """Per token, the previous micro-batch's inputs of every quantised Linear (`blocks`: distinct layers and their
    counts), live through this one's forward and loss. The releases that save the matmul's input
    (saves_matmul_input) keep it on ctx.tensors, not among the saved tensors the backward frees
    (bitsandbytes/autograd/_functions.py MatMul4Bit.forward at 0.42.0 L522-525; #1270 dropped it in 0.43.2), so it
    lives as long as the graph; LitGPT's loop keeps `loss`, the graph's root, until the next micro-batch's loss
    replaces it (litgpt@43c44323 finetune/lora.py L274-281), as a loop keeping the output does. LitGPT's quantised
    head's input among them (FINDINGS.md F55)."""
    if not saves or not (runs_litgpt(loss) or keep_outputs):
        return 0
    return c * (sum(n * held_input_width(b) for b, n in blocks) + (a.embed_dim or a.hidden if runs_litgpt(loss) else 0))
