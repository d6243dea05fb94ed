"""What PyTorch's CUDA caching allocator holds for a sequence of allocations and frees.

On CUDA, ORTModule hands ORT's allocations to PyTorch (``use_external_gpu_allocator``,
default True in ``onnxruntime/training/ortmodule/options.py``: ORT's CUDA provider gets
``gpu_external_alloc``/``free``, which call ``c10::Allocator::raw_allocate``), and ORT puts no
BFC arena in front of an external allocator (``CUDAExecutionProvider::CreateCudaAllocator``
creates it with ``use_arena = false``). So ORT's activations, PyTorch's own tensors and the
training loop's all live in one allocator: PyTorch's ``DeviceCachingAllocator``
(``c10/cuda/CUDACachingAllocator.cpp``). The rules below were read at pytorch/pytorch commit
eb42ad6eca0ce61e7c581212b4bf32f991425571; which release it belongs to was not established.
torch 2.4.1 as installed has its interface (``kLargeBuffer`` exported from
``c10/cuda/CUDACachingAllocator.h``, ``CUDAAllocatorConfig.h``'s options) and its messages
(``libc10_cuda.so``: "max_split_size_mb too small, must be > ", "is reserved by PyTorch but
unallocated"), but 2.4.1's ``.cpp`` itself was not read.

- sizes round up to a multiple of ``kMinBlockSize`` = 512 bytes (``round_size``;
  ``roundup_power2_divisions`` is off by default); a request of 0 bytes allocates nothing
  (``NativeCachingAllocator::allocate``: ``if (size != 0)``);
- requests of at most ``kSmallSize`` = 1 MiB come from the small pool, larger ones from the
  large pool (``get_pool``); free blocks of one pool never serve the other;
- when no free block fits, a new segment is ``cudaMalloc``'d (``get_allocation_size``): a
  small request gets ``kSmallBuffer`` = 2 MiB, a large one below ``kMinLargeAlloc`` = 10 MiB
  gets ``kLargeBuffer`` = 20 MiB, anything larger its size rounded up to ``kRoundLarge`` =
  2 MiB;
- a request takes the smallest free block of its pool that fits, the lowest address among
  equal sizes (``get_free_block``, ``BlockComparatorSize``); with ``max_split_size`` set
  (``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb``, unlimited by default, else above 20 MiB)
  a request below it never takes a block of at least that size, and one at or above it
  takes no block ``kLargeBuffer`` or more larger than itself;
- the block is split, its head given out, when the rest is at least ``kMinBlockSize`` in
  the small pool, more than ``kSmallSize`` in the large pool (and the request is below
  ``max_split_size``); otherwise the whole block is given out, and counted allocated
  (``should_split``, ``alloc_found_block``);
- a freed block merges with free neighbours of its segment (``free_block``,
  ``try_merge_blocks``); segments are never given back, except by ``empty_cache`` or when
  ``cudaMalloc`` fails: then the oversize free segments that cover the request (only with
  ``max_split_size`` set, ``release_available_cached_blocks``), then every wholly free
  segment (``release_cached_blocks``) are released and the ``cudaMalloc`` retried; if that
  fails too it is CUDA's out-of-memory error.

``allocated_bytes`` is what ``torch.cuda.memory_allocated`` reports (block sizes, so an
unsplit block counts whole) and ``reserved_bytes`` what ``torch.cuda.memory_reserved``
does (every segment); their peaks are ``max_memory_allocated``/``max_memory_reserved``.
Out of scope: several streams (one stream assumed: a block freed on it is reusable at
once), CUDA graphs' private pools, ``expandable_segments`` and the garbage-collection
threshold. What the device runs out of is the reserved bytes plus what lives outside the
allocator (the CUDA context, library workspaces, NCCL buffers); ``capacity_bytes`` is what
the device leaves the allocator.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from memopt.errors import MemoptError

__all__ = [
    "K_LARGE_BUFFER",
    "K_MIN_BLOCK_SIZE",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "K_SMALL_BUFFER",
    "K_SMALL_SIZE",
    "CudaCachingAllocator",
    "CudaOutOfMemoryError",
    "round_size",
    "segment_size",
]

K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: large allocations may be packed in 20 MiB segments
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 << 20  # kRoundLarge: larger allocations round up to 2 MiB


class CudaOutOfMemoryError(MemoptError):
    """``cudaMalloc`` failed even after the allocator released its cached segments."""


def round_size(size: int) -> int:
    """The block size a request of ``size`` bytes asks for (``round_size``)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * -(-size // K_MIN_BLOCK_SIZE)


def segment_size(rounded: int) -> int:
    """The bytes ``cudaMalloc``'d when no free block fits a ``rounded`` request (``get_allocation_size``)."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-rounded // K_ROUND_LARGE)


@dataclass(eq=False, slots=True)
class _Block:
    address: int
    size: int
    small: bool  # its pool: small blocks come from 2 MiB segments
    allocated: bool = False
    prev: _Block | None = None  # neighbours in its segment
    next: _Block | None = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


@dataclass
class _Pool:
    """Free blocks ordered as ``BlockComparatorSize`` orders them: by size, then address."""

    keys: list[tuple[int, int]] = field(default_factory=list)
    blocks: dict[int, _Block] = field(default_factory=dict)  # address -> free block

    def insert(self, block: _Block) -> None:
        bisect.insort(self.keys, (block.size, block.address))
        self.blocks[block.address] = block

    def remove(self, block: _Block) -> None:
        del self.keys[bisect.bisect_left(self.keys, (block.size, block.address))]
        del self.blocks[block.address]

    def smallest_from(self, size: int) -> _Block | None:
        """The smallest free block of at least ``size`` bytes, the lowest address among equals."""
        index = bisect.bisect_left(self.keys, (size, -1))
        return self.blocks[self.keys[index][1]] if index < len(self.keys) else None


class CudaCachingAllocator:
    """PyTorch's caching allocator on one device and one stream: live and reserved bytes, with peaks.

    ``max_split_size``: ``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb`` in bytes (None: unlimited,
    PyTorch's default). ``capacity_bytes``: what ``cudaMalloc`` can reserve in all (None:
    unlimited); a segment that would pass it fails as ``cudaMalloc`` would."""

    def __init__(self, max_split_size: int | None = None, capacity_bytes: int | None = None) -> None:
        if max_split_size is not None and max_split_size <= K_LARGE_BUFFER:
            # CUDAAllocatorConfig refuses it: "max_split_size_mb too small, must be > 20".
            raise ValueError(f"max_split_size must be above {K_LARGE_BUFFER} bytes (kLargeBuffer)")
        self._max_split = max_split_size
        self._capacity = capacity_bytes
        self._small = _Pool()
        self._large = _Pool()
        self._live: dict[object, _Block | None] = {}  # buffer -> its block (None: a 0-byte request)
        # cudaMalloc's addresses are the driver's; increasing ones only break ties between
        # free blocks of equal size.
        self._next_address = 0
        self.allocated_bytes = 0
        self.reserved_bytes = 0
        self.peak_allocated_bytes = 0
        self.peak_reserved_bytes = 0

    @property
    def touched_bytes(self) -> int:
        """Device memory the allocator holds: ``cudaMalloc`` backs every reserved byte at once
        (the counterpart of ``BFCArena.touched_bytes``, the pages ORT's arena wrote)."""
        return self.reserved_bytes

    def allocate(self, buffer: object, size: float) -> None:
        """``malloc`` of ``size`` bytes for ``buffer``; raises ``CudaOutOfMemoryError``."""
        requested = math.ceil(size)
        if requested <= 0:
            self._live[buffer] = None
            return
        rounded = round_size(requested)
        pool = self._small if rounded <= K_SMALL_SIZE else self._large
        block = self._free_block(pool, rounded)
        if block is None:
            block = self._new_segment(rounded)
        if self._should_split(block, rounded):
            rest = _Block(block.address + rounded, block.size - rounded, block.small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = rounded
            pool.insert(rest)
        block.allocated = True
        self._live[buffer] = block
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)

    def free(self, buffer: object) -> None:
        """Return ``buffer``'s block to its pool, merged with free neighbours; nothing is released."""
        if buffer not in self._live:
            return
        block = self._live.pop(buffer)
        if block is None:
            return
        self.allocated_bytes -= block.size
        block.allocated = False
        pool = self._small if block.small else self._large
        before, after = block.prev, block.next
        if before is not None and not before.allocated:
            pool.remove(before)
            before.size += block.size
            before.next = after
            if after is not None:
                after.prev = before
            block = before
        if after is not None and not after.allocated:
            pool.remove(after)
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
        pool.insert(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache``: release every wholly free segment (``release_cached_blocks``)."""
        for pool in (self._large, self._small):
            for block in [b for b in pool.blocks.values() if not b.is_split()]:
                self._release(pool, block)

    def reset_peaks(self) -> None:
        """``torch.cuda.reset_peak_memory_stats``: the peaks start again from the current figures."""
        self.peak_allocated_bytes = self.allocated_bytes
        self.peak_reserved_bytes = self.reserved_bytes

    def _free_block(self, pool: _Pool, rounded: int) -> _Block | None:
        block = pool.smallest_from(rounded)
        if block is None:
            return None
        if self._max_split is not None:
            if rounded < self._max_split <= block.size:
                return None  # an oversize block serves no request below max_split_size
            if rounded >= self._max_split and block.size >= rounded + K_LARGE_BUFFER:
                return None  # nor one it would waste kLargeBuffer or more of
        pool.remove(block)
        return block

    def _should_split(self, block: _Block, rounded: int) -> bool:
        remaining = block.size - rounded
        if block.small:
            return remaining >= K_MIN_BLOCK_SIZE
        return (self._max_split is None or rounded < self._max_split) and remaining > K_SMALL_SIZE

    def _new_segment(self, rounded: int) -> _Block:
        """``alloc_block``, retried after releasing cached segments as ``malloc`` does."""
        size = segment_size(rounded)
        if not self._fits(size):
            pool = self._small if rounded <= K_SMALL_SIZE else self._large
            if not (self._release_oversize(pool, rounded) and self._fits(size)):
                self.empty_cache()
                if not self._fits(size):
                    raise CudaOutOfMemoryError(
                        f"CUDA out of memory. Tried to allocate {size} bytes with {self.reserved_bytes} reserved"
                        f" ({self.allocated_bytes} allocated) of {self._capacity}"
                    )
        block = _Block(self._next_address, size, rounded <= K_SMALL_SIZE)
        self._next_address += size
        self.reserved_bytes += size
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return block

    def _fits(self, size: int) -> bool:
        return self._capacity is None or self.reserved_bytes + size <= self._capacity

    def _release_oversize(self, pool: _Pool, rounded: int) -> bool:
        """``release_available_cached_blocks``: with ``max_split_size`` set, release the smallest
        free oversize segment that covers the request, else the largest ones until they do."""
        if self._max_split is None:
            return False
        wanted = max(rounded, self._max_split)
        block = pool.smallest_from(wanted)
        if block is not None:
            self._release(pool, block)
            return True
        released = 0
        for size, address in reversed(list(pool.keys)):
            if released >= wanted or size < self._max_split:
                break
            released += size
            self._release(pool, pool.blocks[address])
        return released >= wanted

    def _release(self, pool: _Pool, block: _Block) -> None:
        """``release_block``: ``cudaFree`` a wholly free segment."""
        pool.remove(block)
        self.reserved_bytes -= block.size
