"""ORTModule's per-step memory lines (``ORTMODULE_PRINT_MEMORY_STATS=1``, CUDA only).

ORT 1.15-1.18 print ``[0/2] step 1 memory (MiB) | phase: pre_forward | allocated: 10 | …``
(rank/world size), 1.19 ``rank-0 step 1 memory (MiB) | phase: … | …`` with the module's
``param``, ``grad`` and ``buffer`` sizes added; figures are MiB rounded to integers, one line
per phase for steps below 10 and powers of 2 after, from rank 0 only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memopt.backends.ort.logparse.lines import LogLine, brief
from memopt.backends.ort.logparse.model import StepMemory
from memopt.backends.ort.logparse.numbers import read_int

__all__ = ["STEP_MEMORY_KEYWORD", "step_memory"]

STEP_MEMORY_KEYWORD = "memory (MiB)"
_HEAD = re.compile(r"(?:\brank-(\S+)|\[([^\]/\s]+)/([^\]/\s]+)\]) step (\S+) memory \(MiB\)")
_FIGURES = {
    "allocated": "allocated_mib",
    "max allocated": "max_allocated_mib",
    "cached": "cached_mib",
    "max cached": "max_cached_mib",
    "inactive": "inactive_mib",
    "max inactive": "max_inactive_mib",
    "param": "param_mib",
    "grad": "grad_mib",
    "buffer": "buffer_mib",
}


def step_memory(line: LogLine, warn: Callable[[str], None]) -> StepMemory | None:
    """The record of a per-step memory line; None for any other line. Unreadable figures are
    None, each with a warning."""
    head = _HEAD.search(line.text)
    if head is None:
        return None
    rank_text, world_text, step_text = head.group(1) or head.group(2), head.group(3), head.group(4)
    unreadable: list[str] = []
    rank, step = read_int(rank_text), read_int(step_text)
    world_size = None if world_text is None else read_int(world_text)
    unreadable.extend(
        name
        for name, text, value in (
            ("rank", rank_text, rank),
            ("step", step_text, step),
            ("world size", world_text, world_size),
        )
        if text is not None and value is None
    )
    figures: dict[str, int | None] = {}
    phase: str | None = None
    for cell in line.text[head.end() :].split("|")[1:]:
        key, colon, value = cell.partition(":")
        key, value = key.strip(), value.strip()
        if key == "phase" and colon:
            phase = value or None
        elif key in _FIGURES and colon:
            figures[_FIGURES[key]] = read_int(value)
            if figures[_FIGURES[key]] is None:
                unreadable.append(key)
        elif cell.strip():
            unreadable.append(repr(brief(cell)))
    if phase is None:
        unreadable.append("phase")
    if unreadable:
        warn(f"line {line.number}: step memory line with unreadable {', '.join(unreadable)} (taken as unknown)")
    return StepMemory(
        line_number=line.number, stream=line.stream, rank=rank, world_size=world_size, step=step, phase=phase, **figures
    )
