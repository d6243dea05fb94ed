"""Shapes shared by the built-in transformer recipes (gpt, bert)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["TransformerConfig", "check_shape_options"]


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    max_seq: int  # positions the model has
    seq_len: int  # default sequence length of a batch
    dropout: float = 0.1

    def with_layers(self, n_layer: int | None) -> TransformerConfig:
        """This shape with ``n_layer`` blocks (its own depth when None)."""
        return self if n_layer is None else replace(self, n_layer=_at_least_one("n_layer", n_layer))

    def sequence(self, seq_len: int | None) -> int:
        """The batch's sequence length: ``seq_len`` or the default, within the model's positions."""
        seq = self.seq_len if seq_len is None else _at_least_one("seq_len", seq_len)
        if seq > self.max_seq:
            raise ValueError(f"seq_len {seq} exceeds the model's {self.max_seq} positions")
        return seq


def check_shape_options(options: Mapping[str, Any]) -> None:
    """Refuse a depth or sequence length no model has, before any run (``ValueError``)."""
    for name in ("n_layer", "seq_len"):
        if options.get(name) is not None:
            _at_least_one(name, options[name])


def _at_least_one(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    return value
