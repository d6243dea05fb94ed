"""How ORT's CPU arena grew, from its DEVINFO log lines.

At log level DEVINFO ORT's BFC arena (``onnxruntime/core/framework/bfc_arena.cc``) logs every
region it adds: ``Extending BFCArena for Cpu. bin_num:… (requested) num_bytes: N (actual)
rounded_bytes:R`` for the request no free chunk could hold, then ``Extended allocation by
B bytes.`` A process builds more than one arena (ORTModule's export-time sessions have their
own); each ``Creating BFCArena for Cpu`` line starts a new one, and the training session's
is the last created.

The first regions are added as the session is built, between ``Saving initialized tensors``
and ``Done saving initialized tensors`` (``session_state_utils.cc``), for the graph's
constants. ORT saves them in the order of a hash map seeded per process, so which constant
asks for each of those regions changes from run to run: a tiny GPT's arena opens for a
1-byte scalar in most runs and for its 4 KiB causal mask in some. Growth is compared on
those regions' sizes only (``growth_parts_at``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["ArenaGrowth", "growth_parts_at", "training_arena_growth"]

_CREATED = "Creating BFCArena for Cpu"
_REQUEST = re.compile(r"Extending BFCArena for Cpu\..*rounded_bytes:\s*(\d+)")
_EXTENDED = re.compile(r"Extended allocation by (\d+) bytes")
_SAVING = "Saving initialized tensors"
_SAVED = "Done saving initialized tensors"


@dataclass(frozen=True)
class ArenaGrowth:
    """One region the arena added, for the (rounded) request that no free chunk held."""

    request_bytes: int
    region_bytes: int
    for_constants: bool = False  # added as the session saved the graph's constants, before any step


def training_arena_growth(lines: Iterable[str]) -> tuple[ArenaGrowth, ...]:
    """The regions the last CPU arena created in ``lines`` added, in order; empty when the log
    holds no arena lines (a level above DEVINFO, or a CUDA run)."""
    growth: list[ArenaGrowth] = []
    request: int | None = None
    saving = False
    for line in lines:
        if _CREATED in line:
            growth, request, saving = [], None, False
            continue
        if _SAVED in line or _SAVING in line:
            saving = _SAVED not in line
            continue
        asked = _REQUEST.search(line)
        if asked is not None:
            request = int(asked.group(1))
            continue
        extended = _EXTENDED.search(line)
        if extended is not None and request is not None:
            growth.append(ArenaGrowth(request, int(extended.group(1)), saving))
            request = None
    return tuple(growth)


def growth_parts_at(real: Sequence[ArenaGrowth], simulated: Sequence[ArenaGrowth]) -> int | None:
    """The index of the first region in ``real`` that ``simulated`` did not add alike; None
    where every one of them was. A region added for the constants is alike when its size is
    (the constant that asked for it depends on the process), any other when its request is too."""
    for index, grown in enumerate(real):
        other = simulated[index] if index < len(simulated) else None
        if other is None or other.for_constants != grown.for_constants or other.region_bytes != grown.region_bytes:
            return index
        if not grown.for_constants and other.request_bytes != grown.request_bytes:
            return index
    return None
