"""PyTorch's CUDA caching allocator, simulated: hand-worked sequences, each checking one rule
of ``c10/cuda/CUDACachingAllocator.cpp`` (the test names say which)."""

from __future__ import annotations

import pytest

from memopt.cuda_caching import (
    K_LARGE_BUFFER,
    K_SMALL_BUFFER,
    AllocatorSettings,
    BlockUse,
    CudaCachingAllocator,
    CudaOutOfMemoryError,
    PoolBlock,
    PoolLayout,
    PoolSegment,
    SimulationMisuse,
    round_size,
    segment_size,
)
from memopt.errors import MemoptError

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
    assert (cuda.alloc_retries, cuda.ooms) == (1, 0)  # num_alloc_retries counts the retried cudaMalloc
    with pytest.raises(CudaOutOfMemoryError):
        cuda.allocate("c", 10 * MiB)  # nothing cached to release: CUDA out of memory
    assert (cuda.alloc_retries, cuda.ooms) == (2, 1)


def test_max_split_size_keeps_oversize_blocks_for_oversize_requests() -> None:
    cuda = CudaCachingAllocator(AllocatorSettings(max_split_size=64 * MiB))
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
    cuda = CudaCachingAllocator(AllocatorSettings(max_split_size=32 * MiB), capacity_bytes=140 * MiB)
    cuda.allocate("spare", 10 * MiB)  # a 10 MiB segment, below max_split_size
    cuda.allocate("big", 100 * MiB)
    cuda.free("spare")
    cuda.free("big")
    cuda.allocate("other", 40 * MiB)  # 110 + 40 > 140: only the oversize 100 MiB segment goes
    assert cuda.reserved_bytes == 10 * MiB + 40 * MiB  # empty_cache would have released the 10 MiB too


def test_max_split_size_must_be_at_least_20_mib() -> None:
    with pytest.raises(ValueError, match="kLargeBuffer"):
        AllocatorSettings(max_split_size=19 * MiB)


def test_max_split_size_of_20_mib_makes_a_wholly_free_20_mib_segment_oversize() -> None:
    # PyTorch's AcceleratorAllocatorConfig takes 20 (kLargeBuffer) itself: a mid-size request's
    # 20 MiB segment, once wholly free, is then oversize and serves no request below 20 MiB.
    cuda = CudaCachingAllocator(AllocatorSettings(max_split_size=20 * MiB))
    cuda.allocate("a", 5 * MiB)  # a new 20 MiB segment, split: 5 MiB is below max_split_size
    cuda.free("a")
    cuda.allocate("b", 5 * MiB)  # the free 20 MiB block is oversize: another segment
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (5 * MiB, 40 * MiB)


def test_max_non_split_rounding_widens_what_an_oversize_request_may_take_whole() -> None:
    settings = AllocatorSettings(max_split_size=64 * MiB, max_non_split_rounding=40 * MiB)
    cuda = CudaCachingAllocator(settings)
    cuda.allocate("big", 100 * MiB)
    cuda.free("big")
    cuda.allocate("over", 70 * MiB)  # 100 < 70 + 40: the cached block serves it, unsplit
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (100 * MiB, 100 * MiB)


# Mistakes of the caller are raised, never hidden.


def test_allocating_a_live_buffer_again_raises() -> None:
    cuda = CudaCachingAllocator()
    cuda.allocate("a", KiB)
    with pytest.raises(SimulationMisuse, match="allocated twice"):
        cuda.allocate("a", KiB)
    cuda.allocate("empty", 0)
    with pytest.raises(SimulationMisuse):
        cuda.allocate("empty", 0)  # a 0-byte buffer is live too


def test_freeing_an_unknown_or_freed_buffer_raises() -> None:
    cuda = CudaCachingAllocator()
    with pytest.raises(SimulationMisuse, match="not allocated"):
        cuda.free("never")
    cuda.allocate("a", KiB)
    cuda.free("a")
    with pytest.raises(SimulationMisuse):
        cuda.free("a")
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (0, 2 * MiB)  # nothing was counted twice


# PYTORCH_CUDA_ALLOC_CONF, read as PyTorch reads it.


def test_alloc_conf_settings_the_simulation_models_are_read() -> None:
    settings = AllocatorSettings.from_environment(
        {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,roundup_power2_divisions:4,max_non_split_rounding_mb:64"}
    )
    assert settings == AllocatorSettings(128 * MiB, 64 * MiB, 4)
    assert settings.warning() is None
    assert AllocatorSettings.from_environment({}) == AllocatorSettings()


def test_alloc_conf_settings_left_out_are_named_in_one_line() -> None:
    settings = AllocatorSettings.from_environment(
        {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,garbage_collection_threshold:0.6,"
            "roundup_power2_divisions:[256:1,>:4],pinned_use_cuda_host_register:True,backend:cudaMallocAsync"
        }
    )
    assert settings.not_modelled == (
        "expandable_segments:True",
        "garbage_collection_threshold:0.6",
        "roundup_power2_divisions:[256:1,>:4]",  # the list form, kept whole though it holds commas
        "backend:cudaMallocAsync",
    )  # pinned host memory is no part of the device's pool: not named
    warning = settings.warning()
    assert warning is not None and "\n" not in warning
    assert "expandable_segments:True" in warning and "backend:cudaMallocAsync" in warning
    assert (
        AllocatorSettings.from_environment({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}).warning() is None
    )


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("max_split_size_mb:19", "too small"),
        ("max_non_split_rounding_mb:10", "too small"),
        ("max_split_size_mb:lots", "not a whole number"),
        ("roundup_power2_divisions:3", "not a power of 2"),
    ],
)
def test_alloc_conf_values_pytorch_refuses_are_refused(conf: str, message: str) -> None:
    with pytest.raises(MemoptError, match=message):
        AllocatorSettings.from_environment({"PYTORCH_CUDA_ALLOC_CONF": conf})


def test_pytorch_alloc_conf_where_set_is_read_instead_of_the_cuda_one() -> None:
    # Newer PyTorch parses the first one set of PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF.
    both = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert AllocatorSettings.from_environment(both) == AllocatorSettings(max_split_size=64 * MiB)
    with pytest.raises(MemoptError, match="PYTORCH_ALLOC_CONF: max_split_size_mb:8 is too small"):
        AllocatorSettings.from_environment({"PYTORCH_ALLOC_CONF": "max_split_size_mb:8"})


def test_no_cuda_memory_caching_is_refused_with_a_reason() -> None:
    with pytest.raises(MemoptError, match="PYTORCH_NO_CUDA_MEMORY_CACHING=1 turns PyTorch's caching allocator off"):
        AllocatorSettings.from_environment({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert AllocatorSettings.from_environment({"PYTORCH_NO_CUDA_MEMORY_CACHING": "0"}) == AllocatorSettings()


def test_roundup_power2_divisions_rounds_to_equal_steps_between_powers_of_two() -> None:
    four = AllocatorSettings(roundup_power2_divisions=4)
    # 1 MiB .. 2 MiB in four steps of 256 KiB: 1 MiB + 1 goes to 1.25 MiB.
    assert four.round(MiB + 1) == MiB + 256 * KiB
    assert four.round(MiB + 256 * KiB) == MiB + 256 * KiB  # on a step: kept
    assert four.round(2 * MiB) == 2 * MiB  # a power of two: kept
    assert four.round(1500) == 1536  # not above 4 x 512 bytes... 1500 <= 2048: the 512-byte rounding
    assert four.round(3000) == 3072  # 2048 .. 4096 in steps of 512
    assert four.round(5000) == 5120  # 4096 .. 8192 in steps of 1024
    cuda = CudaCachingAllocator(four)
    cuda.allocate("a", 3 * MiB + 1)  # 2 .. 4 MiB in steps of 512 KiB: 3.5 MiB
    assert cuda.allocated_bytes == 3 * MiB + 512 * KiB


# The pool as a trial leaves it: what already lives there.


def _layout() -> PoolLayout:
    """A 20 MiB large segment: 6 MiB held for good, a free 4 MiB, the loop's 2 MiB, a free 8 MiB;
    and a small 2 MiB segment with 512 bytes held and the rest free."""
    return PoolLayout(
        (
            PoolSegment(
                False,
                (
                    PoolBlock(6 * MiB, BlockUse.RESIDENT),
                    PoolBlock(4 * MiB, BlockUse.FREE),
                    PoolBlock(2 * MiB, BlockUse.LOOP),
                    PoolBlock(8 * MiB, BlockUse.FREE),
                ),
            ),
            PoolSegment(True, (PoolBlock(512, BlockUse.RESIDENT), PoolBlock(2 * MiB - 512, BlockUse.FREE))),
        )
    )


def test_a_pool_layout_is_in_place_before_the_first_request() -> None:
    cuda = CudaCachingAllocator(pool=_layout())
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (8 * MiB + 512, 22 * MiB)
    assert (cuda.peak_allocated_bytes, cuda.peak_reserved_bytes) == (8 * MiB + 512, 22 * MiB)
    # Best fit: the free 4 MiB between the resident and the loop's blocks; 1 MiB left is not
    # more than kSmallSize, so it is taken whole.
    cuda.allocate("a", 3 * MiB)
    cuda.allocate("b", 7 * MiB)  # the free 8 MiB, taken whole likewise
    cuda.allocate("s", MiB)  # the small segment's free rest
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (8 * MiB + 512 + 4 * MiB + 8 * MiB + MiB, 22 * MiB)
    cuda.allocate("c", 2 * MiB)  # nothing in the large pool is free any more: a new segment
    assert cuda.reserved_bytes == 42 * MiB


def test_the_loops_blocks_are_freed_by_the_step_and_merge_with_free_neighbours() -> None:
    cuda = CudaCachingAllocator(pool=_layout())
    cuda.free(("loop", 0))  # the next step's yield drops the last step's outputs
    assert cuda.allocated_bytes == 6 * MiB + 512
    cuda.allocate("a", 14 * MiB)  # 4 + 2 + 8 MiB merged: served without a new segment
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (20 * MiB + 512, 22 * MiB)
    with pytest.raises(SimulationMisuse):
        cuda.free(("loop", 0))


def test_the_residents_keep_their_segment_from_being_released() -> None:
    cuda = CudaCachingAllocator(pool=_layout(), capacity_bytes=30 * MiB)
    cuda.free(("loop", 0))
    cuda.allocate("big", 12 * MiB)  # 4 + 2 + 8 = 14 MiB free in the held segment: fits there
    cuda.free("big")
    with pytest.raises(CudaOutOfMemoryError):  # 22 + 16 > 30 and no wholly free segment to release
        cuda.allocate("more", 16 * MiB)
    assert (cuda.alloc_retries, cuda.ooms, cuda.reserved_bytes) == (1, 1, 22 * MiB)


def test_a_pool_layout_reads_a_memory_snapshot_and_round_trips_through_json() -> None:
    snapshot = [  # torch.cuda.memory_snapshot()'s fields memopt reads; segments out of address order
        {
            "address": 1 << 30,
            "segment_type": "small",
            "blocks": [
                {"address": (1 << 30) + 512, "size": 2 * MiB - 512, "state": "inactive"},
                {"address": 1 << 30, "size": 512, "state": "active_allocated"},
            ],
        },
        {
            "address": 1 << 20,
            "segment_type": "large",
            "blocks": [
                {"address": 1 << 20, "size": 6 * MiB, "state": "active_allocated"},
                {"address": 7 << 20, "size": 4 * MiB, "state": "inactive"},
                {"address": 11 << 20, "size": 2 * MiB, "state": "active_allocated"},
                {"address": 13 << 20, "size": 8 * MiB, "state": "inactive"},
            ],
        },
    ]
    layout = PoolLayout.from_snapshot(snapshot, loop_addresses={11 << 20})
    assert layout == _layout()
    assert (layout.reserved_bytes, layout.held_bytes(BlockUse.RESIDENT)) == (22 * MiB, 6 * MiB + 512)
    assert PoolLayout.from_json(layout.to_json()) == layout
    with pytest.raises(ValueError):
        PoolLayout.from_json([{"small": True, "blocks": [[1000, "resident"]]}])  # not a block size


def test_segment_addresses_given_decide_ties_between_equal_free_blocks() -> None:
    # cudaMalloc placed the second segment below the first: its free block goes first.
    cuda = CudaCachingAllocator(segment_addresses=[8 << 30, 4 << 30])
    cuda.allocate("first", 14 * MiB)  # at 8 GiB
    cuda.allocate("second", 14 * MiB)  # at 4 GiB
    cuda.free("first")
    cuda.free("second")
    cuda.allocate("again", 14 * MiB)  # the lower address: the second segment's
    assert cuda.address("again") == 4 << 30
    cuda.free("again")
    cuda.allocate("held", 14 * MiB)
    cuda.empty_cache()  # the first segment is wholly free and released; the one at 4 GiB holds "held"
    assert (cuda.address("held"), cuda.reserved_bytes) == (4 << 30, 14 * MiB)


@pytest.mark.parametrize(
    ("first_segment_at", "allocated", "reserved"),
    [(0, 39 * MiB, 50 * MiB), (1 << 30, 40 * MiB, 40 * MiB)],
)
def test_where_cudamalloc_puts_segments_changes_allocated_too(
    first_segment_at: int, allocated: int, reserved: int
) -> None:
    # The same requests, the two segments placed in either order. A and B split the first
    # 20 MiB segment (2 MiB left at its end), C and D the second alike. E (2 MiB) takes the
    # lower of the two equal 2 MiB ends. Freeing B merges it with its segment's end only
    # where E went to the other segment: then F (10 MiB) finds those 11 MiB, and as 1 MiB
    # left is not more than kSmallSize, it gets them whole: 40 MiB allocated in 40 reserved.
    # Where E sits after B, B's 9 MiB stay alone, and F gets a new 10 MiB segment: 39 in 50.
    cuda = CudaCachingAllocator(segment_addresses=[first_segment_at, (1 << 30) - first_segment_at])
    for name in "ABCD":
        cuda.allocate(name, 9 * MiB)
    cuda.allocate("E", 2 * MiB)
    assert cuda.address("E") == min(first_segment_at, (1 << 30) - first_segment_at) + 18 * MiB
    cuda.free("B")
    cuda.allocate("F", 10 * MiB)
    assert (cuda.allocated_bytes, cuda.reserved_bytes) == (allocated, reserved)
