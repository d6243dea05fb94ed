"""A recipe whose forward reads a tensor's value (a branch on it): fake tensors cannot run it."""

import torch
from torch import nn


class BranchesOnValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        if bool((h > 0).any()):
            h = h * 2
        return self.fc2(h)


def build_model() -> nn.Module:
    return BranchesOnValues()


def make_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))
