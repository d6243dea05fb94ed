"""A recipe whose training step fails to allocate memory, as ORT's CPU allocator reports it."""

import torch
from torch import nn


def build_model():
    return nn.Linear(4, 2)


def make_batch(batch_size):
    return torch.randn(batch_size, 4), None


def loss(output, target):
    raise RuntimeError(
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for requested buffer of size 68719476736"
    )
