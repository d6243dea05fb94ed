"""Gradients with a recompute policy against those without: a seeded training step, bitwise, in this process.

Recompute must not change what training computes: the same seeds give the same gradients and
buffers (dropout's masks included, as checkpoint regions replay the RNG state) to the bit on CPU.
"""

from __future__ import annotations

import warnings

import torch

from memopt import recompute
from memopt.recipes import Recipe
from memopt.recipes.defaults import default_loss
from memopt.recompute import RecomputePolicy

__all__ = ["gradient_differences", "seeded_step"]


def seeded_step(recipe: Recipe, policy: RecomputePolicy | None, batch: int) -> dict[str, torch.Tensor]:
    """One seeded training step (dropout on), with ``policy`` applied where given: every gradient and buffer after it."""
    torch.manual_seed(0)
    model = recipe.model().train()
    torch.manual_seed(1)
    inputs, target = recipe.batch(batch)
    if policy is not None:  # its optimizer plan changes how the step updates, not the gradients
        recompute.apply(model, RecomputePolicy(policy.model_plans))
    torch.manual_seed(2)
    output = (
        model(**inputs) if isinstance(inputs, dict) else model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    )
    (recipe.loss or default_loss)(output, target).backward()
    state = {f"grad {name}": p.grad for name, p in model.named_parameters() if p.grad is not None}
    return {**state, **{f"buffer {name}": b for name, b in model.named_buffers()}}


def gradient_differences(recipe: Recipe, policy: RecomputePolicy, batch: int) -> list[str]:
    """The gradients and buffers a seeded step under ``policy`` changes (bitwise, on CPU); [] where none."""
    with warnings.catch_warnings():
        # torch 2.4's own checkpoint calls its deprecated torch.cpu.amp.autocast: nothing a user can act on.
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch.utils.checkpoint")
        plain, recomputed = seeded_step(recipe, None, batch), seeded_step(recipe, policy, batch)
    names = sorted(set(plain) | set(recomputed))
    return [
        name
        for name in names
        if name not in plain or name not in recomputed or not torch.equal(plain[name], recomputed[name])
    ]
