"""The BFC arena model: placement, reuse of freed chunks, growth, and the pages it hands out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.graphs import STEP

import memopt
from memopt.backends.ort.predict.arena import ALLOCATE, FREE, BFCArena
from memopt.backends.ort.predict.liveness import simulate

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


def test_a_run_of_operations_names_the_allocations_that_touched_new_pages() -> None:
    arena = BFCArena()
    touches = arena.run(
        [
            (ALLOCATE, "a", 4 * MiB),  # a 4 MiB region
            (FREE, "a", 0.0),
            (ALLOCATE, "b", 8 * MiB),  # fits no free chunk: an 8 MiB region
            (FREE, "b", 0.0),
            (ALLOCATE, "c", 4 * MiB),  # the first region's pages again: nothing new
        ]
    )
    assert touches == [("a", 4 * MiB), ("b", 12 * MiB)] and arena.reserved_bytes == 12 * MiB


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


class ScanningArena:
    """The arena's rules as plainly as they can be written: every free chunk of every region
    scanned for the best fit, pages tracked one 256-byte granule at a time."""

    def __init__(self) -> None:
        self.regions: list[tuple[int, list[list[int]]]] = []  # (start, [[offset, size, in use]])
        self.next_region = MiB
        self.where: dict[str, tuple[int, int]] = {}  # buffer -> (region, offset)
        self.touched: set[int] = set()  # byte addresses, as granules of 1 byte at the chunk's head
        self.touched_bytes = 0
        self.reserved_bytes = 0

    def allocate(self, buffer: str, size: int) -> None:
        rounded = max(256, -(-size // 256) * 256)
        fits = [
            (chunk[1], start + chunk[0], r, i)
            for r, (start, chunks) in enumerate(self.regions)
            for i, chunk in enumerate(chunks)
            if not chunk[2] and chunk[1] >= rounded
        ]
        if fits:
            _, _, r, i = min(fits)
        else:
            grew = rounded > self.next_region
            while rounded > self.next_region:
                self.next_region *= 2
            self.regions.append((-(len(self.regions) + 1) << 40, [[0, self.next_region, 0]]))
            self.reserved_bytes += self.next_region
            if not grew:
                self.next_region = min(self.next_region * 2, 1 << 30)
            r, i = len(self.regions) - 1, 0
        start, chunks = self.regions[r]
        chunk = chunks[i]
        if chunk[1] >= 2 * rounded or chunk[1] - rounded >= 128 * MiB:
            chunks.insert(i + 1, [chunk[0] + rounded, chunk[1] - rounded, 0])
            chunk[1] = rounded
        chunk[2] = 1
        self.where[buffer] = (r, chunk[0])
        # Sizes here are multiples of 64: count touched bytes in 64-byte granules.
        granules = {(start + chunk[0]) // 64 + k for k in range(-(-max(size, 1) // 64))}
        self.touched_bytes += 64 * len(granules - self.touched)
        self.touched |= granules

    def free(self, buffer: str) -> None:
        r, offset = self.where.pop(buffer)
        chunks = self.regions[r][1]
        i = next(i for i, chunk in enumerate(chunks) if chunk[0] == offset)
        chunks[i][2] = 0
        if i + 1 < len(chunks) and not chunks[i + 1][2]:
            chunks[i][1] += chunks.pop(i + 1)[1]
        if i > 0 and not chunks[i - 1][2]:
            chunks[i - 1][1] += chunks.pop(i)[1]


# Requests in 64-byte steps up to 4 MiB (small enough to share regions, large enough to grow them).
_OPERATIONS = st.lists(st.tuples(st.booleans(), st.integers(1, 1 << 16)), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None)
@given(_OPERATIONS)
def test_placement_matches_a_scan_over_every_free_chunk(operations: list[tuple[bool, int]]) -> None:
    arena, reference = BFCArena(), ScanningArena()
    live: list[str] = []
    for number, (allocate, granules) in enumerate(operations):
        if allocate or not live:
            name = f"t{number}"
            arena.allocate(name, 64 * granules)
            reference.allocate(name, 64 * granules)
            live.append(name)
        else:
            name = live.pop(granules % len(live))
            arena.free(name)
            reference.free(name)
        assert (arena.touched_bytes, arena.reserved_bytes) == (reference.touched_bytes, reference.reserved_bytes)


def test_the_arena_places_alike_past_the_size_of_its_first_arrays() -> None:
    """Thousands of chunks, free chunks and touched ranges: the compiled loop stops where its
    arrays are full, they grow, and it resumes at that operation."""
    arena, reference = BFCArena(), ScanningArena()
    names = [f"t{number}" for number in range(1500)]
    for number, name in enumerate(names):
        arena.allocate(name, 64 * (1 + number % 37))
        reference.allocate(name, 64 * (1 + number % 37))
    for name in names[::2]:  # every other chunk freed: hundreds of free chunks that cannot merge
        arena.free(name)
        reference.free(name)
    touches = arena.run([(ALLOCATE, f"u{number}", 64 * (40 + number)) for number in range(400)])
    for number in range(400):
        reference.allocate(f"u{number}", 64 * (40 + number))
    assert (arena.touched_bytes, arena.reserved_bytes) == (reference.touched_bytes, reference.reserved_bytes)
    assert touches and touches[-1][1] == arena.touched_bytes


@pytest.mark.subprocess
def test_the_arena_runs_where_its_compiled_code_cannot_be_cached(tmp_path: Path) -> None:
    """memopt installed read-only, with no writable home: numba compiles in the process instead
    of failing to import (a real read-only tmpfs, root only)."""
    disk = tmp_path / "readonly"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copytree(Path(memopt.__file__).parent, disk / "memopt", ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        home = str(disk / "home")  # does not exist and cannot be made
        script = "from memopt.backends.ort.predict.arena import BFCArena; a = BFCArena(); a.allocate('x', 100); print(a.touched_bytes)"
        env = {**os.environ, "PYTHONPATH": str(disk), "HOME": home, "XDG_CACHE_HOME": home}
        env.pop("NUMBA_CACHE_DIR", None)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert (done.returncode, done.stdout.strip()) == (0, "100"), done.stderr
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_prepared_operations_must_name_reserved_buffers_and_whole_requests() -> None:
    arena = BFCArena()
    first = arena.reserve(2)
    with pytest.raises(ValueError, match="did not reserve"):
        arena.numbered(np.array([ALLOCATE]), np.array([first + 2]), np.array([100.0]))
    with pytest.raises(ValueError, match="not a number of bytes"):
        arena.numbered(np.array([ALLOCATE]), np.array([first]), np.array([float("nan")]))
    with pytest.raises(ValueError, match="not live"):
        arena.addresses(np.array([first]))
