"""Byte sizes as people write them."""

from __future__ import annotations

__all__ = ["format_bytes", "format_cuda_memory", "format_mib"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    size = float(value)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


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
