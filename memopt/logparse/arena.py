"""How ORT's CPU arena grew, from its DEVINFO log lines.

At log level DEVINFO ORT's BFC arena (``onnxruntime/core/framework/bfc_arena.cc``) logs every
region it adds: ``Extending BFCArena for Cpu. bin_num:… (requested) num_bytes: N (actual)
rounded_bytes:R`` for the request no free chunk could hold, then ``Extended allocation by
B bytes.`` A process builds more than one arena (ORTModule's export-time sessions have their
own); each ``Creating BFCArena for Cpu`` line starts a new one, and the training session's
is the last created.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ArenaGrowth", "training_arena_growth"]

_CREATED = "Creating BFCArena for Cpu"
_REQUEST = re.compile(r"Extending BFCArena for Cpu\..*rounded_bytes:\s*(\d+)")
_EXTENDED = re.compile(r"Extended allocation by (\d+) bytes")


@dataclass(frozen=True)
class ArenaGrowth:
    """One region the arena added, for the (rounded) request that no free chunk held."""

    request_bytes: int
    region_bytes: int


def training_arena_growth(lines: Iterable[str]) -> tuple[ArenaGrowth, ...]:
    """The regions the last CPU arena created in ``lines`` added, in order; empty when the log
    holds no arena lines (a level above DEVINFO, or a CUDA run)."""
    growth: list[ArenaGrowth] = []
    request: int | None = None
    for line in lines:
        if _CREATED in line:
            growth, request = [], None
            continue
        asked = _REQUEST.search(line)
        if asked is not None:
            request = int(asked.group(1))
            continue
        extended = _EXTENDED.search(line)
        if extended is not None and request is not None:
            growth.append(ArenaGrowth(request, int(extended.group(1))))
            request = None
    return tuple(growth)
