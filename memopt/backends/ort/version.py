"""ONNX Runtime Training releases memopt knows the memory-optimizer behaviour of."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memopt.errors import MemoptError

__all__ = ["OLDEST_MINOR", "NEWEST_MINOR", "OrtVersion", "OrtVersionError", "OrtVersionRange"]

OLDEST_MINOR = 14
NEWEST_MINOR = 19
_VERSION = re.compile(r"^\s*1\.([0-9]{1,6})(?:\.([0-9]{1,9}))?\S*\s*$")


class OrtVersionError(MemoptError):
    """A version string memopt cannot use."""


@dataclass(frozen=True, order=True)
class OrtVersion:
    """A 1.x release; ``patch`` is None when only the series (``1.18``) is known."""

    minor: int
    patch: int | None = None

    @classmethod
    def parse(cls, text: str) -> OrtVersion:
        match = _VERSION.match(text)
        if match is None:
            raise OrtVersionError(f"{text!r} is not an ONNX Runtime version like 1.19 or 1.17.1")
        minor = int(match.group(1))
        if not OLDEST_MINOR <= minor <= NEWEST_MINOR:
            raise OrtVersionError(
                f"ONNX Runtime {text.strip()} is outside the supported 1.{OLDEST_MINOR}-1.{NEWEST_MINOR}"
            )
        return cls(minor, None if match.group(2) is None else int(match.group(2)))

    def __str__(self) -> str:
        return f"1.{self.minor}" if self.patch is None else f"1.{self.minor}.{self.patch}"


@dataclass(frozen=True)
class OrtVersionRange:
    """The releases (by series, inclusive) a log could have come from."""

    lowest_minor: int = OLDEST_MINOR
    highest_minor: int = NEWEST_MINOR
    exact: OrtVersion | None = None

    def narrow(self, other: OrtVersionRange) -> OrtVersionRange | None:
        """The releases both ranges allow; None when they contradict each other."""
        lowest = max(self.lowest_minor, other.lowest_minor)
        highest = min(self.highest_minor, other.highest_minor)
        if lowest > highest:
            return None
        return OrtVersionRange(lowest, highest, other.exact or self.exact)

    def __str__(self) -> str:
        if self.exact is not None:
            return str(self.exact)
        if self.lowest_minor == self.highest_minor:
            return f"1.{self.lowest_minor}"
        return f"1.{self.lowest_minor}-1.{self.highest_minor}"
