"""The structure table: one row per part of a Spec, as records for the pages and as dicts for the JSON twin."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from .parts import Block, Part, Spec

# The part name the encoder-decoder builders give the encoder's final norm (families/encoder_decoders.py)
ENCODER_FINAL_NORM = "Encoder_Final_Norm"


@dataclass(frozen=True)
class StructureRow:
    """One row of the structure table: a part's place in forward order (from 1), name, type, shape and parameters."""

    index: int
    name: str
    type: str
    output_shape: tuple[int, ...]
    params: int


class _Shapes(dict[int, tuple[int, ...]]):
    """Output shape per part width at `tokens`: (1, tokens) for a negative width (the input ids), else
    (1, tokens, width or the hidden size); each made when first asked."""

    def __init__(self, tokens: int, hidden: int) -> None:
        super().__init__({0: (1, tokens, hidden)})
        self.tokens = tokens

    def __missing__(self, width: int) -> tuple[int, ...]:
        shape = self[width] = (1, self.tokens) if width < 0 else (1, self.tokens, width)
        return shape


class StructureTable(Sequence[StructureRow]):
    """The structure table of a spec at `tokens`: the embedding stage, every layer's parts, the head, in forward
    order, output shapes as _Shapes gives them. The rows are made when first read (the pages read them); the JSON
    twin's dicts are made straight from the spec (records()), with no row object in between: an estimate +
    to_dict builds one object per part, and a layer that stacks.numbered copied is read once for all its copies."""

    def __init__(self, spec: Spec, tokens: int) -> None:  # read-only after this: the rows are made from them once
        self.spec = spec
        self.tokens = tokens

    def _runs(self) -> Iterator[tuple[str, Block | None, tuple[Part, ...]]]:
        """(tag, source, parts) per run of parts in forward order: a numbered copy gives "_<its number>", its
        source and the source's parts (names holding "_<the source's number>"); anything else "", None, its own
        parts. An encoder-decoder's final encoder norm, which the spec holds with the embedding stage (the memory
        terms read it there), is shown where it runs: after the encoder's last layer (modeling_t5 T5Stack)."""
        spec = self.spec
        late, last = self._late()
        yield "", None, spec.embed if last < 0 else tuple(p for p in spec.embed if p not in late)
        for k, b in enumerate(spec.blocks):
            source = b.source
            yield ("", None, b.parts) if source is None else (f"_{b.index}", source, source.parts)
            if k == last:
                yield "", None, late
        yield "", None, spec.head

    def _late(self) -> tuple[tuple[Part, ...], int]:
        """The embedding stage's parts that run after the encoder (its final norm), and the encoder's last block's
        position (-1: none moves)."""
        spec = self.spec
        late = tuple(p for p in spec.embed if p.name == ENCODER_FINAL_NORM)
        last = max((k for k, b in enumerate(spec.blocks) if b.stack == "encoder"), default=-1) if late else -1
        return late, last

    def layer_spans(self) -> list[tuple[int, int, int]]:
        """(layer number, first row, end row) of each layer's rows, positions from 0, as _runs lays them out (the
        encoder's final norm after its last layer)."""
        late, last = self._late()
        out, start = [], len(self.spec.embed) - (len(late) if last >= 0 else 0)
        for k, b in enumerate(self.spec.blocks):
            count = len((b.source or b).parts)
            out.append((b.index, start, start + count))
            start += count + (len(late) if k == last else 0)
        return out

    def records(self) -> list[dict[str, Any]]:
        """The rows as the JSON twin writes them (StructureRow's fields in order, the shape a list), new dicts on
        every call (the caller may change them). A numbered copy's rows are copies of its source's, made once
        for every copy (type and parameters set, the name split at its first "_<the source's number>"): per row
        only the index, the name joined with the copy's "_<number>" and the shape's list are set (a dict copy costs
        less than a new dict)."""
        shapes = _Shapes(self.tokens, self.spec.hidden)
        cells: dict[int, list[tuple[dict[str, Any], list[str], tuple[int, ...]]]] = {}
        out: list[dict[str, Any]] = []
        for tag, source, parts in self._runs():
            if source is None:
                out += [{"index": i, "name": p.name, "type": p.type, "output_shape": [*shapes[p.width]],
                         "params": p.params} for i, p in enumerate(parts, len(out) + 1)]
                continue
            found = cells.get(id(source))
            if found is None:
                was = f"_{source.index}"
                found = cells[id(source)] = [
                    ({"index": 0, "name": "", "type": p.type, "output_shape": None, "params": p.params},
                     p.name.split(was, 1), shapes[p.width]) for p in parts]
            for i, (row, pieces, shape) in enumerate(found, len(out) + 1):
                row = row.copy()
                row["index"], row["name"], row["output_shape"] = i, tag.join(pieces), [*shape]
                out.append(row)
        return out

    @functools.cached_property
    def rows(self) -> tuple[StructureRow, ...]:
        """The rows as StructureRow, made once from records() when a page or a test reads them (the JSON twin
        does not)."""
        return tuple(StructureRow(r["index"], r["name"], r["type"], tuple(r["output_shape"]), r["params"])
                     for r in self.records())

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

