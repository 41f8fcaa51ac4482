"""Why a checkpoint's tensor count differs from the graph: known stored-but-not-built tensors.

Checkpoint totals (safetensors metadata) count stored tensors, not model parameters (DESIGN.md
"What is already known"): buffers (rotary inv_freq, GPT-2 attn.bias masks, BERT position_ids,
MoE e_score_correction_bias), untied copies of tied heads, multi-token-prediction layers the
transformers class does not build, BERT's pretraining heads, T5's legacy decoder relative bias,
quantisation scales and packed elements. Some totals are smaller than the model: the count source
left out the 1-D tensors, or the config copy omits a key whose transformers default adds weights the
checkpoint lacks. A gap is explained when a combination of up to three known causes (positive: stored
but not built; negative: built but not counted) equals it (within the scale-layout tolerance for
quantised checkpoints).
"""

from __future__ import annotations

from .config.arch import Arch
from .graph.nodes import Graph
from .graph.parts import Part
from .memory.stored_formats import part_stored_delta

ENCODER_FAMILIES = {"bert", "roberta", "xlm-roberta", "camembert", "data2vec-text", "electra", "ernie", "xmod",
                    "roberta-prelayernorm", "megatron-bert", "roc_bert", "big_bird", "distilbert", "rembert"}


SCORE_BUFFER_FAMILIES = {"deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite", "glm_moe_dsa", "dots1", "sarvam_mla",
                         "sarvam_moe", "solar_open", "axk1", "axk2", "mimo_v2_flash", "longcat_flash", "nemotron_h",
                         "exaone_moe", "hy_v3", "hy_v4", "kimi_linear", "bailing_hybrid"}


# MTP layers a checkpoint stores although config.json declares no count (transformers skips them on load).
MTP_LAYERS_UNDECLARED = {
    "qwen3_next": 1,  # modeling_qwen3_next.Qwen3NextPreTrainedModel: _keys_to_ignore_on_load_unexpected ["^mtp.*"]
    # modeling_mimo_v2_flash.MiMoV2FlashPreTrainedModel._keys_to_ignore_on_load_unexpected = [r"^model\.mtp\."];
    # the MiMo-V2-Flash model card: 3 MTP blocks of about 0.33B, each with sliding-window attention and a
    # dense FFN. The snapshot gap (987,782,528 above the FP8 model) is 2.9999 of such blocks.
    "mimo_v2_flash": 3,
}


# Families whose MTP block is a sliding-window attention layer with a dense FFN, not the last (MoE) layer.
MTP_DENSE_SLIDING = {"mimo_v2_flash"}


def _int(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def combinations(items: list[tuple[str, int]], k: int) -> list[list[tuple[str, int]]]:
    """All k-item subsets in order (itertools is not among the estimator's allowed imports)."""
    if k == 0:
        return [[]]
    return [[x, *rest] for i, x in enumerate(items) for rest in combinations(items[i + 1:], k - 1)]


def _exact(causes: list[tuple[str, int]], gap: int) -> list[tuple[str, int]] | None:
    """The first combination of up to three causes (in combinations' order: fewer first, then in order) whose
    sizes sum to the gap exactly: per cause or pair, the size still missing is looked up among the later causes."""
    sizes = [s for _, s in causes]
    n = len(sizes)
    if gap in sizes:
        return [causes[sizes.index(gap)]]
    for i in range(n):
        if gap - sizes[i] in sizes[i + 1:]:
            return [causes[i], causes[sizes.index(gap - sizes[i], i + 1)]]
    for i in range(n):
        for j in range(i + 1, n):
            need = gap - sizes[i] - sizes[j]
            if need in sizes[j + 1:]:
                return [causes[i], causes[j], causes[sizes.index(need, j + 1)]]
    return None


def _within(causes: list[tuple[str, int]], gap: int, slack: int) -> list[tuple[str, int]] | None:
    """The first combination of up to three causes whose sum is within `slack` of the gap: within the scale
    layout's slack, only causes larger than the slack can explain the gap."""
    for k in (1, 2, 3):
        for combo in combinations(causes, k):
            size = sum(s for _, s in combo)
            if abs(gap - size) <= slack and min(abs(s) for _, s in combo) > slack:
                return combo
    return None


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
        # one id per row of the position table: max_position_embeddings (RoBERTa's sequences take 2 fewer)
        out.append(("the position_ids buffer", _int(a.raw.get("max_position_embeddings")) or a.max_context))
        out.append(("BertForPreTraining's pooler and next-sentence head", h * h + h + 2 * h + 2))
    if a.family in ("t5", "mt5"):
        heads = a.heads
        buckets = _int(a.raw.get("relative_attention_num_buckets")) or 32
        out.append(("a relative_attention_bias of the decoder's first cross-attention saved by older transformers",
                     buckets * heads))
    # MoE layers, counted over the distinct layers (Spec.distinct_layers: a copy's part names differ only in
    # their numbers), and the last of them as the first layer equal to it (Spec.layer_groups)
    moe = {id(b) for b, _ in spec.distinct_layers if any(p.name.startswith("MoE_") for p in b.parts)}
    n_moe = sum(n for b, n in spec.distinct_layers if id(b) in moe)
    if a.experts and a.family in SCORE_BUFFER_FAMILIES:
        out.append(("the routers' e_score_correction_bias buffers", n_moe * a.experts))
    declared = _int(a.raw.get("num_nextn_predict_layers")) or _int(a.raw.get("mtp_num_hidden_layers"))
    n_mtp = declared or MTP_LAYERS_UNDECLARED.get(a.family, 0)
    if n_mtp and spec.blocks:
        # DeepSeek-V3's MTP module (arXiv:2412.19437 §2.2): a decoder layer (the last layer's kind),
        # enorm + hnorm + eh_proj (2 hidden -> hidden) and a final norm; some releases also store their
        # own copies of the embedding and the head.
        groups = spec.layer_groups
        block = next((spec.blocks[k] for k in reversed(groups) if id(spec.blocks[k]) in moe), spec.blocks[groups[-1]])
        last = _mtp_layer(a) or block.params
        if a.quant is not None and a.quant.bits < 16 and a.family not in MTP_DENSE_SLIDING:
            # stored elements: a quantised release stores its MTP layer like the others (packed FP4 experts)
            last += sum(part_stored_delta(a, p)[0] for p in block.parts)
        core = n_mtp * (last + 3 * h + 2 * h * h)
        undeclared = "" if declared else f" ({n_mtp}; config.json declares no count)"
        out.append((f"the multi-token-prediction (MTP) layer(s) transformers does not build{undeclared}", core))
        out.append((f"the multi-token-prediction (MTP) layer(s){undeclared} with their embedding and head copies",
                    core + n_mtp * 2 * a.vocab * h))
        if a.experts and a.family in SCORE_BUFFER_FAMILIES and a.family not in MTP_DENSE_SLIDING:
            out.append(("the MTP layers' e_score_correction_bias buffers", n_mtp * a.experts))
    out += [(name, -size) for name, size in _uncounted(a, g)]
    return out


def _mtp_layer(a: Arch) -> int:
    """One MTP decoder layer where it is not the last layer's kind (0: it is): a sliding-window layer's
    norms and attention with the first dense layer's FFN (MTP_DENSE_SLIDING)."""
    spec = a.spec
    if a.family not in MTP_DENSE_SLIDING:
        return 0
    sliding = next((b for b in spec.blocks if b.kind == "sliding"), None)
    # the first FFN_ part is in the first layer of its kind (Spec.distinct_layers, in forward order)
    ffn = next((p for b, _ in spec.distinct_layers for p in b.parts if p.name.startswith("FFN_")), None)
    if sliding is None or ffn is None:
        return 0
    return sum(p.params for p in sliding.parts if not p.name.startswith("MoE_")) + ffn.params


def _vector_params(a: Arch, g: Graph) -> int:
    """Elements of the 1-D tensors the graph holds (norm weights, biases, attention sinks) and of
    [1, hidden] gates (Qwen2-MoE's shared_expert_gate): a part's parameters outside its weight
    matrices and its router (experts x hidden); parts without listed matrices count none."""
    spec = g.spec
    router = a.experts * a.hidden

    def vectors(parts: tuple[Part, ...]) -> int:
        total = 0
        for p in parts:
            if "Norm" in p.type:
                total += p.params
            elif p.mats or p.linears:  # Part.weight_mats, summed without making it
                weights = sum([c * i * o for c, i, o in p.mats]) if p.mats else sum([i * o for i, o in p.linears])
                total += max(0, p.params - weights - (router if p.name.startswith("MoE_") else 0))
        return total
    # each distinct layer once (Spec.distinct_layers), times the layers it stands for: its copies differ only in
    # their numbers, which leave the MoE_ prefix as it is
    return vectors(spec.embed) + sum(n * vectors(b.parts) for b, n in spec.distinct_layers) + vectors(spec.head)


def _uncounted(a: Arch, g: Graph) -> list[tuple[str, int]]:
    """(cause, scalars) the graph holds but the checkpoint total does not."""
    out: list[tuple[str, int]] = []
    if a.quant is None:
        # Qwen1.5-MoE-A2.7B-Chat: 296,960 = 24 x 3 x 2048 q/k/v biases + 49 x 2048 RMSNorm weights
        # + 24 x 2048 shared_expert_gate rows; Qwen3-30B-A3B-Instruct-2507: 210,944 = 97 x 2048 RMSNorm
        # weights + 48 x 2 x 128 q/k norms. Its sibling Tongyi-DeepResearch-30B-A3B (same shapes, the
        # Hub API's own total) matches the graph exactly, so the source's total skipped these tensors.
        out.append(("every 1-D tensor the model holds (norm weights, biases, [1, hidden] gates), which the "
                    "source's count skipped", _vector_params(a, g)))
    q = a.used().get("q_lora_rank")
    # MLA parts per distinct layer (Spec.distinct_layers, in forward order: the first is the model's first)
    mla = [(p, count) for b, count in g.spec.distinct_layers for p in b.parts if p.type == "Multi-head Latent Attn"]
    if q and str(q["source"]).startswith("default:") and mla and len(mla[0][0].linears) >= 2:
        # modeling_deepseek_v2.DeepseekV2Attention: q_lora_rank set builds q_a_proj, q_a_layernorm and
        # q_b_proj instead of one q_proj; DeepseekV2Config defaults it to 1536, while DeepSeek-V2-Lite
        # publishes q_lora_rank null. A copy of config.json without the key gets the default.
        (hid, rank), (_, n) = mla[0][0].linears[:2]
        bias = rank if (a.used().get("attention_bias") or {}).get("value") else 0
        n_mla = sum(count for _, count in mla)
        if rank == q["value"]:
            out.append((f"the q_a_proj, q_a_layernorm and q_b_proj that transformers' default q_lora_rank ({rank}) "
                        f"adds in {n_mla} layers over one q_proj: this config.json omits the key, the checkpoint "
                        f"has the q_proj (q_lora_rank null)",
                        n_mla * (hid * rank + bias + rank + rank * n - hid * n)))
    return out


def _stores(combo: list[tuple[str, int]]) -> str:
    """'the checkpoint also stores A (n scalars)' and/or 'the checkpoint total is short of B (n scalars)'."""
    extra = [(n, s) for n, s in combo if s > 0]
    lacks = [(n, -s) for n, s in combo if s < 0]
    said = []
    if extra:
        said.append(f"the checkpoint also stores {' and '.join(n for n, _ in extra)} "
                    f"({sum(s for _, s in extra):,} scalars)")
    if lacks:
        who = "its total" if extra else "the checkpoint total"
        said.append(f"{who} is short of {' and '.join(n for n, _ in lacks)} "
                    f"({sum(s for _, s in lacks):,} scalars)")
    return "; ".join(said)


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
        combo = _exact(causes, gap) if slack == 0 else _within(causes, gap, slack)
        if combo is not None:
            return "info", _stores(combo) + f"{scales}."
    if fp8 and abs(gap) <= tolerance and a.quant is not None:
        return "info", (f"the checkpoint stores {a.quant.describes} with their scale tensors; our model of the scales "
                        f"differs by {gap:+,} scalars ({pct:+.3f}%).")
    if a.quant is not None and stored is None and gap < 0:
        return "info", (f"the checkpoint is quantised ({a.quant.describes}); its element count is not the number of "
                        f"weights ({pct:+.2f}%).")
    if a.approximate and gap > 0:
        return "warning", f"the estimate is approximate ({a.approximate}); the checkpoint holds {gap:,} more scalars."
    return "warning", f"unexplained gap of {gap:+,} scalars ({pct:+.2f}% of the checkpoint)."
