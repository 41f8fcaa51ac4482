"""Stacks of layers alike but for their numbers: one layer built, the others its numbered copies.

A copy keeps its source's sums (Block's per-token fields) and makes its parts only when something reads them
(Block.__getattr__); Spec.layer_groups keys a source once for all its copies. The family builders build a layer
once per kind this way where the layer depends on its index only through its part names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from .parts import Block


def copyable(b: Block) -> Block | None:
    """Layer b, to be numbered(), when every part name holds its number as "_<index>" (a copy's names are b's with
    the first "_<index>" made its own); else None."""
    tag = f"_{b.index}"
    return b if all(tag in p[0] for p in b.parts) else None


def numbered(source: Block, indices: Sequence[int]) -> list[Block]:
    """A copyable() layer as each layer of `indices`: its sums kept, only the index set per copy (a copy's parts
    are its source's renamed, made when first read: Block.__getattr__)."""
    fields = source.__dict__.copy()
    fields["source"] = source
    del fields["parts"]
    out, new, put = [], object.__new__, object.__setattr__
    for index in indices:  # _block's work, inline: this runs once per layer of every stack
        copy = fields.copy()
        copy["index"] = index
        block = new(Block)
        put(block, "__dict__", copy)
        out.append(block)
    return out


def alike(numbers: range, make: Callable[[int], Block], keys: Sequence[Hashable | None] = ()) -> list[Block]:
    """Layers `numbers` (1-based) of a stack whose layers differ only in the numbers in their part names, or also in
    what `keys` gives per layer (its window...; None: a layer made on its own): the first layer of each key made by
    `make`, in forward order, the others numbered copies of it; each one made where that first layer's names do not
    hold its number."""
    if not numbers:
        return []
    if not keys or keys[0] is not None and keys.count(keys[0]) == len(numbers):  # one kind of layer
        first = make(numbers[0])
        source = copyable(first) if len(numbers) > 1 else None
        if source is None:
            return [first, *(make(n) for n in numbers[1:])]
        return [first, *numbered(source, numbers[1:])]
    if None not in keys:
        grouped = _grouped(numbers, make, keys)
        if grouped is not None:
            return grouped
    sources: dict[Hashable, Block | None] = {}  # per key: its first layer, when copyable (None: not numbered)
    later: dict[Hashable, list[int]] = {}  # per key: the numbers of its copies
    out: list[Block | None] = []
    for n, key in zip(numbers, keys, strict=True):
        if key is not None and sources.get(key) is not None:
            later[key].append(n)
            out.append(None)
            continue
        b = make(n)
        out.append(b)
        if key is not None and key not in sources:
            sources[key], later[key] = copyable(b), []
    for key, copied in later.items():
        for b in numbered(sources[key], copied):  # type: ignore[arg-type]  # only a copyable layer gets copies
            out[numbers.index(b.index)] = b
    return out  # type: ignore[return-value]  # every None replaced by its copy


def _grouped(numbers: range, make: Callable[[int], Block], keys: Sequence[Hashable]) -> list[Block] | None:
    """alike() over a few kinds of layer, by kind: the first layer of each made in forward order (layers alike read
    the same config keys, so only these firsts read new ones), its copies placed by position; None where a first
    layer's names do not hold its number (alike then makes the stack layer by layer)."""
    out: list[Block | None] = [None] * len(numbers)
    for key in dict.fromkeys(keys):  # the kinds, in the order of their first layers
        where = [k for k, other in enumerate(keys) if other == key]
        first = out[where[0]] = make(numbers[where[0]])
        source = copyable(first) if len(where) > 1 else first
        if source is None:
            return None
        for k, copy in zip(where[1:], numbered(source, [numbers[k] for k in where[1:]]), strict=True):
            out[k] = copy
    return out  # type: ignore[return-value]  # every layer placed
