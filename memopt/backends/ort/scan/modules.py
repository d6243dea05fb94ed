"""Torch module paths read off the names the exporter gives ONNX nodes."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["fold_layers", "module_path"]


def module_path(node_name: str) -> str | None:
    """The torch module a node came from, read off the exporter's scope in its name.

    ``/_original_module/blocks.3/mlp/fc/MatMul/MatmulTransposeFusion/`` -> ``blocks.3.mlp.fc``.
    Scope segments are module attribute names; the first capitalised segment is an op.
    """
    parts = [p for p in node_name.split("/") if p]
    if parts and parts[0] == "_original_module":
        parts = parts[1:]
    scope = []
    for part in parts:
        if part[:1].isupper():
            break
        scope.append(part)
    return ".".join(scope) or None


def fold_layers(modules: Iterable[str]) -> tuple[str, ...]:
    """Module paths with layer indices as ``*`` (``blocks.3.attn`` -> ``blocks.*.attn``), each once, in order."""
    return tuple(dict.fromkeys(re.sub(r"(?<=\.)\d+(?=\.|$)", "*", module) for module in modules))
