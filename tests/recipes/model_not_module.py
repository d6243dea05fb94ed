import torch


def build_model():
    return 42


def make_batch(batch_size):
    return torch.randn(batch_size, 4), None
