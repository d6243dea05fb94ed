"""A torch trial: a recipe's real training steps in a child process, with a recompute policy applied.

The policy goes where a user's script finds it: a file in the run folder named by
``MEMOPT_RECOMPUTE_POLICY`` in the child's environment, read by ``memopt.recompute.apply`` (in
memopt's child for a recipe; in the user's own script for a ``--cmd`` command, whose steps count
from the first training forward of the model it passes to ``apply``).
The peak is measured as for ORT (``memopt.child.steps``): the process's peak RSS on CPU, the
caching allocator's statistics on CUDA. Each finished trial is a journal line of kind
``torch-trial``; ``resume`` reuses one with the same recipe, options, batch and policy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memopt.core import RunStatus
from memopt.errors import MemoptError
from memopt.ort.config import config_file_argument
from memopt.recompute import POLICY_ENV, RecomputePlan, RecomputePolicy
from memopt.run.budget import CPU_ALLOCATOR_ENV, Budget, cpu_device_memory, resolve_budget
from memopt.run.command import run_target
from memopt.run.journal import Journal
from memopt.run.launch import RunRequest, new_run_dir, write_new
from memopt.run.settings import RunSettings

__all__ = [
    "POLICY_FILE",
    "TRIAL_KIND",
    "TorchTrial",
    "allocator_env",
    "export_line",
    "on_cuda",
    "read_policy",
    "resolve_torch_budget",
    "run_torch_trial",
    "trial_key",
]

POLICY_FILE = "recompute-policy.json"
TRIAL_KIND = "torch-trial"


@dataclass(frozen=True)
class TorchTrial:
    batch: int
    policy: RecomputePolicy
    status: RunStatus
    run_dir: Path
    peak_bytes: int | None  # what runs out: the whole run's peak; on CUDA reserved + outside the allocator
    median_step_s: float | None
    error: str | None = None
    reused: bool = False
    allocator: Mapping[str, str] = field(default_factory=dict)  # the allocator's settings it ran with

    @property
    def ran(self) -> bool:
        return self.status.ran

    @property
    def policy_path(self) -> Path:
        return self.run_dir / POLICY_FILE

    def within(self, limit_bytes: int) -> bool:
        return self.ran and self.peak_bytes is not None and self.peak_bytes <= limit_bytes

    @property
    def out_of_memory(self) -> bool:
        return self.status is RunStatus.OUT_OF_MEMORY

    def export_line(self, policy_path: Path | None = None) -> str:
        """The line a job's shell pastes to run as this trial ran: its policy (or the same one
        at ``policy_path``) and its allocator's settings."""
        return export_line(policy_path or self.policy_path, self.allocator)

    def record(self, key: str) -> dict[str, object]:
        return {
            "key": key,
            "kind": TRIAL_KIND,
            "batch": self.batch,
            "plans": [str(plan) for plan in self.policy.plans],
            "status": self.status.value,
            "run_dir": str(self.run_dir),
            "peak_bytes": self.peak_bytes,
            "median_step_s": self.median_step_s,
            "error": self.error,
            "allocator": dict(self.allocator),
        }


def on_cuda(requested_device: str) -> bool:
    """Whether a torch trial runs on CUDA (``auto``: where torch has it)."""
    import torch

    if requested_device == "cuda" and not torch.cuda.is_available():
        raise MemoptError("--device cuda: torch here sees no CUDA device")
    return requested_device == "cuda" or (requested_device == "auto" and torch.cuda.is_available())


def allocator_env(requested_device: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """On CPU, glibc's mmap threshold pinned (``CPU_ALLOCATOR_ENV``) where ``environ`` does not set it."""
    if on_cuda(requested_device):
        return {}
    return {name: value for name, value in CPU_ALLOCATOR_ENV.items() if name not in environ}


def export_line(policy_path: Path, allocator: Mapping[str, str]) -> str:
    """The line a job's shell pastes to run with the policy at ``policy_path`` and the allocator's settings."""
    env = {POLICY_ENV: str(policy_path.resolve()), **allocator}
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())


def resolve_torch_budget(budget: Budget | None, requested_device: str) -> int:
    """The budget in bytes on the device a torch trial runs on (``auto``: CUDA where torch has it)."""
    import torch

    if not on_cuda(requested_device):
        return resolve_budget(budget, "cpu", cpu_device_memory())
    return resolve_budget(
        budget, "cuda", int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    )


def read_policy(text: str) -> RecomputePolicy:
    """``--config`` for the torch back end: ``none``, a policy file, or plans separated by ``;``."""
    if text.strip().lower() == "none":
        return RecomputePolicy(())
    # Named as ORT's config files are: a missing .json, a folder or a FIFO is refused by its name.
    path = config_file_argument(text)
    if path is not None:
        return RecomputePolicy.read(path)
    return RecomputePolicy(tuple(RecomputePlan.parse(plan) for plan in text.split(";") if plan.strip()))


def _reused(record: Mapping[str, Any], batch: int, policy: RecomputePolicy) -> TorchTrial | None:
    """The journal's record of a finished run as a trial; None where a field is not what this
    release writes (a record edited or from elsewhere is run afresh, not trusted)."""
    run_dir, peak, step, allocator = (
        record.get(name) for name in ("run_dir", "peak_bytes", "median_step_s", "allocator")
    )
    allocator = {} if allocator is None else allocator
    if (
        not isinstance(run_dir, str)
        or not (peak is None or (isinstance(peak, int) and not isinstance(peak, bool)))
        or not (step is None or isinstance(step, (int, float)))
        or not isinstance(allocator, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in allocator.items())
    ):
        return None
    return TorchTrial(
        batch,
        policy,
        RunStatus(record["status"]),
        Path(run_dir),
        peak,
        None if step is None else float(step),
        reused=True,
        allocator=allocator,
    )


def trial_key(settings: RunSettings, batch: int, policy: RecomputePolicy) -> str:
    identity = {
        "target": settings.target.spec,
        "options": dict(settings.options),
        "batch": batch,
        "device": settings.device,
        "steps": settings.steps,
        "plans": [str(plan) for plan in policy.plans],
    }
    if not on_cuda(settings.device):  # the allocator's setting the run has, the user's or memopt's
        identity["allocator"] = {name: os.environ.get(name, value) for name, value in CPU_ALLOCATOR_ENV.items()}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_torch_trial(
    settings: RunSettings,
    batch: int,
    policy: RecomputePolicy,
    *,
    journal: Journal,
    resume: bool = False,
    cancel: threading.Event | None = None,
) -> TorchTrial:
    """Train ``settings``' recipe at ``batch`` with ``policy`` in a child process, or run its command
    with the policy file in its environment (its script applies it); journal the outcome.
    ``cancel`` set ends the run (its status ``cancelled``)."""
    key = trial_key(settings, batch, policy)
    if resume:
        done = journal.latest(key, usable=(RunStatus.OK.value,), kind=TRIAL_KIND)
        reused = _reused(done.record, batch, policy) if done is not None else None
        if reused is not None:
            return reused
    run_dir = new_run_dir(settings.runs_dir, f"torch-{settings.target.label}-b{batch}")
    write_new(run_dir / POLICY_FILE, policy.to_json() + "\n")  # a full disk names the file
    allocator = allocator_env(settings.device)
    env = {POLICY_ENV: str((run_dir / POLICY_FILE).resolve()), **allocator}
    run = run_target(RunRequest(settings, batch, env=env, backend="torch"), run_dir, cancel)
    trial = TorchTrial(
        batch, policy, run.status, run_dir, run.memory.device_peak, run.median_step_s, run.error, allocator=allocator
    )
    journal.append(trial.record(key))
    return trial
