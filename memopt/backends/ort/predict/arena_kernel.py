"""The BFC arena's placement loop, compiled with numba: ``memopt.backends.ort.predict.arena`` holds the rules
and the state; this module only the loop a simulation runs millions of times.

State lives in int64 arrays (``BFCArena`` owns them) that the loop reads and writes in place.
Chunks are numbered; each knows its address, size, use and its neighbours in the region (chunk
numbers, -1 for none). The free chunks are kept sorted by (size, address), the touched byte
ranges sorted and disjoint. When an array is full the loop stops before the allocation that
could overflow it and returns that operation's index: the caller grows the arrays and resumes
there. numba checks no index: the caller hands in buffer numbers the ``where`` array holds.
"""

from __future__ import annotations

import numpy as np

from memopt.compiled import compiled

__all__ = [
    "ALLOCATE",
    "CHUNKS",
    "FREE",
    "FREE_CHUNKS",
    "GROWN",
    "NEXT_REGION",
    "RANGES",
    "REGIONS",
    "RESERVED",
    "SCALARS",
    "SPARE",
    "TOUCHED",
    "TOUCHES",
    "run_operations",
]

ALLOCATE, FREE = 0, 1  # an operation's kind
# The scalars of ``scalars``, by index.
REGIONS, NEXT_REGION, TOUCHED, RESERVED, CHUNKS, SPARE, FREE_CHUNKS, RANGES, GROWN, TOUCHES = range(10)
SCALARS = 10

_MIN_ALLOCATION = 256
_MAX_DEAD_BYTES = 128 << 20
_MAX_DOUBLING = 1 << 30
_REGION_SPACING = 40


@compiled
def _free_index(free_size: np.ndarray, free_address: np.ndarray, count: int, size: int, address: int) -> int:
    """The first position in the free list not below (size, address)."""
    low, high = 0, count
    while low < high:
        middle = (low + high) >> 1
        if free_size[middle] < size or (free_size[middle] == size and free_address[middle] < address):
            low = middle + 1
        else:
            high = middle
    return low


@compiled
def _insert_free(
    free_size: np.ndarray,
    free_address: np.ndarray,
    free_chunk: np.ndarray,
    count: int,
    chunk: int,
    size: int,
    address: int,
) -> None:
    at = _free_index(free_size, free_address, count, size, address)
    for k in range(count, at, -1):
        free_size[k], free_address[k], free_chunk[k] = free_size[k - 1], free_address[k - 1], free_chunk[k - 1]
    free_size[at], free_address[at], free_chunk[at] = size, address, chunk


@compiled
def _remove_free(free_size: np.ndarray, free_address: np.ndarray, free_chunk: np.ndarray, count: int, at: int) -> None:
    for k in range(at, count - 1):
        free_size[k], free_address[k], free_chunk[k] = free_size[k + 1], free_address[k + 1], free_chunk[k + 1]


@compiled
def _merge(
    left: int, right: int, listed: int, free: np.ndarray, free_count: int, chunks: np.ndarray, scalars: np.ndarray
) -> None:
    """Chunk ``right`` joins its neighbour ``left``; ``listed``, the one of them that was free
    before, leaves the free list (one entry fewer), ``right``'s number becomes spare."""
    chunk_address, chunk_size, _, chunk_previous, chunk_next, spare_chunks = chunks
    free_size, free_address, free_chunk = free
    at = _free_index(free_size, free_address, free_count, chunk_size[listed], chunk_address[listed])
    _remove_free(free_size, free_address, free_chunk, free_count, at)
    chunk_size[left] += chunk_size[right]
    after = chunk_next[right]
    chunk_next[left] = after
    if after >= 0:
        chunk_previous[after] = left
    chunk_address[right] = 0
    spare_chunks[scalars[SPARE]] = right
    scalars[SPARE] += 1


@compiled
def _new_chunk(scalars: np.ndarray, spare_chunks: np.ndarray) -> int:
    """A number for a new chunk: a spare one (a merge let it go) where there is one."""
    if scalars[SPARE] > 0:
        scalars[SPARE] -= 1
        return int(spare_chunks[scalars[SPARE]])
    scalars[CHUNKS] += 1
    return int(scalars[CHUNKS] - 1)


@compiled
def run_operations(
    kinds: np.ndarray,
    buffers: np.ndarray,
    sizes: np.ndarray,
    start: int,
    scalars: np.ndarray,
    chunks: np.ndarray,
    free: np.ndarray,
    where: np.ndarray,
    ranges: np.ndarray,
    growth: np.ndarray,
    touches_out: np.ndarray,
) -> int:
    """Apply operations ``start`` on (``kinds``: ALLOCATE or FREE; ``buffers``: numbers, their
    chunk in ``where``, -1 where none; ``sizes``: bytes) and record each allocation that touched
    new pages in ``touch_operation``/``touch_bytes``. Returns -1 when every operation is
    applied, else the index of the one that needs larger arrays (nothing of it applied).

    ``chunks``: rows address, size, used, previous, next, and the spare chunk numbers; ``free``:
    rows size, address, chunk; ``ranges``: rows start, end; ``touches_out``: rows operation,
    touched bytes after it."""
    chunk_address, chunk_size, chunk_used, chunk_previous, chunk_next, spare_chunks = chunks
    free_size, free_address, free_chunk = free
    range_start, range_end = ranges
    touch_operation, touch_bytes = touches_out
    free_count, range_count = scalars[FREE_CHUNKS], scalars[RANGES]
    grown, touches = scalars[GROWN], scalars[TOUCHES]
    stopped = -1
    for index in range(start, len(kinds)):
        if kinds[index] == ALLOCATE:
            # The free list needs no check: it has a slot per chunk number, and each entry is a
            # chunk of its own.
            if (
                scalars[CHUNKS] + 2 > len(chunk_address)
                or range_count + 1 > len(range_start)
                or grown + 1 > len(growth) // 2
                or touches + 1 > len(touch_operation)
            ):
                stopped = index
                break
            whole = sizes[index]
            rounded = -(-whole // _MIN_ALLOCATION) * _MIN_ALLOCATION
            if rounded == 0:
                rounded = _MIN_ALLOCATION
            at = _free_index(free_size, free_address, free_count, rounded, -(1 << 62))
            if at < free_count:
                found, address, chunk = free_size[at], free_address[at], free_chunk[at]
                _remove_free(free_size, free_address, free_chunk, free_count, at)
                free_count -= 1
            else:
                # A new region: ORT doubles the next one after a region that was big enough,
                # up to the cap, and from there stays at it.
                grew = False
                while rounded > scalars[NEXT_REGION]:
                    scalars[NEXT_REGION] *= 2
                    grew = True
                found = scalars[NEXT_REGION]
                scalars[REGIONS] += 1
                address = -scalars[REGIONS] << _REGION_SPACING
                scalars[RESERVED] += found
                growth[2 * grown], growth[2 * grown + 1] = rounded, found
                grown += 1
                if not grew:
                    doubled = scalars[NEXT_REGION] * 2
                    scalars[NEXT_REGION] = doubled if doubled < _MAX_DOUBLING else _MAX_DOUBLING
                chunk = _new_chunk(scalars, spare_chunks)
                chunk_address[chunk], chunk_size[chunk] = address, found
                chunk_previous[chunk], chunk_next[chunk] = -1, -1
            if found >= 2 * rounded or found - rounded >= _MAX_DEAD_BYTES:
                rest = _new_chunk(scalars, spare_chunks)
                following = chunk_next[chunk]
                chunk_address[rest], chunk_size[rest], chunk_used[rest] = address + rounded, found - rounded, 0
                chunk_previous[rest], chunk_next[rest] = chunk, following
                if following >= 0:
                    chunk_previous[following] = rest
                chunk_next[chunk] = rest
                chunk_size[chunk] = rounded
                _insert_free(free_size, free_address, free_chunk, free_count, rest, found - rounded, address + rounded)
                free_count += 1
            chunk_used[chunk] = 1
            where[buffers[index]] = chunk
            end = address + (whole if whole > 1 else 1)
            # The last touched range starting at or before the address.
            low, high = 0, range_count
            while low < high:
                middle = (low + high) >> 1
                if range_start[middle] <= address:
                    low = middle + 1
                else:
                    high = middle
            i = low - 1
            if i < 0 or range_end[i] < end:  # pages not touched before: rare after the first step
                begin = address
                if i < 0 or range_end[i] < begin:  # that range does not reach this one
                    i += 1
                j, covered = i, 0
                while j < range_count and range_start[j] <= end:
                    covered += range_end[j] - range_start[j]
                    begin = min(range_start[j], begin)
                    end = max(range_end[j], end)
                    j += 1
                # Ranges i..j-1 become one: [begin, end).
                if j == i:
                    for k in range(range_count, i, -1):
                        range_start[k], range_end[k] = range_start[k - 1], range_end[k - 1]
                    range_count += 1
                elif j > i + 1:
                    gone = j - i - 1
                    for k in range(i + 1, range_count - gone):
                        range_start[k], range_end[k] = range_start[k + gone], range_end[k + gone]
                    range_count -= gone
                range_start[i], range_end[i] = begin, end
                scalars[TOUCHED] += end - begin - covered
                touch_operation[touches], touch_bytes[touches] = index, scalars[TOUCHED]
                touches += 1
        else:
            buffer = buffers[index]
            chunk = where[buffer]
            if chunk < 0:
                continue
            where[buffer] = -1
            chunk_used[chunk] = 0
            following = chunk_next[chunk]
            if following >= 0 and chunk_used[following] == 0:
                _merge(chunk, following, following, free, free_count, chunks, scalars)
                free_count -= 1
            previous = chunk_previous[chunk]
            if previous >= 0 and chunk_used[previous] == 0:
                _merge(previous, chunk, previous, free, free_count, chunks, scalars)
                free_count -= 1
                chunk = previous
            _insert_free(
                free_size, free_address, free_chunk, free_count, chunk, chunk_size[chunk], chunk_address[chunk]
            )
            free_count += 1
    scalars[FREE_CHUNKS], scalars[RANGES] = free_count, range_count
    scalars[GROWN], scalars[TOUCHES] = grown, touches
    return stopped
