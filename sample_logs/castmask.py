"""A tiny recipe whose activations include an up-cast (bool mask -> float32) kept for backward.

Used by capture.py so that ORT prints a RecomputeWithCompromise plan (``Cast+:2:-1`` on
1.17+, the "RecomputeWithCompromise" section on <=1.16): the built-in tiny recipes on CPU
(fp32 throughout) have no up-cast and print none.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["build_model", "make_batch"]

SIZES: dict[str, tuple[int, int, int]] = {"tiny": (32, 64, 10)}  # in_features, hidden, classes


class CastMask(nn.Module):
    def __init__(self, in_features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        weight = keep.to(x.dtype)  # Cast bool -> float32: a 4x up-cast, used again in backward
        h = F.gelu(self.fc1(x)) * weight
        h = F.gelu(self.fc2(h)) * weight
        return self.head(h)


def build_model(size: str = "tiny") -> CastMask:
    return CastMask(*SIZES[size])


def make_batch(batch_size: int, size: str = "tiny") -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    in_features, hidden, classes = SIZES[size]
    keep = torch.rand(batch_size, hidden) > 0.1
    return (torch.randn(batch_size, in_features), keep), torch.randint(0, classes, (batch_size,))
