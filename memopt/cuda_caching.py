"""What PyTorch's CUDA caching allocator holds for a sequence of allocations and frees; its settings and what lives in its pool.

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

- sizes round up to a multiple of ``kMinBlockSize`` = 512 bytes (``round_size``); with
  ``roundup_power2_divisions:N`` (off by default) a request above ``N`` × 512 bytes that is not
  a power of two rounds up to the next of ``N`` equal steps between the powers of two around
  it (``roundup_power2_next_division``); a request of 0 bytes allocates nothing
  (``NativeCachingAllocator::allocate``: ``if (size != 0)``);
- requests of at most ``kSmallSize`` = 1 MiB come from the small pool, larger ones from the
  large pool (``get_pool``); free blocks of one pool never serve the other;
- when no free block fits, a new segment is ``cudaMalloc``'d (``get_allocation_size``): a
  small request gets ``kSmallBuffer`` = 2 MiB, a large one below ``kMinLargeAlloc`` = 10 MiB
  gets ``kLargeBuffer`` = 20 MiB, anything larger its size rounded up to ``kRoundLarge`` =
  2 MiB;
- a request takes the smallest free block of its pool that fits, the lowest address among
  equal sizes (``get_free_block``, ``BlockComparatorSize``); with ``max_split_size`` set
  (``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb``, unlimited by default, else at least 20 MiB)
  a request below it never takes a block of at least that size, and one at or above it
  takes no block ``max_non_split_rounding_mb`` (default ``kLargeBuffer``) or more larger
  than itself;
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
once), CUDA graphs' private pools, ``expandable_segments`` (segments that grow in place:
PyTorch's OOM message recommends them), ``garbage_collection_threshold``, the
``cudaMallocAsync`` backend and the per-interval list form of ``roundup_power2_divisions``:
``AllocatorSettings`` names the ones a user set in one warning line, and the simulation plays
PyTorch's defaults in their place. What the device runs out of is the reserved bytes plus
what lives outside the allocator (the CUDA context, library workspaces, NCCL buffers);
``capacity_bytes`` is what the device leaves the allocator.

The pool need not start empty: a ``PoolLayout`` read from a trial (``torch.cuda.memory_snapshot``
after its warm-up step) puts its segments in place first, each block held for good (weights,
optimizer state), held by the training loop until the next step's outputs replace them, or
free, so the step's buffers are placed around what already lives there.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from memopt.errors import MemoptError

__all__ = [
    "ALLOC_CONF_VARIABLES",
    "K_LARGE_BUFFER",
    "K_MIN_BLOCK_SIZE",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "K_SMALL_BUFFER",
    "K_SMALL_SIZE",
    "NO_CACHING_VARIABLE",
    "AllocatorSettings",
    "AllocatorSettingsNotModelled",
    "BlockUse",
    "CudaSetup",
    "CudaCachingAllocator",
    "CudaOutOfMemoryError",
    "PoolBlock",
    "PoolLayout",
    "PoolSegment",
    "SimulationMisuse",
    "round_size",
    "segment_size",
]

K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: large allocations may be packed in 20 MiB segments
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 << 20  # kRoundLarge: larger allocations round up to 2 MiB


MiB = 1 << 20
# PyTorch reads its allocator settings from these. Newer releases (``c10/core/AllocatorConfig.cpp``)
# parse the first one set of ``PYTORCH_ALLOC_CONF`` and then ``PYTORCH_CUDA_ALLOC_CONF`` (kept
# for older releases, which read only it): the same is done here.
ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
NO_CACHING_VARIABLE = "PYTORCH_NO_CUDA_MEMORY_CACHING"
# Settings that do not change what the device's allocator holds (pinned host memory, locking).
_HOST_OR_LOCKING = re.compile(r"pinned_\w+|release_lock_on_cudamalloc")


class CudaOutOfMemoryError(MemoptError):
    """``cudaMalloc`` failed even after the allocator released its cached segments."""


class SimulationMisuse(Exception):
    """The simulated allocator was asked to do what a correct caller never does (allocate a
    buffer that is live, free one that is not): a bug in whoever drives it, never hidden."""


class AllocatorSettingsNotModelled(UserWarning):
    """Allocator settings the user set that the simulation plays as PyTorch's defaults."""


@dataclass(frozen=True)
class AllocatorSettings:
    """The caching allocator's settings the simulation follows (PyTorch's defaults unless set):
    ``max_split_size`` and ``max_non_split_rounding`` in bytes, ``roundup_power2_divisions``
    (0: off). ``not_modelled``: settings the user set that it leaves out, as ``key:value``."""

    max_split_size: int | None = None
    max_non_split_rounding: int = K_LARGE_BUFFER
    roundup_power2_divisions: int = 0
    not_modelled: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_split_size is not None and self.max_split_size < K_LARGE_BUFFER:
            # PyTorch's allocator config refuses it: "max_split_size_mb too small, must be >= 20"
            # (releases before its AcceleratorAllocatorConfig refuse 20 itself: "must be > 20").
            raise ValueError(f"max_split_size must be at least {K_LARGE_BUFFER} bytes (kLargeBuffer)")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> AllocatorSettings:
        """The settings a process started with ``environ`` runs PyTorch's allocator with;
        ``MemoptError`` where it runs without the caching allocator (nothing to predict or
        measure: its statistics read 0) or where PyTorch would refuse a setting."""
        if environ.get(NO_CACHING_VARIABLE, "0") not in ("", "0"):
            raise MemoptError(
                f"{NO_CACHING_VARIABLE}={environ[NO_CACHING_VARIABLE]} turns PyTorch's caching allocator off:"
                " its memory statistics then read 0 and nothing can be predicted or judged; unset it"
            )
        variable = next((v for v in reversed(ALLOC_CONF_VARIABLES) if environ.get(v)), ALLOC_CONF_VARIABLES[0])
        return cls.parse(dict(_options(environ.get(variable, ""))), variable)

    @classmethod
    def parse(cls, options: Mapping[str, str], source: str = ALLOC_CONF_VARIABLES[0]) -> AllocatorSettings:
        """The settings of ``key:value`` options as PyTorch's ``CUDAAllocatorConfig::parseArgs`` reads them."""
        max_split: int | None = None
        non_split = K_LARGE_BUFFER
        divisions = 0
        left_out: list[str] = []
        for key, value in options.items():
            if key == "max_split_size_mb":
                max_split = _at_least_large_buffer(source, key, value)
            elif key == "max_non_split_rounding_mb":
                non_split = _at_least_large_buffer(source, key, value)
            elif key == "roundup_power2_divisions" and not value.startswith("["):
                divisions = _whole(source, key, value)
                if divisions & (divisions - 1):
                    raise MemoptError(
                        f"{source}: roundup_power2_divisions:{value} is not a power of 2 (PyTorch refuses it)"
                    )
            elif key == "expandable_segments" and value.lower() == "false":
                continue
            elif key == "backend" and value == "native":
                continue
            elif not _HOST_OR_LOCKING.fullmatch(key):
                left_out.append(f"{key}:{value}")
        return cls(max_split, non_split, divisions, tuple(left_out))

    def warning(self) -> str | None:
        """The one line naming what the simulation leaves out, if anything."""
        if not self.not_modelled:
            return None
        return (
            f"the CUDA prediction plays {', '.join(self.not_modelled)} (PyTorch's allocator settings) as"
            " PyTorch's defaults: the simulation does not model them, so predicted reserved bytes may be off"
        )

    def round(self, size: int) -> int:
        """The block size a request of ``size`` bytes asks for (``round_size``)."""
        if size < K_MIN_BLOCK_SIZE:
            return K_MIN_BLOCK_SIZE
        divisions = self.roundup_power2_divisions
        if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
            return _next_division(size, divisions)
        return K_MIN_BLOCK_SIZE * -(-size // K_MIN_BLOCK_SIZE)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_split_size": self.max_split_size,
            "max_non_split_rounding": self.max_non_split_rounding,
            "roundup_power2_divisions": self.roundup_power2_divisions,
            "not_modelled": list(self.not_modelled),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AllocatorSettings:
        split = data.get("max_split_size")
        return cls(
            None if split is None else int(split),
            int(data.get("max_non_split_rounding", K_LARGE_BUFFER)),
            int(data.get("roundup_power2_divisions", 0)),
            tuple(str(item) for item in data.get("not_modelled", ())),
        )


def _options(text: str) -> Iterable[tuple[str, str]]:
    """``key:value`` pairs of an allocator setting, split at commas outside brackets."""
    for option in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        key, _, value = option.partition(":")
        if key.strip():
            yield key.strip(), value.strip()


def _whole(source: str, key: str, value: str) -> int:
    if not value.isdigit():
        raise MemoptError(f"{source}: {key}:{value} is not a whole number")
    return int(value)


def _at_least_large_buffer(source: str, key: str, value: str) -> int:
    """A ``*_mb`` setting in bytes; PyTorch refuses one under ``kLargeBuffer``'s 20 MiB (releases
    before its ``AcceleratorAllocatorConfig`` refuse 20 itself, and say so when they start)."""
    megabytes = _whole(source, key, value)
    if megabytes < K_LARGE_BUFFER // MiB:
        raise MemoptError(f"{source}: {key}:{value} is too small; PyTorch refuses it too (must be >= 20)")
    return megabytes * MiB


def _next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: ``size`` up to the next of ``divisions`` equal steps
    between the powers of two below and above it (a power of two stays)."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    below = size & ~(step - 1)
    return size if below == size else below + step


def round_size(size: int) -> int:
    """The block size a request of ``size`` bytes asks for with PyTorch's default settings (``round_size``)."""
    return _DEFAULTS.round(size)


def segment_size(rounded: int) -> int:
    """The bytes ``cudaMalloc``'d when no free block fits a ``rounded`` request (``get_allocation_size``)."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-rounded // K_ROUND_LARGE)


class BlockUse(str, Enum):
    """What a block of a pool read from a trial holds while the simulated steps run."""

    RESIDENT = "resident"  # held for good: weights, optimizer state, start-up leftovers
    LOOP = "loop"  # the last step's outputs, held by the training loop until the next step's yield
    FREE = "free"  # cached, free for the step's buffers


class PoolBlock(NamedTuple):
    size: int
    use: BlockUse


class PoolSegment(NamedTuple):
    """One ``cudaMalloc``'d segment, its blocks in address order."""

    small: bool  # a small-pool segment (2 MiB, requests of at most 1 MiB)
    blocks: tuple[PoolBlock, ...]

    @property
    def size(self) -> int:
        return sum(block.size for block in self.blocks)


@dataclass(frozen=True)
class PoolLayout:
    """What lives in the caching allocator's pool before the simulated steps, segments in
    address order: read from a trial's ``torch.cuda.memory_snapshot`` after its warm-up step."""

    segments: tuple[PoolSegment, ...] = ()

    @property
    def reserved_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def held_bytes(self, *uses: BlockUse) -> int:
        return sum(b.size for s in self.segments for b in s.blocks if b.use in uses)

    def held_count(self, use: BlockUse) -> int:
        return sum(b.use is use for s in self.segments for b in s.blocks)

    @classmethod
    def from_snapshot(cls, snapshot: Sequence[Mapping[str, Any]], loop_addresses: Collection[int]) -> PoolLayout:
        """The layout ``torch.cuda.memory_snapshot()`` describes; blocks at ``loop_addresses``
        (the storages of the step's outputs the loop holds) are the loop's."""

        def use(block: Mapping[str, Any]) -> BlockUse:
            if block["state"] == "inactive":
                return BlockUse.FREE
            return BlockUse.LOOP if block["address"] in loop_addresses else BlockUse.RESIDENT

        return cls(
            tuple(
                PoolSegment(
                    segment["segment_type"] == "small",
                    tuple(
                        PoolBlock(int(b["size"]), use(b)) for b in sorted(segment["blocks"], key=lambda b: b["address"])
                    ),
                )
                for segment in sorted(snapshot, key=lambda s: s["address"])
            )
        )

    def residents(self) -> PoolLayout:
        """The segments that hold something for good, the rest of them free: the layout a step
        at any batch fits around (the loop's outputs and the segments the warm-up step left
        wholly cached depend on the trial's batch; the simulation plays its own)."""
        kept = []
        for segment in self.segments:
            if not any(block.use is BlockUse.RESIDENT for block in segment.blocks):
                continue
            blocks: list[PoolBlock] = []
            for size, use in segment.blocks:
                use = BlockUse.FREE if use is BlockUse.LOOP else use
                if use is BlockUse.FREE and blocks and blocks[-1].use is BlockUse.FREE:
                    size += blocks.pop().size
                blocks.append(PoolBlock(size, use))
            kept.append(PoolSegment(segment.small, tuple(blocks)))
        return PoolLayout(tuple(kept))

    def to_json(self) -> list[dict[str, Any]]:
        return [{"small": s.small, "blocks": [[b.size, b.use.value] for b in s.blocks]} for s in self.segments]

    @classmethod
    def from_json(cls, data: Iterable[Mapping[str, Any]]) -> PoolLayout:
        """The layout ``to_json`` wrote; ``ValueError`` where it holds anything else."""
        segments = []
        for segment in data:
            blocks = tuple(PoolBlock(_size(size), BlockUse(use)) for size, use in segment["blocks"])
            if not blocks or not isinstance(segment["small"], bool):
                raise ValueError("a pool segment needs its pool and at least one block")
            segments.append(PoolSegment(segment["small"], blocks))
        return cls(tuple(segments))


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % K_MIN_BLOCK_SIZE:
        raise ValueError(f"{value!r:.40} is not a block size")
    return value


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

    ``settings``: ``PYTORCH_CUDA_ALLOC_CONF`` as far as modelled (PyTorch's defaults unless
    given). ``capacity_bytes``: what ``cudaMalloc`` can reserve in all (None: unlimited); a
    segment that would pass it fails as ``cudaMalloc`` would. ``pool``: what lives in the pool
    before the first request; its loop-held blocks are the buffers ``("loop", i)``, freed by
    ``free`` as any other. ``segment_addresses``: where ``cudaMalloc`` places each new segment,
    in turn (the real ones, read off a device, make the tie-breaks between equal free blocks
    exact); unlimited increasing ones past them."""

    def __init__(
        self,
        settings: AllocatorSettings | None = None,
        capacity_bytes: int | None = None,
        pool: PoolLayout = PoolLayout(),
        segment_addresses: Iterable[int] = (),
    ) -> None:
        self.settings = settings or _DEFAULTS
        self._max_split = self.settings.max_split_size
        self._capacity = capacity_bytes
        self._small = _Pool()
        self._large = _Pool()
        self._live: dict[object, _Block | None] = {}  # buffer -> its block (None: a 0-byte request)
        # cudaMalloc's addresses are the driver's; increasing ones only break ties between
        # free blocks of equal size where the real ones are not known.
        self._addresses = iter(segment_addresses)
        self._segments: list[tuple[int, int]] = []  # (address, size) of each reserved segment, in order
        self._next_address = 0
        self.allocated_bytes = 0
        self.reserved_bytes = 0
        self.peak_allocated_bytes = 0
        self.peak_reserved_bytes = 0
        self.alloc_retries = 0  # torch.cuda.memory_stats()'s num_alloc_retries
        self.ooms = 0  # and num_ooms
        self._place(pool)

    def _place(self, layout: PoolLayout) -> None:
        """Put ``layout``'s segments in place: resident blocks held under keys of their own, the
        loop's as ``("loop", i)``, the free ones in their pool."""
        loop = 0
        for number, segment in enumerate(layout.segments):
            if not self._fits(segment.size):
                raise CudaOutOfMemoryError(
                    f"the pool's {layout.reserved_bytes} bytes pass the capacity {self._capacity}"
                )
            address, before = self._reserve(segment.size), None
            for index, (size, use) in enumerate(segment.blocks):
                block = _Block(address, size, segment.small, prev=before)
                if before is not None:
                    before.next = block
                before, address = block, address + size
                if use is BlockUse.FREE:
                    (self._small if segment.small else self._large).insert(block)
                    continue
                block.allocated = True
                key: object = ("loop", loop) if use is BlockUse.LOOP else ("resident", number, index)
                loop += use is BlockUse.LOOP
                self._live[key] = block
                self.allocated_bytes += size
        self.peak_allocated_bytes = self.allocated_bytes

    @property
    def touched_bytes(self) -> int:
        """Device memory the allocator holds: ``cudaMalloc`` backs every reserved byte at once
        (the counterpart of ``BFCArena.touched_bytes``, the pages ORT's arena wrote)."""
        return self.reserved_bytes

    def allocate(self, buffer: object, size: float) -> None:
        """``malloc`` of ``size`` bytes for ``buffer``; raises ``CudaOutOfMemoryError``, and
        ``SimulationMisuse`` where ``buffer`` is live already."""
        if buffer in self._live:
            raise SimulationMisuse(f"{buffer!r} is allocated twice without a free between")
        requested = math.ceil(size)
        if requested <= 0:
            self._live[buffer] = None
            return
        rounded = self.settings.round(requested)
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
        """Return ``buffer``'s block to its pool, merged with free neighbours; nothing is
        released. ``SimulationMisuse`` where ``buffer`` is not live."""
        if buffer not in self._live:
            raise SimulationMisuse(f"{buffer!r} is freed but not allocated")
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

    def address(self, buffer: object) -> int:
        """Where ``buffer``'s block starts (``KeyError`` where it is not live, or took 0 bytes)."""
        block = self._live[buffer]
        if block is None:
            raise KeyError(buffer)
        return block.address

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
            if rounded >= self._max_split and block.size >= rounded + self.settings.max_non_split_rounding:
                return None  # nor one it would waste max_non_split_rounding_mb (kLargeBuffer) or more of
        pool.remove(block)
        return block

    def _should_split(self, block: _Block, rounded: int) -> bool:
        remaining = block.size - rounded
        if block.small:
            return remaining >= K_MIN_BLOCK_SIZE
        return (self._max_split is None or rounded < self._max_split) and remaining > K_SMALL_SIZE

    def _new_segment(self, rounded: int) -> _Block:
        """``alloc_block``, retried after releasing cached segments as ``malloc`` does."""
        size, small = segment_size(rounded), rounded <= K_SMALL_SIZE
        if not self._fits(size):
            pool = self._small if small else self._large
            if not (self._release_oversize(pool, rounded) and self._fits(size)):
                self.empty_cache()
                self.alloc_retries += 1  # num_alloc_retries: the cudaMalloc after release_cached_blocks
                if not self._fits(size):
                    self.ooms += 1  # num_ooms
                    raise CudaOutOfMemoryError(
                        f"CUDA out of memory. Tried to allocate {size} bytes with {self.reserved_bytes} reserved"
                        f" ({self.allocated_bytes} allocated) of {self._capacity}"
                    )
        return _Block(self._reserve(size), size, small)

    def _reserve(self, size: int) -> int:
        """``cudaMalloc`` of a segment of ``size`` bytes: its address. ``SimulationMisuse``
        where the address given for it overlaps a segment still reserved."""
        address = next(self._addresses, None)
        if address is None:
            address = self._next_address
        index = bisect.bisect_left(self._segments, (address, 0))
        before = self._segments[index - 1] if index else None
        after = self._segments[index] if index < len(self._segments) else None
        if (before is not None and before[0] + before[1] > address) or (
            after is not None and after[0] < address + size
        ):
            raise SimulationMisuse(f"a segment of {size} bytes at {address:#x} overlaps one still reserved")
        self._segments.insert(index, (address, size))
        self._next_address = max(self._next_address, address + size)
        self.reserved_bytes += size
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return address

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
        self._segments.remove((block.address, block.size))
        self.reserved_bytes -= block.size


_DEFAULTS = AllocatorSettings()


@dataclass(frozen=True)
class CudaSetup:
    """What the simulation of a CUDA step starts from: the allocator's settings, and what lives
    in its pool (None: an empty pool, the graph's constants placed first as the weights)."""

    settings: AllocatorSettings = _DEFAULTS
    pool: PoolLayout | None = None

    def allocator(self) -> CudaCachingAllocator:
        return CudaCachingAllocator(self.settings, pool=self.pool or PoolLayout())

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings.to_json(), "pool": None if self.pool is None else self.pool.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CudaSetup:
        """The setup ``to_json`` wrote; ``ValueError`` (or ``KeyError``, ``TypeError``) where it holds anything else."""
        pool = data.get("pool")
        return cls(AllocatorSettings.from_json(data["settings"]), None if pool is None else PoolLayout.from_json(pool))
