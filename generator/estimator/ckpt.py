"""Why a checkpoint's tensor count differs from the graph: known stored-but-not-built tensors.

Checkpoint totals (safetensors metadata) count stored tensors, not model parameters (DESIGN.md
"What is already known"): buffers (rotary inv_freq, GPT-2 attn.bias masks, BERT position_ids,
MoE e_score_correction_bias), untied copies of tied heads, multi-token-prediction layers the
transformers class does not build, BERT's pretraining heads, T5's legacy decoder relative bias,
quantisation scales and packed elements. A gap is explained when a combination of up to three
known causes equals it (within the scale-layout tolerance for quantised checkpoints).
"""

from __future__ import annotations

from .arch import Arch
from .graph import Graph

ENCODER_FAMILIES = {"bert", "roberta", "xlm-roberta", "camembert", "data2vec-text", "electra", "ernie", "xmod",
                    "roberta-prelayernorm", "megatron-bert", "roc_bert", "big_bird", "distilbert", "rembert"}
SCORE_BUFFER_FAMILIES = {"deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite", "glm_moe_dsa", "dots1", "sarvam_mla",
                         "sarvam_moe", "solar_open", "axk1", "axk2", "mimo_v2_flash", "longcat_flash", "nemotron_h",
                         "exaone_moe", "hy_v3", "kimi_linear", "bailing_hybrid"}


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def combinations(items: list[tuple[str, int]], k: int) -> list[list[tuple[str, int]]]:
    """All k-item subsets in order (itertools is not among the estimator's allowed imports)."""
    if k == 0:
        return [[]]
    return [[x, *rest] for i, x in enumerate(items) for rest in combinations(items[i + 1:], k - 1)]


def gap_causes(a: Arch, g: Graph) -> list[tuple[str, int]]:
    """(cause, scalars) candidates for this model."""
    spec = g.spec
    h = a.hidden
    out: list[tuple[str, int]] = []
    if a.tie:
        out.append(("an untied copy of the tied lm_head", a.vocab * (a.embed_dim or h)))
    rot = a.rotary_dims or (a.head_dim if a.position == "rope" else 0)
    if rot:
        out.append(("rotary inv_freq buffers saved per layer", a.layers * (rot // 2)))
    if a.family == "gpt2":
        out.append(("causal-mask attn.bias buffers", a.layers * a.max_context * a.max_context))
    if a.family in ENCODER_FAMILIES:
        out.append(("the position_ids buffer", a.max_context))
        out.append(("BertForPreTraining's pooler and next-sentence head", h * h + h + 2 * h + 2))
    if a.family in ("t5", "mt5"):
        heads = a.heads
        buckets = _int(a.raw.get("relative_attention_num_buckets")) or 32
        out.append(("a relative_attention_bias of the decoder's first cross-attention saved by older transformers",
                     buckets * heads))
    moe_blocks = [b for b in spec.blocks if any(p.name.startswith("MoE_") for p in b.parts)] if spec else []
    if a.experts and a.family in SCORE_BUFFER_FAMILIES:
        out.append(("the routers' e_score_correction_bias buffers", len(moe_blocks) * a.experts))
    n_mtp = _int(a.raw.get("num_nextn_predict_layers")) or _int(a.raw.get("mtp_num_hidden_layers")) or \
        (1 if a.family == "qwen3_next" else 0)
    if n_mtp and spec is not None and spec.blocks:
        # DeepSeek-V3's MTP module (arXiv:2412.19437 §2.2): a decoder layer (the last layer's kind),
        # enorm + hnorm + eh_proj (2 hidden -> hidden) and a final norm; some releases also store their
        # own copies of the embedding and the head.
        last = (moe_blocks or list(spec.blocks))[-1].params
        core = n_mtp * (last + 3 * h + 2 * h * h)
        out.append(("the multi-token-prediction (MTP) layer(s) transformers does not build", core))
        out.append(("the multi-token-prediction (MTP) layer(s) with their embedding and head copies",
                    core + n_mtp * 2 * a.vocab * h))
        if a.experts and a.family in SCORE_BUFFER_FAMILIES:
            out.append(("the MTP layers' e_score_correction_bias buffers", n_mtp * a.experts))
    return out


def explain(a: Arch, g: Graph, checkpoint: int, stored: int | None) -> tuple[str, str]:
    """Severity and message for graph != checkpoint."""
    base = stored if stored is not None else g.params_total
    gap = checkpoint - base
    if a.text_tower_only and gap > 0:
        return "warning", (f"the checkpoint also holds the parts outside the text tower (vision tower, projector; "
                           f"{gap:,} scalars), which this estimate does not count.")
    causes = [c for c in gap_causes(a, g) if c[1]]
    fp8 = a.quant is not None and stored is not None and a.quant.method in ("fp8", "compressed-tensors")
    tolerance = int(0.0005 * checkpoint) if fp8 else 0
    pct = 100.0 * gap / max(checkpoint, 1)
    scales = f" besides {a.quant.describes} with their scale tensors" if fp8 and a.quant else ""
    for slack in (0, tolerance) if tolerance else (0,):
        for k in (1, 2, 3):
            for combo in combinations(causes, k):
                size = sum(s for _, s in combo)
                # within the scale-layout slack, only causes larger than the slack can explain the gap
                if abs(gap - size) <= slack and (slack == 0 or min(s for _, s in combo) > slack):
                    names = " and ".join(n for n, _ in combo)
                    return "info", f"the checkpoint also stores {names} ({size:,} scalars){scales}."
    if fp8 and abs(gap) <= tolerance and a.quant is not None:
        return "info", (f"the checkpoint stores {a.quant.describes} with their scale tensors; our model of the scales "
                        f"differs by {gap:+,} scalars ({pct:+.3f}%).")
    if a.quant is not None and stored is None and gap < 0:
        return "info", (f"the checkpoint is quantised ({a.quant.describes}); its element count is not the number of "
                        f"weights ({pct:+.2f}%).")
    if a.approximate and gap > 0:
        return "warning", f"the estimate is approximate ({a.approximate}); the checkpoint holds {gap:,} more scalars."
    return "warning", f"unexplained gap of {gap:+,} scalars ({pct:+.2f}% of the checkpoint)."
