"""Saved-for-backward bytes per token of a layer and of the head, for any training regime (AMP, pure bf16, fp32;
weights trained or frozen; LoRA adapters on all or some Linears).

Every term is a tensor PyTorch keeps for the backward, read off CPU-simulated real steps of 16 model types
(data/measurements/FINDINGS.md F1-F4, F8; Korthikanti et al. 2022, arXiv:2205.05198, Table 2 for the layout,
less the score terms that SDPA's fused kernels do not keep). memory.py (the site's jobs) and job.py (one exact
setup) both price activations with these functions.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block, Part
from .dropouts import layer_dropouts
from .lora import adapted_linears, all_linear_roles, expert_tensors, linear_experts, linear_roles

# transformers' Python-written GELUs (activations.py NewGELUActivation, FastGELUActivation, QuickGELUActivation)
# save three more MLP-width tensors than one fused op (FINDINGS.md F8: gpt2's gelu_new).
PYTHON_GELU = ("gelu_new", "gelu_fast", "quick_gelu")

# transformers' XIELUActivation (activations.py, apertus) in Python (the fused kernel is an optional wheel):
# where(x > 0, alpha_p * x * x + beta * x, (expm1(min(x, eps)) - x) * alpha_n + beta * x) keeps, per MLP element,
# alpha_p * x (the parameter's dtype wins the promotion: fp32 under full AMP), expm1's output, the bool condition,
# and, when alpha_n trains, expm1(...) - x (FINDINGS.md F9).
XIELU = "xielu"

# transformers' ReLUSquaredActivation (activations.py "relu2": arcee, nemotron, persimmon, bitnet, jais2,
# nanochat): relu(x) then square(relu): a plain MLP's fc1 output, relu's and square's outputs are live at once in
# a forward without grad (generate's prefill), one MLP-wide tensor more than a single fused activation (F9).
RELU_SQUARED = "relu2"

# Differential attention (modeling_diffllama.DiffLlamaAttention, Ye et al. 2024, arXiv:2410.05258): two attention
# calls over the same q and k with the two halves of V, their outputs concatenated, weighted by lambda, and a
# head-pair RMSNorm (nn.RMSNorm(2 x head_dim), no weight) before o_proj (F9).
DIFFERENTIAL_ATTENTION = {"diffllama": "modeling_diffllama.DiffLlamaAttention"}

# Config keys naming the MLP's activation, in the order transformers' config classes read them
# (config/reader.activation_name reads the same keys).
ACT_KEYS = ("hidden_act", "activation_function", "hidden_activation", "afn")

# q_norm / k_norm classes that multiply by the weight in fp32 before casting back ((weight * x).to(input_dtype):
# modeling_olmo2.Olmo2RMSNorm and its copies; Gemma's output * (1 + weight.float()), then type_as: modeling_gemma3
# .Gemma3RMSNorm and its copies): the normalised output the weight's gradient reads is fp32. The others
# (modeling_qwen3.Qwen3RMSNorm, LlamaRMSNorm's copies: weight * x.to(input_dtype)) keep it in the input's dtype,
# the q/k projection's output: bf16 under autocast (FINDINGS.md F10). Read off each modeling file's q_norm class.
QK_NORM_FP32 = frozenset({
    "afmoe", "beam", "diffusion_gemma", "embedding_gemma2", "flex_olmo", "flint", "gemma3", "gemma3_text", "gemma3n",
    "gemma3n_text", "gemma4", "gemma4_text", "gemma4_unified", "minimax_m3_vl", "neomme", "olmo2", "olmo3",
    "olmo_hybrid", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next", "qwen4_exp",
    "shieldgemma2", "step3p7", "t5gemma2"})  # shieldgemma2: Gemma3's text model


# LayerNorms written in Python that save two fp32 centred copies of their input (x - mean, once for the variance's
# pow, once for the normalising mul) and the rsqrt, not native layer_norm's input, mean and rstd; with a trained
# weight the fp32 normalised tensor too (CohereLayerNorm.forward; the CPU simulation's sub.Tensor pairs, F63).
PYTHON_LAYER_NORM = {"cohere": "modeling_cohere.CohereLayerNorm", "cohere2": "modeling_cohere2.Cohere2LayerNorm",
                     "cohere2_moe": "modeling_cohere2_moe.Cohere2MoeLayerNorm",
                     "cohere_compass": "modeling_cohere_compass.CohereCompassLayerNorm",
                     "cohere_compass_text": "modeling_cohere_compass.CohereCompassLayerNorm"}
# RMSNorms that multiply their input as it came (bf16) by the fp32 rsqrt of its upcast's mean square: the mul keeps
# that input beside the upcast pow keeps (T5LayerNorm.forward and its copies; F101). An fp32 input is its own upcast.
INPUT_KEEPING_RMS_NORM = {"t5": "T5LayerNorm", "mt5": "MT5LayerNorm", "umt5": "UMT5LayerNorm",
                          "longt5": "LongT5LayerNorm", "switch_transformers": "SwitchTransformersLayerNorm",
                          "udop": "UdopLayerNorm", "pix2struct": "Pix2StructLayerNorm", "idefics": "IdeficsRMSNorm"}


class Regime(NamedTuple):
    """How a training step keeps its tensors: the residual stream's and the matmuls' bytes per element, whether
    the base weights train, and whether autocast casts each Linear's input (FINDINGS.md F3/F4). A named tuple: it
    keys the estimate's table of per-layer terms (profile.memoised), hashed at C speed."""

    residual_bytes: int
    compute_bytes: int
    trained: bool  # full fine-tune: the base weights take gradients; LoRA/QLoRA: frozen
    amp: bool  # bf16 autocast: fp32 norm outputs and adapter inputs are cast per reading Linear
    adapter_bytes: int = 0  # LoRA adapters' dtype (peft autocast_adapter_dtype=True: fp32 on a bf16 base)
    lora_dropout: bool = False  # LoRA dropout p > 0 (peft: nn.Dropout on each adapter's input, else Identity)
    cpu: bool = False  # CPU kernels (the simulation): dropout masks in the input dtype, layer_norm in bf16
    dropout: bool = True  # train mode: the model's own dropouts (DROPOUTS) are active
    torch_scan: bool = False  # a Mamba mixer runs transformers' torch scan, not mamba-ssm's kernels (recurrence)
    input_cast: bool = True  # peft casts each adapter's input to the adapters' dtype (not: ADAPTER_NO_CAST)
    padded: bool = False  # samples padded to the batch's longest: SDPA gets a mask in every layer (masked_sdpa_windows)
    kbit_upcast: bool = False  # prepare_model_for_kbit_training upcast the non-quantised weights (layer_bytes, F59)


def mask_bytes(r: Regime, input_bytes: int) -> int:
    """Bytes per element of a dropout mask kept for backward (dropouts.py): bool on CUDA, the input's dtype on
    CPU."""
    return input_bytes if r.cpu else 1


def mlp_act(a: Arch) -> str:
    """The MLP's activation as transformers reads it: the config's key, else the family's Arch.act."""
    for key in ACT_KEYS:
        value = a.raw.get(key)
        if isinstance(value, str):
            return value
    return a.act


def regime(method: str, precision: str, adapter_bytes: int = 0, lora_dropout: bool = False, cpu: bool = False,
           upcast: bool = False, torch_scan: bool = False, input_cast: bool = True) -> Regime:
    """amp: fp32 weights under bf16 autocast for a full fine-tune (HF Trainer --bf16), a bf16 base with fp32
    adapters for LoRA; bf16: everything bf16 (LitGPT bf16-true, torchtune); fp32: no autocast. adapter_bytes 0:
    peft's default, fp32 adapters on any base, autocast or not (peft/tuners/tuners_utils.py cast_adapter_dtype);
    LitGPT's and torchtune's own LoRA keep theirs in the base's dtype, as their recipes set (adapter_dtype bf16). upcast: peft's prepare_model_for_kbit_training cast every non-quantised parameter (embeddings,
    norms, LM head) to fp32 (peft/utils/other.py), so the residual stream is fp32. torch_scan: Mamba mixers run
    transformers' torch scan (memory.recurrence), as without mamba-ssm and on the CPU. input_cast False: the
    adapters read their input as it comes, under autocast (ADAPTER_NO_CAST)."""
    trained = method == "full"
    if precision == "fp32":
        return Regime(4, 4, trained, False, adapter_bytes or 4, lora_dropout, cpu, True, torch_scan)
    if precision == "bf16":
        return Regime(4 if upcast else 2, 2, trained, False, adapter_bytes or 4, lora_dropout, cpu, True, torch_scan)
    return Regime(4 if trained or upcast else 2, 2, trained, True, adapter_bytes or 4, lora_dropout, cpu, True, torch_scan,
                  input_cast)


# peft's LoRA layers on a bitsandbytes base (peft/tuners/lora/bnb.py Linear8bitLt and Linear4bit.forward) cast the
# adapters' input to their dtype only where `not torch.is_autocast_enabled()`: under autocast (CUDA's, which that
# call without a device reads) lora_A reads the Linear's input as it is, bf16 or an upcast base's fp32, and autocast
# makes its bf16 copy. peft's plain lora.Linear (layer.py) always casts. Storages whose LoRA layer is bnb's:
ADAPTER_NO_CAST = frozenset({"nf4", "int8"})


def adapter_input_bytes(r: Regime) -> int:
    """Bytes per element of the tensor each adapter's path (dropout, lora_A) starts from: the adapters' dtype where
    peft casts to it, else the Linear's input, the residual stream's (bf16, or fp32 after the kbit upcast)."""
    return (r.adapter_bytes or r.compute_bytes) if r.input_cast else r.residual_bytes


def norm_bytes(rms_width: int, width: int, stats: int, read: int, fed: int, r: Regime) -> int:
    """Saved bytes per token of a group of norms (FINDINGS.md F3/F4; modeling_llama.LlamaRMSNorm upcasts to fp32,
    torch's native_layer_norm saves its input, mean and rstd). `width` all norms, `rms_width` the RMSNorms',
    `stats` their statistics bytes, `read` width x reading Linears, `fed` widths some Linear reads."""
    ln = width - rms_width
    if not r.trained:  # a frozen weight needs no normalised output: the fp32 input (+ rsqrt / mean, rstd)
        if r.amp and r.cpu:  # CPU autocast runs layer_norm in bf16 on its bf16 input (CUDA: fp32, FINDINGS F8)
            return 4 * rms_width + r.residual_bytes * ln + stats
        return 4 * width + stats if r.amp else 4 * rms_width + r.residual_bytes * ln + stats
    if r.amp:  # fp32 input; RMS: the fp32 normalised output for the weight's gradient; a bf16 cast per reader
        return 4 * width + stats + 4 * rms_width + r.compute_bytes * read
    # pure bf16 / fp32: RMS upcasts its input; the normalised output (weight gradient) and the scaled output
    # (the Linears' shared input) in the weights' dtype
    return 4 * rms_width + r.residual_bytes * ln + stats + r.residual_bytes * (rms_width + fed)


def python_layer_norm_bytes(a: Arch, parts: tuple[Part, ...] | list[Part], r: Regime) -> int:
    """Per token, what a PYTHON_LAYER_NORM family's LayerNorms among `parts` save beyond what norm_bytes charged
    them as native layer_norm (its input in fp32 under CUDA autocast, else in the residual's dtype, with mean and
    rstd): 8 B per element and 4 per norm, 12 B per element where the weight trains; an INPUT_KEEPING_RMS_NORM
    family's RMSNorms their input below fp32. 0 for other families."""
    if a.model_type in INPUT_KEEPING_RMS_NORM and r.residual_bytes < 4:
        return r.residual_bytes * sum(p.norm_width for p in parts if p.type == "RMSNorm")
    if a.model_type not in PYTHON_LAYER_NORM:
        return 0
    norms = [p for p in parts if p.norm_width and p.type != "RMSNorm"]
    width = sum(p.norm_width for p in norms)
    native = (4 if r.amp and (r.trained or not r.cpu) else r.residual_bytes) * width + 8 * len(norms)
    return (12 if r.trained else 8) * width + 4 * len(norms) - native


def adapter_copy_bytes(r: Regime) -> tuple[int, int]:
    """Bytes per element that lora_A's input copy and lora_B's input take (bf16 under AMP, else the adapters'
    dtype), and what an adapter keeps per element of its input: that copy and, with LoRA dropout, its mask
    (adapter_activation_bytes)."""
    saved = r.compute_bytes if r.amp else adapter_input_bytes(r)
    return saved, saved + (mask_bytes(r, adapter_input_bytes(r)) if r.lora_dropout else 0)


def adapter_activation_bytes(b: Block, roles: frozenset[str] | None, rank: int, r: Regime) -> int:
    """Per token, from peft's lora.Linear.forward (peft/tuners/lora/layer.py: x = self._cast_input_dtype(x,
    lora_A.weight.dtype); result + lora_B(lora_A(dropout(x))) * scaling), over the layer's Linears adapted on
    `roles` (lora.adapted_linears; None: every Linear, whose sums the layer holds: Block.lora_in, Block.linears):
    - the input is cast to the adapter's dtype when it differs (a new tensor per adapter). Under AMP autocast casts
      it back to bf16 for lora_A, and that bf16 copy is what lora_A saves (c x in); without autocast lora_A saves
      the cast itself (adapter bytes x in). peft's bitsandbytes layers under autocast skip the cast
      (ADAPTER_NO_CAST): the path starts from the Linear's input as it is (adapter_input_bytes);
    - with no cast and no dropout, adapters reading one tensor share it (counted once; o_proj's is the SDPA output,
      already saved);
    - LoRA dropout (p > 0) makes a dropped copy per adapter, saved by lora_A (under AMP: its bf16 autocast copy),
      plus the dropout's mask (mask_bytes of the adapter-dtype input);
    - lora_B saves A's output: rank x (c under AMP, else adapter bytes)."""
    idle = [p for p in b.parts if p.linears and p.matmul and p.active_matmul == 0]
    if idle:  # Linears held here that this pass does not run (Inkling's message gates in a loop's first pass)
        b = Block(b.index, b.kind, tuple(p for p in b.parts if p not in idle), b.stack)
    c, ab = r.compute_bytes, adapter_input_bytes(r)
    saved, per_input = adapter_copy_bytes(r)
    # an nn.Linear expert's adapter (lora.linear_experts) as a Linear's, over the rows routed to it: top_k a token
    routed = sum(k * (per_input * i + saved * rank) for _, i, _, k in linear_experts(b, roles))
    if ab != c or r.lora_dropout:  # a copy per adapter: sums over the adapted Linears
        if roles is None:
            return per_input * b.lora_in + saved * rank * len(b.linears) + routed
        return sum(per_input * i + saved * rank for i, _, _ in adapted_linears(b, roles)) + routed
    adapted = adapted_linears(b, roles)
    groups = {g: i for i, _, g in adapted if g != "attn_out"}
    return saved * (sum(groups.values()) + rank * len(adapted)) + routed


def recompute_transient_bytes(b: Block, r: Regime, roles: frozenset[str] | None, saves: bool = False,
                              upcast: bool = False, a: Arch | None = None, backward: bool = True) -> int:
    """Per token, what a checkpointed layer's recomputation holds beyond its saved tensors (block_activation_bytes)
    at its peak, the adapter forward of the layer's last Linear (down_proj, fc2) when it is adapted. Non-reentrant
    checkpointing (torch/utils/checkpoint.py, early stop on by default) reruns the layer's forward inside its
    backward until the last saved tensor is packed again, lora_B's input of that Linear: every other saved tensor
    of the layer is back by then, and peft's lora.Linear.forward (peft/tuners/lora/layer.py: result =
    self.base_layer(x); x = self._cast_input_dtype(x, lora_A.weight.dtype); result + lora_B(lora_A(dropout(x))) *
    scaling) holds a chain of copies of the Linear's input, the last one saved by lora_A (priced), the others not:
    - the input (the MLP's product; fp32 under AMP after prepare_model_for_kbit_training's upcast), unless a
      bitsandbytes matmul saves it (`saves`, storage.saves_matmul_input) or no copy follows (lora_A saves it);
    - its cast to the adapters' dtype, a new tensor when the dtypes differ;
    - LoRA dropout's output (aten dropout: CUDA's native_dropout returns it beside a bool mask, the CPU's
      _dropout_impl makes it as input * noise, the noise in the input's dtype: either mask is saved and priced in
      adapter_activation_bytes by mask_bytes; the dropped copy is the same on both);
    - under AMP with adapters not in bf16, autocast's bf16 copy for lora_A (the saved one).
    Hidden-wide beside them (read off the CPU simulation's live tensors at this peak, Mistral-7B LoRA): the
    decoder layer's post-attention residual (a parallel block's attention output), the MLP's input (the normed
    hidden state, unless lora_A of gate/up saves it: no copy), the Linear's base output `result`; the backward's
    gradient of the layer output, lora_B's output gradient times scaling (bf16 under autocast, else the adapters'
    dtype) and, where that dtype is not the base output's, the add's cast of it for the base branch.
    `backward` False: the same forward at the end of a forward pass without checkpointing, every layer's tensors
    saved and no gradient yet (job.py's FORWARD_PHASE; an adapted last Linear only, else 0): the peak of steps whose
    vocabulary is small beside the MLP's width (FINDINGS.md F44).
    Nothing for a full fine-tune (its tensors are saved) or on an MoE part (ParamWrapper adapts the experts).
    Without LoRA dropout the chain is one copy shorter and the same hidden-wide tensors are held: the Mistral-7B
    pure-bf16 fp32-adapter row without dropout measures its peak at this moment, and this phase reads -1.56% of it
    (FINDINGS.md F12). QLoRA runs the same forward in peft's 4-bit layer (peft/tuners/lora/bnb.py Linear4bit).
    prepare_model_for_kbit_training's fp32 residual stream under AMP (`upcast`) copies less, as the
    CPU simulation's live tensors at this peak show (F29): the norms upcast nothing, so the first norm's saved fp32
    input is the checkpointed input itself and the post-attention residual is the second norm's (both priced
    already: the result is negative where nothing else is held), and the backward's cast of lora_B's gradient for
    the fp32 base branch is not made yet."""
    fp32_stream = upcast and r.amp  # (an fp32 base's stream is fp32 too, but its bf16 Linear outputs hold other
    # copies: its checkpointed runs read +2.7% without this, -2.7% with it, and are left as they were)
    shared = 4 * b.parts[0].norm_width if fp32_stream and b.parts and b.parts[0].norm_width else 0
    part = last_linear_part(b)
    if r.trained:
        return 0
    if not backward and (part is None or part.type not in MLP_TYPES):
        return 0  # measured on MLPs only: RWKV's channel mix, say, peaks elsewhere (+3.3% with this term)
    if part is None or (roles is not None and linear_roles(part)[-1] not in roles):
        if not backward:
            return 0
        return frozen_mlp_backward_bytes(part, r, mlp_act(a) if a is not None else "", 4 * fp32_stream) - shared
    width, hidden = part.linears[-1]
    c, ab = r.compute_bytes, adapter_input_bytes(r)
    x = 4 if fp32_stream else c
    chain = [x] + ([ab] if ab != x else []) + ([ab] if r.lora_dropout else []) + ([c] if r.amp and ab != c else [])
    copied = len(chain) > 1
    inputs = sum(chain[:-1]) - (x if saves and copied else 0)
    lora_out = c if r.amp else ab
    grads = r.residual_bytes + lora_out + (x if lora_out != x and not fp32_stream else 0) if backward else 0
    # the forward runs on past lora_A: lora_B's output and its product with the scaling, before the add to `result`
    # (a recomputation stops at lora_B's input, its last saved tensor: F44's CPU-simulated peaks, llama, 1-3 layers)
    forward = (0 if fp32_stream else r.residual_bytes) + (x if copied and not saves else 0) + x \
        + (0 if backward else 2 * lora_out)
    return inputs * width + hidden * (forward + grads) - shared


def forward_locals_bytes(g: Graph, r: Regime) -> int:
    """Per token, what a LoRA forward's model code still references at its last layer and no backward saves: the
    embedding output (`inputs_embeds`) and, through the layer loop's `hidden_states`, the last layer's input, each
    as wide as the residual stream; one tensor under one layer (transformers 5.24 modeling_llama.py
    LlamaModel.forward; BERT's `embedding_output` and encoder loop alike). Read off CPU-simulated Llama LoRA steps
    at 1, 2 and 3 layers (FINDINGS.md F58)."""
    return r.residual_bytes * g.spec.hidden * g.spec.streams * min(2, len(g.spec.blocks))


MLP_TYPES = ("SwiGLU", "GeGLU", "GLU", "MLP")  # a dense feed-forward's Part.type


def frozen_mlp_backward_bytes(part: Part | None, r: Regime, act: str = "", mlp_bytes: int = 0) -> int:
    """Per token, what the backward of an MLP whose down projection carries no adapter holds beside the layer's
    saved tensors: MLP-wide gradients in the MLP's dtype (`mlp_bytes`, default the compute dtype; fp32 after
    prepare_model_for_kbit_training, as Linear4bit.forward returns its input's dtype: F59), and the layer output's,
    hidden-wide in the residual's. A gated MLP at its product's backward (act(gate) * up): down_proj's input
    gradient and the product's two (torchtune's Llama-2-7B LoRA on q and v; Llama-2-7B, Mistral-7B). A plain one at
    its activation's (`act`, mlp_act): fc2's input gradient and the activation's (pythia-6.9b, opt-125m), a Python GELU's a third
    (gpt2's gelu_new), relu²'s two more (grad * 2 * x.pow(1): Persimmon's step read -10.5% without, F64). F32."""
    if part is None or part.type not in MLP_TYPES or len(part.linears) not in (2, 3):
        return 0
    width, hidden = part.linears[-1]
    wide = (3 if act in PYTHON_GELU else 2) + (2 if act == RELU_SQUARED else 0) if part.type == "MLP" else 3
    return wide * width * (mlp_bytes or r.compute_bytes) + hidden * r.residual_bytes


def last_linear_part(b: Block) -> Part | None:
    """The part holding the layer's last Linear (down_proj, fc2: the first its backward reaches), None where the
    layer has none or that part is a mixture of experts (its tensors are the experts', not one Linear's)."""
    part = next((p for p in reversed(b.parts) if p.linears), None)
    return None if part is None or part.type.startswith("MoE") else part


def last_linear_params(b: Block) -> int:
    """Weights of the layer's last Linear (last_linear_part), 0 where there is none."""
    part = last_linear_part(b)
    return 0 if part is None else part.linears[-1][0] * part.linears[-1][1]


def block_activation_bytes(a: Arch, b: Block, r: Regime, rank: int = 0,
                           roles: frozenset[str] | None = None) -> int:
    """Saved-for-backward bytes of one layer per token (SDPA attention): norms, the parts' saved tensors (frozen:
    `act_frozen`), fp32 softmax statistics, q/k norms over head_dim and adapters' inputs."""
    c = r.compute_bytes
    out = norm_bytes(b.rms_width, b.norm_width, b.norm_stats_bytes, b.norm_read, b.norm_fed, r)
    out += python_layer_norm_bytes(a, b.parts, r)
    out += c * (b.act if r.trained else b.act_frozen) + 4 * b.act32
    attention = sum(1 for p in b.parts if p.attends)
    if a.qk_norm and attention:
        # q_norm / k_norm (qwen3, olmo2, gemma3): the fp32 upcast, plus the normalised output when it trains, fp32
        # or in the projection's dtype (QK_NORM_FP32); a scale-free norm ("noscale": nanochat, NeoMME) has no
        # weight to multiply, so nothing saves its output
        qk = a.heads * a.head_dim + a.kv_heads * a.head_dim
        scaled = r.trained and a.qk_norm != "noscale"
        out += attention * qk * (4 + (0 if not scaled else 4 if a.model_type in QK_NORM_FP32 else c))
    act = mlp_act(a)
    if act in PYTHON_GELU:
        out += python_gelu_bytes(b, c)
    elif act == XIELU:  # over the two priced tensors (fc1 output; the activation's, saved by down_proj when it trains)
        per = max(r.residual_bytes, c) + c + 1 + (c if r.trained else 0)
        out += per * sum(p.act // 2 for p in b.parts if p.type == "MLP")
    if attention and a.model_type in DIFFERENTIAL_ATTENTION:
        out += attention * differential_attention_bytes(a, r)
    hidden, inter = layer_dropouts(a, b) if r.dropout else (0, 0)
    out += hidden * a.hidden * mask_bytes(r, c)  # masks of the residual-branch dropouts, on the branch outputs
    if inter and (down := last_linear_part(b)) is not None:
        # its mask, and where the down Linear trains, the dropped tensor it saves in place of its input, which only
        # relu (threshold_backward reads its result) keeps anyway: gelu and silu save their input, a gated product's
        # mul its factors. A frozen down Linear saves nothing; its adapter's cast input is priced either way.
        kept = c if r.trained and act == "relu" and down.type == "MLP" else 0
        out += inter * down.linears[-1][0] * (kept + mask_bytes(r, c))
    if rank:
        roles = all_linear_roles(a) if roles is None else roles
        out += adapter_activation_bytes(b, roles, rank, r)
        out += expert_adapter_activation_bytes(b, roles, r)
    return out


def python_gelu_bytes(b: Block, c: int) -> int:
    """Per token of one layer: the three more MLP-wide tensors a Python-written GELU (PYTHON_GELU) keeps beyond one
    fused op (FINDINGS.md F8: gpt2's plain MLP; F35: T5 v1.1's gated "GeGLU", gelu_new on wi_0's output), each as
    wide as what the MLP's down Linear reads."""
    return 3 * c * sum(p.linears[-1][0] for p in b.parts if p.type in ("MLP", "GeGLU") and p.linears)


def expert_adapter_activation_bytes(b: Block, roles: frozenset[str] | None, r: Regime) -> int:
    """Per token, what peft's ParamWrapper (lora/layer.py: the tensor parametrized as W + scaling x lhs @ rhs,
    one baddbmm) makes the routed experts and the router keep (FINDINGS.md F10): an adapted tensor takes a
    gradient, so its grouped matmul keeps its input: the gathered rows (k x hidden) for gate+up, the gated
    product (k x inter) for down; the router's F.linear keeps its input, the normed hidden state."""
    out = 0
    for experts, i, _, _, k in expert_tensors(b, roles):
        out += r.compute_bytes * (k * i if experts > 1 else i)
    return out


def differential_attention_bytes(a: Arch, r: Regime) -> int:
    """Per token, what one differential attention layer saves over plain SDPA attention (DIFFERENTIAL_ATTENTION):
    the second call's output and fp32 LSE; two half-V tensors repeated to every KV head (v.repeat(1, 2, 1, 1))
    where one V was priced; the head-pair RMSNorm's fp32 input (torch's rms_norm upcasts) and rstd per head pair.
    Under AMP with an fp32 residual (rope in fp32), autocast casts q and k to bf16 once per call: a second pair.
    When the weights train: the concatenated outputs (kept by lambda_full x output2 for lambda's gradient) and
    o_proj's input, the normed output (plain attention's o_proj reads the SDPA output, already saved)."""
    c = r.compute_bytes
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    out = c * (q + kv) + 4 * a.heads + 4 * q + 2 * a.heads
    if r.amp and r.residual_bytes != c:
        out += c * (q + kv)
    if r.trained:
        out += c * 3 * q
    return out


# families/hyper_connections.py's layer Part types: DeepSeek-V4's, and HY-V4's, whose streams are mixed in fp32
HYPER_CONNECTIONS, HYPER_CONNECTIONS_FP32 = "Hyper-connections", "Hyper-connections (fp32 mixing)"
HYPER_CONNECTION_TYPES = (HYPER_CONNECTIONS, HYPER_CONNECTIONS_FP32)


def hyper_gradient_bytes(b: Block) -> int:
    """Per token, what a layer whose hyper-connections mix the streams in fp32 holds through its backward beside
    its saved tensors: the m streams' gradient cast to fp32 by the backward of the mix's `.to(dtype)`, m x hidden
    (modeling_hy_v4.HYV4DecoderLayer; read off a checkpointed CPU-simulated HY-V4 step, FINDINGS.md F103). The
    Part's act_frozen is its two modules' streams, 2 x m x hidden (hyper_connections.layer_part): 4 B x half of it."""
    return sum(2 * p.act_frozen for p in b.parts if p.type == HYPER_CONNECTIONS_FP32)
