"""A package's re-exports imported on first use (PEP 562), so that importing one of its modules
does not load the others: the torch back end takes ``memopt.run``'s processes and
``memopt.predict``'s exact choice without ORT's trials and memory model, a log reader
``memopt.graph``'s expressions without onnx."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """The package's ``__getattr__``: each name of ``exports`` (module -> names) from its module."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def attribute(name: str) -> Any:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module_of[name]), name)

    return attribute
