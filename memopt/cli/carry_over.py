"""An ORT memory-optimizer config carried over to plain PyTorch and verified there: what
``memopt export --torch`` does, and ``memopt tune --export-torch`` after a verified tune."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.markup import escape
from rich.table import Table

from memopt.cli import console, error_console
from memopt.cli.show import say
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RecipeTarget, RunnableTarget
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.graph.sizes import resolve_dims
from memopt.ort.config import ConfigEntry
from memopt.ort.stack import inspect_stack
from memopt.predict.choice import DEFAULT_MARGIN, budget_limit
from memopt.recipes import Recipe
from memopt.run.budget import Budget
from memopt.run.files import replace_atomically
from memopt.run.journal import Journal
from memopt.run.launch import TORCH_LOG_NAME
from memopt.run.settings import RunSettings
from memopt.run.target import load_target
from memopt.run.trials import TrialSpec, run_trial
from memopt.scan import ScanReport, scan_graph
from memopt.units import format_bytes

if TYPE_CHECKING:
    from memopt.backends.torch.export import TorchExport

__all__ = ["carry_over_to_torch", "exportable", "torch_side"]

# The steps this process runs itself (the torch scan's captures, the gradient check) stay at a
# small batch; only the trials run at the config's.
_IN_PROCESS_BATCH = 2


def exportable(target: RunnableTarget, command: str = "export --torch") -> RecipeTarget:
    """``target`` if a config of it can be carried over: memopt trains it both ways itself. Called
    before the recipe's options are read: the carry-over builds the model in this process, so the
    torch back end (and torch) is loaded first, as an hf: config read by transformers without
    torch (the options check's light import) leaves transformers unable to build a model."""
    if not isinstance(target, RecipeTarget):
        raise MemoptError(f"{command} verifies in memopt's own training of a recipe, not {target}")
    import memopt.backends.torch.export  # noqa: F401

    return target


def torch_side(settings: RunSettings, budget: Budget | None) -> tuple[Recipe, int]:
    """The recipe as the torch back end trains it, and the budget in bytes on the device its
    trial runs on: what a carry-over refuses before any run (a file that is no recipe, a budget
    for a device not here)."""
    from memopt.backends.torch.trial import resolve_torch_budget

    return exportable(settings.target).load(settings.options), resolve_torch_budget(budget, settings.device)


def carry_over_to_torch(
    entries: tuple[ConfigEntry, ...],
    settings: RunSettings,
    batch: int,
    budget: Budget | None,
    *,
    margin: float,
    recipe: str,
    out: Path | None = None,
    force: bool = False,
) -> bool:
    """Map ``entries`` (an ORT config of ``settings.target``) to a torch recompute policy, check its
    gradients, and run it at ``batch``. Prints the mapping, the figures and either the export line
    (True: the measured peak of its one run is under the limit, the budget less ``margin``) or the torch back end's own tune to run (False).
    ``recipe`` is the target as the user typed it, for that command."""
    target = settings.target
    # Imported here, not with the module: the torch back end loads torch, which the commands' shared
    # start-up must not carry (``exportable`` loaded it before the options were read).
    from memopt.backends.torch.export import export_config
    from memopt.backends.torch.gradients import gradient_differences
    from memopt.backends.torch.scan import scan_recipe
    from memopt.backends.torch.trial import run_torch_trial

    loaded, budget_bytes = torch_side(settings, budget)
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
        raise MemoptError(f"{trial.status.failure(target.noun)}: {trial.error} (log: {trial.run_dir / TORCH_LOG_NAME})")
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
    limit_bytes = int(budget_limit(budget_bytes, margin))
    against = f"the limit {format_bytes(limit_bytes)} (budget {format_bytes(budget_bytes)} less {margin:.0%})"
    if trial.within(limit_bytes):
        say(f"measured: {measured}, within {against} ({trial.run_dir})")
        print(f"# {policy}")
        print(trial.export_line(policy_path))
        return True
    over = "" if trial.peak_bytes is None else f" by {format_bytes(trial.peak_bytes - limit_bytes)}"
    say(f"measured: {measured}: over {against}{over} ({trial.run_dir})")
    retune = ["memopt", "tune", "--backend", "torch", *_recipe_words(recipe, settings.options)]
    budget_text = budget.text if budget is not None else format_bytes(budget_bytes).replace(" ", "")
    retune += ["--target-batch", str(batch), "--budget", budget_text]
    retune += [] if margin == DEFAULT_MARGIN else ["--margin", f"{margin:g}"]
    retune += [] if settings.device == "auto" else ["--device", settings.device]
    print(f"# the policy is written ({policy_path}) but misses; the torch back end's own tune at that budget:")
    print(shlex.join([*retune, "--no-tui"]))
    return False


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
        return f"ORT's trial of the config: {ort_trial.outcome.label}, {where}: no peak to compare with"
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
