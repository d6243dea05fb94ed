"""Integers from log text, read only when they are plain decimal numbers of sane size."""

from __future__ import annotations

__all__ = ["MAX_DIGITS", "read_int"]

# Every count and byte figure ORT prints fits in a signed 64-bit integer (18 digits always
# do); anything longer is damage, and Python refuses int() of over 4,300 digits anyway.
MAX_DIGITS = 18


def read_int(text: str) -> int | None:
    """``text`` (optional sign, ASCII digits) as an int; None when it is anything else or too long."""
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits or len(digits) > MAX_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return int(text)
