"""The caching allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), replayed.

Read from c10/cuda/CUDACachingAllocator.cpp's expandable-segment paths (ExpandableSegment, find_expandable_block,
try_allocate_expandable_block, map_block, unmap_block, release_blocks):

- each pool (small: requests up to 1 MiB; large) is one virtual segment, mapped to memory in pages of 2 MiB (small,
  kSmallBuffer) or 20 MiB (large, kLargeBuffer); reserved memory is what is mapped;
- a request takes the smallest mapped free block that holds it (get_free_block, as without expandable segments), and
  every block is split down to 512 B (should_split);
- failing that, it takes the lowest-address run of free blocks, mapped or not, that is long enough, starting from the
  free block just before an unmapped one (find_expandable_block), and maps the pages it lacks (map_block, which merges
  a newly mapped block with its free mapped neighbours);
- a freed block merges with its free neighbours of the same mapped state (try_merge_blocks);
- where mapping would take reserved past `capacity_bytes`, every free mapped block's page-aligned interior is unmapped,
  wherever in the segment it lies (release_blocks -> unmap_block), and the request is tried once more.
Unlike the default allocator (allocator.py), a segment pinned by one live tensor gives back its other free pages.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .allocator import (
    LARGE_SEGMENT_BYTES,
    MIN_BLOCK_BYTES,
    SMALL_SEGMENT_BYTES,
    Ledger,
    OutOfMemoryError,
    absorb,
    cut,
)

VIRTUAL_BYTES = 1 << 50  # each pool's address range: far beyond any card, as the segment reserves the device's size


def page_bytes(small: bool) -> int:
    """The mapping granularity of a pool (ExpandableSegment's segment_size)."""
    return SMALL_SEGMENT_BYTES if small else LARGE_SEGMENT_BYTES


class _NoRoom(Exception):
    """Mapping would take reserved past the capacity."""


@dataclass(eq=False)
class Run:
    """A run of one pool's address range: allocated, free and mapped, or unmapped."""

    addr: int
    size: int
    small: bool
    mapped: bool = True
    allocated: bool = False
    prev: Run | None = field(default=None, repr=False)
    next: Run | None = field(default=None, repr=False)


class ExpandableAllocator(Ledger):
    """The replay, on allocator.Ledger's malloc and free."""

    def __init__(self, capacity_bytes: int | None = None) -> None:
        super().__init__(capacity_bytes)
        self._free: dict[bool, list[tuple[tuple[int, int], Run]]] = {True: [], False: []}  # mapped, by size
        self._unmapped: dict[bool, list[tuple[int, Run]]] = {True: [], False: []}  # by address
        for small in (True, False):
            self._unmapped[small].append((0, Run(0, VIRTUAL_BYTES, small, mapped=False)))

    # --- the two sorted sets --------------------------------------------------------------------------------
    def _insert(self, run: Run) -> None:
        if run.mapped:
            bisect.insort(self._free[run.small], ((run.size, run.addr), run))
        else:
            bisect.insort(self._unmapped[run.small], (run.addr, run))

    def _remove(self, run: Run) -> None:
        if run.mapped:
            free = self._free[run.small]
            i = bisect.bisect_left(free, ((run.size, run.addr),))
            assert free[i][1] is run, "the free set lost a run"
            del free[i]
        else:
            unmapped = self._unmapped[run.small]
            j = bisect.bisect_left(unmapped, (run.addr,))
            assert unmapped[j][1] is run, "the unmapped set lost a run"
            del unmapped[j]

    def _merge(self, run: Run, other: Run | None) -> None:
        """try_merge_blocks: `other`, a free neighbour of the same mapped state, joins `run` (not in a set)."""
        if other is None or other.allocated or other.mapped != run.mapped:
            return
        self._remove(other)
        absorb(run, other)

    def _split(self, run: Run, size: int, mapped: bool) -> Run:
        """Cut `run` (in no set) at `size`; the rest, with `mapped`, goes back to its set."""
        rest = Run(run.addr + size, run.size - size, run.small, mapped=mapped)
        cut(run, rest)
        self._insert(rest)
        return rest

    # --- mapping ------------------------------------------------------------------------------------------
    def _map(self, run: Run, nbytes: int) -> Run:
        """map_block: map the pages covering `run`'s first `nbytes`; returns the mapped free run, merged with its
        free mapped neighbours and back in the free set."""
        page = page_bytes(run.small)
        size = min(run.size, -(-nbytes // page) * page)
        if self.capacity_bytes is not None and self.reserved_bytes + size > self.capacity_bytes:
            raise _NoRoom
        self._remove(run)
        if size < run.size:
            self._split(run, size, mapped=False)
        run.mapped = True
        self._reserve(size)
        self._merge(run, run.prev)
        self._merge(run, run.next)
        self._insert(run)
        return run

    def _unmap(self, run: Run) -> None:
        """unmap_block: give back the whole pages inside a free mapped run (in the free set); a mapped head and tail
        that do not fill a page stay free and mapped."""
        page = page_bytes(run.small)
        run_end = run.addr + run.size
        start, end = -(-run.addr // page) * page, run_end // page * page
        if end <= start:
            return
        self._remove(run)
        if start > run.addr:
            head = Run(run.addr, start - run.addr, run.small, prev=run.prev, next=run)
            if run.prev is not None:
                run.prev.next = head
            run.prev = head
            self._insert(head)
        if end < run_end:
            tail = Run(end, run_end - end, run.small, prev=run, next=run.next)
            if run.next is not None:
                run.next.prev = tail
            run.next = tail
            self._insert(tail)
        run.addr, run.size, run.mapped = start, end - start, False
        self.reserved_bytes -= run.size
        self._merge(run, run.prev)
        self._merge(run, run.next)
        self._insert(run)

    def empty_cache(self) -> None:
        """release_blocks with expandable segments: every free mapped run gives back its whole pages."""
        for small in (True, False):
            for _, run in list(self._free[small]):
                self._unmap(run)

    # --- requests -----------------------------------------------------------------------------------------
    def _expand(self, size: int, small: bool) -> Run:
        """try_allocate_expandable_block: the lowest-address run of free space that holds `size`, mapped."""
        for _, unmapped in self._unmapped[small]:
            first = unmapped.prev if unmapped.prev is not None and not unmapped.prev.allocated else unmapped
            room = 0
            cursor: Run | None = first
            while cursor is not None and not cursor.allocated and room < size:
                room += cursor.size
                cursor = cursor.next
            if room >= size:
                break
        else:  # the virtual range is never exhausted
            raise AssertionError("no address space left")
        candidate = first if first.mapped else self._map(first, min(first.size, size))
        while candidate.size < size:
            following = candidate.next
            assert following is not None and not following.mapped
            candidate = self._map(following, min(size - candidate.size, following.size))
        self._remove(candidate)
        return candidate

    def _take(self, size: int, small: bool) -> Run:
        pool = self._free[small]
        i = bisect.bisect_left(pool, ((size, -1),))
        if i < len(pool):
            run = pool.pop(i)[1]
        else:
            try:
                run = self._expand(size, small)
            except _NoRoom:
                self.empty_cache()
                try:
                    run = self._expand(size, small)
                except _NoRoom:
                    raise OutOfMemoryError(f"{size} bytes do not map within {self.capacity_bytes}") from None
        if run.size - size >= MIN_BLOCK_BYTES:
            self._split(run, size, mapped=True)
        return run

    def _release(self, run: Run) -> None:
        self._merge(run, run.prev)
        self._merge(run, run.next)
        self._insert(run)
