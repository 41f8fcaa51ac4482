"""The one layer layout: norms around the mixer (+ cross-attention) and the feed-forward, sequential or parallel."""

from __future__ import annotations

from .parts import Block, Part, add_part, norm_part


def standard_block(n: int, parts_pre: list[Part], attn: Part, ffn: Part | None, norm: str, width: int, *,
                   norms: tuple[str, ...] = ("pre_attn", "pre_mlp"), kind: str = "attention",
                   stack: str = "decoder", cross: Part | None = None, cross_norm: bool = True,
                   parallel: bool = False) -> Block:
    """Layer n as a Block of standard_parts."""
    return Block(n, kind, tuple(standard_parts(n, parts_pre, attn, ffn, norm, width, norms=norms, cross=cross,
                                               cross_norm=cross_norm, parallel=parallel)), stack)


def standard_parts(n: int, parts_pre: list[Part], attn: Part, ffn: Part | None, norm: str, width: int, *,
                   norms: tuple[str, ...] = ("pre_attn", "pre_mlp"), cross: Part | None = None,
                   cross_norm: bool = True, parallel: bool = False) -> list[Part]:
    """Layer n's parts in forward order (a builder that adds parts of its own makes its Block once, from these).
    Sequential: the norms named in `norms` ("pre_attn", "post_attn", "pre_mlp", "post_mlp") around the mixer
    (+ cross-attention) and the feed-forward, each followed by its residual add. Parallel (GPT-J, phi, cohere,
    falcon): the norms first, then mixer and feed-forward reading the same normed input, then one add. Norms
    are numbered in forward order (`RMSNorm_3_2`: layer 3's second)."""
    norm_type = "RMSNorm" if norm.startswith("rmsnorm") else "LayerNorm"
    parts = list(parts_pre)
    k = 0

    def add_norm() -> None:
        nonlocal k
        k += 1
        parts.append(norm_part(f"{norm_type}_{n}_{k}", norm, width))

    if parallel:
        for _ in norms:
            add_norm()
        parts += [attn] + ([ffn] if ffn is not None else []) + [add_part(f"Add_{n}")]
        return parts

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
    return parts
