"""What ``memopt export --torch`` and ``memopt tune --export-torch`` print of an ORT config
carried over to plain PyTorch (``memopt.pipeline.carry_over``): the mapping, the figures, and
either the export line or the torch back end's own tune to run."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.markup import escape
from rich.table import Table

from memopt.backends.ort.config import ConfigEntry
from memopt.cli import console, error_console
from memopt.cli.progress import CommandProgress
from memopt.cli.show import say
from memopt.cli.tables import add_entry_column, print_table
from memopt.core import RunStatus
from memopt.core.trial import TrialResult
from memopt.pipeline.carry_over import map_config, verify_mapped
from memopt.predict.choice import DEFAULT_MARGIN
from memopt.run.budget import Budget
from memopt.run.settings import RunSettings
from memopt.units import format_bytes

if TYPE_CHECKING:
    from memopt.pipeline.torch_export import TorchExport

__all__ = ["carry_over_to_torch"]


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
    from memopt.backends.torch.trial import trial_export_line  # loads torch, which ORT's commands must not carry

    progress = CommandProgress(None, error_console)
    mapped = map_config(entries, settings, batch, budget, margin=margin, progress=progress)
    _print_mapping(mapped.exported, str(settings.target), mapped.ort_version)
    carried = verify_mapped(mapped, out=out, force=force, progress=progress)
    trial, policy, policy_path = carried.trial, mapped.exported.policy, carried.policy_path
    peak = trial.memory.device_peak
    if trial.status is RunStatus.OUT_OF_MEMORY:
        measured = f"out of memory at batch {batch} under the policy"
    else:
        assert peak is not None
        measured = (
            f"peak {format_bytes(peak)} at batch {batch} under the policy ({_against_ort(mapped.ort_trial, peak)})"
        )
    limit_bytes, budget_bytes = mapped.limit_bytes, mapped.budget_bytes
    against = f"the limit {format_bytes(limit_bytes)} (budget {format_bytes(budget_bytes)} less {margin:.0%})"
    if carried.within(mapped):
        say(f"measured: {measured}, within {against} ({trial.run_dir})")
        print(f"# {policy}")
        print(trial_export_line(trial, policy_path))
        return True
    over = "" if peak is None else f" by {format_bytes(peak - limit_bytes)}"
    say(f"measured: {measured}: over {against}{over} ({trial.run_dir})")
    retune = ["memopt", "tune", "--backend", "torch", *_recipe_words(recipe, settings.options)]
    budget_text = budget.text if budget is not None else format_bytes(budget_bytes).replace(" ", "")
    retune += ["--target-batch", str(batch), "--budget", budget_text]
    retune += [] if margin == DEFAULT_MARGIN else ["--margin", f"{margin:g}"]
    retune += [] if settings.device == "auto" else ["--device", settings.device]
    print(f"# the policy is written ({policy_path}) but misses; the torch back end's own tune at that budget:")
    print(shlex.join([*retune, "--no-tui"]))
    return False


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
