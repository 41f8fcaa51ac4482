"""Which attention a job runs and what it keeps beyond SDPA's fused kernels: the default per model class
(transformers' `_supports_sdpa`, sdpa_table.py) or custom code, eager attention's scores, and SDPA's math kernel
where torch cannot run a fused one."""

from __future__ import annotations

from ..config.arch import Arch
from ..config.transformers_defaults import CLASS_DEFAULTS
from ..graph.nodes import Graph, tied_weight_params
from ..graph.parts import Block, Part
from .activations import DIFFERENTIAL_ATTENTION, Regime, mask_bytes
from .sdpa_table import NO_SDPA

# Custom modeling code (auto_map) known to keep no score matrix, with what the page says of it. Other custom code is
# priced as keeping its attention scores (eager): the worst measured misses were custom code at long sequences
# (issue 13).
# - THUDM/chatglm3-6b modeling_chatglm.py CoreAttention: torch.nn.functional.scaled_dot_product_attention on
#   torch >= 2.
# - Qwen-1 (Qwen/Qwen-1_8B-Chat) modeling_qwen.py QWenAttention.forward: FlashAttention-2 where flash_attn imports
#   (config use_flash_attn "auto"), else F.scaled_dot_product_attention on torch >= 2 with the mask it builds in each
#   layer (attention_mask.expand(...).masked_fill(~causal_mask, min)); its _attn, which keeps the scores, runs only
#   with use_cache_quantization or torch 1. Not Qwen-VL's or Qwen-Audio's code, of the same model_type (a "visual"
#   or "audio" block in the config), which keeps the scores (_attn only in the copies read: CUSTOM_SDPA_EXCEPT).
CUSTOM_SDPA = {
    "chatglm": "its attention calls torch's scaled_dot_product_attention: no score matrix kept",
    "qwen": ("its attention runs FlashAttention-2 where flash-attn is installed, else torch's "
             "scaled_dot_product_attention: no score matrix kept. Without flash-attn, the mask it builds in each "
             "layer ([batch, 1, T, T] where the batch carries an attention mask) is kept for the backward (2 B per "
             "token pair and layer in bf16), which these figures leave out"),
}
CUSTOM_SDPA_EXCEPT = {"qwen": ("visual", "audio")}


def custom_sdpa(a: Arch) -> str:
    """What the page says of custom code known to keep no score matrix (CUSTOM_SDPA), '' for any other."""
    if a.model_type not in CUSTOM_SDPA or any(k in a.raw for k in CUSTOM_SDPA_EXCEPT.get(a.model_type, ())):
        return ""
    return CUSTOM_SDPA[a.model_type]

# Eager attention written out in the model's own class that masks by adding the mask and clamping at the dtype's
# minimum (torch.max(scores + mask, finfo.min), whose backward keeps the masked scores), then softmax in the
# scores' dtype with no dtype=float32 (FINDINGS.md F9).
CLAMPED_SCORES = {"xglm": "modeling_xglm.XGLMAttention"}

# Eager attention with a learnable per-head sink applied as post-attention logsumexp scaling: torch.logsumexp over
# the masked scores keeps them (in the compute dtype) for its backward, beside the softmax's (F15's sweep).
LSE_SINK_SCORES = {"granite_swa": "modeling_granite_swa.eager_attention_forward",
                   "granitemoe_swa": "modeling_granitemoe_swa.eager_attention_forward"}

# Bytes per token squared each attention layer keeps beside its scores, for a position bias gathered per query and
# key: Inkling2RelativePositionBias (modeling_inkling2.py, modeling_inkling2_loop.py) gathers each head's bias
# profile by relative_distance.clamp(...) (an int64 index, kept by gather) and zeroes the distances out of range
# with masked_fill (a bool mask, kept), in every layer (FINDINGS.md F97).
GATHERED_BIAS_INDEX = dict.fromkeys(("inkling2", "inkling2_text", "inkling2_loop", "inkling2_loop_text"), 8 + 1)


# Eager attention with per-head sinks concatenated to the masked scores, softmax'd in their dtype (softmax(...,
# dtype=combined_logits.dtype): the wider of the compute dtype and the sinks' parameter dtype; autocast leaves an
# explicit dtype alone), the sink column sliced off as a view: no cast, one saved softmax output per score. Only
# where the sinks follow the model's dtype: hy_v4 and flint keep theirs in fp32 (_keep_in_fp32_modules_strict), so
# their concatenation is fp32 and they keep the fp32 softmax and its cast, as eager_attention_forward does.
SINK_SOFTMAX = {"gpt_oss": "modeling_gpt_oss.eager_attention_forward",
                "mimo_v2_flash": "modeling_mimo_v2_flash.eager_attention_forward"}

# Eager attention on fp32 q and k (query.to(torch.float32)) with a softmax that names no dtype, then a cast to the
# value's dtype: fp32 scores and softmax, except under CPU autocast, which runs the matmul in bf16 and leaves
# softmax alone (CUDA autocast lists softmax among its fp32 ops), so the softmax keeps the bf16 scores' dtype and
# the cast is a no-op.
# BERT's eager_attention_forward and its copies (modeling_bert.py, roberta, xlm_roberta, distilbert) take the scores
# in the compute dtype and also name no dtype: the same rule.
AUTOCAST_SOFTMAX = {"gpt_neo": "modeling_gpt_neo.GPTNeoSelfAttention._attn",
                    "bert": "modeling_bert.eager_attention_forward", "roberta": "modeling_roberta.eager_attention_forward",
                    "xlm-roberta": "modeling_xlm_roberta.eager_attention_forward",
                    "distilbert": "modeling_distilbert.eager_attention_forward",
                    "mvp": "modeling_mvp.MvpAttention.forward",
                    "big_bird": "modeling_big_bird.BigBirdSelfAttention, BigBirdBlockSparseAttention"}

# Eager attention whose scores take the residual stream's dtype: baddbmm into zeros of the query's dtype (the
# rotary embedding's cos and sin follow the embedding output: fp32 under a full fine-tune's AMP), the mask added,
# then a softmax that names no dtype: CUDA autocast runs it in fp32; CPU autocast, and any run without autocast
# (pure bf16, fp32, serving), in its input's dtype.
# T5 and its copies add the relative position bias (the bias Embedding's dtype: fp32 under a full fine-tune's AMP)
# to the scores, so they follow the same rule.
PROMOTED_SOFTMAX = {"gpt_neox_japanese": "modeling_gpt_neox_japanese.GPTNeoXJapaneseAttention._attn",
                    "t5": "modeling_t5.eager_attention_forward", "mt5": "modeling_mt5.eager_attention_forward",
                    "umt5": "modeling_umt5.eager_attention_forward",
                    "switch_transformers": "modeling_switch_transformers.eager_attention_forward",
                    "longt5": "modeling_longt5.eager_attention_forward (its decoder's)",
                    # the mask added before a softmax that names no dtype (the local attention's extended_mask too);
                    # their cross-attention adds none: under a full fine-tune's CPU autocast it stays bf16 (over)
                    "pegasus_x": "modeling_pegasus_x.eager_attention_forward, PegasusXGlobalLocalAttention",
                    "bigbird_pegasus": "modeling_bigbird_pegasus.eager_attention_forward",
                    "led": "modeling_led.LEDDecoderAttention", "fsmt": "modeling_fsmt.Attention",
                    "nllb-moe": "modeling_nllb_moe.eager_attention_forward"}

# Eager attention whose forward holds more score-sized tensors at its softmax than its backward keeps: locals that
# still reference them until the function returns, by their widths (the compute dtype's, or the residual stream's
# where the mask or the query takes it: fp32 under a full fine-tune's AMP). BLOOM: the raw alibi.baddbmm output
# (`attention_scores`) beside its sum with the mask, which follows the embeddings' dtype (transformers 5.24
# modeling_bloom.py BloomAttention.forward L271-284); GPT-NeoX-Japanese: the zeros buffer baddbmm adds into
# (`attn_scores`, the query's dtype) beside the masked sum (modeling_gpt_neox_japanese.py _attn L244-263).
FORWARD_HELD_SCORES = {"bloom": ("compute", "residual"), "gpt_neox_japanese": ("residual", "residual")}
# Their layers return the attention probabilities with the hidden states, and the model's layer loop holds that
# tuple until the next layer returns (modeling_bloom.py BloomAttention.forward L311, BloomModel.forward L524-537;
# modeling_gpt_neox_japanese.py L453): checkpointed, the previous layer's probabilities live through this one's
# forward, which keeps none of its own.
RETURNS_PROBS = frozenset({"bloom", "gpt_neox_japanese"})


# Local attention whose probabilities take no dropout, whatever the config's attention dropout (Part.keys' scores).
UNDROPPED_LOCAL = {"big_bird": "modeling_big_bird.BigBirdBlockSparseAttention.bigbird_block_sparse_attention",
                   "bigbird_pegasus": "modeling_bigbird_pegasus.BigBirdPegasusBlockSparseAttention"}
# Local attention that runs softmax(scores.float()).type_as(scores): an fp32 softmax whatever autocast does, then a
# cast, where the model's other attention (score_bytes) differs.
FP32_LOCAL_SOFTMAX = {"longt5": "modeling_longt5.LongT5LocalAttention, LongT5TransientGlobalAttention",
                      "led": "modeling_led.LEDEncoderSelfAttention",
                      "longformer": "modeling_longformer.LongformerSelfAttention"}


def _local_score_widths(a: Arch, c: int, r: Regime) -> tuple[int, int, int]:
    """_score_widths of a local attention's scores (Part.keys): UNDROPPED_LOCAL's keep no dropout mask,
    FP32_LOCAL_SOFTMAX's an fp32 softmax and its cast (or the dropout's mask and output)."""
    r = r._replace(dropout=False) if a.model_type in UNDROPPED_LOCAL else r
    if a.model_type in FP32_LOCAL_SOFTMAX:
        return 0, 4, mask_bytes(r, c) + c if r.dropout and attention_dropout(a) > 0 else c
    return _score_widths(a, c, r)


def local_score_bytes(a: Arch, c: int, r: Regime) -> int:
    """score_bytes of a local attention's scores (_local_score_widths)."""
    return sum(_local_score_widths(a, c, r))


def eager_forward_excess(a: Arch, c: int, r: Regime) -> int:
    """Bytes per score a FORWARD_HELD_SCORES model's eager attention holds in the forward beyond the scores its
    layer keeps for the backward (score_bytes), at the larger of two moments: its softmax (the locals' tensors, the
    fp32 copy of the softmax's input where the softmax is fp32 and its input narrower, the softmax's output) and the
    cast after it (the locals', the softmax's output, the dropout's mask and output where dropout runs, and the cast
    where it makes a new tensor). 0 for eager_attention_forward and the others: their moments stay under their
    backward's (eager_backward_bytes). Read off CPU-simulated steps of BLOOM (checkpointed LoRA) and
    GPT-NeoX-Japanese (LoRA and full, not checkpointed) at 2,048 tokens, whose peaks were in the last layer's
    forward (FINDINGS.md F57)."""
    kinds = FORWARD_HELD_SCORES.get(a.model_type, ())
    if not kinds:
        return 0
    widths = [c if k == "compute" else max(c, r.residual_bytes) for k in kinds]
    before, soft, after = _score_widths(a, c, r)
    copy = 4 if soft == 4 and widths[-1] < 4 else 0
    cast = c if soft != c else 0
    dropped = mask_bytes(r, soft) + soft if r.dropout and attention_dropout(a) > 0 else 0
    held = sum(widths)
    return max(held + copy + soft, held + soft + dropped + cast) - (before + soft + after)


def eager_forward_scores(a: Arch, g: Graph, r: Regime, tokens: int, grad_ckpt: bool) -> int:
    """Per sequence, what eager_forward_excess adds at the largest attention layer's softmax, and checkpointed, the
    previous layer's returned probabilities in the compute dtype (RETURNS_PROBS); 0 for other models."""
    excess = eager_forward_excess(a, r.compute_bytes, r)
    if not excess:
        return 0
    returned = r.compute_bytes if grad_ckpt and a.model_type in RETURNS_PROBS else 0
    return max(full_attention_heads(g), default=0) * tokens * tokens * (excess + returned)


# config.json's own choice of attention: from_pretrained builds the model with it unless told otherwise
# (transformers 5.24: a config's _attn_implementation, or attn_implementation, sets the implementation the model is
# made with: LlamaConfig.from_dict({..., "_attn_implementation": "eager"}) gives an eager model; repository code reads
# its config's attn_implementation the same way, InternLM2's). Every kernel but eager keeps no score matrix.
DECLARED_ATTENTION_KEYS = ("_attn_implementation", "attn_implementation")
NO_SCORE_KERNELS = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


def default_attention(a: Arch) -> tuple[str, str]:
    """(the attention a job runs when none is asked, why). The config's own choice first (DECLARED_ATTENTION_KEYS);
    then transformers picks SDPA only for classes with `_supports_sdpa` (sdpa_table.NO_SDPA, generated from
    transformers 5.24); a model_type transformers does not ship runs its own code (auto_map), priced as keeping its
    scores unless it is known to call SDPA."""
    key = next((k for k in DECLARED_ATTENTION_KEYS if isinstance(a.raw.get(k), str)), "")
    declared = a.raw.get(key)
    if declared == "eager":
        return "eager", (f"config.json sets {key} to eager, which from_pretrained builds the model with: every "
                         "layer's attention scores are kept")
    if declared in NO_SCORE_KERNELS:
        return "sdpa", f"config.json sets {key} to {declared}, which keeps no score matrix"
    if a.model_type in NO_SDPA:
        return "eager", (f"transformers' {NO_SDPA[a.model_type]} has no SDPA path (_supports_sdpa is False): it "
                         "runs eager attention by default, which keeps every layer's attention scores")
    if a.custom_code and a.model_type not in CLASS_DEFAULTS and not custom_sdpa(a):
        return "eager", ("custom modeling code (auto_map) whose attention was not read: priced as keeping its "
                         "attention scores (eager), the common case for repository code")
    return "sdpa", ""


def score_bytes(a: Arch, c: int, r: Regime | None = None) -> int:
    """Bytes per attention-score element eager attention keeps (transformers' eager_attention_forward), the sum
    of _score_widths: softmax(QK^T, dtype=float32) (fp32, saved by softmax) and its cast to the query dtype (saved
    by the AV matmul). Gemma-2's logit soft-capping adds tanh's saved output
    (modeling_gemma2.eager_attention_forward), a logsumexp sink (LSE_SINK_SCORES) the masked scores it reads.
    CLAMPED_SCORES in a training step (`r`): the masked scores, in the mask's dtype (the weights': fp32 under full
    AMP) when wider than the bf16 QK^T, kept by torch.max; their softmax (fp32 under CUDA autocast, which lists
    softmax among its fp32 ops; CPU autocast does not), and its cast to the compute dtype for the AV bmm when it
    differs. SINK_SOFTMAX: the softmax's output alone, in its own dtype, cast where the AV matmul's differs;
    AUTOCAST_SOFTMAX: the softmax in the dtype autocast leaves it. A
    training step's attention dropout (nn.functional.dropout on the probabilities) keeps its mask
    (mask_bytes) and hands the AV matmul the dropped probabilities in place of the cast ones."""
    before, soft, after = _score_widths(a, c, r)
    return before + soft + after


def _score_widths(a: Arch, c: int, r: Regime | None) -> tuple[int, int, int]:
    """Per score element, the bytes eager attention keeps (before its softmax, the softmax's saved output, after
    it: the probabilities the AV matmul saves and the dropout's mask), as score_bytes reads them."""
    weights = r.residual_bytes if r is not None else c  # bytes per weight (a sink's; the mask follows them)
    cast = False  # transformers' eager_attention_forward casts even where that is a no-op (fp32): priced as kept
    if r is not None and a.model_type in CLAMPED_SCORES:
        before, soft = max(c, weights), 4 if r.amp and not r.cpu else max(c, weights)
    elif a.model_type in SINK_SOFTMAX:
        before, soft = 0, max(c, weights)
    elif a.model_type in AUTOCAST_SOFTMAX:
        before, soft = 0, c if r is not None and r.amp and r.cpu else 4
    elif a.model_type in PROMOTED_SOFTMAX:
        before, soft = 0, 4 if r is not None and r.amp and not r.cpu else max(c, weights)
    else:
        before = (c if a.setting("attn_logit_softcapping") else 0) + (c if a.model_type in LSE_SINK_SCORES else 0)
        soft, cast = 4, True
    if r is not None and r.dropout and attention_dropout(a) > 0:  # the dropped probabilities are a new tensor
        return before, soft, mask_bytes(r, soft if a.model_type in PROMOTED_SOFTMAX else c) + c
    return before, soft, c if soft != c or cast else 0  # no cast where the softmax kept the compute dtype


def eager_backward_bytes(a: Arch, b, r: Regime) -> tuple[int, int]:
    """(bytes per token, bytes per token squared) one layer's eager attention backward holds beside what the layer
    saved, at its softmax's backward (_softmax_backward_data): the gradients of the probabilities and of the scores,
    each as wide as the softmax (fp32), beside its saved output; the probabilities the AV matmul saved (and the
    dropout's mask) are freed by then. Never less than one compute-dtype gradient (the AV matmul's backward, where
    the softmax is as narrow as its output). Read off CPU-simulated LoRA and full steps of llama, phi, diffllama and
    xglm with checkpointing: those tensors were the peak of the recomputed layer. A local attention's (Part.keys)
    are per token: its largest part's, where the layer has no full one."""
    full = max((p.heads for p in b.parts if p.attends and not p.keys), default=0)
    local = None if full else max((p for p in b.parts if p.attends), key=lambda p: p.heads * p.keys, default=None)
    c = r.compute_bytes
    if local is None:
        _, soft, after = _score_widths(a, c, r)
        return 0, full * max(c, 2 * soft - after)
    _, soft, after = _local_score_widths(a, c, r)
    per_score = max(c, 2 * soft - after)
    return local.heads * local.keys * per_score, local.heads * per_score // local.key_stride if local.key_stride else 0


# Eager attention's score tensors alive at once in a forward without grad (generate's prefill), per score element as
# (fp32 tensors, compute-dtype tensors), where a family's code keeps other than eager_attention_forward's softmax and
# its cast (score_bytes). A layer that returns its probabilities in an old-style tuple has them kept by the model's
# loop while the next layer runs: one compute-dtype tensor more. Read off each class default's generate at 1,024
# tokens (FINDINGS.md F81).
GENERATE_SCORES = {
    "bloom": (2, 3),  # BloomAttention.forward: alibi.baddbmm, + mask, softmax(dtype=float32)'s input and output
    "gpt_neox_japanese": (0, 4),  # _attn: baddbmm's zeros buffer (a local), + mask, softmax in the compute dtype
    "flint": (3, 0),  # eager_attention_forward: fp32 q k^T + mask, its cat with the sinks, the softmax
    "hy_v4": (2, 2),  # eager_attention_forward: q k^T + mask, its cat with fp32 sinks less the max, softmax, cast
    "xglm": (0, 2),  # XGLMAttention.forward: q k^T + mask and its torch.max with finfo.min; a bf16 softmax in place
}


def generate_scores_bytes(a: Arch, g: Graph, tokens: int, c: int) -> int:
    """Per sequence, the largest attention layer's eager scores at generate's prefill: GENERATE_SCORES where the
    family's code differs, else the softmax and its cast (score_bytes)."""
    kept = GENERATE_SCORES.get(a.model_type)
    per_score = score_bytes(a, c) if kept is None else 4 * kept[0] + c * kept[1]
    return max(score_elements(g, tokens), default=0) * per_score


def eager_scores_bytes(a: Arch, g: Graph, tokens: int, c: int, one_layer: bool = False) -> int:
    """Per sequence: heads x T x T score elements per attention layer, heads x T x keys per local one
    (score_elements; every layer's, or the largest one's when only one layer's tensors live: checkpointing's
    recomputation, serving)."""
    scores = score_elements(g, tokens)
    return (max(scores, default=0) if one_layer else sum(scores)) * score_bytes(a, c)


def full_attention_heads(g: Graph) -> list[int]:
    """Query heads of every attention part of the model with a T x T score matrix per head, in layer order."""
    return [p.heads for b in g.spec.blocks for p in b.parts if p.attends and not p.keys]


def score_elements(g: Graph, tokens: int) -> list[int]:
    """Per sequence, the score elements of every attention part, in layer order: heads x T x T, or a local
    attention's heads x T x keys (Part.keys: its blocks and global tokens, and T / key_stride side keys; or T where
    T is shorter)."""
    def keys(p: Part) -> int:
        return min(tokens, p.keys + (tokens // p.key_stride if p.key_stride else 0)) if p.keys else tokens
    return [p.heads * tokens * keys(p) for b in g.spec.blocks for p in b.parts if p.attends]


def eager_layer_terms(a: Arch, b, compute_bytes: int, trained: bool, r: Regime | None = None) -> tuple[int, int]:
    """(bytes per token, bytes per token squared) eager attention adds to one layer's SDPA activations
    (transformers' eager_attention_forward): its matmuls save q and the heads-wide repeat_kv copies of k and v in
    place of SDPA's q, k, v; its output is saved by o_proj when that trains (SDPA saved it itself); no fp32 LSE;
    and heads x T x T scores of score_bytes each (twice for differential attention: two calls, each its own); a
    local attention's heads x keys per token (Part.keys)."""
    attention = [p for p in b.parts if p.attends]
    if not attention:
        return 0, 0
    c = compute_bytes
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    delta = c * ((2 if trained else 1) * q - 2 * kv) - 4 * a.heads
    calls = 2 if a.model_type in DIFFERENTIAL_ATTENTION else 1
    local_bytes = calls * (local_score_bytes(a, c, r) if r else score_bytes(a, c))
    local = sum(p.heads * p.keys for p in attention) * local_bytes
    side = sum(p.heads * local_bytes // p.key_stride for p in attention if p.key_stride)  # T / key_stride keys
    full = sum(p.heads for p in attention if not p.keys) * calls * score_bytes(a, c, r)
    if r is not None and r.cpu and not r.padded and a.model_type in PROMOTED_SOFTMAX:
        # a cross-attention (its cache over the encoder's tokens: window -1) adds no tensor of the weights' dtype (T5's
        # zero bias takes the query's): under CPU autocast its softmax stays in the compute dtype (CUDA's runs fp32)
        narrow = score_bytes(a, c, r._replace(residual_bytes=c)) - score_bytes(a, c, r)
        full += sum(p.heads for p in attention if p.window < 0 and not p.keys) * calls * narrow
    return len(attention) * delta + local, full + side + len(attention) * GATHERED_BIAS_INDEX.get(a.model_type, 0)


def head_params(a: Arch, g: Graph) -> int:
    """Parameters whose gradients the loss backward makes first: the head's, and a tied embedding's."""
    return sum(p.params for p in g.spec.head) + tied_weight_params(a)


# Config keys transformers' attention classes pass to SDPA as dropout_p in a training step (the generic
# sdpa_attention_forward's `dropout=0.0 if not self.training else self.attention_dropout`, gpt2's attn_pdrop...).
ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attn_dropout", "attention_probs_dropout_prob")
# Model types whose attention reads another key: T5Attention's `self.dropout = config.dropout_rate` (modeling_t5.py,
# modeling_mt5.py, modeling_umt5.py, modeling_longt5.py's three attentions, modeling_switch_transformers.py), the one
# dropout rate of the whole model.
ATTENTION_DROPOUT_KEY = dict.fromkeys(("t5", "mt5", "umt5", "longt5", "switch_transformers"), "dropout_rate")


def attention_dropout(a: Arch) -> float:
    """The dropout_p a training step passes to SDPA (0 for falcon without alibi, whose SDPA call passes 0.0)."""
    if a.model_type == "falcon" and not a.raw.get("alibi"):
        return 0.0
    for key in (ATTENTION_DROPOUT_KEY[a.model_type],) if a.model_type in ATTENTION_DROPOUT_KEY else ATTENTION_DROPOUT_KEYS:
        p = a.raw.get(key)
        if isinstance(p, (int, float)) and not isinstance(p, bool):
            return float(p)
    return 0.0


# Stacks whose first layer computes the relative position biases and hands them to every later layer
# (T5Stack.forward: position_bias, encoder_decoder_position_bias passed as the layer's arguments).
PASSED_POSITION_BIAS = {"t5": "modeling_t5.T5Stack", "mt5": "modeling_mt5.MT5Stack",
                        "switch_transformers": "modeling_switch_transformers.SwitchTransformersStack"}


def passed_position_bias_bytes(a: Arch, g: Graph, r: Regime) -> int:
    """Bytes per token squared, one for the batch: what checkpointing keeps of a PASSED_POSITION_BIAS stack, whose
    later layers take the biases as inputs, kept until their backward: per stack of two or more layers the bias
    Embedding's [T, T, heads] output in the weights' dtype (the residual stream's), and in a decoder the
    cross-attention's zero bias [1, heads, T, S] in the query's (compute) dtype. Without checkpointing they go with
    their stack's forward. Read off a checkpointed CPU-simulated LoRA step of t5-small (FINDINGS.md F101)."""
    if a.model_type not in PASSED_POSITION_BIAS:
        return 0
    layers = {s: sum(1 for b in g.spec.blocks if b.stack == s) for s in ("encoder", "decoder")}
    return a.heads * (r.residual_bytes * sum(n > 1 for n in layers.values())
                      + (r.compute_bytes if layers["decoder"] > 1 else 0))


# Relative position biases handed to SDPA as a float mask (transformers integrations/sdpa_attention.py
# create_position_bias_mask): every self-attention call makes its own [1, heads, T, T] mask from the stack's bias,
# torch.where with the causal mask in a decoder, .contiguous() of the permuted bias Embedding's output in an encoder,
# and the kernel keeps it for its backward. Cross-attention's zero bias is contiguous already: one, shared.
POSITION_BIAS_SDPA = {"t5": "modeling_t5.T5Attention", "mt5": "modeling_mt5.MT5Attention",
                      "umt5": "modeling_umt5.UMT5Attention"}


def masked_sdpa_terms(a: Arch, b: Block, tokens: int, r: Regime) -> tuple[int, int]:
    """(bytes per token, bytes per token squared) SDPA keeps in one layer when the model hands it a mask instead of
    is_causal (FINDINGS.md F11): a sliding-window layer at tokens >= its window (transformers masking_utils
    ._ignore_causal_mask_sdpa: `local_attention_size is not None and kv_length >= local_attention_size` builds the
    [B, 1, T, T] bool mask). torch's scaled_dot_product_attention converts a bool mask to the query's dtype
    (convert_boolean_attn_mask: where(mask, 0, -inf)), a new [B, 1, T, T] tensor per call that the kernel saves
    for its backward (the CPU flash kernel and CUDA's memory-efficient one, which takes masks); and with a mask
    integrations/sdpa_attention.use_gqa_in_sdpa is False, so GQA's k and v are repeat_kv'd to every head and SDPA
    saves the copies (heads - kv_heads more heads of each) in place of the kv-wide tensors; in every layer where a
    batch is padded (Regime.padded, F72)."""
    active = [(linear, squared) for window, linear, squared in masked_sdpa_windows(a, b, r) if window <= tokens]
    return sum(t[0] for t in active), sum(t[1] for t in active)


def masked_sdpa_windows(a: Arch, b: Block, r: Regime) -> tuple[tuple[int, int, int], ...]:
    """(window, bytes per token, bytes per token squared) of masked_sdpa_terms for each windowed attention part of
    the layer, each applying from tokens >= window on (Profile.total_at moves a profile across that step)."""
    c = r.compute_bytes
    repeated = c * 2 * max(a.heads - a.kv_heads, 0) * a.head_dim
    padded = r.padded and a.model_type not in POSITION_BIAS_SDPA  # padding keeps the mask (_ignore_causal_mask_sdpa)
    windowed = tuple((1 if padded else p.window, repeated, c) for p in b.parts
                     if p.attends and (padded or p.window > 0))
    if padded or a.model_type not in POSITION_BIAS_SDPA:
        return windowed
    # from the first token on, each self-attention's heads x T x T mask, in the compute dtype (autocast's SDPA casts it)
    return windowed + tuple((1, 0, p.heads * c) for p in b.parts if p.attends and p.window == 0)
