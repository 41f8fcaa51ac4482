"""SDPA's math kernel: when torch runs it in place of a fused kernel, and the fp32 scores it keeps (FINDINGS.md F15)."""

from __future__ import annotations

from ..config.arch import Arch
from ..graph.nodes import Graph
from .activations import Regime, mask_bytes
from .attention import POSITION_BIAS_SDPA, attention_dropout, full_attention_heads

MLA_PART = "Multi-head Latent Attn"  # families/assembly.mla_part's node type
# Attention masks computed from the layer's own activations, so a training step's mask needs a gradient: Doge's
# dynamic mask, exp(A x softplus(dt_proj(values))) expanded over the queries (modeling_doge.py
# DogeAttention.forward, prepare_dynamic_mask).
ACTIVATION_MASK = {"doge": "modeling_doge.DogeAttention.prepare_dynamic_mask"}


def _falcon_multi_query(a: Arch) -> bool:
    """Falcon's original multi-query attention (modeling_falcon.FalconAttention, multi_query without
    new_decoder_architecture): it hands SDPA one K/V head for all query heads, broadcast, without enable_gqa."""
    return a.model_type == "falcon" and bool(a.raw.get("multi_query")) and not a.raw.get("new_decoder_architecture")


def _head_dims(a: Arch) -> tuple[int, int]:
    """(q/k head dim, v head dim): multi-head latent attention's nope + rope and v_head_dim, else head_dim."""
    v = a.raw.get("v_head_dim")
    nope, rope = a.raw.get("qk_nope_head_dim"), a.raw.get("qk_rope_head_dim")
    if all(isinstance(x, int) and not isinstance(x, bool) for x in (v, nope, rope)):
        return nope + rope, v  # type: ignore[operator, return-value]
    return a.head_dim, a.head_dim


def _math_fp32_bytes(a: Arch) -> tuple[int, int]:
    """(q/k head dim, per token the math kernel's fp32 q x scale, K^T x scale and V: heads-wide where enable_gqa
    repeats K/V, K/V-wide where falcon broadcasts its one head)."""
    dk, dv = _head_dims(a)
    kv = a.kv_heads if _falcon_multi_query(a) else a.heads
    return dk, 4 * (a.heads * dk + kv * (dk + dv))


def _dropped_bytes(a: Arch, r: Regime) -> int:
    """Per score element, what a training step's attention dropout adds in the math kernel: its mask (mask_bytes
    of the fp32 scores) and the dropped scores."""
    return (mask_bytes(r, 4) + 4) if r.dropout and attention_dropout(a) > 0 else 0


def math_sdpa(a: Arch, cpu: bool, training: bool, trained: bool = False) -> str:
    """Why torch's scaled_dot_product_attention runs its math kernel (aten _scaled_dot_product_attention_math)
    for this model, '' where a fused one takes the call. torch picks a fused kernel only when its checks pass
    (aten/src/ATen/native/transformers/sdp_utils_cpp.h and cuda/sdp_utils.cpp):
    - equal query and K/V head counts unless enable_gqa (check_batch_size_and_num_heads_dense), on every device:
      falcon's multi-query attention fails it;
    - on the CPU (the simulation), the flash kernel alone: no dropout (check_for_dropout), equal q/k and v head
      dims (check_head_dim_size_cpp: multi-head latent attention's 192 vs 128) and no mask that needs a gradient
      (a `trained` relative position bias, POSITION_BIAS_SDPA; a mask made from activations, ACTIVATION_MASK: seen
      in torch 2.13's profile, F101). CUDA's memory-efficient kernel takes all three, so a GPU keeps no scores
      there."""
    if _falcon_multi_query(a):
        return ("falcon's multi-query attention hands torch's SDPA one K/V head for all query heads "
                "(modeling_falcon.FalconAttention, no enable_gqa): the fused kernels need equal head counts, so it "
                "runs the math kernel, which keeps every layer's attention scores in fp32")
    if not cpu:
        return ""
    if training and attention_dropout(a) > 0:
        return "attention dropout on the CPU: its flash kernel takes no dropout"
    if training and trained and a.model_type in POSITION_BIAS_SDPA:
        return "a trained relative position bias on the CPU: its flash kernel takes no mask that needs a gradient"
    if training and a.model_type in ACTIVATION_MASK:
        return "a mask made from the layer's values on the CPU: its flash kernel takes no mask that needs a gradient"
    dk, dv = _head_dims(a)
    return "unequal q/k and v head dims on the CPU: its flash kernel needs them equal" if dk != dv else ""


def math_layer_terms(a: Arch, b, r: Regime) -> tuple[int, int]:
    """(bytes per token, bytes per token squared) the math kernel adds to one layer's fused-SDPA activations
    (at::_scaled_dot_product_attention_math, torch 2.13): it casts q, k, v to fp32 and saves q x scale, K^T x
    scale and V (heads-wide when enable_gqa repeats them: transformers' use_gqa_in_sdpa; falcon broadcasts its one
    K/V head) for its two matmuls, and the fp32 softmax of the scores (_safe_softmax); a training step's dropout
    adds its mask (mask_bytes) and the dropped scores. In place of what the fused kernel kept: q, k, v and its
    output (multi-head latent attention: every tensor of the part but its two compressed latents, which its norms
    keep; o_proj keeps math's output copy when its weight trains) and the fp32 logsumexp. Read off CPU-simulated
    steps with the fused kernels switched off (torch.backends.cuda.enable_flash_sdp(False)) and of DeepSeek-V3's
    and MiniCPM3's latent attention. A trained relative position bias sends the self-attentions alone there (the
    cross-attention's zero bias needs no gradient): their mask copies (masked_sdpa_terms) are not kept."""
    bias_only = a.model_type in POSITION_BIAS_SDPA and not (r.dropout and attention_dropout(a) > 0)
    attention = [p for p in b.parts if p.attends and not (bias_only and p.window < 0)]
    if not attention:
        return 0, 0
    c, heads = r.compute_bytes, a.heads
    dk, dv = _head_dims(a)
    math = _math_fp32_bytes(a)[1] + (c * heads * dv if r.trained else 0)
    latents = sum(a.raw.get(k) or 0 for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim"))
    fused = [c * (p.act - latents if p.type == MLA_PART else heads * dk + a.kv_heads * (dk + dv) + heads * dv)
             + 4 * p.heads for p in attention]
    return len(attention) * math - sum(fused), sum(p.heads for p in attention) * (4 + _dropped_bytes(a, r))


def math_backward_bytes(a: Arch, g: Graph, r: Regime, tokens: int, attention: str = "sdpa") -> tuple[int, int]:
    """Per sequence, at the backward of the largest math-kernel attention ((0, 0) where none runs: eager
    attention, or a fused kernel): (what that attention saved, the fp32 heads x T x T gradients its backward holds
    beside them: the AV matmul's gradient of the probabilities (bmm) and the softmax's (_softmax_backward_data)). By then the layer's later tensors (its MLP's) are freed.
    Read off CPU-simulated steps (falcon and DeepSeek-V3 with checkpointing: those two tensors and the saved
    softmax were the peak)."""
    if attention == "eager" or not math_sdpa(a, r.cpu, True, r.trained):
        return 0, 0
    heads = max(full_attention_heads(g), default=0)
    dropped = _dropped_bytes(a, r)
    saved = tokens * _math_fp32_bytes(a)[1] + tokens * tokens * heads * (4 + dropped)
    # with dropout the peak is the dropout's backward (the dropped scores, the mask, one gradient beside the
    # softmax); without, the softmax's (its output and two gradients)
    return saved, (4 if dropped else 8) * heads * tokens * tokens


def math_scores_bytes(a: Arch, g: Graph, tokens: int, cpu: bool) -> int:
    """Serving (no grad), per sequence, the largest attention layer (one layer's tensors live at a time; 0 where
    a fused kernel runs): the math kernel's fp32 scores and the masked scores beside them (bmm, then + the causal
    mask), the fp32 [T, T] mask it builds for is_causal, and its fp32 copies of q (and q x scale), k and v. Read off CPU-simulated prefills of
    MiniCPM3 and DeepSeek-V3."""
    if not math_sdpa(a, cpu, False):
        return 0
    dk, fp32 = _math_fp32_bytes(a)  # + the fp32 q beside q x scale
    return max(full_attention_heads(g), default=0) * tokens * tokens * 8 + 4 * tokens * tokens \
        + tokens * (fp32 + 4 * a.heads * dk)
