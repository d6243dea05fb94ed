"""How ORT's CPU arena grew, from its DEVINFO log lines.

At log level DEVINFO ORT's BFC arena (``onnxruntime/core/framework/bfc_arena.cc``) logs every
region it adds: ``Extending BFCArena for Cpu. bin_num:… (requested) num_bytes: N (actual)
rounded_bytes:R`` for the request no free chunk could hold, then ``Extended allocation by
B bytes.`` A process builds more than one arena (ORTModule's export-time sessions have their
own); each ``Creating BFCArena for Cpu`` line starts a new one, and the training session's
is the last created.

The first regions are added as the session is built, up to ``Done saving initialized
tensors`` (``session_state_utils.cc``): for the graph's constants (ORT 1.15 adds its first
region earlier, as it optimises the graph). ORT saves the constants in the order of a hash
map seeded per process, so which constant asks for each of those regions changes from run
to run (a tiny GPT's arena opens for a scalar in most runs, for its 4 KiB causal mask in
some), and they are compared on their sizes alone (``growth_parts_at``). Their sizes too can
depend on that order where constants are large beside the arena's first 1 MiB region (a
chunk is split only for a request of at most half of it); a check then reports where the
two part, as for any other region.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

__all__ = ["ArenaGrowth", "growth_parts_at", "training_arena_growth"]

_CREATED = "Creating BFCArena for Cpu"
_REQUEST = re.compile(r"Extending BFCArena for Cpu\.(?:.*rounded_bytes:\s*(\d+))?")
# ORT 1.16's Python logger re-emits the session build's lines wrapped at 180 columns: the
# rounded size can start the next line.
_WRAPPED_ROUNDED = re.compile(r"\s*rounded_bytes:\s*(\d+)")
_EXTENDED = re.compile(r"Extended allocation by (\d+) bytes")
_BUILT = "Done saving initialized tensors"


@dataclass(frozen=True)
class ArenaGrowth:
    """One region the arena added, for the (rounded) request that no free chunk held."""

    request_bytes: int
    region_bytes: int
    at_build: bool = False  # added as the session was built (its constants saved), before any step


def training_arena_growth(lines: Iterable[str]) -> tuple[ArenaGrowth, ...]:
    """The regions the last CPU arena created in ``lines`` added, in order, those added before
    the session's build was done marked ``at_build`` (none where the log does not say when it
    was); empty when the log holds no arena lines (a level above DEVINFO, or a CUDA run)."""
    growth: list[ArenaGrowth] = []
    request: int | None = None
    built_at: int | None = None  # how many regions the arena had added when the build was done
    wrapped = False  # the last line asked for a region without saying its rounded size
    for line in lines:
        if _CREATED in line:
            growth, request, built_at, wrapped = [], None, None, False
            continue
        if _BUILT in line:
            built_at = len(growth) if built_at is None else built_at
            continue
        asked = _REQUEST.search(line)
        if asked is not None:
            wrapped = asked.group(1) is None
            request = None if wrapped else int(asked.group(1))
            continue
        if wrapped:
            wrapped = False
            rest = _WRAPPED_ROUNDED.match(line)
            if rest is not None:
                request = int(rest.group(1))
                continue
        extended = _EXTENDED.search(line)
        if extended is not None and request is not None:
            growth.append(ArenaGrowth(request, int(extended.group(1))))
            request = None
    return tuple(
        replace(grown, at_build=True) if index < (built_at or 0) else grown for index, grown in enumerate(growth)
    )


def growth_parts_at(real: Sequence[ArenaGrowth], simulated: Sequence[ArenaGrowth]) -> int | None:
    """The index of the first region in ``real`` that ``simulated`` did not add alike; None
    where every one of them was. A region either side added ``at_build`` is alike when its
    size is (which constant asked for it depends on the process), any other when its request
    is too."""
    for index, grown in enumerate(real):
        other = simulated[index] if index < len(simulated) else None
        if other is None or other.region_bytes != grown.region_bytes:
            return index
        if not (grown.at_build or other.at_build) and other.request_bytes != grown.request_bytes:
            return index
    return None
