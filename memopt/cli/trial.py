"""``memopt trial``: one config, one batch size, real ORTModule steps, journaled."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memopt.backends import Backend, choose_backend
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
from memopt.cli.show import print_trial, say
from memopt.core import RunnableTarget, runnable
from memopt.errors import MemoptError
from memopt.ort.config import ConfigEntry, PlanKey
from memopt.ort.version import OrtVersion
from memopt.pipeline.calibrate import load_saved_model, model_identity, save_model
from memopt.predict.calibration import learn_from_trial
from memopt.predict.memory_model import MemoryModel, ModelError
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.budget import Budget, parse_budget
from memopt.run.journal import Journal
from memopt.run.launch import LOG_NAME, TORCH_LOG_NAME
from memopt.run.settings import RunSettings
from memopt.run.trials import (
    TrialSpec,
    parse_trial_config,
    run_trial,
    stack_versions,
)
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
        help="A JSON config file, a config string, a comma list of plan keys (X+ means X+:1:-1), or none.",
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
    """Run RECIPE (or your command) at --batch with --config applied as a user would; record memory, time and ORT's plans."""
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
    if chosen_backend.backend is Backend.TORCH:
        _torch_trial(settings, batch, config, parsed_budget, resume, as_json, chosen_backend.line())
        return
    options = settings.options
    versions = stack_versions(settings.python, settings.timeout_s)
    if versions.ort_version is None:
        raise MemoptError("the ORT training stack cannot run: onnxruntime-training is not installed")
    validated = parse_trial_config(config, OrtVersion.parse(versions.ort_version))
    say(chosen_backend.line())
    spec = TrialSpec(settings, batch, validated.entries)

    identity_device = "cuda" if versions.cuda and device != "cpu" else "cpu"
    identity = model_identity(target, options, versions, identity_device)
    model = load_saved_model(runs_dir, identity)
    plan_keys = _plan_keys(model, validated.entries) if model else ()
    predicted = None
    if model is not None:
        try:
            predicted = int(model.predict(batch, plan_keys).peak_bytes)
        except ModelError:
            predicted = None
    with console.status(
        f"Trial of {escape(str(target))} at batch {batch} ({len(validated.entries)} config entries, {steps + 1} steps)…"
    ):
        result = run_trial(
            spec,
            runs_dir,
            journal=Journal.in_folder(runs_dir),
            resume=resume,
            budget=parsed_budget,
            predicted_peak_bytes=predicted,
            versions=versions,
        )
    if result.status.fatal:
        raise MemoptError(
            f"{result.status.failure(target.noun)}: {result.error} (log: {Path(result.run_dir) / LOG_NAME})"
        )
    learnt = learn_from_trial(model, result, plan_keys) if model is not None and not result.reused else None
    if learnt is not None:
        save_model(runs_dir, identity, learnt)
    if as_json:
        print(json.dumps(result.to_record(), indent=2, default=str))
    else:
        for warning in dict.fromkeys((*validated.warnings, *result.config_warnings)):
            console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
        print_trial(result)
    if result.outcome.does_not_fit:
        sys.exit(EXIT_DOES_NOT_FIT)
    if not result.fits:
        sys.exit(1)


def _torch_trial(
    settings: RunSettings,
    batch: int,
    config: str,
    budget: Budget | None,
    resume: bool,
    as_json: bool,
    backend_line: str,
) -> None:
    # Imported here: the torch back end loads torch (about 600 MiB of RSS), which an ORT trial's
    # parent process, counted in the same memory cgroup as its job, must not carry.
    from memopt.backends.torch.trial import read_policy, resolve_torch_budget, run_torch_trial, trial_key

    policy = read_policy(config)  # bad input stays one error line, before the back end's line
    say(backend_line)
    with console.status(f"Trial of {escape(str(settings.target))} at batch {batch} in plain PyTorch ({policy})…"):
        trial = run_torch_trial(settings, batch, policy, journal=Journal.in_folder(settings.runs_dir), resume=resume)
    if as_json:
        print(json.dumps(trial.record(trial_key(settings, batch, policy)), indent=2, default=str))
    if trial.out_of_memory:
        error_console.print(f"out of memory at batch {batch} with {policy} ({trial.run_dir})", markup=False)
        sys.exit(EXIT_DOES_NOT_FIT)
    if not trial.ran:
        raise MemoptError(
            f"{trial.status.failure(settings.target.noun)}: {trial.error} (log: {trial.run_dir / TORCH_LOG_NAME})"
        )
    if not as_json:
        peak = format_bytes(trial.peak_bytes) if trial.peak_bytes is not None else "unknown"
        step = f"{trial.median_step_s:.3f} s" if trial.median_step_s is not None else "unknown"
        console.print(f"batch {batch}, {policy}: peak {peak}, median step {step}", markup=False, highlight=False)
        console.print(trial.export_line(), markup=False, highlight=False)
    if budget is not None and trial.peak_bytes is not None:
        budget_bytes = resolve_torch_budget(budget, settings.device)
        if trial.peak_bytes > budget_bytes:
            peak, budget_shown = format_compared(trial.peak_bytes, budget_bytes)
            error_console.print(f"over budget: {peak} > {budget_shown}", markup=False)
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


def _plan_keys(model: MemoryModel, entries: Sequence[ConfigEntry]) -> tuple[PlanKey, ...]:
    enabled = {e.cell for e in entries if int(e.optimization)}
    return tuple(p.key for p in model.plans if enabled and set(p.entries) <= enabled)
