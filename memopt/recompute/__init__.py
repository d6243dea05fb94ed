"""Activation recompute for plain PyTorch, in one line of a training script::

    import memopt.recompute
    model = memopt.recompute.apply(model)

``apply`` reads the policy file named by ``MEMOPT_RECOMPUTE_POLICY`` (written by
``memopt tune --backend torch``) and wraps the model's modules as its plans say; with the
variable unset it does nothing. A missing or malformed file, or a plan that matches nothing in
the model, raises ``RecomputePolicyError`` with one line saying what is wrong: never a silent
run without the recompute the budget was planned with.

This module imports only torch and the standard library (``memopt.recompute.policy``
describes the plans, ``memopt.recompute.wrappers`` how they are applied).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from torch import nn

from memopt.recompute.policy import POLICY_ENV, RecomputePlan, RecomputePolicy, RecomputePolicyError
from memopt.recompute.wrappers import AppliedPolicy, apply_policy

__all__ = [
    "POLICY_ENV",
    "AppliedPolicy",
    "RecomputePlan",
    "RecomputePolicy",
    "RecomputePolicyError",
    "apply",
    "apply_policy",
]

Model = TypeVar("Model", bound=nn.Module)


def apply(model: Model, policy: RecomputePolicy | None = None) -> Model:
    """Apply ``policy`` (default: the file ``$MEMOPT_RECOMPUTE_POLICY``, or nothing where unset) to ``model``."""
    if policy is None:
        path = os.environ.get(POLICY_ENV, "").strip()
        if not path:
            return model
        policy = RecomputePolicy.read(Path(path))
    apply_policy(model, policy)
    return model
