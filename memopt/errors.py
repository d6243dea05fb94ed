"""The one exception type memopt's CLI turns into a one-line message and a non-zero exit."""

from __future__ import annotations

__all__ = ["DamagedRecord", "MemoptError", "one_line"]


class MemoptError(Exception):
    """A problem the user can act on; ``str(err)`` is the whole message, one line."""


class DamagedRecord(UserWarning):
    """A record read from disk that does not hold what memopt wrote: it is skipped, and said so."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, for errors whose full text goes to a log."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {(lines[0] if lines else '')[:limit]}"
