"""``memopt trial``: one config, one batch size, real training steps (ORTModule, or plain PyTorch with a
recompute policy: ``Backend.trial``), journaled."""

from __future__ import annotations

import json
import os
import shlex
import sys
from functools import singledispatch
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memopt.backends import choose_backend
from memopt.backends.base import TrialReport, TrialRequest
from memopt.backends.ort.commands import OrtTrialReport
from memopt.backends.torch.commands import TorchTrialReport
from memopt.cli import EXIT_DOES_NOT_FIT, app, console, error_console
from memopt.cli.options import (
    BackendOption,
    BatchOption,
    CommandOption,
    DeviceOption,
    HfTaskOption,
    OptionPairs,
    PythonOption,
    RunOptions,
    RunsDirOption,
    SeqOption,
    SizeOption,
    StepsOption,
    TargetOptions,
    TargetSeqOption,
    TimeoutOption,
    choose_target,
    run_settings,
)
from memopt.cli.progress import CommandProgress
from memopt.cli.show import print_trial
from memopt.core import RunnableTarget, RunStatus, runnable
from memopt.core.trial import Outcome
from memopt.errors import MemoptError
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.budget import parse_budget
from memopt.run.launch import TORCH_LOG_NAME
from memopt.units import format_bytes, format_compared

__all__ = ["trial_command"]


@app.command("trial")
def trial_command(
    batch: BatchOption,
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="RECIPE | -- CMD ARGS…",
            help="A recipe (built-in name, .py file, package.module[:attr], hf:NAME or hf:PATH), or after -- your own training command.",
            show_default=False,
        ),
    ] = None,
    command: CommandOption = None,
    config: str = typer.Option(
        "none",
        "--config",
        "-c",
        help="ORT: a JSON config file, a config string or a comma list of plan keys (X+ means X+:1:-1); --backend torch: a policy file or plans separated by ';'; or none.",
    ),
    steps: StepsOption = DEFAULT_STEPS,
    seq: SeqOption = None,
    size: SizeOption = None,
    option: OptionPairs = [],  # noqa: B006  (typer reads the default; never mutated)
    hf_task: HfTaskOption = None,
    target_seq: TargetSeqOption = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            help="Peak memory allowed, e.g. 2.5GiB, 2500MB or 80% (of the device the trial runs on): above it the trial is over budget.",
        ),
    ] = None,
    device: DeviceOption = "auto",
    runs_dir: RunsDirOption = DEFAULT_RUNS_DIR,
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Reuse a finished trial of the journal with the same recipe, options, batch, config and versions.",
    ),
    python: PythonOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    as_json: bool = typer.Option(False, "--json", help="Print the journal record as JSON."),
    backend: BackendOption = None,
) -> None:
    """Run RECIPE (or your command) at --batch with --config applied as a user would; journal its memory and time.

    With ORT, --config is an ORTMODULE_MEMORY_OPT_CONFIG and the record says which plans ORT
    applied; with --backend torch, a recompute policy handed over in MEMOPT_RECOMPUTE_POLICY.
    """
    chosen_backend = choose_backend(backend)
    if not config.strip():  # an unset shell variable, most likely: never taken for "no recompute"
        raise MemoptError("--config is empty: give plans, a config file, or --config none for no recompute")
    target = _target(words or [], command)
    parsed_budget = parse_budget(budget) if budget is not None else None
    settings = run_settings(
        target,
        batch,
        TargetOptions(seq, size, option, hf_task, target_seq),
        RunOptions(steps, device, timeout, python, runs_dir),
    )
    request = TrialRequest(settings, batch, config, parsed_budget, resume)
    _show(chosen_backend.backend.trial(request, CommandProgress(chosen_backend.line())), as_json)


@singledispatch
def _show(report: TrialReport, as_json: bool) -> None:
    """The trial's record (``--json``) or its summary, and the exit status its verdict gives."""
    raise TypeError(f"no view of {type(report).__name__}")


@_show.register
def _(report: OrtTrialReport, as_json: bool) -> None:
    result = report.result
    if as_json:
        print(json.dumps(report.record(), indent=2, default=str))
    else:
        for warning in report.warnings:
            console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
        print_trial(result)
    if result.outcome.does_not_fit:
        sys.exit(EXIT_DOES_NOT_FIT)
    if not result.fits:
        sys.exit(1)


@_show.register
def _(report: TorchTrialReport, as_json: bool) -> None:
    from memopt.backends.torch.trial import trial_export_line

    trial, policy, batch = report.trial, report.policy, report.trial.batch_size
    if as_json:
        print(json.dumps(report.record(), indent=2, default=str))
    peak = trial.memory.device_peak
    if trial.status is RunStatus.OUT_OF_MEMORY:
        error_console.print(f"out of memory at batch {batch} with {policy} ({trial.run_dir})", markup=False)
        sys.exit(EXIT_DOES_NOT_FIT)
    if not trial.ran:
        raise MemoptError(
            f"{trial.status.failure(trial.target.noun)}: {trial.error} (log: {Path(trial.run_dir) / TORCH_LOG_NAME})"
        )
    if not as_json:
        shown = format_bytes(peak) if peak is not None else "unknown"
        step = f"{trial.median_step_s:.3f} s" if trial.median_step_s is not None else "unknown"
        console.print(f"batch {batch}, {policy}: peak {shown}, median step {step}", markup=False, highlight=False)
        console.print(trial_export_line(trial), markup=False, highlight=False)
    if trial.outcome is Outcome.OVER_BUDGET and peak is not None and trial.budget_bytes is not None:
        shown, budget_shown = format_compared(peak, trial.budget_bytes)
        error_console.print(f"over budget: {shown} > {budget_shown}", markup=False)
        sys.exit(EXIT_DOES_NOT_FIT)


def _target(words: list[str], command: str | None) -> RunnableTarget:
    """``RECIPE``, ``-- CMD ARGS…`` (several words, or one program that is not a .py recipe) or ``--cmd``."""
    if len(words) > 1 or (words and _is_program(words[0])):
        if command is not None:
            raise MemoptError("give the command after -- or with --cmd, not both")
        return runnable(choose_target(None, shlex.join(words)))
    return runnable(choose_target(words[0] if words else None, command, default=None))


def _is_program(word: str) -> bool:
    return not word.endswith(".py") and os.path.isfile(word) and os.access(word, os.X_OK)
