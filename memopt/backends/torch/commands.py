"""The torch back end's part in the commands: what ``memopt scan``, ``trial`` and ``plan`` do in plain PyTorch.

Imported by the commands of either back end: torch (about 600 MiB of RSS, which an ORT command's
parent process, counted in the same memory cgroup as its runs, must not carry) loads inside.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memopt.backends.base import PlanRequest, Progress, ScanRequest, TrialRequest
from memopt.core import RecipeTarget, RunStatus, runnable
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.run.files import replace_atomically
from memopt.run.journal import Journal
from memopt.run.launch import new_run_dir
from memopt.run.settings import RunSettings

if TYPE_CHECKING:
    from memopt.backends.torch.scan import TorchScan
    from memopt.backends.torch.tune import TorchPlan
    from memopt.recompute import RecomputePolicy

__all__ = ["TorchPlanReport", "TorchScanReport", "TorchTrialReport", "torch_plan", "torch_scan", "torch_trial"]


@dataclass(frozen=True)
class TorchScanReport:
    scanned: TorchScan
    label: str  # the target as the table's title names it
    fake: bool  # captured on fake tensors: no recompute times


def torch_scan(request: ScanRequest, progress: Progress) -> TorchScanReport:
    """A recipe's step captured in this process at a few sizes, or a command's forward in three
    short runs of it, grouped into ``memopt.recompute``'s plans."""
    from memopt.backends.torch.command_scan import scan_command
    from memopt.backends.torch.offload import NOT_ON_CPU
    from memopt.backends.torch.optimizer import with_step_plans
    from memopt.backends.torch.scan import scan_recipe

    target, fake = request.target, request.torch.fake
    if fake and not isinstance(target, RecipeTarget):
        raise MemoptError("--fake scans a recipe in this process; a command's model is captured in its own run")
    progress.checked()
    batch = request.batch or request.probe_batch
    if isinstance(target, RecipeTarget):
        recipe = target.load(request.options)
        with progress.working(f"Capturing a training step of {target} at a few sizes…"):
            scanned = with_step_plans(scan_recipe(recipe, batch, timed=not fake), recipe, "cpu", timed=not fake)
        progress.say(NOT_ON_CPU)
    else:
        runs = runnable(target)
        settings = RunSettings(target=runs, python=progress.interpreter(runs, batch), runs_dir=request.runs_dir)
        with progress.working(f"Capturing a training forward of {target} in three short runs…"):
            scanned = scan_command(settings, batch)
    return TorchScanReport(scanned, str(target), fake)


@dataclass(frozen=True)
class TorchTrialReport:
    trial: TrialResult  # judged against the budget where one was asked for
    policy: RecomputePolicy

    def record(self) -> dict[str, Any]:
        return self.trial.to_record()


def torch_trial(request: TrialRequest, progress: Progress) -> TorchTrialReport:
    """The policy file read, the recipe or command run in plain PyTorch with it applied."""
    from memopt.backends.torch.trial import read_policy, resolve_torch_budget, run_torch_trial

    settings, batch = request.settings, request.batch
    policy = read_policy(request.config)  # bad input stays one error line, before the back end's line
    progress.checked()
    with progress.working(f"Trial of {settings.target} at batch {batch} in plain PyTorch ({policy})…"):
        trial = run_torch_trial(
            settings, batch, policy, journal=Journal.in_folder(settings.runs_dir), resume=request.resume
        )
    if request.budget is not None and trial.ran:
        trial = trial.judged(resolve_torch_budget(request.budget, settings.device))
    return TorchTrialReport(trial, policy)


@dataclass(frozen=True)
class TorchPlanReport:
    plan: TorchPlan
    written: Path | None  # the policy file; None where no policy is predicted to fit
    trial: TrialResult | None  # ``verify``'s run of it
    export: tuple[str, ...]  # the line a job's shell pastes

    @property
    def fits(self) -> bool:
        return self.plan.feasible and (self.trial is None or self.trial.within(int(self.plan.limit_bytes)))

    @property
    def status(self) -> str:
        return "does_not_fit" if not self.fits else "predicted" if self.trial is None else "verified"

    def summary(self) -> dict[str, Any]:
        plan, trial = self.plan, self.trial
        return {
            "status": self.status,
            "backend": "torch",
            "feasible": plan.feasible,
            "target_batch": plan.target_batch,
            "budget_bytes": plan.budget_bytes,
            "limit_bytes": int(plan.limit_bytes),
            "predicted_without_recompute_bytes": int(plan.baseline_bytes),
            "predicted_bytes": int(plan.predicted_bytes),
            "kept_room_bytes": int(plan.kept_room_bytes),
            "kept_room": plan.room_line,
            "plans": [str(p) for p in plan.policy.plans],
            "policy_file": str(self.written.resolve()) if self.written is not None else None,
            "export": list(self.export),
            "verify": None if trial is None else {"status": trial.status.value, "peak_bytes": trial.memory.device_peak},
        }


def torch_plan(request: PlanRequest, progress: Progress) -> TorchPlanReport:
    """Tune's scan, probes and choice, without its verifying run (``verify`` adds that one run);
    the policy file written where a job reads it."""
    from memopt.backends.torch.trial import POLICY_FILE, allocator_env, export_line, run_torch_trial
    from memopt.backends.torch.tune import plan_torch
    from memopt.units import format_compared

    settings = request.settings
    run, target_batch, out = settings.run, settings.target_batch, request.out
    progress.checked()
    with progress.result_kept():
        plan = plan_torch(
            run, target_batch, settings.budget, margin=settings.margin, resume=settings.resume, say=progress.say
        )
    written = None
    if plan.feasible:  # a policy not predicted to fit is no answer: nothing is written
        path = out or new_run_dir(run.runs_dir, f"torch-plan-{run.target.label}-b{target_batch}") / POLICY_FILE
        written = replace_atomically(path, plan.policy.to_json() + "\n", overwrite=out is None or request.force)
    trial = None
    if request.verify and plan.feasible:
        trial = run_torch_trial(run, target_batch, plan.policy, journal=Journal.in_folder(run.runs_dir))
        measured, limit = format_compared(trial.memory.device_peak or 0, plan.limit_bytes)
        peak = (
            "out of memory"
            if trial.status is RunStatus.OUT_OF_MEMORY
            else f"peak {measured}"
            if trial.ran
            else trial.status.failure(run.target.noun)
        )
        verdict = "within" if trial.within(int(plan.limit_bytes)) else "OVER"
        progress.say(f"measurement: {peak} against the limit {limit}: {verdict} ({trial.run_dir})")
    export: tuple[str, ...] = ()
    if written is not None:
        ran_with = trial.torch.allocator if trial is not None and trial.torch else allocator_env(run.device)
        export = (export_line(written, ran_with),)
    return TorchPlanReport(plan, written, trial, export)
