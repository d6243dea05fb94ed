"""``memopt plan``: the cheapest recompute config predicted to fit a target batch in a budget."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memopt.backends import Backend, choose_backend
from memopt.cli import EXIT_DOES_NOT_FIT, app, console, error_console
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
from memopt.cli.show import print_trial, say, stdout_kept_for_the_result
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RunnableTarget, runnable
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.ort.config import takes_json_file
from memopt.ort.version import OrtVersion
from memopt.pipeline.calibrate import calibrate, save_model
from memopt.predict.calibration import Calibration, learn_from_trial
from memopt.predict.planner import DEFAULT_MARGIN, PlanResult, choose_plans
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.budget import Budget, parse_budget, require_budget, resolve_budget
from memopt.run.files import check_write_target, replace_atomically
from memopt.run.journal import Journal
from memopt.run.launch import new_run_dir
from memopt.run.settings import RunSettings
from memopt.run.trials import TrialSpec, run_trial, stack_versions
from memopt.tune.export import ConfigExport, plan_export, write_config
from memopt.units import format_bytes, format_compared, format_cuda_memory, format_mib

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
    """Choose the plans that bring RECIPE's predicted peak at --target-batch under --budget at least recompute cost."""
    if out is not None:
        check_write_target(out, overwrite=force)  # before any run: a user's file is never replaced unasked
    target = runnable(choose_target(recipe, command, default=None))
    chosen_backend = choose_backend(backend)
    if chosen_backend.backend is Backend.TORCH:
        # Loaded before the options are checked: this back end builds an hf: model in this process
        # (its scan), which transformers cannot once imported without torch for the check alone.
        import memopt.backends.torch.tune  # noqa: F401
    settings = run_settings(
        target,
        target_batch,
        TargetOptions(seq, size, option, hf_task, target_seq),
        RunOptions(steps, device, timeout, python, runs_dir),
    )
    parsed = parse_budget(budget) if budget is not None else None
    if chosen_backend.backend is Backend.TORCH:
        say(chosen_backend.line())
        _plan_torch(settings, target_batch, parsed, margin, resume, verify, out, force, as_json)
        return
    batches = calibration_batches(calibrate_at)
    versions = stack_versions(settings.python, settings.timeout_s)
    if (
        out is not None
        and versions.ort_version is not None
        and not takes_json_file(OrtVersion.parse(versions.ort_version))
    ):
        raise MemoptError(f"ORT {versions.ort_version} takes the config string itself; --out is for 1.19 JSON files")
    require_budget(parsed, device, versions.cuda)
    say(chosen_backend.line())
    with (
        stdout_kept_for_the_result(),
        console.status(f"Calibrating {escape(str(target))}: graph probe and no-config trials…"),
    ):
        cal = calibrate(settings, target_batch, calibration_batches=batches, resume=resume, versions=versions)
    for line in cal.refused:
        error_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    budget_bytes = resolve_budget(parsed, cal.device, cal.device_total)
    with stdout_kept_for_the_result():
        result = choose_plans(
            cal.model,
            cal.costs_s,
            target_batch,
            budget_bytes,
            cal.ort_version,
            margin=margin,
            baseline_step_s=cal.baseline_step_s,
        )
    # A config that is not predicted to fit is no answer: nothing is written or exported.
    export, config_file = _write_config(result, cal, runs_dir, target, out, force) if result.feasible else (None, None)
    trial = None
    if verify and result.feasible:
        predicted = int(result.predicted_bytes)
        with console.status(f"Verifying at batch {target_batch}…"):
            trial = run_trial(
                TrialSpec(settings, target_batch, result.entries),
                runs_dir,
                journal=Journal.in_folder(runs_dir),
                budget_bytes=budget_bytes,
                predicted_peak_bytes=predicted,
                versions=versions,
            )
        learnt = learn_from_trial(cal.model, trial, result.plans, result.counts)
        if learnt is not None:
            save_model(runs_dir, cal.identity, learnt)
    if as_json:
        print(json.dumps(_as_json(result, cal, export, config_file, trial), indent=2, default=str))
    else:
        _print(result, cal, export, target, out)
        if trial is not None:
            print_trial(trial)
    if not result.feasible or (trial is not None and trial.outcome.does_not_fit):
        sys.exit(EXIT_DOES_NOT_FIT)


def _plan_torch(
    settings: RunSettings,
    target_batch: int,
    budget: Budget | None,
    margin: float,
    resume: bool,
    verify: bool,
    out: Path | None,
    force: bool,
    as_json: bool,
) -> None:
    """The torch back end's plan: tune's scan, probes and choice, without its verifying run
    (``--verify`` adds that one run); the policy file written where a job reads it."""
    # Imported here: the torch back end loads torch, which an ORT plan's process must not carry.
    from memopt.backends.torch.trial import POLICY_FILE, allocator_env, export_line, run_torch_trial
    from memopt.backends.torch.tune import plan_torch

    with stdout_kept_for_the_result():
        plan = plan_torch(settings, target_batch, budget, margin=margin, resume=resume, say=say)
    written = None
    if plan.feasible:  # a policy not predicted to fit is no answer: nothing is written
        path = (
            out or new_run_dir(settings.runs_dir, f"torch-plan-{settings.target.label}-b{target_batch}") / POLICY_FILE
        )
        written = replace_atomically(path, plan.policy.to_json() + "\n", overwrite=out is None or force)
    trial = None
    if verify and plan.feasible:
        trial = run_torch_trial(settings, target_batch, plan.policy, journal=Journal.in_folder(settings.runs_dir))
        measured, limit = format_compared(trial.peak_bytes or 0, plan.limit_bytes)
        peak = (
            "out of memory"
            if trial.out_of_memory
            else f"peak {measured}"
            if trial.ran
            else trial.status.failure(settings.target.noun)
        )
        verdict = "within" if trial.within(int(plan.limit_bytes)) else "OVER"
        say(f"measurement: {peak} against the limit {limit}: {verdict} ({trial.run_dir})")
    fits = plan.feasible and (trial is None or trial.within(int(plan.limit_bytes)))
    status = "does_not_fit" if not fits else "predicted" if trial is None else "verified"
    export = []
    if written is not None:
        ran_with = trial.allocator if trial is not None else allocator_env(settings.device)
        export = [export_line(written, ran_with)]
    if as_json:
        document = {
            "status": status,
            "backend": "torch",
            "feasible": plan.feasible,
            "target_batch": target_batch,
            "budget_bytes": plan.budget_bytes,
            "limit_bytes": int(plan.limit_bytes),
            "predicted_without_recompute_bytes": int(plan.baseline_bytes),
            "predicted_bytes": int(plan.predicted_bytes),
            "plans": [str(p) for p in plan.policy.plans],
            "policy_file": str(written.resolve()) if written is not None else None,
            "export": export,
            "verify": None if trial is None else {"status": trial.status.value, "peak_bytes": trial.peak_bytes},
        }
        print(json.dumps(document, indent=2))
    elif written is not None:
        predicted = f"predicted {format_bytes(int(plan.predicted_bytes))}"
        said = {
            "predicted": "not verified (memopt tune verifies it)",
            "verified": "verified by one run",
            "does_not_fit": "over the limit when run",
        }[status]
        print(f"# {plan.policy}: {predicted}, {said}")
        print(export[0])
    if not fits:
        sys.exit(EXIT_DOES_NOT_FIT)


def _write_config(
    result: PlanResult, cal: Calibration, runs_dir: Path, target: RunnableTarget, out: Path | None, force: bool
) -> tuple[ConfigExport, Path | None]:
    """The config of a feasible plan and the file written for it, where ORT 1.19 reads one.
    With ``--out`` the file is written even when no recompute is needed: it gets the empty
    config, so a job that exports it runs as with no config, never with an older config."""
    version = cal.ort_version
    export = plan_export(result.entries, version, runs_dir, target, result.target_batch, out, kind="plan")
    if takes_json_file(version) and (result.entries or out is not None):
        return export, write_config(export, overwrite=out is None or force)
    return export, None


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


def _as_json(
    result: PlanResult,
    cal: Calibration,
    export: ConfigExport | None,
    config_file: Path | None,
    trial: TrialResult | None,
) -> dict[str, Any]:
    config_value = export.value if export is not None else None
    return {
        "recipe_graph": cal.graph_source,
        "device": cal.device,
        "ort_version": str(cal.ort_version),
        "target_batch": result.target_batch,
        "budget_bytes": result.budget_bytes,
        "limit_bytes": round(result.limit_bytes),
        "baseline_bytes": round(result.baseline_bytes),
        "predicted_bytes": round(result.predicted_bytes),
        "feasible": result.feasible,
        "needs_recompute": result.needs_recompute,
        "cost_s": result.cost_s,
        "baseline_step_s": result.baseline_step_s,
        "overhead": result.overhead,
        "solver": result.solver,
        "max_batch_all_plans": result.max_batch_all_plans,
        "max_batch_no_plans": result.max_batch_no_plans,
        "plans": [
            {
                "key": c.key,
                "count": c.count,
                "frequency": c.frequency,
                "saving_bytes": c.saving_bytes,
                "cost_s": c.cost_s,
            }
            for c in result.choices
        ],
        "config": [str(e) for e in result.entries],
        "refused": list(cal.refused),
        "config_value": config_value,
        "export": export.lines[0] if export is not None else None,
        "config_file": str(config_file) if config_file is not None else None,
        "model": {
            "description": cal.model.describe(),
            "cost_source": cal.cost_source,
            "arena_check": cal.arena_check or None,
            "fixed_bytes": round(cal.model.static_bytes),
            "activation_scale": cal.model.activation_scale,
            "outside_bytes": round(cal.model.outside_bytes),
            "on_card": dict(
                zip(
                    ("allocated_bytes", "reserved_bytes", "outside_bytes"),
                    (round(part) for part in cal.model.on_card(result.target_batch, result.plans, result.counts)),
                )
            )
            if cal.model.simulated and cal.device == "cuda"
            else None,
            "peak_at": cal.model.timeline(result.target_batch, result.plans).where() if cal.model.simulated else None,
        },
        "verification": trial.to_record() if trial is not None else None,
    }
