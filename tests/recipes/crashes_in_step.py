import torch
from torch import nn


class Exploding(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] > 0:
            raise ValueError("labels are missing from this batch")
        return self.linear(x)


def build_model():
    return Exploding()


def make_batch(batch_size):
    return torch.randn(batch_size, 4), None
