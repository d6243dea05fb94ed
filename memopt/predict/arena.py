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
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["BFCArena"]

_MIN_ALLOCATION = 256
_INITIAL_REGION = 1 << 20
_MAX_DEAD_BYTES = 128 << 20
_MAX_DOUBLING = 1 << 30


@dataclass
class _Region:
    start: int  # arena-wide address of the region's first byte
    size: int
    # Chunks in address order as [offset, size, in_use]; they tile the region.
    chunks: list[list[int]] = field(default_factory=list)
    # Touched byte ranges [start, end) in the region, sorted and disjoint.
    touched: list[list[int]] = field(default_factory=list)


class BFCArena:
    """Best-fit-with-coalescing placement, tracking the bytes ever handed out."""

    def __init__(self) -> None:
        self._regions: list[_Region] = []
        self._next_region = _INITIAL_REGION
        self._where: dict[object, tuple[_Region, int]] = {}  # buffer -> (region, chunk offset)
        self.touched_bytes = 0
        self.reserved_bytes = 0

    def allocate(self, buffer: object, size: float) -> None:
        rounded = max(_MIN_ALLOCATION, -(-int(size) // _MIN_ALLOCATION) * _MIN_ALLOCATION)
        found = self._best_fit(rounded)
        if found is None:
            found = self._extend(rounded)
        region, index = found
        chunk = region.chunks[index]
        if chunk[1] >= 2 * rounded or chunk[1] - rounded >= _MAX_DEAD_BYTES:
            region.chunks.insert(index + 1, [chunk[0] + rounded, chunk[1] - rounded, 0])
            chunk[1] = rounded
        chunk[2] = 1
        self._where[buffer] = (region, chunk[0])
        self._touch(region, chunk[0], chunk[0] + max(int(size), 1))

    def free(self, buffer: object) -> None:
        placed = self._where.pop(buffer, None)
        if placed is None:
            return
        region, offset = placed
        offsets = [c[0] for c in region.chunks]
        index = bisect.bisect_left(offsets, offset)
        chunks = region.chunks
        chunks[index][2] = 0
        if index + 1 < len(chunks) and not chunks[index + 1][2]:
            chunks[index][1] += chunks.pop(index + 1)[1]
        if index > 0 and not chunks[index - 1][2]:
            chunks[index - 1][1] += chunks.pop(index)[1]

    def _best_fit(self, rounded: int) -> tuple[_Region, int] | None:
        best: tuple[int, int] | None = None
        found: tuple[_Region, int] | None = None
        for region in self._regions:
            for index, (offset, size, in_use) in enumerate(region.chunks):
                if in_use or size < rounded:
                    continue
                key = (size, region.start + offset)
                if best is None or key < best:
                    best, found = key, (region, index)
        return found

    def _extend(self, rounded: int) -> tuple[_Region, int]:
        grew = False
        while rounded > self._next_region:
            self._next_region *= 2
            grew = True
        size = self._next_region
        # Later regions come from later mmaps, which Linux places at lower addresses.
        start = -(len(self._regions) + 1) << 40
        region = _Region(start, size, [[0, size, 0]])
        self._regions.append(region)
        self.reserved_bytes += size
        if not grew:  # ORT doubles the next region, up to the cap, and from there stays at it
            self._next_region = self._next_region * 2 if self._next_region * 2 < _MAX_DOUBLING else _MAX_DOUBLING
        return region, 0

    def _touch(self, region: _Region, start: int, end: int) -> None:
        ranges = region.touched
        i = bisect.bisect_left(ranges, [start, start])
        if i > 0 and ranges[i - 1][1] >= start:
            i -= 1
        j, covered = i, 0
        while j < len(ranges) and ranges[j][0] <= end:
            covered += ranges[j][1] - ranges[j][0]
            start, end = min(ranges[j][0], start), max(ranges[j][1], end)
            j += 1
        ranges[i:j] = [[start, end]]
        self.touched_bytes += end - start - covered
