"""A replay of PyTorch's CUDA caching allocator: what `max_memory_reserved` reads for a simulated step's allocations.

The simulated step sees every tensor storage made and freed, in order (tracker.PeakTracker), but not the segments
the CUDA caching allocator would keep for them. This replays that order through the allocator's block policy, read
from c10/cuda/CUDACachingAllocator.cpp (torch 2.x, native backend, default PYTORCH_CUDA_ALLOC_CONF: no
max_split_size, no roundup_power2_divisions, no expandable segments, no garbage collection):

- a request is rounded up to a multiple of 512 B (round_size, kMinBlockSize);
- up to 1 MiB (kSmallSize) it is served from the small pool, above from the large pool (get_pool);
- the smallest free block of the pool that holds it is taken, the lower address on a tie (get_free_block: the pool
  is a set ordered by stream, size, address, searched with lower_bound);
- failing that, a segment is cudaMalloc'ed: 2 MiB for a small request (kSmallBuffer), 20 MiB for one under 10 MiB
  (kLargeBuffer, kMinLargeAlloc), else the request rounded up to 2 MiB (kRoundLarge) (get_allocation_size);
- a block is split when what is left is at least 512 B (small pool) or more than 1 MiB (large pool) (should_split),
  and the rest goes back to the pool;
- a freed block merges with its free neighbours in the same segment (free_block, try_merge_blocks); a segment is
  returned to the driver only by empty_cache or an out-of-memory retry;
- where cudaMalloc fails (here: the segment would take reserved past `capacity_bytes`), every cached segment with
  nothing allocated in it is freed and cudaMalloc tried once more (release_cached_blocks; the narrower
  release_available_cached_blocks does nothing without max_split_size), and failing that the request raises
  OutOfMemoryError. A split segment is never returned: that is what fragmentation costs a card.

`minimum_capacity_bytes` replays a step's allocations on smaller and smaller cards: the least memory the step runs
in, the number a "fits on this card" answer is about.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_REQUEST_BYTES = 1 << 20  # kSmallSize: the small pool's largest request
SMALL_SEGMENT_BYTES = 2 << 20  # kSmallBuffer
MIN_LARGE_SEGMENT_REQUEST_BYTES = 10 << 20  # kMinLargeAlloc: from here a segment is the request's own size
LARGE_SEGMENT_BYTES = 20 << 20  # kLargeBuffer: the segment for a request between 1 MiB and 10 MiB
LARGE_ROUNDING_BYTES = 2 << 20  # kRoundLarge

# One allocation event: (handle, nbytes) is a malloc, (handle, None) a free.
Event = tuple[int, int | None]


class OutOfMemoryError(Exception):
    """The replayed card has no room for a request, even after its cached segments are freed."""


@dataclass(eq=False)
class Block:
    """A run of one segment, allocated or free; `prev`/`next` are its neighbours in the segment."""

    segment: int
    addr: int  # within its segment
    size: int
    small: bool
    allocated: bool = False
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)

    def key(self) -> tuple[int, int, int]:
        # The pool's order: size, then address. Segments are numbered in the order they were made, which stands in
        # for the addresses cudaMalloc hands out.
        return (self.size, self.segment, self.addr)


def round_size(nbytes: int) -> int:
    """The bytes a request of `nbytes` takes (round_size)."""
    return max(MIN_BLOCK_BYTES, -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES)


def segment_size(size: int) -> int:
    """The segment cudaMalloc'ed for a rounded request the pool cannot serve (get_allocation_size)."""
    if size <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if size < MIN_LARGE_SEGMENT_REQUEST_BYTES:
        return LARGE_SEGMENT_BYTES
    return -(-size // LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES


class Linked(Protocol):
    """A run of a segment in its address-ordered chain (Block here, expandable.Run)."""

    addr: int
    size: int
    prev: Any
    next: Any


def cut(run: Linked, rest: Linked) -> None:
    """`rest`, made for `run`'s tail, takes its place in the chain after `run`, which keeps only its head
    (the split in malloc and in map_block). `rest.addr` and `rest.size` are already the tail's."""
    rest.prev, rest.next = run, run.next
    if run.next is not None:
        run.next.prev = rest
    run.next = rest
    run.size -= rest.size


def absorb(run: Linked, other: Linked) -> None:
    """`other`, the run just before or after `run` in its segment, joins it (try_merge_blocks): `run` takes the
    whole span and `other`'s place in the chain. Neither is in a free set while this runs."""
    if other is run.prev:
        run.addr = other.addr
        run.prev = other.prev
        if other.prev is not None:
            other.prev.next = run
    else:
        run.next = other.next
        if other.next is not None:
            other.next.prev = run
    run.size += other.size


class Ledger:
    """What both allocator models keep alike: the live runs by handle, reserved and allocated bytes and their peaks.
    A model supplies `_take(size, small)`, a run of at least `size` bytes taken out of its free sets (split as its
    rules say, reserving memory where it must), and `_release(run)`, a freed run merged with its free neighbours and
    back in its set."""

    def __init__(self, capacity_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self._live: dict[int, Any] = {}
        self.reserved_bytes = 0
        self.peak_reserved_bytes = 0
        self.allocated_bytes = 0
        self.peak_allocated_bytes = 0

    def _reserve(self, nbytes: int) -> None:
        self.reserved_bytes += nbytes
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def malloc(self, handle: int, nbytes: int) -> None:
        """Allocate `nbytes` for `handle` (a storage's identity), as the allocator's malloc would."""
        if handle in self._live:
            raise ValueError(f"handle {handle} is already allocated")
        size = round_size(nbytes)
        run = self._take(size, size <= SMALL_REQUEST_BYTES)
        run.allocated = True
        self._live[handle] = run
        self.allocated_bytes += run.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)

    def free(self, handle: int) -> None:
        """Free `handle`'s run and merge it with its free neighbours."""
        run = self._live.pop(handle)
        run.allocated = False
        self.allocated_bytes -= run.size
        self._release(run)

    def _take(self, size: int, small: bool) -> Any:
        raise NotImplementedError

    def _release(self, run: Any) -> None:
        raise NotImplementedError


class CachingAllocator(Ledger):
    """The replay. `malloc(handle, nbytes)` and `free(handle)` in the step's order; `reserved_bytes` is what
    torch.cuda.memory_reserved would read, `peak_reserved_bytes` its maximum, `allocated_bytes` the rounded live
    requests (torch.cuda.memory_allocated)."""

    def __init__(self, capacity_bytes: int | None = None) -> None:
        super().__init__(capacity_bytes)
        self._pools: dict[bool, list[tuple[tuple[int, int, int], Block]]] = {True: [], False: []}
        self._segments = 0

    def _insert(self, block: Block) -> None:
        bisect.insort(self._pools[block.small], (block.key(), block))

    def _remove(self, block: Block) -> None:
        pool = self._pools[block.small]
        i = bisect.bisect_left(pool, (block.key(),))
        assert pool[i][1] is block, "the free pool lost a block"
        del pool[i]

    def _free_block(self, size: int, small: bool) -> Block | None:
        pool = self._pools[small]
        i = bisect.bisect_left(pool, ((size, -1, -1),))
        if i == len(pool):
            return None
        block = pool[i][1]
        del pool[i]
        return block

    def _new_segment(self, size: int, small: bool) -> Block:
        nbytes = segment_size(size)
        if self.capacity_bytes is not None and self.reserved_bytes + nbytes > self.capacity_bytes:
            self.empty_cache()
            if self.reserved_bytes + nbytes > self.capacity_bytes:
                raise OutOfMemoryError(f"{nbytes} bytes more than {self.capacity_bytes - self.reserved_bytes} free")
        self._segments += 1
        self._reserve(nbytes)
        return Block(self._segments, 0, nbytes, small)

    def _take(self, size: int, small: bool) -> Block:
        block = self._free_block(size, small) or self._new_segment(size, small)
        remaining = block.size - size
        if remaining >= MIN_BLOCK_BYTES if small else remaining > SMALL_REQUEST_BYTES:
            rest = Block(block.segment, block.addr + size, remaining, small)
            cut(block, rest)
            self._insert(rest)
        return block

    def _release(self, block: Block) -> None:
        for other in (block.prev, block.next):
            if other is not None and not other.allocated:
                self._remove(other)
                absorb(block, other)
        self._insert(block)

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache: every free block that is a whole segment goes back to the driver."""
        for small, pool in self._pools.items():
            keep = []
            for key, block in pool:
                if block.prev is None and block.next is None:
                    self.reserved_bytes -= block.size
                else:
                    keep.append((key, block))
            self._pools[small] = keep


def replay(events: Iterable[Event], capacity_bytes: int | None = None,
           make: Callable[[int | None], Ledger] = CachingAllocator) -> Ledger:
    """The allocator `make(capacity_bytes)` makes, after `events`; raises OutOfMemoryError where they do not run in
    `capacity_bytes`."""
    allocator = make(capacity_bytes)
    for handle, nbytes in events:
        if nbytes is None:
            allocator.free(handle)
        else:
            allocator.malloc(handle, nbytes)
    return allocator


def capacity_figures(events: list[Event], make: Callable[[int | None], Ledger] = CachingAllocator,
                     step_bytes: int = LARGE_ROUNDING_BYTES) -> tuple[int, int]:
    """(the reserved peak on a card with room, the least card memory the events run in, a multiple of `step_bytes`).
    The least card is bisected between the peak of the live requests, which no card can go under, and the roomy
    reserved peak, which always runs."""
    roomy = replay(events, make=make)
    low = -(-roomy.peak_allocated_bytes // step_bytes) - 1  # in steps; known to fail (or be the floor)
    high = -(-roomy.peak_reserved_bytes // step_bytes)  # known to run
    while high - low > 1:
        middle = (low + high) // 2
        try:
            replay(events, middle * step_bytes, make)
        except OutOfMemoryError:
            low = middle
        else:
            high = middle
    return roomy.peak_reserved_bytes, high * step_bytes


def minimum_capacity_bytes(events: list[Event], make: Callable[[int | None], Ledger] = CachingAllocator) -> int:
    """The least card memory the events run in (capacity_figures)."""
    return capacity_figures(events, make)[1]
