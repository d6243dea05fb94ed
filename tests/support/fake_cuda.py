"""A FAKE ``torch.cuda`` for the GPU check's self-test (``bench/gpu/check_allocator.py``): no
GPU runs here, so memopt's own simulation of PyTorch's caching allocator stands in for the
real one behind the calls the check makes. It places each new segment at an address of its
own choosing, as ``cudaMalloc`` does, so the check's two ways of simulating (at the device's
addresses, and at the simulation's own) differ as they can on a GPU."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

from memopt.cuda_caching import AllocatorSettings, CudaCachingAllocator, CudaOutOfMemoryError

GiB = 1 << 30


class FakeCuda:
    """The caching allocator of a FAKE device with ``total_memory`` bytes, run with ``alloc_conf``."""

    OutOfMemoryError = CudaOutOfMemoryError

    def __init__(self, alloc_conf: str = "", total_memory: int = 80 * GiB, seed: int = 0) -> None:
        self._settings = AllocatorSettings.from_environment({"PYTORCH_CUDA_ALLOC_CONF": alloc_conf})
        self._total = total_memory
        self._rng = random.Random(seed)
        self._keys: dict[int, int] = {}  # pointer -> the allocation's key
        self._made = 0
        self._counted = {"num_alloc_retries": 0, "num_ooms": 0}  # by allocators given up
        self._allocator = self._new(None)

    def _addresses(self) -> Iterator[int]:
        """Segment addresses in no order, 1 GiB apart (no segment here is as large)."""
        for slot in self._rng.sample(range(1, 1 << 16), 1 << 12):
            yield slot * GiB

    def _new(self, capacity: int | None) -> CudaCachingAllocator:
        return CudaCachingAllocator(self._settings, capacity, segment_addresses=self._addresses())

    def caching_allocator_alloc(self, size: int) -> int:
        self._made += 1
        self._allocator.allocate(self._made, size)
        pointer = self._allocator.address(self._made)
        self._keys[pointer] = self._made
        return pointer

    def caching_allocator_delete(self, pointer: int) -> None:
        self._allocator.free(self._keys.pop(pointer))

    def memory_allocated(self) -> int:
        return self._allocator.allocated_bytes

    def memory_reserved(self) -> int:
        return self._allocator.reserved_bytes

    def memory_stats(self) -> Mapping[str, Any]:
        return {
            "num_alloc_retries": self._counted["num_alloc_retries"] + self._allocator.alloc_retries,
            "num_ooms": self._counted["num_ooms"] + self._allocator.ooms,
        }

    def mem_get_info(self) -> tuple[int, int]:
        return self._total - self._allocator.reserved_bytes, self._total

    def empty_cache(self) -> None:
        self._allocator.empty_cache()

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """A cap on what the allocator may reserve; set here only while it holds nothing."""
        if self._allocator.reserved_bytes:
            raise AssertionError("the FAKE device sets its cap on an empty allocator only")
        self._counted = dict(self.memory_stats())
        self._allocator = self._new(int(fraction * self._total))
