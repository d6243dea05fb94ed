from torch import nn


def build_model():
    return nn.Linear(4, 2)
