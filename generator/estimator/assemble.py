"""Assembling an Arch from parts a family builder laid out itself, and the standard layer layout."""

from __future__ import annotations

from typing import Any, Mapping

from .arch import Arch
from .config import architectures_of
from .reader import Reader, activation_name
from .spec import Block, Part, Spec, add_part, norm_part


def assemble(cfg: Mapping[str, Any], model: str, r: Reader, *, hidden: int, layers: int, heads: int, kv: int,
             head_dim: int, inter: int, vocab: int, ctx: int, tie: bool, embed: list[Part], blocks: list[Block],
             head: list[Part], kind: str = "decoder", windows: tuple[int, ...] = (), family: str | None = None,
             experts: int = 0, top_k: int = 0, logits: int | None = None,
             position: str = "rope", approx: str | None = None, act: str | None = None, qk_norm: str | None = None,
             **spec_extra: Any) -> Arch:
    """An Arch from parts a family builder laid out itself (classic.py, ssm.py, encoders.py, vlm.py)."""
    spec = Spec(kind, hidden, vocab, tuple(embed), tuple(blocks), tuple(head), vocab if logits is None else logits,
                tied=tie, **spec_extra)
    mt = str(cfg.get("model_type"))
    return Arch(model_type=mt, family=family or mt, architectures=architectures_of(cfg, model),
                custom_code="auto_map" in cfg, text_tower_only=False, hidden=hidden, layers=layers, heads=heads,
                kv_heads=kv, head_dim=head_dim, intermediate=inter, vocab=vocab, max_context=ctx, tie=tie,
                act=act or activation_name(r) or "silu", qk_norm=qk_norm, position=position, rotary_dims=head_dim if position == "rope" else 0, uses=tuple(r.uses),
                raw=r.cfg, kind=kind, layer_windows=windows or (0,) * layers, spec=spec, experts=experts,
                experts_per_token=top_k, approximate=approx)


def standard_block(n: int, parts_pre: list[Part], attn: Part, ffn: Part | None, norm: str, width: int, *,
                   norms: tuple[str, ...] = ("pre_attn", "pre_mlp"), kind: str = "attention",
                   stack: str = "decoder", cross: Part | None = None, cross_norm: bool = True) -> Block:
    """Norms around attention (+ cross-attention) and the feed-forward, named like the dense families."""
    norm_type = "RMSNorm" if norm == "rmsnorm" else "LayerNorm"
    parts = list(parts_pre)
    k = 0

    def add_norm() -> None:
        nonlocal k
        k += 1
        parts.append(norm_part(f"{norm_type}_{n}_{k}", norm, width))

    if "pre_attn" in norms:
        add_norm()
    parts.append(attn)
    if "post_attn" in norms:
        add_norm()
    parts.append(add_part(f"Add_{n}_attn"))
    if cross is not None:
        if "pre_attn" in norms and cross_norm:
            add_norm()
        parts.append(cross)
        if "post_attn" in norms and cross_norm:
            add_norm()
        parts.append(add_part(f"Add_{n}_cross"))
    if ffn is not None:
        if "pre_mlp" in norms:
            add_norm()
        parts.append(ffn)
        if "post_mlp" in norms:
            add_norm()
        parts.append(add_part(f"Add_{n}_ffn"))
    return Block(n, kind, tuple(parts), stack)
