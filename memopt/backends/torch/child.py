"""The torch back end's part in the child's measured steps: the model with the recompute policy
of ``MEMOPT_RECOMPUTE_POLICY`` applied (``memopt.recompute.apply``), in plain PyTorch, or a peer
set-up measured beside it (``memopt.backends.torch.peers``).

Runs inside the child process only. Imported before the child knows whether torch loads here, so
torch is imported once the steps start.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn
    from torch.optim.optimizer import Optimizer

    from memopt.recipes import Recipe
    from memopt.recompute import RecomputePolicy

__all__ = ["TorchSteps"]


class TorchSteps:
    """The model in plain PyTorch (``memopt.child.steps.StepsBackend``): the policy's plans on the
    model when it is wrapped, its optimizer plan on the optimizer once it is made from the wrapped model."""

    def __init__(self) -> None:
        self.policy: RecomputePolicy | None = None

    def check(self) -> None:
        return None  # the child runs on torch already

    def stack_record(self) -> dict[str, Any]:
        try:
            return {"torch_version": version("torch")}
        except PackageNotFoundError:
            return {"torch_version": None}

    def has_cuda(self) -> bool:
        return True

    def wrap(self, model: nn.Module, log_level: str, save_onnx: bool) -> nn.Module:
        from memopt.backends.torch.peers import peer_from_env
        from memopt.recompute import RecomputePolicy, apply_policy, policy_from_env

        peer = peer_from_env()  # a peer measured beside memopt's policy, applied instead of it
        if peer is not None:
            self.policy = None
            return peer.apply(model)
        self.policy = policy_from_env()
        if self.policy is not None:
            apply_policy(model, RecomputePolicy(self.policy.model_plans))
        return model

    def prepare_optimizer(self, optimizer: Optimizer) -> None:
        from memopt.recompute import apply_optimizer

        if self.policy is not None:
            apply_optimizer(optimizer, self.policy)

    def after_steps(self, recipe: Recipe, batch_size: int, device: str, folder: Path) -> None:
        return None  # a torch trial's recompute times come from its own steps
