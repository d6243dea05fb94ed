"""Running the user's target, each run in a child process of its own (under ORTModule or plain PyTorch).

- ``launch``: run folders and child processes (``launch``, cancellable with an event).
- ``command``: the user's own training command as a target, every rank measured.
- ``probe``: one no-config run that saves the graphs ORTModule builds.
- ``journal``: every finished trial (``memopt.core.trial.TrialResult``); each back end's trials
  are its own (``memopt.backends.ort.trials``, ``memopt.backends.torch.trial``).
- ``budget``: memory budgets as people write them, resolved against the device;
  ``cgroup``: the memory cgroup's limit; ``oom``: the kernel's record of an OOM kill.
- ``stops``: the stretches memopt or a run was stopped in, left out of step times.
- ``settings``: what every run shares, declared once: defaults and the checks of each value.

The child process's own side lives in ``memopt.child`` (it imports torch; nothing here does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.lazy import lazy_exports

# Two functions share their module's name: imported now, so that the package's attribute is the
# function, not the submodule a first import would leave there.
from memopt.run.launch import launch
from memopt.run.probe import probe

if TYPE_CHECKING:
    from memopt.run.budget import (
        DEFAULT_FRACTION,
        Budget,
        BudgetError,
        cpu_device_memory,
        parse_budget,
        require_budget,
        resolve_budget,
    )
    from memopt.run.command import run_target
    from memopt.run.journal import JOURNAL_NAME, Journal, JournalEntry
    from memopt.run.launch import (
        LOG_NAME,
        ONNX_DIR,
        ONNX_PREFIX,
        RECORD_NAME,
        RunRequest,
        RunResult,
        end_all_runs,
        new_run_dir,
    )
    from memopt.run.probe import GRAPH_KINDS, ProbeResult, run_label
    from memopt.run.settings import (
        DEFAULT_RUNS_DIR,
        DEFAULT_STEPS,
        DEFAULT_TIMEOUT_S,
        DEVICES,
        RunSettings,
        check_batch,
        check_count,
        check_device,
        check_options,
        check_steps,
        check_timeout,
    )

# Imported on first use: a command loads only the machinery it runs.
_LAZY = {
    "memopt.run.budget": (
        "DEFAULT_FRACTION",
        "Budget",
        "BudgetError",
        "cpu_device_memory",
        "parse_budget",
        "require_budget",
        "resolve_budget",
    ),
    "memopt.run.command": ("run_target",),
    "memopt.run.journal": ("JOURNAL_NAME", "Journal", "JournalEntry"),
    "memopt.run.launch": (
        "LOG_NAME",
        "ONNX_DIR",
        "ONNX_PREFIX",
        "RECORD_NAME",
        "RunRequest",
        "RunResult",
        "end_all_runs",
        "new_run_dir",
    ),
    "memopt.run.probe": ("GRAPH_KINDS", "ProbeResult", "run_label"),
    "memopt.run.settings": (
        "DEFAULT_RUNS_DIR",
        "DEFAULT_STEPS",
        "DEFAULT_TIMEOUT_S",
        "DEVICES",
        "RunSettings",
        "check_batch",
        "check_count",
        "check_device",
        "check_options",
        "check_steps",
        "check_timeout",
    ),
}
__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_FRACTION",
    "DEFAULT_RUNS_DIR",
    "DEFAULT_STEPS",
    "DEFAULT_TIMEOUT_S",
    "DEVICES",
    "GRAPH_KINDS",
    "JOURNAL_NAME",
    "LOG_NAME",
    "ONNX_DIR",
    "ONNX_PREFIX",
    "RECORD_NAME",
    "Budget",
    "BudgetError",
    "Journal",
    "JournalEntry",
    "ProbeResult",
    "RunRequest",
    "RunResult",
    "RunSettings",
    "check_batch",
    "check_count",
    "check_device",
    "check_options",
    "check_steps",
    "check_timeout",
    "end_all_runs",
    "launch",
    "new_run_dir",
    "parse_budget",
    "probe",
    "require_budget",
    "resolve_budget",
    "run_label",
    "run_target",
    "cpu_device_memory",
]
