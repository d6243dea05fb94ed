"""A torch trial: a recipe's real training steps in a child process, with a recompute policy applied.

The policy goes where a user's script finds it: a file in the run folder named by
``MEMOPT_RECOMPUTE_POLICY`` in the child's environment, read by ``memopt.recompute.apply`` (in
memopt's child for a recipe; in the user's own script for a ``--cmd`` command, whose steps count
from the first training forward of the model it passes to ``apply``).
The peak is measured as for ORT (``memopt.child.steps``): the process's peak RSS on CPU, the
caching allocator's statistics on CUDA. Each finished trial is a ``TrialResult``, journaled
as ORT's are with its torch section; ``resume`` reuses one with the same recipe, options, batch
and policy, and reads an older release's ``torch-trial`` lines too.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from memopt.backends.torch.peers import PEER_ENV, Peer
from memopt.core import BackendName, RunStatus
from memopt.core.plan import plan_names
from memopt.core.records import Positive, Seconds, checked_record, record_type, report_damaged
from memopt.core.trial import Outcome, TorchTrialDetails, TrialResult, outcome_of
from memopt.core.trial import trial_key as core_trial_key
from memopt.errors import MemoptError
from memopt.recompute import POLICY_ENV, RecomputePlan, RecomputePolicy
from memopt.run.budget import CPU_ALLOCATOR_ENV, Budget, cpu_device_memory, resolve_budget
from memopt.run.command import run_target
from memopt.run.files import config_file_argument
from memopt.run.journal import Journal, JournalEntry, journaled_trial
from memopt.run.launch import RunRequest, new_run_dir, write_new
from memopt.run.settings import RunSettings

if TYPE_CHECKING:  # the scan loads torch's fake tensors, which a trial's reader does without
    from memopt.backends.torch.scan import TorchScan

__all__ = [
    "POLICY_FILE",
    "SCAN_KIND",
    "allocator_env",
    "export_line",
    "journaled_times",
    "journaled_torch_trial",
    "on_cuda",
    "policy_of",
    "policy_path",
    "read_policy",
    "read_torch_trial",
    "resolve_torch_budget",
    "run_torch_trial",
    "trial_export_line",
    "trial_key",
]

POLICY_FILE = "recompute-policy.json"


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


def policy_of(trial: TrialResult) -> RecomputePolicy:
    """The policy a torch trial ran with: its plans as the journal names them."""
    return RecomputePolicy(tuple(RecomputePlan.parse(plan) for plan in trial.config))


def policy_path(trial: TrialResult) -> Path:
    """The policy file the trial's run read (``MEMOPT_RECOMPUTE_POLICY``), in its run folder."""
    return Path(trial.run_dir) / POLICY_FILE


def trial_export_line(trial: TrialResult, path: Path | None = None) -> str:
    """The line a job's shell pastes to run as ``trial`` ran: its policy (or the same one at
    ``path``) and its allocator's settings."""
    return export_line(path or policy_path(trial), trial.torch.allocator if trial.torch else {})


def trial_key(settings: RunSettings, batch: int, policy: RecomputePolicy, peer: Peer | None = None) -> str:
    identity: dict[str, object] = {
        "target": settings.target.spec,
        "options": dict(settings.options),
        "batch": batch,
        "device": settings.device,
        "steps": settings.steps,
        "plans": [str(plan) for plan in policy.plans],
    }
    if peer is not None:  # only a peer's run names one: memopt's runs keep their keys
        identity["peer"] = peer.text
    if not on_cuda(settings.device):  # the allocator's setting the run has, the user's or memopt's
        identity["allocator"] = {name: os.environ.get(name, value) for name, value in CPU_ALLOCATOR_ENV.items()}
    return core_trial_key(identity)


# An older release's journal line for a torch trial: kind ``torch-trial``, its own field names,
# its key the first 16 digits of today's (the same digest), without the recipe, options, steps
# and device (its key held them) and with the whole run's peak alone.
_OLDER_KIND = "torch-trial"
_OLDER_KEY_DIGITS = 16
_STATUS_WORDS = tuple(status.value for status in RunStatus)
_OLDER_NAMES = {"batch_size": "batch", "config": "plans", "torch.allocator": "allocator", "torch": "allocator"}


def read_torch_trial(
    entry: JournalEntry, settings: RunSettings, batch: int, policy: RecomputePolicy
) -> TrialResult | None:
    """The torch trial ``entry`` holds for ``settings``' recipe at ``batch`` with ``policy`` (the
    trial its key names), checked as every trial record is (``TrialResult.from_record``), in
    today's form or an older release's; None, with one warning naming the line and the field,
    where a field is damaged or is not the trial its key names."""
    record: Mapping[str, Any] = entry.record
    names: Mapping[str, str] = {}
    older = len(entry.key) == _OLDER_KEY_DIGITS
    kind = record.get("kind")
    if kind != (_OLDER_KIND if older else None):
        report_damaged(f"{entry.where}: skipped a damaged trial record (kind: not a torch trial's, got {kind!r})")
        return None
    if older:
        record, names = _today(record, settings), _OLDER_NAMES
    trial = TrialResult.from_record(record, entry.where, entry.path.parent, names)
    if trial is None:
        return None
    wrong = next(
        (
            (name, value)
            for name, value, expected in (
                ("batch_size", trial.batch_size, batch),
                ("config", trial.config, plan_names(str(plan) for plan in policy.plans)),
                ("torch", trial.torch is not None, True),
            )
            if value != expected
        ),
        None,
    )
    if wrong is not None:
        name, value = wrong
        report_damaged(
            f"{entry.where}: skipped a damaged trial record ({names.get(name, name)}: not the trial its key names, got {value!r})"
        )
        return None
    return replace(trial, reused=True)


def _today(record: Mapping[str, Any], settings: RunSettings) -> dict[str, Any]:
    """An older release's torch trial line as today's record: the fields its key stood for
    from ``settings``, its peak as what runs out, its allocator in the torch section."""
    run_dir, status = record.get("run_dir"), record.get("status")
    # An unknown status is the field to name: the outcome follows from a known one.
    outcome = outcome_of(RunStatus(status), None, None) if status in _STATUS_WORDS else Outcome.CRASHED
    return {
        "key": record["key"],
        "recipe": settings.target.spec,
        "options": dict(settings.options),
        "steps": settings.steps,
        "device": settings.device,
        "batch_size": record.get("batch"),
        "config": record.get("plans"),
        "config_value": str(Path(run_dir) / POLICY_FILE) if isinstance(run_dir, str) else None,
        "status": status,
        "outcome": outcome.value,
        "run_dir": run_dir,
        "peak_bytes": record.get("peak_bytes"),
        "median_step_s": record.get("median_step_s"),
        "error": record.get("error"),
        "torch": {"allocator": {} if record.get("allocator") is None else record.get("allocator")},
    }


SCAN_KIND = "torch-scan"
_SCAN_RECORD = TypeAdapter(
    record_type(
        "TorchScanRecord",
        {"key": str, "kind": str, "batch": Positive, "recompute_s": dict[str, Seconds]},
        ("recompute_s",),
    )
)


def journaled_times(scanned: TorchScan, settings: RunSettings, journal: Journal, resume: bool) -> TorchScan:
    """``scanned`` with each plan's recompute time as the journal holds it for this recipe, where
    ``resume`` finds one for all its plans; else as measured now, journaled for the next resume.

    A recompute time is measured afresh in each process and varies from run to run; the choice
    reads it, so a resume that measured again could choose another policy (and run it) where the
    journal already holds the answer. A damaged record is reported and measured afresh."""
    key = core_trial_key(
        {
            "kind": SCAN_KIND,
            "target": settings.target.spec,
            "options": dict(settings.options),
            "batch": scanned.batch,
            "device": settings.device,
        }
    )
    # The plans over every layer alike and the plans layer by layer, which tune chooses from.
    timed = (*scanned.rows, *scanned.layers)
    plans = {str(row.plan) for row in timed}
    if resume:
        for entry in journal.newest_first((key,), SCAN_KIND):
            checked = checked_record(_SCAN_RECORD, entry.record, entry.where, "scan")
            if checked is not None and set(checked["recompute_s"]) == plans:
                times = checked["recompute_s"]
                rows, layers = (
                    tuple(replace(row, recompute_seconds=times[str(row.plan)]) for row in group)
                    for group in (scanned.rows, scanned.layers)
                )
                return replace(scanned, rows=rows, layers=layers)
    journal.append(
        {
            "key": key,
            "kind": SCAN_KIND,
            "batch": scanned.batch,
            "recompute_s": {str(row.plan): row.recompute_seconds for row in timed},
        }
    )
    return scanned


def journaled_torch_trial(
    settings: RunSettings, batch: int, policy: RecomputePolicy, journal: Journal, peer: Peer | None = None
) -> TrialResult | None:
    """The journal's newest run of ``settings``' recipe at ``batch`` with ``policy`` (or ``peer``)
    that ran (in today's form or an older release's), each record checked on the way (``read_torch_trial``)."""
    key = trial_key(settings, batch, policy, peer)
    return journaled_trial(
        journal,
        key,
        lambda trial: trial.ran,
        read=lambda entry: read_torch_trial(entry, settings, batch, policy),
        keys=(key[:_OLDER_KEY_DIGITS],),
        kind=(None, _OLDER_KIND),
    )


def run_torch_trial(
    settings: RunSettings,
    batch: int,
    policy: RecomputePolicy,
    *,
    journal: Journal,
    resume: bool = False,
    cancel: threading.Event | None = None,
    peer: Peer | None = None,
) -> TrialResult:
    """Train ``settings``' recipe at ``batch`` with ``policy`` in a child process, or run its command
    with the policy file in its environment (its script applies it); journal the outcome.
    ``cancel`` set ends the run (its status ``cancelled``). ``peer``: a recipe's run with that
    set-up applied instead of the policy (``memopt.backends.torch.peers``)."""
    key = trial_key(settings, batch, policy, peer)
    if resume:
        reused = journaled_torch_trial(settings, batch, policy, journal, peer)
        if reused is not None:
            return reused
    journal.check_writable()  # refused before the trial runs, not after its result is lost
    run_dir = new_run_dir(settings.runs_dir, f"torch-{settings.target.label}-b{batch}")
    write_new(run_dir / POLICY_FILE, policy.to_json() + "\n")  # a full disk names the file
    allocator = allocator_env(settings.device)
    env = {POLICY_ENV: str((run_dir / POLICY_FILE).resolve()), **allocator}
    if peer is not None:
        env[PEER_ENV] = peer.text
    run = run_target(RunRequest(settings, batch, env=env, backend=BackendName.TORCH), run_dir, cancel)
    trial = TrialResult(
        key=key,
        target=settings.target,
        options=dict(settings.options),
        batch_size=batch,
        config=plan_names(str(plan) for plan in policy.plans),
        config_value=str((run_dir / POLICY_FILE).resolve()),
        outcome=outcome_of(run.status, run.memory.device_peak, None),
        status=run.status,
        run_dir=str(run_dir),
        steps=settings.steps,
        device="cuda" if on_cuda(settings.device) else "cpu",
        error=run.error,
        torch_version=(run.stack or {}).get("torch_version"),
        memory=run.memory,
        step_times_s=run.step_times_s,
        median_step_s=run.median_step_s,
        finished_at=time.time(),
        oom_evidence=run.oom_evidence,
        torch=TorchTrialDetails(allocator),
    )
    journal.append(trial.to_record())
    return trial
