"""Assembling an Arch from parts a family builder laid out itself, and the small parts several such builders share."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader, activation_name, architectures_of
from ..graph.parts import (
    Block,
    Part,
    Spec,
    attention_part,
    attention_type,
    linear,
)

# A family builder: (config dict, model id) -> Arch. A wrapper also takes the reader of its text tower
# (normalise's dispatch), so that no family module needs the merged table of every family.
Builder = Callable[[Mapping[str, Any], str], Arch]
TextReader = Callable[[Mapping[str, Any], str], Arch]
Wrapper = Callable[[Mapping[str, Any], str, TextReader], Arch]


def bind(table: Mapping[str, Any], build: Callable[[Mapping[str, Any], str, str, Any], Arch]) -> dict[str, Builder]:
    """Builders for every model_type of a traits table read by one builder (build(cfg, model, model_type, traits))."""
    return {model_type: functools.partial(_bound, build, model_type, traits) for model_type, traits in table.items()}


def _bound(build: Callable[[Mapping[str, Any], str, str, Any], Arch], model_type: str, traits: Any,
           cfg: Mapping[str, Any], model: str) -> Arch:
    return build(cfg, model, model_type, traits)


def assemble(cfg: Mapping[str, Any], model: str, r: Reader, *, hidden: int, layers: int, heads: int, kv: int,
             head_dim: int, inter: int, vocab: int, ctx: int, tie: bool, embed: list[Part], blocks: list[Block],
             head: list[Part], kind: str = "decoder", windows: tuple[int, ...] = (), family: str | None = None,
             experts: int = 0, top_k: int = 0, logits: int | None = None,
             position: str = "rope", approx: str | None = None, act: str | None = None, qk_norm: str | None = None,
             **spec_extra: Any) -> Arch:
    """An Arch from parts a family builder laid out itself (gpt2_era, mamba, encoders, vision_language...). An
    encoder whose class has no LM head (sequence or token classification, QA, a bare model: encoders.head_kind)
    shares its word embeddings with nothing, whatever tie_word_embeddings says: its Spec is not tied."""
    lm_head = kind != "encoder" or any(p.name.startswith("LM_Head") for p in head)
    spec = Spec(kind, hidden, vocab, tuple(embed), tuple(blocks), tuple(head), vocab if logits is None else logits,
                tied=tie and lm_head, **spec_extra)
    mt = str(cfg.get("model_type"))
    return Arch(model_type=mt, family=family or mt, architectures=architectures_of(cfg, model),
                custom_code="auto_map" in cfg, text_tower_only=False, hidden=hidden, layers=layers, heads=heads,
                kv_heads=kv, head_dim=head_dim, intermediate=inter, vocab=vocab, max_context=ctx, tie=tie,
                act=act or activation_name(r) or "silu", qk_norm=qk_norm, position=position, rotary_dims=head_dim if position == "rope" else 0, uses=tuple(r.uses),
                raw=r.cfg, kind=kind, layer_windows=windows or (0,) * layers, spec=spec, experts=experts,
                experts_per_token=top_k, approximate=approx)


def plain_attention(n: int, h: int, heads: int, hd: int, *, bias: bool = False, extra: int = 0, rope: bool = False,
                    name: str = "Attention", typ: str = "") -> Part:
    """Multi-head attention of layer n with q/k/v/o of heads x head_dim (CPM-Ant, HRM-Text, XLNet, ProphetNet...)."""
    return attention_part(f"{name}_{n}", typ or attention_type(heads, heads), h, heads, heads, hd, qkv_bias=bias,
                          o_bias=bias, extra=extra, rope=rope)


def mla_part(name: str, r: Reader, hidden: int, heads: int, *, bias: bool = False, extra: int = 0,
             q_norm_bias: bool = False, indexer: bool = False, window: int = 0) -> Part:
    q_rank = r.opt_int("q_lora_rank")
    kv_rank = r.int("kv_lora_rank")
    rope = r.int("qk_rope_head_dim")
    nope = r.int("qk_nope_head_dim", minimum=0)
    v_dim = r.int("v_head_dim")
    qk = nope + rope
    lin: list[tuple[int, int]] = []
    params = extra
    if q_rank:
        params += linear(hidden, q_rank, bias) + q_rank * (2 if q_norm_bias else 1) + linear(q_rank, heads * qk)
        lin += [(hidden, q_rank), (q_rank, heads * qk)]
    else:
        params += linear(hidden, heads * qk)
        lin.append((hidden, heads * qk))
    params += linear(hidden, kv_rank + rope, bias) + kv_rank + linear(kv_rank, heads * (nope + v_dim))
    params += linear(heads * v_dim, hidden, bias)
    lin += [(hidden, kv_rank + rope), (kv_rank, heads * (nope + v_dim)), (heads * v_dim, hidden)]
    index_keys = 0
    if indexer:  # DeepSeek-V3.2 sparse-attention indexer (modeling_deepseek_v32.DeepseekV32Indexer)
        ih, idim = r.int("index_n_heads"), r.int("index_head_dim")
        params += linear(q_rank or hidden, ih * idim) + linear(hidden, idim) + 2 * idim + linear(hidden, ih)
        # its keys, one index_head_dim vector a token, are cached beside the latent: transformers keeps them in the
        # compute dtype (cache.update_indexer, DynamicIndexedLayer), vLLM in fp8 with a 4-byte scale (132 B a token
        # at 128, deepseek_v2.py's indexer cache spec), so a served figure is over by the difference
        index_keys = idim
    mm = sum(i * o for i, o in lin)
    q_all, kv_all = heads * qk, heads * (nope + v_dim)
    return Part(name, "Multi-head Latent Attn", params, matmul=mm, linears=tuple(lin),
                act=(q_rank or 0) + kv_rank + rope + 3 * q_all + kv_all + heads * v_dim * 2, act32=heads,
                transient=q_all + kv_all + heads * v_dim, kv=kv_rank + rope + index_keys, window=window,
                attn_flops=2 * heads * (qk + v_dim), heads=heads)
