"""A recipe whose training step hangs after the first one (the warm-up step finishes).

``-o hang_at=B`` hangs only at batch size B (0: at any batch). Before it hangs, the step
writes its pid to the file ``$MEMOPT_TEST_HANG_MARKER`` names, so a test knows the trial
is in its hanging step.
"""

import os
import time

import torch
from torch import nn

_state = {"hang": False, "steps": 0}


def build_model():
    return nn.Linear(4, 2)


def make_batch(batch_size, hang_at: int = 0):
    _state["hang"] = hang_at in (0, batch_size)
    return torch.randn(batch_size, 4), None


def loss(output, target):
    _state["steps"] += 1
    if _state["hang"] and _state["steps"] > 1:
        marker = os.environ.get("MEMOPT_TEST_HANG_MARKER")
        if marker:
            with open(marker, "a") as handle:
                handle.write(f"{os.getpid()}\n")
        time.sleep(3600)
    return output.mean()
