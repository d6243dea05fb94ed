"""ORT's part in the child's measured steps: the model under ORTModule, the stack it needs, and
on CPU each node's kernel time profiled after the steps (``memopt.backends.ort.profile``).

Runs inside the child process only. Imported before the child knows whether torch loads here, so
torch and ORTModule are imported once the steps start.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memopt.backends.ort.profile import profile_sessions, write_node_times
from memopt.backends.ort.stack import check_stack, inspect_stack
from memopt.child import ONNX_PREFIX
from memopt.errors import one_line

if TYPE_CHECKING:
    from torch import nn
    from torch.optim.optimizer import Optimizer

    from memopt.recipes import Recipe

__all__ = ["PROFILED_STEPS", "OrtSteps"]

PROFILED_STEPS = 3  # steps of the profiled session after its own warm-up


class OrtSteps:
    """The model under ORTModule (``memopt.child.steps.StepsBackend``)."""

    def check(self) -> None:
        check_stack(inspect_stack())

    def stack_record(self) -> dict[str, Any]:
        return asdict(inspect_stack())

    def has_cuda(self) -> bool:
        return inspect_stack().ort_cuda_version is not None

    def wrap(self, model: nn.Module, log_level: str, save_onnx: bool) -> nn.Module:
        from onnxruntime.training.ortmodule import DebugOptions, LogLevel, ORTModule

        options = DebugOptions(log_level=LogLevel[log_level], save_onnx=save_onnx, onnx_prefix=ONNX_PREFIX)
        return ORTModule(model, options)

    def prepare_optimizer(self, optimizer: Optimizer) -> None:
        return None  # ORT's memory optimizer plans the graph; the optimizer steps as the recipe made it

    def after_steps(self, recipe: Recipe, batch_size: int, device: str, folder: Path) -> None:
        """Each node's median kernel time over ``PROFILED_STEPS`` steps (CPU only), from a second
        session built after the measured steps: the profiler's events (megabytes a step) would add
        to their memory, and steps added before them would move them later in the arena's drift.

        Best effort: the trial has measured what it ran for, and without node times the recompute
        cost falls back to the graph's work."""
        from memopt.child.steps import TrainingStep

        if device != "cpu" or not profile_sessions(folder):
            return
        try:
            step = TrainingStep(recipe, batch_size, device, lambda model: self.wrap(model, "WARNING", False))
            for _ in range(PROFILED_STEPS + 1):  # the first builds the session
                step()
            write_node_times(step.model, folder)
        except Exception as err:  # whatever went wrong, the measured steps stand
            print(f"[memopt] profiling the kernels failed ({one_line(err)}); costs fall back to FLOPs", file=sys.stderr)
