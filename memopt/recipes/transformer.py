"""Shapes shared by the built-in transformer recipes (gpt, bert)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TransformerConfig"]


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    max_seq: int  # positions the model has
    seq_len: int  # default sequence length of a batch
    dropout: float = 0.1

    def sequence(self, seq_len: int | None) -> int:
        """The batch's sequence length: ``seq_len`` or the default, within the model's positions."""
        seq = seq_len or self.seq_len
        if seq > self.max_seq:
            raise ValueError(f"seq_len {seq} exceeds the model's {self.max_seq} positions")
        return seq
