"""The BFC arena model: placement, reuse of freed chunks, growth, and the pages it hands out."""

from __future__ import annotations

from support.graphs import STEP

from memopt.predict.arena import BFCArena
from memopt.predict.liveness import simulate

MiB = 1 << 20


def test_first_region_is_one_mib_and_regions_double_after_one_that_was_big_enough() -> None:
    arena = BFCArena()
    arena.allocate("a", 1000)
    assert arena.reserved_bytes == MiB
    arena.allocate("b", 8 * MiB)  # larger than the next region (2 MiB): a region of exactly 8 MiB
    arena.allocate("c", 8 * MiB)  # the 8 MiB region was big enough: this one is 8 MiB, the next 16
    arena.allocate("d", 8 * MiB)
    assert arena.reserved_bytes == (1 + 8 + 8 + 16) * MiB


def test_regions_stop_doubling_at_one_gib() -> None:
    arena = BFCArena()
    arena.allocate("a", 512 * MiB)  # a region of exactly 512 MiB (grown to the request)
    arena.allocate("b", 512 * MiB)  # another; doubling would reach 1 GiB, the cap: the next is 1 GiB
    arena.allocate("c", 1024 * MiB)
    arena.allocate("d", 600 * MiB)  # the cap is not doubled: 1 GiB again
    assert arena.reserved_bytes == (512 + 512 + 1024 + 1024) * MiB


def test_a_freed_chunk_is_reused_without_touching_more_pages() -> None:
    arena = BFCArena()
    arena.allocate("a", 4 * MiB)
    arena.free("a")
    arena.allocate("b", 4 * MiB)
    assert arena.touched_bytes == 4 * MiB


def test_best_fit_takes_the_smallest_free_chunk_that_fits() -> None:
    arena = BFCArena()
    arena.allocate("big", 64 * MiB)  # a 64 MiB region, used whole
    arena.allocate("pad", 64 * MiB)  # another; the next region is 128 MiB
    arena.allocate("small", 16 * MiB)  # the head of the 128 MiB region
    arena.free("big")
    arena.free("small")  # free: 64 MiB (all touched) and 128 MiB (16 touched)
    touched = arena.touched_bytes
    arena.allocate("next", 32 * MiB)  # best fit: the 64 MiB chunk, whose pages are already touched
    assert arena.touched_bytes == touched


def test_fragmented_free_bytes_make_the_arena_grow() -> None:
    arena = BFCArena()
    for name in "abcd":  # regions of 8, 8 and 16 MiB; c and d share the last
        arena.allocate(name, 8 * MiB)
    arena.free("a")
    arena.free("c")  # 16 MiB free, in two pieces that cannot merge
    arena.allocate("e", 16 * MiB)  # a new region
    assert arena.touched_bytes == 48 * MiB  # while 32 MiB are live


def test_the_step_simulation_reports_the_arena_high_water_mark() -> None:
    timeline = simulate(STEP, {"b": 1024})  # 1 MiB per tensor: every allocation a chunk of its own
    assert timeline.resident_bytes >= timeline.peak_bytes
