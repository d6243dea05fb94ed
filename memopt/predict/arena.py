"""The pages ORT's BFC arena touches, for a sequence of allocations and frees.

ORT's CPU and CUDA allocators are BFC arenas (``onnxruntime/core/framework/bfc_arena.cc``):
requests are rounded up to 256 bytes and served best-fit (the smallest free chunk that
fits, the lowest address among equal sizes), a chunk at least twice the request (or
128 MiB more) is split, its head given out; a freed chunk merges with free neighbours of
its region. When no chunk fits the arena grows by a region: 1 MiB first, then doubling
after every region that was big enough (kNextPowerOfTwo), at least the request, at most
1 GiB per doubling. Regions are never given back.

What the process holds is therefore not the live bytes but every page the arena ever
handed out: freed chunks stay resident, and a request that fits no free chunk grows the
arena although enough bytes are free in pieces. ``BFCArena.touched_bytes`` is that
figure; it is what a CPU trial's peak RSS sees of ORT's activations (on CUDA the arena's
reserved bytes play that part).

The free chunks are kept sorted by (size, address), so the best fit is one bisection, not a
scan (ORT's size-binned free lists answer the same question); chunks know their neighbours
in the region, so a free merges without a search either.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable

from memopt.logparse import ArenaGrowth

__all__ = ["ALLOCATE", "FREE", "BFCArena"]

ALLOCATE, FREE = 0, 1  # the operations ``BFCArena.run`` takes

_MIN_ALLOCATION = 256
_INITIAL_REGION = 1 << 20
_MAX_DEAD_BYTES = 128 << 20
_MAX_DOUBLING = 1 << 30
# Region i starts at -(i + 1) << 40: later regions come from later mmaps, which Linux places
# at lower addresses, and no region is ever as large as the gap.
_REGION_SPACING = 40


class _Chunk:
    """A piece of a region; ``previous`` and ``next``: its neighbours' addresses in the region."""

    __slots__ = ("in_use", "next", "previous", "size")

    def __init__(self, size: int, previous: int | None, following: int | None) -> None:
        self.size = size
        self.in_use = False
        self.previous = previous
        self.next = following


class BFCArena:
    """Best-fit-with-coalescing placement, tracking the bytes ever handed out."""

    def __init__(self) -> None:
        self._regions = 0
        self._next_region = _INITIAL_REGION
        self._chunks: dict[int, _Chunk] = {}  # address -> chunk
        self._free: list[tuple[int, int]] = []  # (size, address) of every free chunk, sorted
        self._where: dict[object, int] = {}  # buffer -> address of its chunk
        # Touched byte ranges [start, end), arena-wide (regions never adjoin): sorted and disjoint.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.touched_bytes = 0
        self.reserved_bytes = 0
        self.growth: list[ArenaGrowth] = []  # each region added, for which rounded request

    def allocate(self, buffer: object, size: float) -> None:
        self.run(((ALLOCATE, buffer, size),))

    def free(self, buffer: object) -> None:
        self.run(((FREE, buffer, 0.0),))

    def run(self, operations: Iterable[tuple[int, object, float]]) -> list[tuple[object, int]]:
        """Apply ``operations`` in turn, (ALLOCATE, buffer, bytes) or (FREE, buffer, _); returns
        each buffer whose allocation touched pages not touched before, with ``touched_bytes``
        after it (rare once the first step is played: a caller reads the figure where it
        changed instead of after every operation). One loop for a whole step: a simulation
        runs millions of these."""
        free_chunks, chunks, where, starts = self._free, self._chunks, self._where, self._starts
        touches: list[tuple[object, int]] = []
        for kind, buffer, size in operations:
            if kind == ALLOCATE:
                whole = int(size)
                rounded = -(-whole // _MIN_ALLOCATION) * _MIN_ALLOCATION or _MIN_ALLOCATION
                index = bisect_left(free_chunks, (rounded,))  # the smallest size that fits, the lowest address first
                if index < len(free_chunks):
                    found, address = free_chunks.pop(index)
                else:
                    found, address = self._extend(rounded)
                chunk = chunks[address]
                if found >= 2 * rounded or found - rounded >= _MAX_DEAD_BYTES:
                    rest = address + rounded
                    following = chunk.next
                    chunks[rest] = _Chunk(found - rounded, address, following)
                    if following is not None:
                        chunks[following].previous = rest
                    chunk.next = rest
                    chunk.size = rounded
                    insort(free_chunks, (found - rounded, rest))
                chunk.in_use = True
                where[buffer] = address
                end = address + (whole if whole > 1 else 1)
                i = bisect_right(starts, address) - 1
                if i < 0 or self._ends[i] < end:  # pages not touched before: rare after the first step
                    self._touch(i, address, end)
                    touches.append((buffer, self.touched_bytes))
            else:
                released = where.pop(buffer, None)
                if released is None:
                    continue
                chunk = chunks[released]
                chunk.in_use = False
                following = chunk.next
                if following is not None:
                    after = chunks[following]
                    if not after.in_use:
                        del free_chunks[bisect_left(free_chunks, (after.size, following))]
                        del chunks[following]
                        chunk.size += after.size
                        chunk.next = after.next
                        if after.next is not None:
                            chunks[after.next].previous = released
                previous = chunk.previous
                if previous is not None:
                    before = chunks[previous]
                    if not before.in_use:
                        del free_chunks[bisect_left(free_chunks, (before.size, previous))]
                        del chunks[released]
                        before.size += chunk.size
                        before.next = chunk.next
                        if chunk.next is not None:
                            chunks[chunk.next].previous = previous
                        released, chunk = previous, before
                insort(free_chunks, (chunk.size, released))
        return touches

    def address(self, buffer: object) -> int:
        """Where a live buffer's chunk starts."""
        return self._where[buffer]

    def layout(self) -> tuple[object, ...]:
        """The state placement depends on: regions, chunks, the size of the next region. Two
        arenas with one layout, their live buffers at the same addresses, place alike from there."""
        chunks = tuple(sorted((address, c.size, c.in_use) for address, c in self._chunks.items()))
        return self._regions, self._next_region, chunks

    def _extend(self, rounded: int) -> tuple[int, int]:
        grew = False
        while rounded > self._next_region:
            self._next_region *= 2
            grew = True
        size = self._next_region
        self._regions += 1
        start = -self._regions << _REGION_SPACING
        self._chunks[start] = _Chunk(size, None, None)
        self.reserved_bytes += size
        self.growth.append(ArenaGrowth(rounded, size))
        if not grew:  # ORT doubles the next region, up to the cap, and from there stays at it
            self._next_region = self._next_region * 2 if self._next_region * 2 < _MAX_DOUBLING else _MAX_DOUBLING
        return size, start

    def _touch(self, i: int, start: int, end: int) -> None:
        """Add [start, end) to the touched ranges; ``i``: the last range starting at or before ``start``."""
        starts, ends = self._starts, self._ends
        if i < 0 or ends[i] < start:  # that range does not reach this one
            i += 1
        j, covered = i, 0
        while j < len(starts) and starts[j] <= end:
            covered += ends[j] - starts[j]
            start, end = min(starts[j], start), max(ends[j], end)
            j += 1
        starts[i:j] = [start]
        ends[i:j] = [end]
        self.touched_bytes += end - start - covered
