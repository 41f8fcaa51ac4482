"""What the ends of the stack keep per token: the embedding side (its dropout's mask, what a frozen embedding
spares the first norm) and the head (the final norm, the logits, a logit soft-cap), and the final norm's backward."""

from __future__ import annotations

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import norm_sums
from ..inputs import Assumptions
from .activations import Regime, mask_bytes, norm_bytes
from .dropouts import embed_dropouts

# The config keys of final-logit soft-capping: gemma2's and its followers' final_logit_softcapping,
# RecurrentGemma's logits_soft_cap (modeling_recurrent_gemma.py applies it unconditionally), xLSTM's
# output_logit_soft_cap.
LOGIT_SOFTCAP_KEYS = ("final_logit_softcapping", "logits_soft_cap", "output_logit_soft_cap")


def head_activation_bytes(a: Arch, g: Graph, r: Regime, s: Assumptions) -> int:
    """Per token after the stack: the final norm (read by the LM head) and `logits_bytes` per logit (F1);
    final-logit soft-capping (gemma2, recurrent_gemma: logits / cap, tanh, x cap) keeps tanh's output for its
    backward."""
    spec = g.spec
    softcap = r.compute_bytes * spec.logits if any(a.raw.get(k) for k in LOGIT_SOFTCAP_KEYS) else 0
    return head_norm_bytes(g, r) + s.logits_bytes * spec.logits + softcap


def head_norm_bytes(g: Graph, r: Regime) -> int:
    """Per token, what the final norm saves (norm_bytes of the head's norms)."""
    rms, stats, read, fed = norm_sums(g.spec.head)
    return norm_bytes(rms, sum(p.norm_width for p in g.spec.head), stats, read, fed, r)


def final_norm_backward_bytes(g: Graph) -> int:
    """Per token, what the final RMSNorm's backward holds beside the saved tensors, once the LM head's backward
    has run and freed the logits and their gradients: five fp32 tensors of its width (the fp32 upcast's gradient
    terms; read off the live tensors of CPU-simulated steps whose small vocabulary leaves this the peak,
    qwen3_5_text and recurrent_gemma, FINDINGS.md F25). 0 where the head has no RMSNorm."""
    return 20 * norm_sums(g.spec.head)[0]


def frozen_embedding_bytes(a: Arch, g: Graph, r: Regime) -> int:
    """Per token, what the charges of the embedding side (embed_dropout_bytes) and of the first layer's input norm
    (block_activation_bytes) hold that a frozen model does not keep: a frozen embedding's output needs no gradient,
    so neither the embedding dropout's mask nor the norm reading it (a frozen weight) is recorded by autograd
    (FINDINGS.md F10). Not so when a Linear of the embedding side (a projection, a vision tower's) carries an
    adapter, or the weights train; callers leave it in when enable_input_require_grads runs (gradient
    checkpointing, prepare_model_for_kbit_training)."""
    spec = g.spec
    if r.trained or not spec.blocks or spec.image_tokens or any(p.linears or p.matmul for p in spec.embed):
        return 0
    first = spec.blocks[0].parts[:1]
    out = embed_dropout_bytes(a, g, r)
    if first and first[0].norm_width:
        rms, stats, read, fed = norm_sums(first)
        out += norm_bytes(rms, first[0].norm_width, stats, read, fed, r)
    return out


def embed_dropout_bytes(a: Arch, g: Graph, r: Regime) -> int:
    """Per token: the masks of the dropouts outside the layers (dropouts.DROPOUTS), on the embedding output
    (residual dtype)."""
    embed = embed_dropouts(a) if r.dropout else 0
    return embed * g.spec.hidden * mask_bytes(r, r.residual_bytes)
