"""``memopt export --torch``: an ORT memory-optimizer config carried over to plain PyTorch, and verified there."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from memopt.cli import EXIT_DOES_NOT_FIT, app, console, error_console
from memopt.cli.options import (
    BudgetOption,
    DeviceOption,
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
from memopt.cli.show import say
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RecipeTarget, runnable
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.graph.sizes import resolve_dims
from memopt.ort.stack import inspect_stack
from memopt.ort.version import OrtVersion
from memopt.run import DEFAULT_RUNS_DIR, DEFAULT_STEPS, DEFAULT_TIMEOUT_S
from memopt.run.budget import parse_budget
from memopt.run.files import check_write_target, replace_atomically
from memopt.run.journal import Journal
from memopt.run.launch import LOG_NAME
from memopt.run.settings import RunSettings
from memopt.run.target import load_target
from memopt.run.trials import TrialSpec, parse_trial_config, run_trial
from memopt.scan import ScanReport, scan_graph
from memopt.units import format_bytes

if TYPE_CHECKING:
    from memopt.backends.torch.export import TorchExport

__all__ = ["export_command"]

# The steps this process runs itself (the torch scan's captures, the gradient check) stay at a
# small batch; only the trials run at the config's.
_IN_PROCESS_BATCH = 2


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
    """Carry CONFIG over to plain PyTorch for RECIPE: the recompute policy that drops the same tensors,
    checked in PyTorch (gradients, saved bytes, measured peak against the budget)."""
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
    target = runnable(choose_target(recipe, None))
    if not isinstance(target, RecipeTarget):
        raise MemoptError(f"export --torch verifies in memopt's own training of a recipe, not {target}")
    # Imported here, not with the module: the torch back end loads torch, which the commands' shared
    # start-up must not carry; and before the recipe's options are read, as an hf: config read by
    # transformers without torch builds no model in this process.
    from memopt.backends.torch.export import export_config
    from memopt.backends.torch.gradients import gradient_differences
    from memopt.backends.torch.scan import scan_recipe
    from memopt.backends.torch.trial import resolve_torch_budget, run_torch_trial
    from memopt.recompute import POLICY_ENV

    settings = run_settings(
        target, batch, TargetOptions(seq, size, option), RunOptions(steps, device, timeout, runs_dir=runs_dir)
    )
    loaded = target.load(settings.options)  # a file that is no recipe is said before any run
    budget_bytes = resolve_torch_budget(parsed_budget, settings.device)  # so is a budget for a device not here
    journal = Journal.in_folder(settings.runs_dir)
    with error_console.status(f"ORT's plans for {escape(str(target))} (a short ORTModule probe, once)…"):
        ort_version, report, ort_dims = _ort_plans(settings, batch)
    # ORT's own measurement of the config: the journal's, where it ran at this batch before.
    with error_console.status(f"ORT trial of the config at batch {batch} (or the journal's)…"):
        ort_trial = run_trial(TrialSpec(settings, batch, entries), settings.runs_dir, journal=journal, resume=True)
    with error_console.status(f"Capturing training steps of {escape(str(target))} in plain PyTorch…"):
        torch_scan = scan_recipe(loaded, min(batch, _IN_PROCESS_BATCH))
    exported = export_config(
        entries, report.patterns, torch_scan, batch=batch, ort_dims=ort_dims, ort_stashed=report.stashed
    )
    policy = exported.policy
    _print_mapping(exported, str(target), ort_version)
    say(
        f"at batch {batch}, ORT's plans save {format_bytes(exported.ort_bytes)} of the "
        f"{format_bytes(exported.ort_kept_bytes)} ORT stashes (memopt's model of the ORT graph); the torch policy "
        f"{format_bytes(exported.torch_bytes)} of the {format_bytes(exported.torch_kept_bytes)} eager PyTorch keeps "
        "(torch scan, each plan alone)"
    )
    gradient_batch = min(batch, _IN_PROCESS_BATCH)
    with error_console.status("Comparing gradients with and without the policy…"):
        differ = gradient_differences(loaded, policy, gradient_batch)
    if differ:
        raise MemoptError(
            f"the exported policy changes {len(differ)} gradient(s) or buffer(s) of a seeded step "
            f"({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''}): it is not written"
        )
    say(f"gradients: equal to the unwrapped model's, bitwise (a seeded step at batch {gradient_batch}, on CPU)")
    with error_console.status(f"Trial at batch {batch} in plain PyTorch ({escape(str(policy))})…"):
        trial = run_torch_trial(settings, batch, policy, journal=journal)
    if not trial.out_of_memory and (not trial.ran or trial.peak_bytes is None):
        raise MemoptError(f"the trial {trial.status}: {trial.error} (log: {trial.run_dir / LOG_NAME})")
    if out is not None:
        replace_atomically(out, policy.to_json() + "\n", overwrite=force)
    policy_path = out if out is not None else trial.policy_path
    if trial.out_of_memory:
        measured = f"out of memory at batch {batch} under the policy"
    else:
        assert trial.peak_bytes is not None
        measured = (
            f"peak {format_bytes(trial.peak_bytes)} at batch {batch} under the policy "
            f"({_against_ort(ort_trial, trial.peak_bytes)})"
        )
    if trial.within(budget_bytes):
        say(f"measured: {measured}, within the budget {format_bytes(budget_bytes)} ({trial.run_dir})")
        print(f"# {policy}")
        print(f"export {POLICY_ENV}={shlex.quote(str(policy_path.resolve()))}")
        return
    over = "" if trial.peak_bytes is None else f" by {format_bytes(trial.peak_bytes - budget_bytes)}"
    say(f"measured: {measured}: over the budget {format_bytes(budget_bytes)}{over} ({trial.run_dir})")
    retune = ["memopt", "tune", "--backend", "torch", *_recipe_words(recipe, settings.options)]
    retune += ["--target-batch", str(batch), "--budget", budget or format_bytes(budget_bytes).replace(" ", "")]
    print(f"# the policy is written ({policy_path}) but misses; the torch back end's own tune at that budget:")
    print(shlex.join([*retune, "--no-tui"]))
    sys.exit(EXIT_DOES_NOT_FIT)


def _ort_plans(settings: RunSettings, batch: int) -> tuple[str, ScanReport, dict[str, int]]:
    """ORT's scan of the recipe (from the training graph of a short no-config probe): its release,
    the scan, and the graph's dims at ``batch``."""
    loaded = load_target(settings.target, options=settings.options, runs_dir=settings.runs_dir)
    version = loaded.ort_version or inspect_stack().ort_version
    if version is None:
        raise MemoptError("no ORT installed to take the plans' rules from")
    report = scan_graph(loaded.graph, version)
    seq = settings.options.get("seq_len")
    dims = resolve_dims(report.inputs, report.symbols, batch=batch, seq=seq, defaults=loaded.logged_dims)
    return version, report, dims


def _against_ort(ort_trial: TrialResult, torch_peak: int) -> str:
    """The torch policy's measured peak beside the ORT config's, each its run's whole peak."""
    where = "the journal's" if ort_trial.reused else ort_trial.run_dir
    ort_peak = ort_trial.memory.whole_run_peak
    if not ort_trial.fits or ort_peak is None:
        return f"ORT's trial of the config {ort_trial.status}, {where}: no peak to compare with"
    change = (torch_peak - ort_peak) / ort_peak
    return f"{change:+.1%} against ORT's {format_bytes(ort_peak)} under the config, {where}"


def _recipe_words(recipe: str, options: Mapping[str, object]) -> list[str]:
    """The recipe and its options as the command line gives them."""
    flags = {"size": "--size", "seq_len": "--seq"}
    words = [recipe]
    for key, value in options.items():
        words += [flags[key], str(value)] if key in flags else ["-o", f"{key}={value}"]
    return words


def _print_mapping(exported: TorchExport, target: str, ort_version: str) -> None:
    console.print(
        f"{target} at batch {exported.batch}: ORT {ort_version}'s plans carried over to plain PyTorch",
        markup=False,
        highlight=False,
    )
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    add_entry_column(table, "ORT plan", [str(plan.entry) for plan in exported.plans])
    table.add_column("ORT saves", justify="right", no_wrap=True)
    add_entry_column(table, "torch plan", [str(row.plan) for plan in exported.plans for row in plan.rows])
    table.add_column("torch saves", justify="right", no_wrap=True)
    table.add_column("carried over", no_wrap=True)
    for plan in exported.plans:
        torch_plans = [str(row.plan) for row in plan.rows] or ["-"]
        torch_saves = [format_bytes(b) for b in plan.row_bytes] or ["-"]
        first = (str(plan.entry), format_bytes(plan.ort_bytes), plan.fidelity.value if plan.carried else "left out")
        for index, (torch_plan, saves) in enumerate(zip(torch_plans, torch_saves)):
            entry, ort_saves, verdict = first if index == 0 else ("", "", "")
            table.add_row(entry, ort_saves, escape(torch_plan), saves, verdict)
    print_table(table)
    for plan in exported.plans:
        where = f" (ORT: {', '.join(plan.modules)})" if plan.modules else ""
        console.print(f"{plan.entry.subgraph}{where}: {plan.reason}", markup=False, highlight=False, soft_wrap=True)
    left_out = exported.left_out
    if left_out:
        console.print(
            f"{len(left_out)} of {len(exported.plans)} plans left out of the policy: "
            + ", ".join(plan.entry.subgraph for plan in left_out),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
