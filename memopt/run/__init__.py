"""Running the user's target under ORTModule, each run in a child process of its own.

- ``target``: a target's training graph, from a short probe run or an ONNX file.
- ``launch``: run folders and child processes (``launch``, cancellable with an event).
- ``command``: the user's own training command as a target, every rank measured.
- ``probe``: one no-config run that saves the graphs ORTModule builds.
- ``trials``: one config at one batch size, measured; ``journal``: every finished trial.
- ``budget``: memory budgets as people write them, resolved against the device.

The child process's own side lives in ``memopt.child`` (it imports torch; nothing here does).
"""

from memopt.run.budget import (
    DEFAULT_FRACTION,
    Budget,
    BudgetError,
    parse_budget,
    require_budget,
    resolve_budget,
    total_ram,
)
from memopt.run.command import (
    BATCH_PLACEHOLDER,
    COMMAND_PREFIX,
    command_of,
    command_target,
    fixed_batch,
    has_batch_placeholder,
    is_command,
    job_python,
    target_label,
)
from memopt.run.journal import JOURNAL_NAME, Journal, JournalEntry
from memopt.run.launch import (
    DEVICES,
    LOG_NAME,
    ONNX_DIR,
    ONNX_PREFIX,
    RECORD_NAME,
    RunRequest,
    RunResult,
    check_device,
    check_timeout,
    end_all_runs,
    launch,
    new_run_dir,
)
from memopt.run.probe import GRAPH_KINDS, ProbeResult, probe, run_label
from memopt.run.target import CONFIG_VARIABLES, ScanTarget, load_target
from memopt.run.trials import (
    DEFAULT_STEPS,
    LEVEL_VAR,
    REUSABLE_STATUSES,
    ChildTrialRunner,
    CommandTrialRunner,
    JournaledRunner,
    Outcome,
    StackVersions,
    TrialError,
    TrialResult,
    TrialRunner,
    TrialSpec,
    config_key,
    inherited_config_note,
    parse_trial_config,
    recipe_identity,
    run_trial,
    runner_for,
    stack_versions,
)

__all__ = [
    "BATCH_PLACEHOLDER",
    "COMMAND_PREFIX",
    "CommandTrialRunner",
    "command_of",
    "command_target",
    "fixed_batch",
    "has_batch_placeholder",
    "is_command",
    "job_python",
    "runner_for",
    "target_label",
    "CONFIG_VARIABLES",
    "DEFAULT_FRACTION",
    "DEVICES",
    "DEFAULT_STEPS",
    "GRAPH_KINDS",
    "JOURNAL_NAME",
    "LEVEL_VAR",
    "LOG_NAME",
    "ONNX_DIR",
    "ONNX_PREFIX",
    "RECORD_NAME",
    "REUSABLE_STATUSES",
    "Budget",
    "ChildTrialRunner",
    "BudgetError",
    "Journal",
    "JournaledRunner",
    "JournalEntry",
    "Outcome",
    "ProbeResult",
    "RunRequest",
    "RunResult",
    "ScanTarget",
    "StackVersions",
    "TrialError",
    "TrialResult",
    "TrialRunner",
    "TrialSpec",
    "check_device",
    "check_timeout",
    "config_key",
    "inherited_config_note",
    "end_all_runs",
    "launch",
    "load_target",
    "new_run_dir",
    "parse_budget",
    "parse_trial_config",
    "probe",
    "recipe_identity",
    "require_budget",
    "resolve_budget",
    "run_label",
    "run_trial",
    "stack_versions",
    "total_ram",
]
