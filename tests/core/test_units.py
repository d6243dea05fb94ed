"""Byte figures as messages print them: a verdict's two figures never read alike when they differ."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memopt.units import format_bytes, format_compared

MiB, GiB = 2**20, 2**30


def test_figures_a_verdict_depends_on_read_apart() -> None:
    assert format_compared(1954 * MiB, 1896 * MiB) == ("1.91 GiB", "1.85 GiB")  # "1.9 GiB" both at one decimal
    assert format_compared(2.2 * GiB + MiB, 2.2 * GiB) == ("2.201 GiB", "2.200 GiB")
    assert format_compared(GiB + 1, GiB) == ("1,073,741,825 B", "1,073,741,824 B")
    assert format_compared(676.2 * MiB, 676.2 * MiB) == ("676.2 MiB", "676.2 MiB")
    assert format_compared(773.7 * MiB, 3.9 * GiB) == ("773.7 MiB", "3.9 GiB")  # apart already: as format_bytes
    assert format_compared(1000.04 * MiB, 1000 * MiB, "MiB") == ("1,000.04 MiB", "1,000.00 MiB")
    assert format_bytes(2.2 * GiB) == "2.2 GiB" and format_bytes(1023) == "1023 B"


@given(st.integers(0, 2**45), st.integers(0, 2**45))
def test_unequal_figures_never_read_equal_and_keep_their_order(value: int, other: int) -> None:
    shown = format_compared(value, other)
    assert (shown[0] == shown[1]) == (value == other)
    read = [_read(text) for text in shown]
    assert not (read[0] < read[1] and value > other) and not (read[0] > read[1] and value < other), shown


def _read(text: str) -> float:
    number, unit = text.split()
    return float(number.replace(",", "")) * 1024 ** ("B", "KiB", "MiB", "GiB", "TiB").index(unit)
