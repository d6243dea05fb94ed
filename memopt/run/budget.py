"""Memory budgets as people write them: ``2.5GiB``, ``2500MB``, ``80%`` (of the device: on CPU, of\nthe machine's RAM or the memory cgroup's limit, whichever is lower)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from decimal import Decimal

from memopt.errors import MemoptError
from memopt.run.cgroup import memory_limit

__all__ = [
    "CPU_ALLOCATOR_ENV",
    "DEFAULT_FRACTION",
    "Budget",
    "BudgetError",
    "parse_budget",
    "require_budget",
    "resolve_budget",
    "cpu_device_memory",
]

# glibc's malloc raises its mmap threshold to the largest block freed (up to 32 MiB), after which a
# step's activations come from its heap, where freed ones stay resident: the peak RSS then follows
# no function of the step's tensors (GPT-2-small at 512 tokens, torch 2.4.1: 974, 1,106 and 1,244
# MiB above them at batches 1, 2 and 4). Pinned at its default, a block over 128 KiB is mapped and
# returned when freed, and the peak RSS stayed 146-149 MiB above them at each batch and policy
# (bench/bench_cpu_allocator.py).
# The torch back end's CPU runs have it, and its export line carries it, so the job re-run
# peaks as its run did (``memopt.backends.torch.trial.allocator_env``).
CPU_ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}

# Without --budget: the device less 10% (on CUDA left to the allocator cache and the CUDA
# context, on CPU to the rest of the machine); the CPU device's memory is ``cpu_device_memory``.
DEFAULT_FRACTION = 0.9

_UNITS = {
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$", re.ASCII)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$", re.ASCII)
# More memory than any device has (an exbibyte): a budget past it is a typo.
_MOST_BYTES = 2**60


class BudgetError(MemoptError):
    """A budget memopt cannot read."""


@dataclass(frozen=True)
class Budget:
    """Either bytes or a fraction of the device's memory (resolved with ``bytes_of``)."""

    text: str
    bytes: int | None = None
    fraction: float | None = None

    def bytes_of(self, device_total: int | None) -> int:
        if self.bytes is not None:
            return self.bytes
        if device_total is None:
            raise BudgetError(f"--budget {self.text}: the device's total memory is unknown; give bytes, e.g. 2.5GiB")
        return int(device_total * (self.fraction or 0.0))


def parse_budget(text: str) -> Budget:
    """``2.5GiB``/``2500MB``/``1.5G``/``123456789B`` or ``80%``; anything else is an error.

    A number without a unit is refused, not read as bytes: ``80`` reads as 80 GiB or 80% to
    most people, and a budget of 80 bytes is never what they meant; bytes take ``B``."""
    percent = _PERCENT.match(text)
    if percent:
        value = float(percent.group(1))
        if not 0 < value <= 100:
            raise BudgetError(f"--budget {text!r}: a percentage must be above 0 and at most 100")
        return Budget(text.strip(), fraction=value / 100)
    size = _SIZE.match(text)
    unit = size.group(2).lower() if size else ""
    if size is None or unit not in _UNITS and unit != "":
        raise BudgetError(
            f"--budget {text!r} is not a size like 2.5GiB, 2500MB or 80% (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    if unit == "":
        number = size.group(1) if len(size.group(1)) <= 20 else "N"
        raise BudgetError(
            f"--budget {number} has no unit: write it as {number}GiB, {number}MiB or {number}% (of the device), "
            f"or {number}B for bytes"
        )
    value = int(Decimal(size.group(1)) * _UNITS[unit])  # exact, whatever the length
    if value <= 0:
        raise BudgetError(f"--budget {text!r} must be more than zero")
    if value > _MOST_BYTES:
        shown = text if len(text) <= 40 else f"{text.strip()[:20]}…({len(text.strip())} characters)"
        raise BudgetError(f"--budget {shown}: more memory than any device has (at most 1 EiB)")
    return Budget(text.strip(), bytes=value)


def cpu_device_memory() -> int | None:
    """The CPU device's total: this machine's physical memory, or the limit of the memory cgroup
    memopt runs in (its runs start in it too) where that is lower. A percentage budget, and the
    default one, are shares of what the runs can really have."""
    try:
        physical: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = None
    known = [size for size in (physical, memory_limit()) if size]
    return min(known) if known else None


def resolve_budget(budget: Budget | None, device: str, device_total: int | None) -> int:
    """The budget in bytes on ``device`` ("cpu" or "cuda") whose memory is ``device_total``
    (``cpu_device_memory`` on CPU): without a budget, ``DEFAULT_FRACTION`` of it."""
    if budget is not None:
        return budget.bytes_of(device_total)
    if not device_total:
        raise BudgetError(f"the {device.upper()} device's memory is unknown; give --budget, e.g. 2.5GiB")
    return int(device_total * DEFAULT_FRACTION)


def require_budget(budget: Budget | None, device: str, cuda_available: bool) -> None:
    """Refuse, before any run, a missing budget where the device's memory cannot be known."""
    if budget is None and (device == "cpu" or not cuda_available) and cpu_device_memory() is None:
        raise BudgetError("this machine's physical memory is unknown; give --budget, e.g. 2.5GiB")
