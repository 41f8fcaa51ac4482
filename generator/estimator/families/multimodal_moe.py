"""Text towers of multimodal mixture-of-experts models (Step-3.7, Mistral Large 4, ...): traits per model_type.

Each read from transformers 5.24's modeling_<type>.py; the wrappers around them are vision_language's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .assembly import Builder
from .decoder import DecoderTraits, Dims, ExpertTraits, attention, build
from .every_expert_moe import rope_layers
from .mixture_of_experts import first_k_dense, from_layer, sparse_by_types


def _step3p5_sparse(d: Dims) -> list[bool]:
    # configuration_step3p7.Step3p7TextConfig.__post_init__: the legacy moe_layers_enum (indices, a list or a
    # comma-separated string) names the MoE layers, else every layer from index 3 on.
    legacy = d.r.cfg.get("moe_layers_enum")
    if legacy is not None:
        items = legacy.split(",") if isinstance(legacy, str) else legacy if isinstance(legacy, list) else []
        named = {int(x) for x in items if str(x).strip()}
        return [i in named for i in range(d.layers)]
    return [i >= 3 for i in range(d.layers)]


def _step3p5_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_step3p7.Step3p7Attention: "sliding_attention" layers take num_sliding_attention_heads (the
    # per_layer_config override); g_proj hidden -> heads (per-head gating); q/k RMSNorm of head_dim.
    types = d.r.list("layer_types", str)
    sliding = bool(types) and len(types) >= n and types[n - 1] == "sliding_attention"
    heads = d.k("num_sliding_attention_heads", d.heads) if sliding else d.heads
    return attention(t, d, n, window, heads=heads, extra=d.hidden * heads)


def _mistral_large4_indexer_types(d: Dims) -> list[str]:
    # configuration_mistral_large4.MistralLarge4TextConfig.__post_init__: index_topk_pattern ("F"/"S" per layer),
    # else "full" where max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0.
    r = d.r
    given = r.list("indexer_types", str, length=d.layers)
    if given is not None:
        return list(given)
    pattern = r.cfg.get("index_topk_pattern")
    if isinstance(pattern, str):
        return ["full" if c == "F" else "shared" for c in pattern]
    freq, offset = max(r.int("index_topk_freq", 1), 1), r.int("index_skip_topk_offset", 2, minimum=0)
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(d.layers)]


def _mistral_large4_attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    """modeling_mistral_large4.MistralLarge4TextAttention: MLA without a query LoRA (q_proj hidden -> heads x
    (nope + rope)); kv_a_proj_with_mqa (hidden -> kv_lora_rank + rope) and its RMSNorm unless the layer reads an
    earlier layer's latent KV (kv_source_layers); on NoPE layers (no_rope_layers 0, every 4th by default) the rope
    slice joins the nope part of kv_b_proj; o_proj; a softmax scaling (scale and bias per head); on indexer "full"
    layers the DSA indexer (MistralLarge4TextIndexer: wq_b and weights_proj from hidden, wk, k_norm and
    q_input_norm LayerNorms, its own softmax scaling)."""
    r, h, heads, i = d.r, d.hidden, d.heads, n - 1
    rope, nope, v, rank = r.int("qk_rope_head_dim"), r.int("qk_nope_head_dim", minimum=0), r.int("v_head_dim"), \
        r.int("kv_lora_rank")
    uses_rope = rope_layers(d)
    sources = r.list("kv_source_layers", int) or list(range(d.layers))
    rk = rope if uses_rope[i] else 0
    bias = d.f("attention_bias")
    lin = [(h, heads * (nope + rope)), (rank, heads * (nope + rope - rk + v)), (heads * v, h)]
    params = linear(h, heads * (nope + rope)) + linear(rank, heads * (nope + rope - rk + v)) \
        + linear(heads * v, h, bias) + 2 * heads
    own = sources[i] == i
    if own:
        params += linear(h, rank + rk, bias) + rank
        lin.append((h, rank + rk))
    if _mistral_large4_indexer_types(d)[i] == "full":
        ih, idim = r.int("index_n_heads"), r.int("index_head_dim")
        params += linear(h, ih * idim) + linear(h, idim) + 2 * idim + linear(h, ih) + 2 * h + 2 * ih
    q_all, kv_all = heads * (nope + rope), heads * (nope + rope - rk + v)
    return Part(f"Attention_{n}", "Multi-head Latent Attn", params, matmul=sum(a * b for a, b in lin),
                linears=tuple(lin), act=rank + rk + 3 * q_all + kv_all + 2 * heads * v, act32=heads,
                transient=q_all + kv_all + heads * v, kv=rank + rk if own else 0, window=window,
                attn_flops=2 * heads * (nope + rope + v), heads=heads)


TRAITS: dict[str, DecoderTraits] = {
    # modeling_step3p7.Step3p7TextModel: gated GQA, MoE layers (router weight, 3-D experts, a shared SwiGLU of
    # share_expert_dim), dense SwiGLU layers of intermediate_size, untied head.
    "step3p5": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", mlp_bias="mlp_bias",
                             attn=_step3p5_attention,
                             moe=ExpertTraits(experts="n_routed_experts", shared=lambda d: d.k("share_expert_dim"),
                                              shared_bias="mlp_bias", sparse=sparse_by_types(_step3p5_sparse))),
    # modeling_mistral_large4.MistralLarge4TextModel: the attention above, DeepSeek-V3's MoE (dense first layer),
    # LeRoPE's learned alpha (one per rotary frequency: qk_rope_head_dim / 2), untied head.
    "mistral_large4_text": DecoderTraits(mla=True, attn=_mistral_large4_attention,
                                         top_extra=lambda d: d.k("qk_rope_head_dim") // 2,
                                         moe=ExpertTraits(experts="n_routed_experts",
                                                          shared=lambda d: d.k("n_shared_experts", 1, minimum=0)
                                                          * d.k("moe_intermediate_size"),
                                                          sparse=first_k_dense(k0=1))),
}


def _ernie_vl_vision_experts(d: Dims) -> int:
    # modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeMoeBlock.vision_moe: a second routed set for image/video tokens, its own
    # router (experts x hidden, fp32) and e_score_correction_bias (a parameter), 3-D experts of the second width.
    e = d.k("moe_num_experts")
    return e * 3 * d.hidden * d.k("vision_moe_intermediate_size") + e * d.hidden + e


# modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeTextModel: ERNIE-4.5-MoE's layers (use_bias on q/k/v/o and the MLPs,
# tied embeddings); each sparse layer (mlp_layer_types, default all but the first) holds text experts of
# moe_intermediate_size[0], the vision experts above (counted as extra parameters of the MoE part: they run only
# on vision tokens) and shared experts of moe_intermediate_size[0] x moe_num_shared_experts.
ERNIE_VL = DecoderTraits(qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias", tie=True,
                         moe=ExpertTraits(experts="moe_num_experts", top_k="moe_k",
                                          shared=lambda d: d.k("moe_num_shared_experts", 0, minimum=0)
                                          * d.k("moe_intermediate_size"),
                                          shared_bias="use_bias", score_bias=True, extra=_ernie_vl_vision_experts,
                                          sparse=sparse_by_types(from_layer(1))))


def ernie4_5_vl_moe_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """The text tower of ERNIE-4.5-VL-MoE: moe_intermediate_size lists the text and vision experts' widths
    (configuration_ernie4_5_vl_moe: default [1536, 512]); each is read as its own key."""
    widths = Reader(cfg, model, "ernie4_5_vl_moe_text").list("moe_intermediate_size", int, length=2) or [1536, 512]
    flat = dict(cfg, moe_intermediate_size=widths[0], vision_moe_intermediate_size=widths[1])
    return build(flat, model, "ernie4_5_vl_moe_text", ERNIE_VL)


BUILDERS: dict[str, Builder] = {"ernie4_5_vl_moe_text": ernie4_5_vl_moe_text}
