"""The other ways to fit a batch that memopt's policy is measured beside: Hugging Face's gradient
checkpointing on every layer, and ``torch.compile`` with its ``activation_memory_budget``.

A peer is applied in the child in place of ``memopt.recompute.apply`` (``MEMOPT_PEER_SETUP`` names
it), so its run is measured as memopt's runs are: the same steps, the same peak, the same journal.
``bench/bench_side_by_side.py`` applies them through here too.

Whole-module checkpointing of every layer of a model that is not Hugging Face's needs no peer: it
is a memopt policy (``blocks.*: *``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from memopt.errors import MemoptError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["PEER_ENV", "Peer", "PeerKind", "peer_from_env"]

PEER_ENV = "MEMOPT_PEER_SETUP"


class PeerKind(str, Enum):
    HF_CHECKPOINTING = "hf-checkpointing"
    COMPILE = "compile"


@dataclass(frozen=True)
class Peer:
    """A peer set-up; ``compile_budget`` is ``activation_memory_budget``, a fraction of what
    compile's partitioner would save (0: only the graph's inputs; 1: its default), not bytes."""

    kind: PeerKind
    compile_budget: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.compile_budget <= 1:
            raise MemoptError(f"activation_memory_budget must be in [0, 1], not {self.compile_budget:g}")

    @property
    def text(self) -> str:
        """How the environment and the journal name it."""
        if self.kind is PeerKind.COMPILE:
            return f"{self.kind.value}:{self.compile_budget:g}"
        return str(self.kind.value)

    @property
    def title(self) -> str:
        if self.kind is PeerKind.COMPILE:
            return f"torch.compile, activation_memory_budget {self.compile_budget:g}"
        return "HF gradient checkpointing, every layer"

    @classmethod
    def parse(cls, text: str) -> Peer:
        kind, _, budget = text.partition(":")
        try:
            return cls(PeerKind(kind), float(budget) if budget else 1.0)
        except ValueError:
            raise MemoptError(f"{PEER_ENV}={text!r}: expected hf-checkpointing or compile:FRACTION") from None

    def apply(self, model: nn.Module) -> nn.Module:
        """The model as this peer trains it."""
        if self.kind is PeerKind.COMPILE:
            import torch
            import torch._functorch.config  # not loaded by ``import torch`` on every release (2.13)

            torch._functorch.config.activation_memory_budget = self.compile_budget
            compiled: nn.Module = torch.compile(model)  # type: ignore[assignment]
            return compiled
        # A recipe may wrap the Hugging Face model (a loss-only recipe does): its own module is inside.
        hf = next((m for m in model.modules() if getattr(m, "supports_gradient_checkpointing", False)), None)
        if hf is None:
            raise MemoptError(
                "HF gradient checkpointing needs a Hugging Face model that supports it (supports_gradient_checkpointing)"
            )
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model


def peer_from_env() -> Peer | None:
    """The peer the child was asked to apply instead of memopt's policy (None: memopt's policy)."""
    text = os.environ.get(PEER_ENV)
    return Peer.parse(text) if text else None
