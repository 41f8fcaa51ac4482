"""Kolibri 1.1 (transformers 5.25 models/kolibri1_1): Kolibri 1's MoE decoder with indexed-attention layers that
read an earlier layer's keys and values, read by the decoder.

modeling_kolibri1_1.Kolibri1_1ForCausalLM, layer by layer (Kolibri1_1DecoderLayer): four RMSNorms of hidden width
(input, post-self-attention, post-attention, post-MLP); Kolibri1_1Attention: q_proj and q_norm (head_dim), k_proj,
v_proj and k_norm only on a layer that produces its own K/V (kv_source_layers[i] == i), o_proj, no biases; the
indexer (Kolibri1_1Indexer) has no weights. mlp_only_layers (default the first two) have a gated Kolibri1_1MLP of
mlp_only_intermediate_size; the others Kolibri1_1SparseMoeBlock (modeling_kolibri1.Kolibri1SparseMoeBlock: router,
3-D gated experts of moe_intermediate_size, a gated shared expert of shared_expert_intermediate_size). Final RMSNorm,
untied lm_head. transformers 5.24 has no Kolibri1_1Config, so config/transformers_defaults.py does not hold its
defaults: KOLIBRI1_1_DEFAULTS below are configuration_kolibri1_1.Kolibri1_1Config's (5.25.0), with its
attribute_map (num_local_experts -> num_experts) as an alias.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..config.reader import Reader
from ..graph.parts import Part, shared_kv_attention_part
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule, attention

# configuration_kolibri1_1.Kolibri1_1Config's field defaults (transformers 5.25.0); None: derived by __post_init__.
KOLIBRI1_1_DEFAULTS: dict[str, Any] = {
    "vocab_size": 128000, "hidden_size": 2560, "num_hidden_layers": 50, "num_attention_heads": 48,
    "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 262144, "tie_word_embeddings": False,
    "sliding_window": 513, "moe_intermediate_size": 512, "num_experts_per_tok": 6, "num_experts": 384,
    "head_dim": 128, "shared_expert_intermediate_size": 512, "layer_types": None, "index_layers": None,
    "kv_source_layers": None, "mlp_only_layers": None, "mlp_only_intermediate_size": 3584,
}
# Kolibri1_1Config.__post_init__: for the n-th indexed-attention layer, which indexed-attention layer's K/V it reads
_DEFAULT_SOURCES = (0, 0, 0, 3, 4, 5, 5, 5, 5, 0)


def _indexed(i: int) -> bool:
    return (i + 1) % 5 == 0  # Kolibri1_1Config.__post_init__: every 5th layer is indexed attention


def _windows(r: Reader, n: int, w: int) -> list[int]:
    return [0 if _indexed(i) else w for i in range(n)]


def _types(d: Dims) -> list[str]:
    types = d.r.list("layer_types", str, d.layers)
    return types[:d.layers] if types is not None else \
        ["indexed_attention" if _indexed(i) else "sliding_attention" for i in range(d.layers)]


def _stack_sources(d: Dims) -> list[int]:
    """Per layer, the layer whose K/V it attends to: kv_source_layers, else Kolibri1_1Config.__post_init__'s."""
    sources = d.r.list("kv_source_layers", int, d.layers)
    if sources is not None:
        return list(sources[:d.layers])
    indexed = [i for i, kind in enumerate(_types(d)) if kind == "indexed_attention"]
    if len(indexed) > len(_DEFAULT_SOURCES):
        raise ConfigError(d.r.model, "kv_source_layers", None, f"the default covers {len(_DEFAULT_SOURCES)} "
                          f"indexed-attention layers, the config has {len(indexed)}: transformers needs it set")
    out = list(range(d.layers))
    for i, source in zip(indexed, _DEFAULT_SOURCES[:len(indexed)], strict=True):
        out[i] = indexed[source]
    return out


def _attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    # modeling_kolibri1_1.Kolibri1_1Attention: a layer reading another's K/V keeps q_proj, q_norm and o_proj only
    if d.r.once(_stack_sources, lambda: _stack_sources(d))[n - 1] != n - 1:
        return shared_kv_attention_part(f"Attention_{n}", d.hidden, d.heads, d.hd, extra=d.hd, window=window)
    return attention(t, d, n, window)


def _dense_first(d: Dims) -> list[bool]:
    # Kolibri1_1DecoderLayer: experts unless layer_idx in mlp_only_layers (default the first two layers)
    only = d.r.list("mlp_only_layers", int)
    dense = set(only) if only is not None else {0, 1}
    return [i not in dense for i in range(d.layers)]


TRAITS: dict[str, DecoderTraits] = {
    "kolibri1_1": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qk_norm="head",
                                attn=_attention, inter_key="mlp_only_intermediate_size", window_rule=_windows,
                                aliases={"num_experts": ("num_local_experts",)}, defaults=KOLIBRI1_1_DEFAULTS,
                                moe=ExpertTraits(experts="num_experts", shared=lambda d: d.k("shared_expert_intermediate_size"),
                                                 sparse=StackRule(_dense_first),
                                                 dense_inter="mlp_only_intermediate_size")),
}
