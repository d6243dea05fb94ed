"""A recipe whose training step never finishes."""

import time

import torch
from torch import nn


def build_model():
    return nn.Linear(4, 2)


def make_batch(batch_size):
    return torch.randn(batch_size, 4), None


def loss(output, target):
    time.sleep(3600)
    return output.mean()
