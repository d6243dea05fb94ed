"""``memopt plan``: the cheapest recompute predicted to fit a target batch in a budget (``Backend.plan``:
ORT's config, or plain PyTorch's policy file), written where a job reads it."""

from __future__ import annotations

import json
import sys
from functools import singledispatch
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memopt.backends import choose_backend
from memopt.backends.base import PlanReport, PlanRequest
from memopt.backends.ort.commands import OrtPlanReport
from memopt.backends.ort.predict.calibration import Calibration
from memopt.backends.ort.predict.planner import PlanResult
from memopt.backends.ort.tune.export import ConfigExport
from memopt.backends.torch.commands import TorchPlanReport
from memopt.cli import EXIT_DOES_NOT_FIT, app, console
from memopt.cli.options import (
    BackendOption,
    BudgetOption,
    CalibrateOption,
    CommandOption,
    DeviceOption,
    HfTaskOption,
    MarginOption,
    OptionalRecipeArgument,
    OptionPairs,
    PythonOption,
    RunOptions,
    RunsDirOption,
    SeqOption,
    SizeOption,
    StepsOption,
    TargetBatchOption,
    TargetOptions,
    TargetSeqOption,
    TimeoutOption,
    calibration_batches,
    choose_target,
    run_settings,
)
from memopt.cli.progress import CommandProgress
from memopt.cli.show import print_trial
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RunnableTarget, runnable
from memopt.predict import DEFAULT_MARGIN
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.budget import parse_budget
from memopt.run.files import check_write_target
from memopt.tune import OrtTuneSettings, TuneSettings
from memopt.units import format_bytes, format_cuda_memory, format_mib

__all__ = ["plan_command"]


@app.command("plan")
def plan_command(
    target_batch: TargetBatchOption,
    recipe: OptionalRecipeArgument = None,
    command: CommandOption = None,
    budget: BudgetOption = None,
    seq: SeqOption = None,
    size: SizeOption = None,
    option: OptionPairs = [],  # noqa: B006  (typer reads the default; never mutated)
    hf_task: HfTaskOption = None,
    target_seq: TargetSeqOption = None,
    calibrate_at: CalibrateOption = None,
    margin: MarginOption = DEFAULT_MARGIN,
    steps: StepsOption = DEFAULT_STEPS,
    device: DeviceOption = "auto",
    runs_dir: RunsDirOption = DEFAULT_RUNS_DIR,
    resume: bool = typer.Option(
        True, "--resume/--no-resume", help="Reuse finished calibration trials from the journal."
    ),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="Run a trial with the chosen config at the target batch and report measured vs predicted.",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Where to write the answer (default: in --runs-dir): ORT 1.19's JSON config, or with "
        "--backend torch the recompute policy; when no recompute is needed it gets the empty config [] "
        "(a policy with no plans).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it is a regular file."),
    python: PythonOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    backend: BackendOption = None,
) -> None:
    """Choose the cheapest plans predicted to fit --target-batch in --budget: an ORT config or a torch policy.

    The memory model predicts the peak (ORT: the training graph played through the device's
    allocator; torch: the step played on fake tensors, or a line through two runs); nothing is
    verified unless --verify runs one trial of the choice.
    """
    if out is not None:
        check_write_target(out, overwrite=force)  # before any run: a user's file is never replaced unasked
    target = runnable(choose_target(recipe, command, default=None))
    chosen_backend = choose_backend(backend)
    chosen_backend.backend.prepare()
    run = run_settings(
        target,
        target_batch,
        TargetOptions(seq, size, option, hf_task, target_seq),
        RunOptions(steps, device, timeout, python, runs_dir),
    )
    settings = TuneSettings(
        run=run,
        target_batch=target_batch,
        budget=parse_budget(budget) if budget is not None else None,
        resume=resume,
        margin=margin,
        ort=OrtTuneSettings(calibration_batches=calibration_batches(calibrate_at)),
    )
    request = PlanRequest(settings, verify=verify, out=out, force=force)
    report = chosen_backend.backend.plan(request, CommandProgress(chosen_backend.line()))
    if as_json:
        print(json.dumps(report.summary(), indent=2, default=str))
    else:
        _show(report)
    if not report.fits:
        sys.exit(EXIT_DOES_NOT_FIT)


@singledispatch
def _show(report: PlanReport) -> None:
    """The answer as a person reads it."""
    raise TypeError(f"no view of {type(report).__name__}")


@_show.register
def _(report: OrtPlanReport) -> None:
    _print(report.result, report.calibration, report.export, report.request.settings.run.target, report.request.out)
    if report.trial is not None:
        print_trial(report.trial)


@_show.register
def _(report: TorchPlanReport) -> None:
    if report.written is None:
        return
    plan = report.plan
    said = {
        "predicted": "not verified (memopt tune verifies it)",
        "verified": "verified by one run",
        "does_not_fit": "over the limit when run",
    }[report.status]
    print(f"# {plan.policy}: predicted {format_bytes(int(plan.predicted_bytes))}, {said}")
    print(report.export[0])


def _print(
    result: PlanResult, cal: Calibration, export: ConfigExport | None, target: RunnableTarget, out: Path | None
) -> None:
    model = cal.model
    console.print(
        f"[bold]Plan for {escape(str(target))}[/] at batch {result.target_batch} on {cal.device.upper()} "
        f"(ORT {cal.ort_version}), budget {format_mib(result.budget_bytes)} (limit {format_mib(result.limit_bytes)})",
        highlight=False,
    )
    measured = ", ".join(
        f"{o.batch_size}" + (f" ({len(o.plans)} plans)" if o.plans else "") for o in model.observations
    )
    console.print(f"  model        {model.describe()} (measured at batch {measured})", highlight=False)
    console.print(f"  costs        {cal.cost_source}", highlight=False)
    if cal.arena_check:
        console.print(f"  arena        {cal.arena_check}", highlight=False)
    where = f", {model.timeline(result.target_batch).where()}" if model.simulated else ""
    console.print(f"  no config    predicted peak {format_mib(result.baseline_bytes)}{where}", highlight=False)
    if result.choices:
        table = Table(show_edge=False, pad_edge=False, box=None)
        add_entry_column(table, "plan", (choice.key for choice in result.choices))
        for column in ("count", "saving", "cost/step"):
            table.add_column(column, justify="right", no_wrap=True)
        for choice in result.choices:
            table.add_row(
                Text(choice.key),
                "all" if choice.count < 0 else str(choice.count),
                format_bytes(choice.saving_bytes),
                f"{choice.cost_s * 1000:.1f} ms",
            )
        print_table(table)
    overhead = (
        f" (~{result.overhead * 100:.1f}% of a {result.baseline_step_s:.3f} s step)"
        if result.overhead is not None
        else ""
    )
    verdict = "fits" if result.feasible else "DOES NOT FIT"
    where = f", {model.timeline(result.target_batch, result.plans).where()}" if model.simulated and result.plans else ""
    console.print(
        f"  predicted    {format_mib(result.predicted_bytes)}{where} vs budget {format_mib(result.budget_bytes)} "
        f"(limit {format_mib(result.limit_bytes)} after margin): [bold]{verdict}[/]; "
        f"recompute cost {result.cost_s * 1000:.1f} ms/step{overhead}",
        highlight=False,
    )
    if model.simulated and cal.device == "cuda":
        console.print(
            "  on the card  "
            + format_cuda_memory(
                *model.on_card(result.target_batch, result.plans, result.counts), allocated_label="simulated allocated"
            ),
            highlight=False,
        )
    if not result.needs_recompute:
        console.print("  no recompute is needed: the no-config run is predicted to fit", highlight=False)
    if not result.feasible and target.fixed_batch:
        console.print(
            f"  batch {result.target_batch} cannot fit even with every plan (the command sets its own batch size)",
            highlight=False,
        )
    elif not result.feasible:
        console.print(
            f"  batch {result.target_batch} cannot fit even with every plan; {_what_fits(result)}", highlight=False
        )
    if export is None:
        if out is not None:
            console.print(f"# {out} not written: no config is predicted to fit", markup=False, highlight=False)
        return
    if out is not None and not export.entries:
        console.print(
            f"# wrote the empty config [] to {out.resolve()}: exporting it is the same as no config",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for line in export.lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _what_fits(result: PlanResult) -> str:
    if not result.max_batch_all_plans:
        return "not even batch 1 is predicted to fit in this budget"
    return (
        f"predicted to fit: batch {result.max_batch_all_plans} with every plan, "
        f"{result.max_batch_no_plans or 'none'} without"
    )
