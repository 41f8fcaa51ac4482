"""Gemma 1-4, Gemma-3n and RecurrentGemma (Griffin), from transformers 5.24 modeling_gemma*.py / modeling_recurrent_gemma.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.layout import standard_block
from ..graph.parts import (
    Part,
    attention_part,
    linear,
    lm_head_part,
    mlp_part,
    norm_part,
    shared_kv_attention_part,
)
from .assembly import Builder, assemble
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule, attention, build, mlp
from .decoder import Dims as _D
from .tower_inference import inference_elements
from .tower_linears import layer_count, tower_linears
from .vision_language import attach, retie, vision_memory
from .vision_towers import GEMMA4_SOFT_TOKENS, vision_tower


def _overrides(d: Dims) -> dict[int, dict[str, int]]:
    per = d.r.cfg.get("per_layer_config")
    types = d.r.list("layer_types") or ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(d.layers)]
    types = list(types[:d.layers])
    if types:
        types[-1] = "full_attention"  # configuration_gemma4.py forces the last layer global
    if per is None:
        over: dict[str, int] = {"head_dim": d.k("global_head_dim", 512)}
        kv = d.r.opt_int("num_global_key_value_heads")
        if kv is not None and d.f("attention_k_eq_v", True):
            over["num_key_value_heads"] = kv
        return {i: over for i, t in enumerate(types) if t == "full_attention"}
    if not isinstance(per, Mapping):
        raise ConfigError(d.r.model, "per_layer_config", per, "must map layer indices to overrides")
    out: dict[int, dict[str, int]] = {}
    for k, v in per.items():
        if not (isinstance(k, str) and k.isdigit() or isinstance(k, int)) or not isinstance(v, Mapping):
            raise ConfigError(d.r.model, "per_layer_config", per, "must map layer indices to overrides")
        out[int(k)] = {key: val for key, val in v.items() if isinstance(val, int) and not isinstance(val, bool)}
    return out


def _shared(d: Dims, i: int) -> bool:
    return i >= d.layers - d.k("num_kv_shared_layers", 0, minimum=0)


def _attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    i = n - 1
    over = _overrides(d).get(i, {})
    hd, kv = over.get("head_dim", d.hd), over.get("num_key_value_heads", d.kv)
    if _shared(d, i):  # reuses an earlier layer's K/V: q_proj, q_norm, o_proj only, no cache
        p = shared_kv_attention_part(f"Attention_{n}", d.hidden, d.heads, hd, bias=d.f("attention_bias"), extra=hd,
                                     window=window)
        return _head_norms(p, d.heads, 0, hd)
    k_eq_v = d.f("attention_k_eq_v", False) and not window
    p = attention(t, d, n, window, kv=kv, hd=hd, extra=2 * hd)  # q_norm, k_norm (v_norm has no scale)
    # No v_proj: k_proj's output is the values too, but normed apart (v_norm, no RoPE), so the cache keeps keys and
    # values as two tensors (Gemma4TextAttention.forward's cache.update; vLLM's Gemma4Attention a plain Attention)
    if k_eq_v:
        p = p._replace(params=p.params - d.hidden * kv * hd, matmul=p.matmul - d.hidden * kv * hd,
                       linears=tuple(x for j, x in enumerate(p.linears) if j != 2))
    return _head_norms(p, d.heads, kv, hd)


def _head_norms(p: Part, heads: int, kv: int, hd: int) -> Part:
    """Gemma4TextAttention's (and Gemma3nTextAttention's) per-head RMSNorms: q_norm on q, k_norm on k and v_norm
    (no scale) on v, the values (the keys again where attention_k_eq_v), the last two only where the layer makes its
    own K/V. Each saves its fp32 input and two fp32 statistics per head (the mean square plus eps, and its -0.5 power,
    Gemma4RMSNorm); where the weights train, q_norm's and k_norm's fp32 normalised outputs too (4 B: act at 2 B,
    twice). Read off the live tensors of CPU-simulated gemma-4 and gemma-3n steps (FINDINGS.md F40, F41)."""
    q, k = heads * hd, kv * hd
    return p._replace(act32=p.act32 + q + 2 * k + 2 * (heads + 2 * kv), act=p.act + 2 * (q + k),
                      act_frozen=p.frozen_act)


def _ple(d: Dims) -> int:
    w = d.k("hidden_size_per_layer_input", 0, minimum=0)
    if not w:
        return 0
    return d.k("vocab_size_per_layer_input", d.vocab) * d.layers * w + d.hidden * d.layers * w + w


def _layer_ple(d: Dims) -> int:
    w = d.k("hidden_size_per_layer_input", 0, minimum=0)
    return 2 * d.hidden * w + d.hidden if w else 0


def _mlp_width(d: Dims, i: int) -> int:
    return d.inter * (2 if d.f("use_double_wide_mlp", False) and _shared(d, i) else 1)


def gemma4_text(cfg: Mapping[str, Any], model: str, mt: str) -> Arch:
    # the router's scale and per_expert_scale; the block's other norms are parts of their own (_moe_norms)
    moe = ExpertTraits(top_k="top_k_experts", shared=lambda d: d.inter, extra=lambda d: d.hidden + d.k("num_experts"))
    t = DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qk_norm=None, tie=True, attn=_attention,
          qkv_bias="attention_bias", o_bias="attention_bias",
          top_extra=_ple, layer_extra=_layer_ple, moe=moe,
          ffn=lambda d, i: "moe" if d.f("enable_moe_block", False) else "dense")
    arch = build(cfg, model, mt, t)
    spec = arch.spec
    # use_double_wide_mlp doubles the MLP of KV-shared layers: rebuild those FFN parts at double width.
    d = _D(Reader(cfg, model, mt), t)
    blocks = []
    for b in spec.blocks:
        width = _mlp_width(d, b.index - 1)
        if width != d.inter:
            b = dataclasses.replace(b, parts=tuple(mlp(t, d, b.index, width) if p.name == f"FFN_{b.index}" else p
                                                   for p in b.parts))
        if any(p.type.startswith("MoE") for p in b.parts):
            b = dataclasses.replace(b, parts=_moe_norms(b.parts, b.index, d.hidden))
        blocks.append(b)
    return dataclasses.replace(arch, spec=dataclasses.replace(spec, blocks=tuple(blocks)))


def _moe_norms(parts: tuple[Part, ...], n: int, h: int) -> tuple[Part, ...]:
    """Gemma4TextDecoderLayer with enable_moe_block: beside the dense MLP's post_feedforward_layernorm_1, the
    router's norm (no scale) and pre_feedforward_layernorm_2 read the residual, post_feedforward_layernorm_2 the
    experts' output, before the shared post_feedforward_layernorm: four more RMSNorms of hidden width, each saving
    its fp32 input (norm_bytes). After the MoE part, so no Linear counts as their reader."""
    norms = (norm_part(f"RMSNorm_{n}_5", "rmsnorm", h), Part(f"RMSNorm_{n}_6", "RMSNorm", 0, norm_width=h),
             norm_part(f"RMSNorm_{n}_7", "rmsnorm", h), norm_part(f"RMSNorm_{n}_8", "rmsnorm", h))
    k = next(i for i, p in enumerate(parts) if p.type.startswith("MoE")) + 1
    return parts[:k] + norms + parts[k:]


def _text(cfg: Mapping[str, Any], model: str) -> Arch:
    return gemma4_text(cfg, model, str(cfg.get("model_type")))


def gemma4(cfg: Mapping[str, Any], model: str) -> Arch:
    """The multimodal wrappers (modeling_gemma4.Gemma4ForConditionalGeneration): the text tower (text_config), the
    vision tower (Gemma4VisionModel, vision_towers.gemma4_vision) and its embedder (Gemma4MultimodalEmbedder: a
    bias-free Linear of the tower's width to the text width after an RMSNorm without scale). An image adds
    vision_soft_tokens_per_image tokens (the processor's 280 where the file does not say). The audio tower and
    gemma4_unified's vision tower are not counted yet (known_gaps.py)."""
    mt = str(cfg.get("model_type"))
    text = cfg.get("text_config") or {}
    if not isinstance(text, Mapping):
        raise ConfigError(model, "text_config", text, "must be a JSON object")
    inner = "gemma4_text" if mt == "gemma4" else "gemma4_unified_text"
    arch = gemma4_text(dict(text, model_type=inner), model, inner)
    r = Reader(cfg, model, mt)
    tie = r.flag("tie_word_embeddings", arch.tie)
    vc = cfg.get("vision_config")
    if mt == "gemma4" and vc:
        if not isinstance(vc, Mapping):
            raise ConfigError(model, "vision_config", vc, "must be a JSON object")
        tower, patches, vh, per_patch = vision_tower(vc, r, "gemma4_vision")
        soft = r.int("vision_soft_tokens_per_image", GEMMA4_SOFT_TOKENS)
        patches = soft * (patches // GEMMA4_SOFT_TOKENS)
        embedder = Part("Projector", "Gemma4MultimodalEmbedder (norm, Linear)", vh * arch.spec.hidden,
                        matmul=vh * arch.spec.hidden)
        linears = tower_linears(mt, r, vc, "gemma4_vision", (vh, arch.spec.hidden), (patches, soft))
        act, _ = vision_memory(tower, patches, vh, per_patch, layer_count(linears))
        transient, pixels = inference_elements(r.child(vc, "gemma4_vision", prefix="vision_config."),
                                               "gemma4_vision", patches, vh) or (0, 0)
        arch = attach(arch, cfg, r, (tower, embedder), tokens=soft, act=act, transient=transient, tie=tie,
                      linears=linears, pixels=pixels)
    else:
        arch = retie(arch, tie)
    towers = [k for k in ("audio_config",) + (("vision_config",) if mt != "gemma4" else ()) if cfg.get(k)]
    why = f"its {' and '.join(towers)} tower(s) are not counted" if towers else None
    return dataclasses.replace(arch, model_type=mt, family=mt, approximate=why, text_tower_only=bool(towers),
                               architectures=architectures_of(cfg, model))


# the text tower each assistant's config builds (sub_configs_defaults in configuration_gemma4_*assistant.py)
_ASSISTANT = {"gemma4_assistant": "gemma4_text", "gemma4_unified_assistant": "gemma4_unified_text"}


def gemma4_assistant(cfg: Mapping[str, Any], model: str) -> Arch:
    """The MTP drafters (modeling_gemma4_assistant.Gemma4AssistantForCausalLM): a text tower whose every
    layer reuses the target's K/V (num_kv_shared_layers defaults to num_hidden_layers), a tied lm_head,
    pre_projection (2 x backbone_hidden_size -> hidden: the target's embedding and last hidden state) and
    post_projection (hidden -> backbone_hidden_size); use_ordered_embeddings adds a centroids Linear
    (hidden -> num_centroids)."""
    mt = str(cfg.get("model_type"))
    inner = _ASSISTANT[mt]
    text = cfg.get("text_config") or {}
    if not isinstance(text, Mapping):
        raise ConfigError(model, "text_config", text, "must be a JSON object")
    text = dict(text, model_type=inner)
    if not text.get("num_kv_shared_layers"):
        text["num_kv_shared_layers"] = Reader(text, model, inner).int("num_hidden_layers")
    arch = gemma4_text(text, model, inner)
    r = Reader(cfg, model, mt)
    arch = retie(arch, r.flag("tie_word_embeddings", True))
    spec = arch.spec
    h, back = spec.hidden, r.int("backbone_hidden_size")
    pre = Part("Pre_Projection", "Linear", 2 * back * h, matmul=2 * back * h, linears=((2 * back, h),),
               act=2 * back, transient=2 * back + h)
    post = [Part("Post_Projection", "Linear", h * back, width=back, matmul=h * back, linears=((h, back),), act=h,
                 transient=h + back)]
    if r.flag("use_ordered_embeddings", False):
        c = r.int("num_centroids")
        post.append(Part("Centroids", "Linear", h * c, width=c, matmul=h * c, linears=((h, c),), act=h, transient=c))
    spec = dataclasses.replace(spec, embed=(*spec.embed, pre), head=(*spec.head[:-1], *post, spec.head[-1]))
    return dataclasses.replace(arch, model_type=mt, family=mt, spec=spec, architectures=architectures_of(cfg, model))


def gemma3n_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_gemma3n.Gemma3nTextModel. Per layer: four RMSNorms; attention with q_norm, and k/v projections
    plus k_norm only on the first num_hidden_layers - num_kv_shared_layers layers (the rest reuse their K/V:
    no projections, no cache); a GeGLU MLP of intermediate_size[i]; AltUp (correct_output_scale, router norm,
    modality_router hidden -> n, correction n x n and prediction n x n^2 coefficients, n = altup_num_inputs);
    LAuReL (hidden -> laurel_rank -> hidden, norm); the per-layer input gate and projection (hidden <->
    hidden_size_per_layer_input, norm). Outside: the per-layer embedding table (vocab_size_per_layer_input x
    layers x width), its projection from hidden and norm, n - 1 AltUp projections and as many unembedding ones."""
    r = Reader(cfg, model, "gemma3n_text")
    h, n, heads, kv, hd = (r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads"),
                           r.int("num_key_value_heads"), r.int("head_dim"))
    vocab, ple, alt, rank = (r.int("vocab_size"), r.int("hidden_size_per_layer_input"), r.int("altup_num_inputs"),
                             r.int("laurel_rank"))
    inter = r.list("intermediate_size", int, n) if isinstance(cfg.get("intermediate_size"), list) else \
        [r.int("intermediate_size")] * n
    shared_from = n - r.int("num_kv_shared_layers", minimum=0)
    types = r.list("layer_types", length=n) or ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                                                for i in range(n)]
    window = r.int("sliding_window", minimum=0)
    windows = tuple(window if "sliding" in str(t) else 0 for t in types[:n])
    # configuration_gemma3n.py: where the config gives none, the first 10 layers are sparse (0.95) if there are more
    sparsity = r.list("activation_sparsity_pattern", float, n) if cfg.get("activation_sparsity_pattern") is not None \
        else [0.95] * (10 if n > 10 else 0) + [0.0] * (n if n <= 10 else n - 10)
    bias = r.flag("attention_bias")
    blocks = []
    for i in range(1, n + 1):
        w = windows[i - 1]
        if i - 1 >= shared_from:  # reuses an earlier layer's K/V (kv_sharing_modes "reuse")
            attn = _head_norms(shared_kv_attention_part(f"Attention_{i}", h, heads, hd, bias=bias, extra=hd, window=w),
                               heads, 0, hd)
        else:
            attn = _head_norms(attention_part(f"Attention_{i}", "Grouped Query Attn", h, heads, kv, hd, qkv_bias=bias,
                                              o_bias=bias, extra=2 * hd, window=w), heads, kv, hd)
        ffn = mlp_part(f"FFN_{i}", "GeGLU", h, inter[i - 1], True)
        if sparsity[i - 1] > 0:  # Gemma3nTextMLP._gaussian_topk: relu(gate - cutoff) saved beside the gate's output
            ffn = ffn._replace(act=ffn.act + inter[i - 1], act_frozen=ffn.frozen_act + inter[i - 1])
        block = standard_block(i, [], attn, ffn, "rmsnorm", h, norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
                               kind="sliding" if w else "attention")
        coefs = h * alt + alt * alt + alt ** 3  # modality_router, correction_coefs, prediction_coefs
        # AltUp's predict saves the layer's alt stacked inputs (its matmul's operand), correct the repeated
        # innovation (its mul's): 2 x alt streams, in the residual stream's dtype, so fp32 (twice act's 2 B) in an
        # AMP full fine-tune, which also keeps the router's inputs and the scaled output's clone (FINDINGS.md F41);
        # there the input norm's fp32 input is a view of predict's fp32 output (x.float() makes no copy), so the
        # other alt - 1 predictions stay with it (F102)
        extras = (Part(f"AltUp_{i}", "AltUp", 2 * h + coefs, matmul=coefs,
                       linears=((h, alt), (alt, alt), (alt, alt * alt)), act=4 * alt * h + 3 * h + 2 * (alt - 1) * h,
                       act_frozen=2 * alt * h),
                  Part(f"LAuReL_{i}", "LAuReL", 2 * h * rank + h, matmul=2 * h * rank, linears=((h, rank), (rank, h))),
                  Part(f"Per_Layer_Input_{i}", "Per-layer input", 2 * h * ple + h, matmul=2 * h * ple,
                       linears=((h, ple), (ple, h))),
                  # the norms whose scales the three rows above hold: AltUp's router norm, run by predict and by
                  # correct, LAuReL's post norm and the per-layer input's; each saves its fp32 input (norm_bytes)
                  *(Part(f"{name}_{i}", "RMSNorm", 0, norm_width=h) for name in (
                      "AltUp_Router_Norm_Predict", "AltUp_Router_Norm_Correct", "LAuReL_Norm", "Per_Layer_Input_Norm")))
        blocks.append(dataclasses.replace(block, parts=(*block.parts, *extras)))
    tie = r.flag("tie_word_embeddings", True)
    table = r.int("vocab_size_per_layer_input") * n * ple
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE"),
             Part("Per_Layer_Embedding", "Embedding", table, width=n * ple),
             Part("Per_Layer_Projection", "Linear", h * n * ple + ple, width=n * ple, matmul=h * n * ple,
                  linears=((h, n * ple),)),
             Part("AltUp_Projections", "Linear", (alt - 1) * h * h, matmul=(alt - 1) * h * h,
                  linears=((h, h),) * (alt - 1))]
    head = [Part("AltUp_Unembed_Projections", "Linear", (alt - 1) * h * h, matmul=(alt - 1) * h * h,
                 linears=((h, h),) * (alt - 1)),
            norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=kv, head_dim=hd, inter=max(inter),
                    vocab=vocab, ctx=r.int("max_position_embeddings"), tie=tie, embed=embed, blocks=blocks, head=head,
                    windows=windows, streams=alt)


# --- RecurrentGemma (modeling_recurrent_gemma.py, Griffin: De et al. 2024, arXiv:2402.19427): block_types
# cycle over "recurrent" (RG-LRU) and "attention" (local, attention_window_size) temporal blocks.
def _rglru(d: Dims, n: int) -> Part:
    r = d.r
    h, lru, k = d.hidden, r.int("lru_width", d.hidden), r.int("conv1d_width", 4)
    bs = lru // d.heads
    params = 2 * linear(h, lru, True) + linear(lru, h, True) + lru * k + lru + lru + 2 * (d.heads * bs * bs + d.heads * bs)
    lin = ((h, lru), (h, lru), (lru, h))
    return Part(f"RG_LRU_{n}", "Recurrent (RG-LRU)", params, matmul=3 * h * lru, linears=lin, act=8 * lru,
                transient=4 * lru, state=lru * k + lru, scan=(5, lru))


def _griffin_types(d: Dims) -> list[str]:
    types = d.r.list("block_types") or ["recurrent", "recurrent", "attention"]
    return [types[i % len(types)] for i in range(d.layers)]


def _griffin_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    p = attention(t, d, n, d.k("attention_window_size", 2048))
    return p._replace(params=p.params + d.hidden)  # o_proj has a bias, q/k/v do not


def recurrent_gemma(cfg: Mapping[str, Any], model: str) -> Arch:
    r = Reader(cfg, model, "recurrent_gemma")
    inter = r.int("intermediate_size") // 2  # modeling_recurrent_gemma.py: MLP width intermediate_size // 2
    return build(dict(cfg, intermediate_size=inter), model, "recurrent_gemma", RECURRENT_GEMMA)

RECURRENT_GEMMA = DecoderTraits(tie=True, mlp_bias=True, qkv_bias="attention_bias", attn=_griffin_attention,
                              mixer=StackRule(lambda d: ["rglru" if t == "recurrent" else "attention"
                                                           for t in _griffin_types(d)]),
                              mixers={"rglru": _rglru})

BUILDERS: dict[str, Builder] = {
    "recurrent_gemma": recurrent_gemma,
    "gemma4_text": _text,
    "gemma4_unified_text": _text,
    "gemma4": gemma4,
    "gemma4_unified": gemma4,
    "gemma4_assistant": gemma4_assistant,
    "gemma4_unified_assistant": gemma4_assistant,
    "gemma3n_text": gemma3n_text,
}


TRAITS: dict[str, DecoderTraits] = {
    "gemma": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", tie=True, act_default="gelu_pytorch_tanh"),
    "gemma2": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias",
                o_bias="attention_bias", tie=True, act_default="gelu_pytorch_tanh"),
    "gemma3_text": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias",
                     o_bias="attention_bias", qk_norm="head", tie=True, act_default="gelu_pytorch_tanh"),
}
