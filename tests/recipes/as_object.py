"""A recipe given as ``module:attr``: the attribute is an object carrying the functions."""

from types import SimpleNamespace

import torch
from torch import nn

recipe = SimpleNamespace(
    build_model=lambda: nn.Linear(4, 3),
    make_batch=lambda batch_size: (torch.randn(batch_size, 4), torch.randint(0, 3, (batch_size,))),
)
