"""Activation recompute for plain PyTorch, in one line of a training script::

    import memopt.recompute
    model = memopt.recompute.apply(model)                       # or, to let its optimizer plan apply:
    model = memopt.recompute.apply(model, optimizer=optimizer)

``apply`` reads the policy file named by ``MEMOPT_RECOMPUTE_POLICY`` (written by
``memopt tune --backend torch``) and wraps the model's modules as its plans say; with the
variable unset it does nothing. A policy with an optimizer plan (``optimizer: fused``) needs the
optimizer: ``apply`` without one raises, naming the fix, as the step would otherwise peak above
what the budget was planned with. A missing or malformed file, or a plan that matches nothing in
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
from torch.optim.optimizer import Optimizer

from memopt.recompute.policy import POLICY_ENV, RecomputePlan, RecomputePolicy, RecomputePolicyError
from memopt.recompute.wrappers import AppliedPolicy, RecomputeWarning, apply_optimizer, apply_policy

__all__ = [
    "POLICY_ENV",
    "AppliedPolicy",
    "RecomputePlan",
    "RecomputePolicy",
    "RecomputePolicyError",
    "RecomputeWarning",
    "apply",
    "apply_optimizer",
    "apply_policy",
    "policy_from_env",
]

Model = TypeVar("Model", bound=nn.Module)


def apply(model: Model, policy: RecomputePolicy | None = None, *, optimizer: Optimizer | None = None) -> Model:
    """Apply ``policy`` (default: the file ``$MEMOPT_RECOMPUTE_POLICY``, or nothing where unset) to
    ``model``, and its optimizer plan to ``optimizer`` (made from ``model``'s parameters, before its first step)."""
    if policy is None:
        policy = policy_from_env()
        if policy is None:
            return model
    apply_policy(model, policy, optimizer)
    return model


def policy_from_env() -> RecomputePolicy | None:
    """The policy in the file ``$MEMOPT_RECOMPUTE_POLICY`` names; None where the variable is unset."""
    path = os.environ.get(POLICY_ENV, "").strip()
    return RecomputePolicy.read(Path(path)) if path else None
