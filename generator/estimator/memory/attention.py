"""Which attention a job runs and what eager attention keeps: the default per model class (transformers'
`_supports_sdpa`, sdpa_table.py) or custom code, and the bytes per attention score."""

from __future__ import annotations

from ..config.arch import Arch
from ..config.transformers_defaults import CLASS_DEFAULTS
from ..graph.nodes import Graph
from .activations import DIFFERENTIAL_ATTENTION, Regime
from .sdpa_table import NO_SDPA

# Custom modeling code (auto_map) known to call torch's SDPA: THUDM/chatglm3-6b modeling_chatglm.py CoreAttention
# (torch.nn.functional.scaled_dot_product_attention on torch >= 2). Other custom code is priced as keeping its
# attention scores (eager): the worst measured misses were custom code at long sequences (issue 13).
CUSTOM_SDPA = frozenset({"chatglm"})

# Eager attention written out in the model's own class that masks by adding the mask and clamping at the dtype's
# minimum (torch.max(scores + mask, finfo.min), whose backward keeps the masked scores), then softmax in the
# scores' dtype with no dtype=float32 (FINDINGS.md F9).
CLAMPED_SCORES = {"xglm": "modeling_xglm.XGLMAttention"}


def default_attention(a: Arch) -> tuple[str, str]:
    """(the attention a job runs when none is asked, why). transformers picks SDPA only for classes with
    `_supports_sdpa` (sdpa_table.NO_SDPA, generated from transformers 5.24); a model_type transformers does not
    ship runs its own code (auto_map), priced as keeping its scores unless it is known to call SDPA."""
    if a.model_type in NO_SDPA:
        return "eager", (f"transformers' {NO_SDPA[a.model_type]} has no SDPA path (_supports_sdpa is False): it "
                         "runs eager attention by default, which keeps every layer's attention scores")
    if a.custom_code and a.model_type not in CLASS_DEFAULTS and a.model_type not in CUSTOM_SDPA:
        return "eager", ("custom modeling code (auto_map) whose attention was not read: priced as keeping its "
                         "attention scores (eager), the common case for repository code")
    return "sdpa", ""


def score_bytes(a: Arch, c: int, r: Regime | None = None) -> int:
    """Bytes per attention-score element eager attention keeps (transformers' eager_attention_forward):
    softmax(QK^T, dtype=float32) (fp32, saved by softmax) and its cast to the query dtype (saved by the AV
    matmul); dropout 0 keeps no mask. Gemma-2's logit soft-capping adds tanh's saved output
    (modeling_gemma2.eager_attention_forward). CLAMPED_SCORES in a training step (`r`): the masked scores, in
    the mask's dtype (the weights': fp32 under full AMP) when wider than the bf16 QK^T, kept by torch.max; their
    softmax (fp32 under CUDA autocast, which lists softmax among its fp32 ops; CPU autocast does not), and its cast
    to the compute dtype for the AV bmm when it differs."""
    if r is not None and a.model_type in CLAMPED_SCORES:
        masked = max(c, r.residual_bytes)
        soft = 4 if r.amp and not r.cpu else masked
        return masked + soft + (c if soft != c else 0)
    return 4 + c + (c if a.raw.get("attn_logit_softcapping") else 0)


def eager_scores_bytes(a: Arch, g: Graph, tokens: int, c: int, one_layer: bool = False) -> int:
    """Per sequence: heads x T x T score elements per attention layer (every layer's, or the largest one's when
    only one layer's tensors live: checkpointing's recomputation, serving)."""
    spec = g.spec
    heads = [p.act32 for b in spec.blocks for p in b.parts if p.attn_flops and not p.type.startswith("MoE")]
    return (max(heads, default=0) if one_layer else sum(heads)) * tokens * tokens * score_bytes(a, c)


def eager_layer_terms(a: Arch, b, compute_bytes: int, trained: bool, r: Regime | None = None) -> tuple[int, int]:
    """(bytes per token, bytes per token squared) eager attention adds to one layer's SDPA activations
    (transformers' eager_attention_forward): its matmuls save q and the heads-wide repeat_kv copies of k and v in
    place of SDPA's q, k, v; its output is saved by o_proj when that trains (SDPA saved it itself); no fp32 LSE;
    and heads x T x T scores of score_bytes each (twice for differential attention: two calls, each its own)."""
    attention = [p for p in b.parts if p.attn_flops and not p.type.startswith("MoE")]
    if not attention:
        return 0, 0
    c = compute_bytes
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    delta = c * ((2 if trained else 1) * q - 2 * kv) - 4 * a.heads
    calls = 2 if a.model_type in DIFFERENTIAL_ATTENTION else 1
    return len(attention) * delta, calls * sum(p.act32 for p in attention) * score_bytes(a, c, r)
