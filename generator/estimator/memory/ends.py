"""What the ends of the stack keep per token: the embedding side (its dropout's mask, what a frozen embedding
spares the first norm) and the head (the final norm, the logits, a logit soft-cap), and the final norm's backward."""

from __future__ import annotations

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block, Part, norm_sums
from ..inputs import Assumptions
from .activations import (
    HYPER_CONNECTION_TYPES,
    MLP_TYPES,
    PYTHON_GELU,
    Regime,
    adapter_copy_bytes,
    adapter_input_bytes,
    mask_bytes,
    mlp_act,
    norm_bytes,
    python_gelu_bytes,
    python_layer_norm_bytes,
)
from .dropouts import embed_dropouts
from .lora import adapted_linears, linear_roles

# The config keys of final-logit soft-capping: gemma2's and its followers' final_logit_softcapping,
# RecurrentGemma's logits_soft_cap (modeling_recurrent_gemma.py applies it unconditionally), xLSTM's
# output_logit_soft_cap; T5Gemma's decoder config holds it (T5GemmaForConditionalGeneration reads the decoder's).
LOGIT_SOFTCAP_KEYS = ("final_logit_softcapping", "logits_soft_cap", "output_logit_soft_cap")
# Model types whose head casts the logits to fp32 before capping them, so tanh keeps an fp32 output:
# Inkling2ForCausalLM.forward (lm_head(...).float(), then Inkling2Softcap; its looped variant alike), BeamForCausalLM
# (logits.float() / final_logit_softcapping). Inkling's read off the live tensors at the loss backward (F97).
FP32_SOFTCAP = frozenset({"inkling2", "inkling2_text", "inkling2_loop", "inkling2_loop_text", "beam"})


def head_activation_bytes(a: Arch, g: Graph, r: Regime, s: Assumptions) -> int:
    """Per token after the stack: the final norm (read by the LM head) and `logits_bytes` per logit (F1);
    final-logit soft-capping (gemma2, recurrent_gemma: logits / cap, tanh, x cap) keeps tanh's output for its
    backward, in fp32 where the head upcast the logits first (FP32_SOFTCAP). A head part's own `act` and `act32`:
    what a family keeps outside its layers (Inkling's block attention residuals over the block states)."""
    spec = g.spec
    outside = sum(r.compute_bytes * (p.act if r.trained else p.frozen_act) + 4 * p.act32 for p in spec.head)
    width = 4 if a.model_type in FP32_SOFTCAP else r.compute_bytes
    softcap = width * spec.logits if any(a.setting(k) for k in LOGIT_SOFTCAP_KEYS) else 0
    return head_norm_bytes(g, r) + s.logits_bytes * spec.logits + softcap + outside


# The parts of Gemma-3n's text model outside its layers (families/gemma.gemma3n_text), by name.
ALTUP_PROJECTIONS, ALTUP_UNEMBED, PER_LAYER_PROJECTION = (
    "AltUp_Projections", "AltUp_Unembed_Projections", "Per_Layer_Projection")


def altup_end_bytes(g: Graph, r: Regime, roles: frozenset[str] | None) -> tuple[int, int]:
    """Per token, what Gemma-3n's text model keeps for its backward outside its layers, on the embedding side
    (live until the backward's end) and on the head's (freed before the layers' backward) (transformers 5.24
    modeling_gemma3n.Gemma3nTextModel.forward, project_per_layer_inputs; read off the live tensors of
    CPU-simulated LoRA and full steps at their peaks, FINDINGS.md F102), with n = altup_num_inputs streams:
    - before the layers, where its outputs need a gradient (the weights train, or the projections carry
      adapters): each of the n - 1 altup_projections keeps its input's copy (autocast's bf16 cast when the
      weights train; an adapter's, adapter_copy_bytes), its output in the stream's dtype (the square of the
      magnitude reads it) and the rescaled stream (the division by the new magnitude reads it); the stacked
      streams, n hidden widths, are the first layer's input;
    - after them, the same three for each of the n - 1 altup_unembed_projections (the last layer's output needs a
      gradient in any training step); the stack they make is averaged (mean saves nothing);
    - the per-layer inputs: per_layer_model_projection's input copy, its norm's fp32 input (and its normalised
      output where the weight trains), and the scaled sum every layer's gate multiplies by, in the stream's dtype
      (the embedding side's).
    (0, 0) for a model without these parts."""
    spec = g.spec
    parts = {p.name: p for p in (*spec.embed, *spec.head)}
    if ALTUP_PROJECTIONS not in parts or ALTUP_UNEMBED not in parts or PER_LAYER_PROJECTION not in parts:
        return 0, 0
    h, stream = spec.hidden, r.residual_bytes
    adapted = not r.trained and (roles is None or "linear" in roles)
    # each Linear's input copy: autocast's bf16 cast where the weights train (without autocast the input itself,
    # kept already); an adapter's (lora_A's rank-wide output, under 1% of these, is left out)
    copy = (r.compute_bytes * h if r.amp else 0) if r.trained else adapter_copy_bytes(r)[1] * h if adapted else 0
    streams = len(parts[ALTUP_UNEMBED].linears) + 1
    width = parts[PER_LAYER_PROJECTION].width
    before = (streams - 1) * (copy + 2 * stream * h) + streams * stream * h if r.trained or adapted else 0
    after = (streams - 1) * (copy + 2 * stream * h)
    per_layer = width * stream + ((copy + 4 * width + (4 * width if r.trained else 0)) if r.trained or adapted else 0)
    return before + per_layer, after


def head_norm_bytes(g: Graph, r: Regime) -> int:
    """Per token, what the final norm saves (norm_bytes of the head's norms)."""
    rms, stats, read, fed = norm_sums(g.spec.head)
    return norm_bytes(rms, sum(p.norm_width for p in g.spec.head), stats, read, fed, r)


def final_norm_backward_bytes(g: Graph, r: Regime) -> int:
    """Per token, what the final RMSNorm's backward holds beside the saved tensors, once the LM head's backward
    has run and freed the logits and their gradients: five fp32 tensors of its width (the fp32 upcast's gradient
    terms; read off the live tensors of CPU-simulated steps whose small vocabulary leaves this the peak,
    qwen3_5_text and recurrent_gemma, FINDINGS.md F25). 0 where the head has no RMSNorm.
    A hyper-connections head's backward runs next, the final norm's tensors freed; the larger of the two counts.
    Its norm's backward holds its saved fp32 input of the m streams, HYPER_HEAD_TEMPORARIES fp32 temporaries as
    wide, and the streams' gradient in their dtype (read off CPU-simulated DeepSeek-V4 and HY-V4 steps, F103);
    head_norm_bytes, which the caller adds, is taken off it."""
    rms = 20 * norm_sums(g.spec.head)[0]
    hyper = next((p for p in g.spec.head if p.type in HYPER_HEAD_TEMPORARIES), None)
    if hyper is None:
        return rms
    streams = hyper.act32  # head_part: m x hidden
    held = (4 * (1 + HYPER_HEAD_TEMPORARIES[hyper.type]) + r.residual_bytes) * streams
    return max(rms, held - head_norm_bytes(g, r))


# The fp32 temporaries, each m x hidden wide, of a hyper-connections head's norm backward at once, by its Part's
# type (families/hyper_connections.py): DeepSeek-V4's norm returns x * rsqrt(mean(x^2)), five; HY-V4's the
# rsqrt alone, four (F103).
HYPER_HEAD_TEMPORARIES = {"Hyper-connections head": 5, "Hyper-connections head (rsqrt norm)": 4}


def frozen_input(g: Graph, r: Regime) -> bool:
    """Whether the first layer's input needs no gradient: the weights are frozen and nothing on the embedding side
    carries an adapter or feeds image tokens (a projection, a vision tower); autograd then records nothing for what
    only that input's gradient would read (frozen_embedding_bytes, experts.frozen_input_expert_bytes)."""
    spec = g.spec
    return not (r.trained or not spec.blocks or spec.image_tokens or any(p.linears or p.matmul for p in spec.embed))


def frozen_embedding_bytes(a: Arch, g: Graph, r: Regime, roles: frozenset[str] | None = None) -> int:
    """Per token, what the charges of the embedding side (embed_dropout_bytes) and of the first layer's input norm
    (block_activation_bytes) hold that a frozen model does not keep: a frozen embedding's output needs no gradient,
    so neither the embedding dropout's mask nor the norm reading it (a frozen weight) is recorded by autograd
    (FINDINGS.md F10); on named targets (`roles`) of transformers' model, nor the LoRA dropouts' masks of the first
    layer's adapters on that norm's output, nor, in a parallel block, its MLP's tensors where none of its Linears
    carries an adapter: that MLP reads the layer's input too (F63). Not so when a Linear of the embedding side (a
    projection, a vision tower's) carries an adapter, or the weights train; callers leave it in when
    enable_input_require_grads runs (gradient checkpointing, prepare_model_for_kbit_training)."""
    if not frozen_input(g, r):
        return 0
    block = g.spec.blocks[0]
    mlp = parallel_mlp(block)
    first = block.parts[:next((i for i, p in enumerate(block.parts) if not p.norm_width), len(block.parts))]
    first = first if mlp is not None else first[:1]
    out = embed_dropout_bytes(a, g, r)
    if first:  # the layer's input norm, or a parallel block's two (gpt_neox's parallel residual)
        rms, stats, read, fed = norm_sums(first)
        out += norm_bytes(rms, sum(p.norm_width for p in first), stats, read, fed, r) \
            + python_layer_norm_bytes(a, first, r)
    if any(p.type in HYPER_CONNECTION_TYPES for p in block.parts):
        # attn_hc on the layer's input streams keeps nothing: their fp32 flattening and the streams
        # (families/hyper_connections.layer_part; its Sinkhorn divisions, under 3%, stay)
        out += (4 + r.residual_bytes) * g.spec.streams * g.spec.hidden
    if roles is None:  # every Linear adapted, or a framework's own model (LitGPT's keeps these: F30's rows)
        return out
    if mlp is not None and not set(linear_roles(mlp)) & roles:
        out += r.compute_bytes * mlp.frozen_act + (python_gelu_bytes(block, r.compute_bytes)
                                                    if mlp_act(a) in PYTHON_GELU else 0)
    if r.lora_dropout:
        out += mask_bytes(r, adapter_input_bytes(r)) * sum(
            i for i, _, group in adapted_linears(block, roles) if group == "attn_in")
    return out


def parallel_mlp(b: Block) -> Part | None:
    """The MLP of a parallel block (gptj, phi, cohere, falcon, gpt_neox's parallel residual): no Add between the
    attention and it, so both read the layer's input through its first norms; None in a sequential block."""
    attended = False
    for p in b.parts:
        attended = attended or p.attends
        if attended and p.type == "Add":
            return None
        if attended and p.type in MLP_TYPES:
            return p
    return None


def embed_dropout_bytes(a: Arch, g: Graph, r: Regime) -> int:
    """Per token: the masks of the dropouts outside the layers (dropouts.DROPOUTS), on the embedding output
    (residual dtype)."""
    embed = embed_dropouts(a) if r.dropout else 0
    return embed * g.spec.hidden * mask_bytes(r, r.residual_bytes)
