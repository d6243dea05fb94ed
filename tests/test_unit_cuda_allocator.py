"""PyTorch's CUDA caching allocator, simulated: hand-worked sequences, each checking one rule
of ``c10/cuda/CUDACachingAllocator.cpp`` (the test names say which)."""

from __future__ import annotations

import pytest

from memopt.predict.cuda_caching import (
    K_LARGE_BUFFER,
    K_SMALL_BUFFER,
    CudaCachingAllocator,
    CudaOutOfMemoryError,
    round_size,
    segment_size,
)

KiB = 1 << 10
MiB = 1 << 20


def test_round_size_rounds_up_to_512_bytes_at_least_512() -> None:
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(MiB + 1) == MiB + 512


def test_segment_size_small_2_mib_mid_size_20_mib_larger_rounded_to_2_mib() -> None:
    assert segment_size(512) == K_SMALL_BUFFER
    assert segment_size(MiB) == K_SMALL_BUFFER  # kSmallSize itself is still small
    assert segment_size(MiB + 512) == K_LARGE_BUFFER  # 1 MiB < request < kMinLargeAlloc
    assert segment_size(10 * MiB - 512) == K_LARGE_BUFFER
    assert segment_size(10 * MiB) == 10 * MiB  # kMinLargeAlloc and above: kRoundLarge multiples
    assert segment_size(11 * MiB) == 12 * MiB


def test_small_request_is_rounded_and_takes_a_2_mib_segment() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", 1000)
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (1024, 2 * MiB)
    cuda.allocate("b", 1)  # the split rest of the same segment serves it
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (1536, 2 * MiB)


def test_a_request_of_zero_bytes_allocates_nothing() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("empty", 0)
    cuda.free("empty")
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (0, 0)


def test_small_and_large_pools_never_serve_each_other() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("s1", KiB)  # a 2 MiB small segment, 2 MiB - 1 KiB of it free
    cuda.allocate("large", MiB + 512)  # large: a 20 MiB segment although the small one has room
    assert cuda.reserved_bytes == 2 * MiB + 20 * MiB
    cuda.allocate("s2", 2 * MiB - KiB)  # rounded: large too; the 20 MiB segment's rest serves it
    cuda.allocate("s3", MiB)  # small: the small segment's rest
    cuda.free("large")  # a free block in the large pool
    cuda.allocate("s4", MiB)  # small: the small segment has 1 MiB - 1 KiB left, so a second one
    assert cuda.reserved_bytes == 2 * MiB + 20 * MiB + 2 * MiB


def test_mid_size_requests_share_20_mib_segments() -> None:
    cuda = CudaCachingAllocator()
    for name in "abc":  # 6 MiB each: one 20 MiB segment, split after each (rest 14, 8, 2 MiB)
        cuda.allocate(name, 6 * MiB)
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (18 * MiB, 20 * MiB)
    cuda.allocate("d", 6 * MiB)  # the 2 MiB rest is too small: a second 20 MiB segment
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (24 * MiB, 40 * MiB)


def test_requests_from_10_mib_get_segments_rounded_to_2_mib() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", 10 * MiB)
    cuda.allocate("b", 11 * MiB)
    assert cuda.reserved_bytes == 10 * MiB + 12 * MiB


def test_large_split_needs_more_than_1_mib_left_so_the_whole_block_counts_allocated() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", 11 * MiB)  # a 12 MiB segment; 1 MiB left is not more than kSmallSize
    assert cuda.allocated_bytes == 12 * MiB  # max_memory_allocated counts the whole block
    cuda.allocate("b", 19 * MiB - 512)  # a 20 MiB segment; 1 MiB + 512 left: split
    assert cuda.allocated_bytes == 12 * MiB + 19 * MiB - 512
    cuda.allocate("c", MiB + 512)  # the split rest serves it exactly: no new segment
    assert cuda.reserved_bytes == 32 * MiB


def test_small_split_needs_512_bytes_left() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", MiB)  # 2 MiB small segment, 1 MiB rest
    cuda.allocate("b", MiB - 512)  # 512 left: at least kMinBlockSize, so split
    cuda.allocate("c", 1)  # the 512-byte rest
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (2 * MiB, 2 * MiB)


def test_a_freed_block_is_reused_best_fit_without_reserving_more() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("x", 12 * MiB)  # a 12 MiB segment, used whole
    cuda.allocate("y", 6 * MiB)  # a 20 MiB segment: 6 MiB used, 14 MiB free
    cuda.free("x")  # free blocks: 12 MiB and 14 MiB
    cuda.allocate("z", 7 * MiB)  # best fit: the 12 MiB block (split, 5 MiB left)
    cuda.allocate("w", 13 * MiB)  # only the 14 MiB block fits; 1 MiB left: taken whole
    assert cuda.reserved_bytes == 32 * MiB
    assert cuda.allocated_bytes == 6 * MiB + 7 * MiB + 14 * MiB


def test_equal_free_blocks_go_lowest_address_first() -> None:
    # The tie-break is PyTorch's (BlockComparatorSize: size, then address); the addresses are
    # the simulation's: segments placed in the order they were reserved.
    cuda = CudaCachingAllocator()
    cuda.allocate("head", 6 * MiB)  # segment A, 20 MiB: 6 MiB used, a free 14 MiB rest
    cuda.allocate("whole", 14 * MiB)  # the rest fits it: taken whole (nothing left)
    cuda.allocate("b", 14 * MiB)  # segment B, 14 MiB
    cuda.free("whole")
    cuda.free("b")  # two free 14 MiB blocks: A's rest (lower address) and all of B
    cuda.allocate("again", 14 * MiB)  # A's rest
    cuda.free("head")  # A's head cannot merge with its allocated rest
    cuda.empty_cache()  # only B is wholly free
    assert cuda.reserved_bytes == 20 * MiB


def test_freed_neighbours_coalesce_within_a_segment() -> None:
    cuda = CudaCachingAllocator()
    for name in "abc":  # a 20 MiB segment: a, b, c of 6 MiB and a 2 MiB rest
        cuda.allocate(name, 6 * MiB)
    cuda.free("a")
    cuda.free("c")  # c merges with the 2 MiB rest: free 6 MiB and 8 MiB, apart
    cuda.allocate("d", 14 * MiB)  # neither fits: a new 14 MiB segment
    assert cuda.reserved_bytes == 34 * MiB
    cuda.free("b")  # a, b and c's 8 MiB merge into the whole 20 MiB
    cuda.allocate("e", 20 * MiB)  # served by the merged block: nothing new reserved
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (34 * MiB, 34 * MiB)


def test_segments_are_kept_until_empty_cache_releases_the_wholly_free_ones() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", 6 * MiB)
    cuda.allocate("b", 6 * MiB)
    cuda.allocate("c", 30 * MiB)
    cuda.free("a")
    cuda.free("c")
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (6 * MiB, 50 * MiB)  # freed, still reserved
    cuda.empty_cache()  # the 30 MiB segment is wholly free; the 20 MiB one still holds b
    assert cuda.reserved_bytes == 20 * MiB


def test_peaks_of_allocated_and_reserved_and_their_reset() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", KiB)
    cuda.allocate("b", 3 * MiB)
    cuda.free("b")
    cuda.allocate("c", 2 * MiB)
    assert cuda.peak_allocated_bytes == KiB + 3 * MiB  # live then; now KiB + 2 MiB
    assert cuda.peak_reserved_bytes == 2 * MiB + 20 * MiB  # small segment and one 20 MiB segment
    cuda.reset_peaks()
    cuda.free("c")
    assert (cuda.peak_allocated_bytes, cuda.peak_reserved_bytes) == (KiB + 2 * MiB, 22 * MiB)
    assert cuda.touched_bytes == cuda.reserved_bytes  # cudaMalloc backs every reserved byte


def test_out_of_memory_releases_cached_segments_and_retries() -> None:
    cuda = CudaCachingAllocator(capacity_bytes=40 * MiB)
    cuda.allocate("a", 30 * MiB)
    cuda.free("a")  # 30 MiB cached, unused
    cuda.allocate("b", 34 * MiB)  # 30 + 34 > 40: cudaMalloc fails, the cache is released, retried
    assert (cuda.allocated_bytes, cuda.reserved_bytes, cuda.peak_reserved_bytes) == (34 * MiB, 34 * MiB, 34 * MiB)
    with pytest.raises(CudaOutOfMemoryError):
        cuda.allocate("c", 10 * MiB)  # nothing cached to release: CUDA out of memory


def test_max_split_size_keeps_oversize_blocks_for_oversize_requests() -> None:
    cuda = CudaCachingAllocator(max_split_size=64 * MiB)
    cuda.allocate("big", 100 * MiB)
    cuda.free("big")  # a free 100 MiB block, at least max_split_size: oversize
    cuda.allocate("mid", 40 * MiB)  # below max_split_size: may not take the oversize block
    assert cuda.reserved_bytes == 140 * MiB
    cuda.allocate("over", 70 * MiB)  # oversize, but 100 >= 70 + kLargeBuffer: not that block either
    assert cuda.reserved_bytes == 210 * MiB
    cuda.free("over")
    cuda.allocate("close", 90 * MiB)  # the 100 MiB block, less than kLargeBuffer larger: taken unsplit
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (40 * MiB + 100 * MiB, 210 * MiB)


def test_max_split_size_out_of_memory_first_releases_oversize_segments() -> None:
    cuda = CudaCachingAllocator(max_split_size=32 * MiB, capacity_bytes=140 * MiB)
    cuda.allocate("spare", 10 * MiB)  # a 10 MiB segment, below max_split_size
    cuda.allocate("big", 100 * MiB)
    cuda.free("spare")
    cuda.free("big")
    cuda.allocate("other", 40 * MiB)  # 110 + 40 > 140: only the oversize 100 MiB segment goes
    assert cuda.reserved_bytes == 10 * MiB + 40 * MiB  # empty_cache would have released the 10 MiB too


def test_max_split_size_must_exceed_20_mib() -> None:
    with pytest.raises(ValueError, match="kLargeBuffer"):
        CudaCachingAllocator(max_split_size=20 * MiB)


# The memory model on CUDA: liveness plays the step through the caching allocator.
