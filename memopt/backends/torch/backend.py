"""The plain-PyTorch back end (``memopt.backends.base.Backend``): ``memopt.recompute``'s policy,
its plans found in a captured step, their peak played on fake tensors, verified by trials.

Its modules are imported inside the methods: they load torch (about 600 MiB of RSS), which an ORT
command's parent process, counted in the same memory cgroup as its runs, must not carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memopt.backends.base import PlanRequest, Progress, ScanRequest, TrialRequest
from memopt.core.backend import BackendName

if TYPE_CHECKING:
    from memopt.backends.torch.child import TorchSteps
    from memopt.backends.torch.commands import TorchPlanReport, TorchScanReport, TorchTrialReport
    from memopt.backends.torch.session import TorchTuner
    from memopt.tune.events import TuneEvent
    from memopt.tune.settings import TuneSettings

__all__ = ["BACKEND", "TorchBackend"]


class TorchBackend:
    name = BackendName.TORCH
    label = "plain PyTorch"

    def problem_here(self) -> str | None:
        return None  # memopt itself runs on torch

    def prepare(self) -> None:
        # This back end builds an hf: model in this process (its scan), which transformers cannot
        # once imported without torch for the options' check alone.
        import memopt.backends.torch.tune  # noqa: F401

    def child_steps(self) -> TorchSteps:
        from memopt.backends.torch.child import TorchSteps

        return TorchSteps()

    def scan(self, request: ScanRequest, progress: Progress) -> TorchScanReport:
        from memopt.backends.torch.commands import torch_scan

        return torch_scan(request, progress)

    def plan(self, request: PlanRequest, progress: Progress) -> TorchPlanReport:
        from memopt.backends.torch.commands import torch_plan

        return torch_plan(request, progress)

    def trial(self, request: TrialRequest, progress: Progress) -> TorchTrialReport:
        from memopt.backends.torch.commands import torch_trial

        return torch_trial(request, progress)

    def tuning_session(
        self, settings: TuneSettings, progress: Progress, on_event: Callable[[TuneEvent], None] | None = None
    ) -> TorchTuner:
        from memopt.backends.torch.session import TorchTuner
        from memopt.backends.torch.trial import resolve_torch_budget

        progress.checked()
        resolve_torch_budget(settings.budget, settings.run.device)
        return TorchTuner(settings, on_event)


BACKEND = TorchBackend()
