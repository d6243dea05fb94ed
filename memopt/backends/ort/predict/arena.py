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
in the region, so a free merges without a search either. The loop over operations is compiled
(``memopt.backends.ort.predict.arena_kernel``, numba): a planner plays hundreds of training steps of
thousands of operations each, and in Python that loop was most of its time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from memopt.backends.ort.logparse import ArenaGrowth
from memopt.backends.ort.predict import arena_kernel as kernel
from memopt.backends.ort.predict.arena_kernel import ALLOCATE, FREE

__all__ = ["ALLOCATE", "FREE", "BFCArena", "Operations"]

_INITIAL_REGION = 1 << 20


class Operations(NamedTuple):
    """Operations numbered for one arena (``BFCArena.numbered``), to play once or many times."""

    kinds: np.ndarray  # ALLOCATE or FREE
    buffers: np.ndarray  # the arena's number for each operation's buffer
    sizes: np.ndarray  # bytes requested (0 for a free)


class BFCArena:
    """Best-fit-with-coalescing placement, tracking the bytes ever handed out."""

    def __init__(self) -> None:
        self._scalars = np.zeros(kernel.SCALARS, dtype=np.int64)
        self._scalars[kernel.NEXT_REGION] = _INITIAL_REGION
        # As many free-list slots as chunk numbers, grown together: the loop checks only the chunks.
        self._chunks = np.zeros((6, 256), dtype=np.int64)  # address, size, used, previous, next, spare
        self._free = np.zeros((3, 256), dtype=np.int64)  # size, address, chunk: sorted by (size, address)
        self._ranges = np.zeros((2, 64), dtype=np.int64)  # touched [start, end): sorted, disjoint
        self._growth = np.zeros(64, dtype=np.int64)  # (rounded request, region size) per region
        self._touches = np.zeros((2, 256), dtype=np.int64)  # operation, touched bytes after it
        self._numbers: dict[object, int] = {}  # a buffer ``run`` allocated -> its number, for good
        self._reserved = 0  # buffer numbers handed out
        self._where = np.full(256, -1, dtype=np.int64)  # buffer number -> its chunk, -1 for none

    @property
    def touched_bytes(self) -> int:
        return int(self._scalars[kernel.TOUCHED])

    @property
    def reserved_bytes(self) -> int:
        return int(self._scalars[kernel.RESERVED])

    @property
    def growth(self) -> list[ArenaGrowth]:
        """Each region added, for which rounded request."""
        pairs = self._growth[: 2 * self._scalars[kernel.GROWN]].reshape(-1, 2)
        return [ArenaGrowth(int(requested), int(size)) for requested, size in pairs]

    def allocate(self, buffer: object, size: float) -> None:
        self.run(((ALLOCATE, buffer, size),))

    def free(self, buffer: object) -> None:
        self.run(((FREE, buffer, 0.0),))

    def reserve(self, count: int) -> int:
        """Numbers for ``count`` buffers that no other buffer of this arena has: the first of them
        (``numbered`` takes buffers by these numbers)."""
        first = self._reserved
        self._reserved += count
        if self._reserved > len(self._where):
            grown = np.full(max(self._reserved, 2 * len(self._where)), -1, dtype=np.int64)
            grown[: len(self._where)] = self._where
            self._where = grown
        return first

    def numbered(self, kinds: np.ndarray, buffers: np.ndarray, sizes: np.ndarray) -> Operations:
        """Operations in the form ``play`` takes: ``kinds`` ALLOCATE or FREE, ``buffers`` numbers
        from ``reserve``, ``sizes`` bytes (whole bytes are requested: the fraction dropped).
        ValueError where a number was not reserved or a size is not a count of bytes."""
        if len(buffers) and not (0 <= buffers.min() and buffers.max() < self._reserved):
            raise ValueError("a buffer number this arena did not reserve")
        if len(sizes) and not (np.isfinite(sizes).all() and 0 <= sizes.min() and sizes.max() < 2.0**63):
            raise ValueError("a request that is not a number of bytes")
        return Operations(kinds.astype(np.int64), buffers.astype(np.int64), sizes.astype(np.int64))

    def run(self, operations: Iterable[tuple[int, object, float]]) -> list[tuple[object, int]]:
        """Apply ``operations`` in turn, (ALLOCATE, buffer, bytes) or (FREE, buffer, _); returns
        each buffer whose allocation touched pages not touched before, with ``touched_bytes``
        after it."""
        numbers = self._numbers
        listed = []
        for kind, buffer, size in operations:
            if kind == ALLOCATE and buffer not in numbers:
                numbers[buffer] = self.reserve(1)
            if buffer in numbers:  # a free of a buffer never allocated does nothing
                listed.append((kind, buffer, int(size)))
        indices, touched = self.play(
            self.numbered(
                np.array([kind for kind, _, _ in listed], dtype=np.int64),
                np.array([numbers[buffer] for _, buffer, _ in listed], dtype=np.int64),
                np.array([size for _, _, size in listed], dtype=np.int64),
            )
        )
        return [(listed[i][1], int(t)) for i, t in zip(indices, touched)]

    def play(self, operations: Operations) -> tuple[np.ndarray, np.ndarray]:
        """Apply prepared ``operations``; returns the indices of the allocations that touched
        pages not touched before, and ``touched_bytes`` after each (rare once the first step is
        played: a caller reads the figure where it changed instead of after every operation)."""
        self._scalars[kernel.TOUCHES] = 0
        start = 0
        while True:
            start = kernel.run_operations(
                operations.kinds,
                operations.buffers,
                operations.sizes,
                start,
                self._scalars,
                self._chunks,
                self._free,
                self._where,
                self._ranges,
                self._growth,
                self._touches,
            )
            if start < 0:
                break
            self._grow()
        count = self._scalars[kernel.TOUCHES]
        return self._touches[0, :count].copy(), self._touches[1, :count].copy()

    def addresses(self, numbers: np.ndarray) -> tuple[int, ...]:
        """Where the chunk of each live buffer of ``numbers`` (from ``reserve``) starts."""
        chunks = self._where[numbers]
        if (chunks < 0).any():
            raise ValueError("a buffer that is not live has no address")
        return tuple(self._chunks[0, chunks].tolist())

    def layout(self) -> tuple[object, ...]:
        """The state placement depends on: regions, chunks, the size of the next region. Two
        arenas with one layout, their live buffers at the same addresses, place alike from there."""
        address, size, used = self._chunks[:3, : self._scalars[kernel.CHUNKS]]
        alive = address != 0  # a chunk merged into its neighbour: its number is spare
        order = np.argsort(address[alive], kind="stable")
        chunks = np.stack([address[alive][order], size[alive][order], used[alive][order]])
        return int(self._scalars[kernel.REGIONS]), int(self._scalars[kernel.NEXT_REGION]), chunks.tobytes()

    def _grow(self) -> None:
        """Double every array the compiled loop writes (it stopped before one could overflow)."""
        self._chunks = np.concatenate([self._chunks, np.zeros_like(self._chunks)], axis=1)
        self._free = np.concatenate([self._free, np.zeros_like(self._free)], axis=1)
        self._ranges = np.concatenate([self._ranges, np.zeros_like(self._ranges)], axis=1)
        self._growth = np.concatenate([self._growth, np.zeros_like(self._growth)])
        self._touches = np.concatenate([self._touches, np.zeros_like(self._touches)], axis=1)
