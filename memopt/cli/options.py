"""Option handling shared by commands that take a recipe."""

from __future__ import annotations

from typing import Any

from memopt.errors import MemoptError
from memopt.recipes import parse_option_value

__all__ = ["recipe_options"]


def recipe_options(seq: int | None, size: str | None, pairs: list[str]) -> dict[str, Any]:
    """``--seq``/``--size`` and ``-o key=value`` pairs as recipe keyword options."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise MemoptError(f"--option must look like key=value, not {pair!r}")
        options[key.strip()] = parse_option_value(value.strip())
    if seq is not None:
        options["seq_len"] = seq
    if size is not None:
        options["size"] = size
    return options
