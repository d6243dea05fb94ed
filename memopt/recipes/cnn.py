"""A small convolutional classifier: conv/batchnorm/relu/pool stages and a linear head."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["SIZES", "CNNConfig", "build_model", "make_batch"]


@dataclass(frozen=True)
class CNNConfig:
    image_size: int
    channels: tuple[int, ...]
    n_classes: int


SIZES: dict[str, CNNConfig] = {
    "tiny": CNNConfig(image_size=16, channels=(8, 16), n_classes=10),
    "small": CNNConfig(image_size=64, channels=(32, 64, 128, 256), n_classes=100),
    "large": CNNConfig(image_size=224, channels=(64, 128, 256, 512), n_classes=1000),
}


def build_model(size: str = "small") -> nn.Sequential:
    cfg = SIZES[size]
    layers: list[nn.Module] = []
    in_ch = 3
    for out_ch in cfg.channels:
        layers += [
            nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]
        in_ch = out_ch
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, cfg.n_classes)]
    return nn.Sequential(*layers)


def make_batch(
    batch_size: int, size: str = "small", image_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = SIZES[size]
    side = image_size or cfg.image_size
    return torch.randn(batch_size, 3, side, side), torch.randint(0, cfg.n_classes, (batch_size,))
