"""A model that computes its own loss, returned as ``-o style=dict|tuple|output|none``."""

import torch
from torch import nn


class Scored(nn.Module):
    def __init__(self, style: str) -> None:
        super().__init__()
        self.style = style
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x, y):
        prediction = self.body(x)
        loss = ((prediction - y) ** 2).mean()
        if self.style == "dict":
            return {"loss": loss, "prediction": prediction}
        if self.style == "tuple":
            return loss, prediction
        return {"prediction": prediction}  # "none": no loss to find


def build_model(style: str = "dict"):
    return Scored(style)


def make_batch(batch_size, fail: bool = False):
    if fail:
        raise ValueError("the data loader is empty")
    x = torch.randn(batch_size, 8)
    return {"x": x, "y": x.sum(dim=1, keepdim=True)}, None
