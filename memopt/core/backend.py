"""A training back end by name: what ``--backend`` takes, ``run.json`` records and the child reads."""

from __future__ import annotations

from enum import Enum

__all__ = ["BackendName"]


class BackendName(str, Enum):
    """The back ends memopt drives (``memopt.backends`` holds each one's implementation)."""

    ORT = "ort"  # ONNX Runtime Training: the model under ORTModule, ORT's recompute plans
    TORCH = "torch"  # plain PyTorch with ``memopt.recompute``'s policy
