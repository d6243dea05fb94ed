"""``memopt export --torch``: an ORT memory-optimizer config carried over to plain PyTorch, and verified there."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from memopt.backends.ort.stack import inspect_stack
from memopt.backends.ort.trials import parse_trial_config
from memopt.backends.ort.version import OrtVersion
from memopt.cli import EXIT_DOES_NOT_FIT, app
from memopt.cli.carry_over import carry_over_to_torch
from memopt.cli.options import (
    BudgetOption,
    DeviceOption,
    MarginOption,
    OptionPairs,
    RunOptions,
    RunsDirOption,
    SeqOption,
    SizeOption,
    StepsOption,
    TargetOptions,
    TimeoutOption,
    checked_count,
    choose_target,
    run_settings,
)
from memopt.core import runnable
from memopt.errors import MemoptError
from memopt.pipeline.carry_over import exportable
from memopt.predict import DEFAULT_MARGIN
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.budget import parse_budget
from memopt.run.files import check_write_target

__all__ = ["export_command"]


@app.command("export")
def export_command(
    config: Annotated[
        str,
        typer.Argument(
            metavar="CONFIG",
            help="The ORT config: a JSON config file (a tune's or plan's), a config string, or plan keys (X+ means X+:1:-1).",
            show_default=False,
        ),
    ],
    recipe: Annotated[
        str,
        typer.Argument(
            metavar="RECIPE", help="The model the config was tuned for: a recipe (built-in name, .py file, hf:NAME)."
        ),
    ],
    to_torch: bool = typer.Option(False, "--torch", help="Export to plain PyTorch (a memopt recompute policy)."),
    batch: int = typer.Option(
        ..., "--batch", "-b", callback=checked_count, help="The batch the config was tuned for; verified at it."
    ),
    budget: BudgetOption = None,
    margin: MarginOption = DEFAULT_MARGIN,
    out: Path | None = typer.Option(None, "--out", help="Also write the policy file here (atomically)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it is a regular file."),
    seq: SeqOption = None,
    size: SizeOption = None,
    option: OptionPairs = [],  # noqa: B006  (typer reads the default; never mutated)
    steps: StepsOption = DEFAULT_STEPS,
    device: DeviceOption = "auto",
    runs_dir: RunsDirOption = DEFAULT_RUNS_DIR,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Carry an ORT CONFIG over to a plain-PyTorch recompute policy for RECIPE, and check it there.

    The policy drops the same tensors; it is checked in PyTorch (gradients, saved bytes, measured
    peak against the budget) and ends with the MEMOPT_RECOMPUTE_POLICY export line.
    """
    if not to_torch:
        raise MemoptError("say what to export to: --torch (a policy for memopt.recompute.apply) is the one target")
    if out is not None:
        check_write_target(out, overwrite=force)  # before any run: the refusal is the one line
    parsed_budget = parse_budget(budget) if budget is not None else None
    ort_version = inspect_stack().ort_version
    if ort_version is None:
        raise MemoptError(
            "export reads the config against ORT's scan of the model, and onnxruntime-training is not installed here"
        )
    entries = parse_trial_config(config, OrtVersion.parse(ort_version)).entries
    if not entries:
        raise MemoptError(f"the config {config!r} enables no plan: there is nothing to export")
    target = exportable(runnable(choose_target(recipe, None)))
    settings = run_settings(
        target, batch, TargetOptions(seq, size, option), RunOptions(steps, device, timeout, runs_dir=runs_dir)
    )
    if not carry_over_to_torch(
        entries, settings, batch, parsed_budget, margin=margin, recipe=recipe, out=out, force=force
    ):
        sys.exit(EXIT_DOES_NOT_FIT)
