"""Option handling shared by commands that take a recipe."""

from __future__ import annotations

from typing import Any

from memopt.errors import MemoptError
from memopt.recipes import parse_option_value

__all__ = ["calibration_batches", "recipe_options"]


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


def calibration_batches(text: str | None) -> tuple[int, ...] | None:
    """``--calibrate 2,4``: the batch sizes of the no-config calibration trials."""
    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise MemoptError(f"--calibrate takes batch sizes like 2,4, not {text!r}") from None
    if len(set(values)) < 2 or min(values) < 1:
        raise MemoptError(f"--calibrate needs two or more different positive batch sizes, not {text!r}")
    return values
