"""The torch back end's part in the commands that run trials: what ``memopt trial`` does in plain PyTorch.

Imported by the commands of either back end: torch (about 600 MiB of RSS, which an ORT command's
parent process, counted in the same memory cgroup as its runs, must not carry) loads inside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memopt.backends.base import Progress, TrialRequest
from memopt.run.journal import Journal

if TYPE_CHECKING:
    from memopt.backends.torch.trial import TorchTrial
    from memopt.recompute import RecomputePolicy

__all__ = ["TorchTrialReport", "torch_trial"]


@dataclass(frozen=True)
class TorchTrialReport:
    trial: TorchTrial
    policy: RecomputePolicy
    key: str  # the trial's key in the journal
    budget_bytes: int | None  # the budget asked for, on the device the trial ran on

    def record(self) -> dict[str, Any]:
        return self.trial.record(self.key)


def torch_trial(request: TrialRequest, progress: Progress) -> TorchTrialReport:
    """The policy file read, the recipe or command run in plain PyTorch with it applied."""
    from memopt.backends.torch.trial import read_policy, resolve_torch_budget, run_torch_trial, trial_key

    settings, batch = request.settings, request.batch
    policy = read_policy(request.config)  # bad input stays one error line, before the back end's line
    progress.checked()
    with progress.working(f"Trial of {settings.target} at batch {batch} in plain PyTorch ({policy})…"):
        trial = run_torch_trial(
            settings, batch, policy, journal=Journal.in_folder(settings.runs_dir), resume=request.resume
        )
    budget_bytes = None
    if request.budget is not None and trial.peak_bytes is not None:
        budget_bytes = resolve_torch_budget(request.budget, settings.device)
    return TorchTrialReport(trial, policy, trial_key(settings, batch, policy), budget_bytes)
