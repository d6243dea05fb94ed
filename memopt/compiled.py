"""numba's compiler as memopt uses it, for the few loops it runs over every step of a graph,
many times per plan (the BFC arena's placement, a program's buffers, ORT's backward order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

__all__ = ["compiled"]

_Function = TypeVar("_Function", bound=Callable[..., Any])


def compiled(function: _Function) -> _Function:
    """``function`` compiled to machine code on first call, the code cached beside its module
    (or in the user's cache folder); where neither can be written, compiled in every process."""
    try:
        return cast(_Function, njit(cache=True, nogil=True)(function))
    except RuntimeError:  # numba: "cannot cache function …: no locator available"
        return cast(_Function, njit(nogil=True)(function))
