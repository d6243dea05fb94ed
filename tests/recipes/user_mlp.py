"""A user recipe exercising the whole contract: options, loss and optimizer."""

import torch
from torch import nn


def build_model(width: int = 16):
    return nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 1))


def make_batch(batch_size, noise: float = 0.1):
    x = torch.randn(batch_size, 8)
    return x, x.sum(dim=1, keepdim=True) + noise * torch.randn(batch_size, 1)


def loss(output, target):
    return (output - target).abs().mean()


def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.01)
