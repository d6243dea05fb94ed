"""A recipe's loss and optimizer when it defines none: what every back end trains a recipe's model with.

This module imports torch; the recipe contract in ``memopt.recipes`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.nn import functional as F
from torch.optim.adamw import AdamW
from torch.optim.optimizer import Optimizer

from memopt.recipes import Recipe, RecipeError

__all__ = ["check_loss", "default_loss", "make_optimizer"]


def default_loss(output: Any, target: torch.Tensor | None) -> torch.Tensor:
    """The model's own loss when it returns one, else a loss of its output against ``target``.

    A model returns its loss as a mapping with ``loss`` (a Hugging Face ``ModelOutput``, a
    dict) or as a tuple or list whose first item is a scalar tensor. Otherwise the output
    (a tensor, or a tuple's first item) gets cross-entropy for integer targets, MSE for float
    targets, and its mean without a target. Raises RecipeError when no loss follows.
    """
    if isinstance(output, Mapping):
        loss = output.get("loss")
        if not isinstance(loss, torch.Tensor):
            keys = ", ".join(str(key) for key in output) or "none"
            raise RecipeError(
                f"the model returned a {type(output).__name__} without a loss (keys: {keys}); "
                "pass labels in make_batch() or define loss(output, target)"
            )
        return loss
    if isinstance(output, (tuple, list)):
        if not output:
            raise RecipeError("the model returned an empty tuple; define loss(output, target)")
        first = output[0]
        if isinstance(first, torch.Tensor) and first.dim() == 0:
            return first
        output = first
    if not isinstance(output, torch.Tensor):
        raise RecipeError(
            f"the model returned {type(output).__name__}, not a tensor or a loss; define loss(output, target)"
        )
    if target is None:
        return output.float().mean()
    if target.dtype.is_floating_point:
        return F.mse_loss(output, target)
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


def check_loss(loss: Any) -> torch.Tensor:
    """``loss`` if it is a scalar tensor (backward needs one), else a RecipeError."""
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        shape = list(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise RecipeError(f"loss() returned {shape}; expected a scalar tensor")
    return loss


def make_optimizer(recipe: Recipe, parameters: Any) -> Optimizer:
    """The recipe's ``optimizer(parameters)``, else AdamW at lr 1e-4."""
    if recipe.optimizer is None:
        return AdamW(parameters, lr=1e-4)
    optimizer = recipe.optimizer(parameters)
    if not isinstance(optimizer, Optimizer):
        raise RecipeError(f"optimizer() returned {type(optimizer).__name__}; expected a torch.optim.Optimizer")
    return optimizer
