"""The structure table: one row per part of a Spec, as records for the pages and as dicts for the JSON twin."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from .parts import Part, Spec


@dataclass(frozen=True)
class StructureRow:
    index: int
    name: str
    type: str
    output_shape: tuple[int, ...]
    params: int


# What the table keeps of a layer's parts, per part: its name split at the layer's number ("#": a numbered()
# copy joins its own number in) or whole, its type, output shape and parameters.
_Cells = list[tuple[list[str], str, tuple[int, ...], int]]


class StructureTable(Sequence[StructureRow]):
    """The structure table of a spec at `tokens`: the embedding stage, every layer's parts, the head, in forward
    order; output shapes (1, tokens) where a part's width is negative (the input ids), else (1, tokens, width or
    the hidden size). The rows are made when first read (the pages read them); the JSON twin's dicts are made
    straight from the spec (records()), with no row object in between: an estimate + to_dict builds one object
    per part, and a layer that numbered() copied is read once for all its copies."""

    def __init__(self, spec: Spec, tokens: int) -> None:
        self.spec = spec
        self.tokens = tokens

    def _cells(self) -> Iterator[tuple[str, _Cells]]:
        """(tag, cells) per run of parts in forward order: a numbered() copy gives its number and its source's
        cells (names split at "#", made once for every copy), anything else "" and its parts' own cells."""
        spec = self.spec
        shapes: dict[int, tuple[int, ...]] = {0: (1, self.tokens, spec.hidden)}
        of_source: dict[int, _Cells] = {}

        def cells(parts: tuple[Part, ...], names: Sequence[list[str]]) -> _Cells:
            out = []
            for p, name in zip(parts, names, strict=True):
                width = p.width
                shape = shapes.get(width)
                if shape is None:
                    shape = shapes[width] = (1, self.tokens) if width < 0 else (1, self.tokens, width)
                out.append((name, p.type, shape, p.params))
            return out

        yield "", cells(spec.embed, [[p.name] for p in spec.embed])
        for b in spec.blocks:
            source = b.source
            if source is None:
                yield "", cells(b.parts, [[p.name] for p in b.parts])
                continue
            found = of_source.get(id(source))
            if found is None:
                found = of_source[id(source)] = cells(source.parts, [p.name.split("#") for p in source.parts])
            yield str(b.index), found
        yield "", cells(spec.head, [[p.name] for p in spec.head])

    def records(self) -> list[dict[str, Any]]:
        """The rows as the JSON twin writes them (StructureRow's fields in order, the shape a list), new dicts on
        every call (the caller may change them)."""
        out: list[dict[str, Any]] = []
        append = out.append
        index = 0
        for tag, cells in self._cells():
            for pieces, typ, shape, params in cells:
                index += 1
                append({"index": index, "name": tag.join(pieces), "type": typ, "output_shape": [*shape],
                        "params": params})
        return out

    @functools.cached_property
    def rows(self) -> tuple[StructureRow, ...]:
        """The rows as records, made once (each set up directly, its fields written into its instance dict in
        field order: what the frozen dataclass __init__ does through object.__setattr__, at a third of the cost)."""
        new = object.__new__
        rows = []
        index = 0
        for tag, cells in self._cells():
            for pieces, typ, shape, params in cells:
                index += 1
                row = new(StructureRow)
                row.__dict__.update(index=index, name=tag.join(pieces), type=typ, output_shape=shape, params=params)
                rows.append(row)
        return tuple(rows)

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> StructureRow: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[StructureRow, ...]: ...

    def __getitem__(self, i: int | slice) -> StructureRow | tuple[StructureRow, ...]:
        return self.rows[i]

    def __iter__(self) -> Iterator[StructureRow]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StructureTable):
            return self.rows == other.rows
        return self.rows == other if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.rows)

    def __repr__(self) -> str:
        return f"StructureTable({self.rows!r})"

