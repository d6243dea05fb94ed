import warnings

import torch
import torch.utils.checkpoint
from torch import nn


def _recompute():
    # torch 2.4's checkpoint warns, from its own code, of the deprecated autocast it calls
    x = torch.ones(2, requires_grad=True)
    torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False).sum().backward()


def build_model():
    _recompute()
    with warnings.catch_warnings():  # as torch's own code does between two recomputes: Python warns again
        pass
    _recompute()
    return nn.Linear(4, 2)


def make_batch(batch_size):
    return torch.randn(batch_size, 4), torch.randn(batch_size, 2)
