"""Byte sizes as people write them."""

from __future__ import annotations

from typing import Literal

__all__ = ["format_bytes", "format_compared", "format_cuda_memory", "format_mib"]

Unit = Literal["B", "KiB", "MiB", "GiB", "TiB"]
_UNITS: tuple[Unit, ...] = ("B", "KiB", "MiB", "GiB", "TiB")
# Past this many decimals two figures that still read alike are shown in bytes.
_MOST_DECIMALS = 3


def format_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    unit = _unit_of(value)
    return f"{value:.0f} B" if unit == "B" else f"{value / _scale(unit):.1f} {unit}"


def format_compared(value: float, other: float, unit: Unit | None = None) -> tuple[str, str]:
    """Two figures a verdict compares (a peak and its limit), with as many decimals as unequal
    figures need to read unequal: one decimal hides the verdict of a peak 0.01 GiB over its
    limit. Each in its own unit where that tells them apart, else both in ``unit`` (default:
    the larger's)."""
    if unit is None and (value == other or format_bytes(value) != format_bytes(other)):
        return format_bytes(value), format_bytes(other)
    chosen = unit or _unit_of(max(abs(value), abs(other)))
    scale = _scale(chosen)
    for decimals in range(0 if chosen == "B" else 1, _MOST_DECIMALS + 1):
        shown = f"{value / scale:,.{decimals}f} {chosen}", f"{other / scale:,.{decimals}f} {chosen}"
        if value == other or shown[0] != shown[1]:
            return shown
    return f"{value:,.0f} B", f"{other:,.0f} B"


def _unit_of(value: float) -> Unit:
    """The largest unit in which ``value`` is at least 1 (bytes below 1 KiB)."""
    return next((unit for unit in reversed(_UNITS) if abs(value) >= _scale(unit)), "B")


def _scale(unit: Unit) -> int:
    return int(1024 ** _UNITS.index(unit))


def format_mib(value: float | None) -> str:
    """Memory compared with a budget: MiB with a decimal, so an overrun of a few MiB shows."""
    if value is None:
        return "n/a"
    return f"{value / 2**20:,.1f} MiB"


def format_cuda_memory(
    allocated: float | None, reserved: float | None, outside: float | None, allocated_label: str = "allocated"
) -> str:
    """A CUDA figure in its parts: what runs out (reserved + outside the allocator), and of the
    reserved bytes what was allocated."""
    total = None if reserved is None else reserved + (outside or 0)
    return (
        f"{format_mib(total)} = reserved {format_mib(reserved)} + outside the allocator {format_mib(outside)}"
        f" ({allocated_label} {format_mib(allocated)})"
    )
