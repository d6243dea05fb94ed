"""A multi-layer perceptron classifier (Linear/GELU/Dropout stacks)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["SIZES", "MLPConfig", "build_model", "make_batch"]


@dataclass(frozen=True)
class MLPConfig:
    in_features: int
    hidden: int
    n_layer: int
    n_classes: int
    dropout: float = 0.1


SIZES: dict[str, MLPConfig] = {
    "tiny": MLPConfig(in_features=32, hidden=64, n_layer=2, n_classes=10),
    "small": MLPConfig(in_features=1024, hidden=4096, n_layer=4, n_classes=1000),
    "large": MLPConfig(in_features=4096, hidden=8192, n_layer=8, n_classes=1000),
}


def build_model(size: str = "small") -> nn.Sequential:
    cfg = SIZES[size]
    layers: list[nn.Module] = []
    width = cfg.in_features
    for _ in range(cfg.n_layer):
        layers += [nn.Linear(width, cfg.hidden), nn.GELU(), nn.Dropout(cfg.dropout)]
        width = cfg.hidden
    layers.append(nn.Linear(width, cfg.n_classes))
    return nn.Sequential(*layers)


def make_batch(batch_size: int, size: str = "small") -> tuple[torch.Tensor, torch.Tensor]:
    cfg = SIZES[size]
    return torch.randn(batch_size, cfg.in_features), torch.randint(0, cfg.n_classes, (batch_size,))
