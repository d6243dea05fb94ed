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

    from memopt.recipes import Recipe

__all__ = ["TorchSteps"]


class TorchSteps:
    """The model in plain PyTorch (``memopt.child.steps.StepsBackend``)."""

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
        from memopt.recompute import apply

        peer = peer_from_env()  # a peer measured beside memopt's policy, applied instead of it
        return peer.apply(model) if peer is not None else apply(model)

    def after_steps(self, recipe: Recipe, batch_size: int, device: str, folder: Path) -> None:
        return None  # a torch trial's recompute times come from its own steps
