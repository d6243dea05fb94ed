"""An ORT memory-optimizer config carried over to plain PyTorch and verified there: what
``memopt export --torch`` does, and ``memopt tune --export-torch`` after a verified tune. It reads
both back ends: ORT's scan of the recipe and its trial of the config, the torch back end's scan,
gradient check and trial of the policy (``map_config``, then ``verify_mapped``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memopt.backends.base import Progress
from memopt.backends.ort.config import ConfigEntry
from memopt.backends.ort.graph.sizes import resolve_dims
from memopt.backends.ort.scan import ScanReport, scan_graph
from memopt.backends.ort.stack import inspect_stack
from memopt.backends.ort.target import load_target
from memopt.backends.ort.trials import TrialSpec, run_trial
from memopt.core import RecipeTarget, RunnableTarget, RunStatus
from memopt.core.trial import TrialResult
from memopt.errors import MemoptError
from memopt.predict.choice import budget_limit
from memopt.recipes import Recipe
from memopt.run.budget import Budget
from memopt.run.files import replace_atomically
from memopt.run.journal import Journal
from memopt.run.launch import TORCH_LOG_NAME
from memopt.run.settings import RunSettings
from memopt.units import format_bytes

if TYPE_CHECKING:
    from memopt.pipeline.torch_export import TorchExport

__all__ = ["CarriedOver", "MappedConfig", "exportable", "map_config", "torch_side", "verify_mapped"]

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
    import memopt.pipeline.torch_export  # noqa: F401

    return target


def torch_side(settings: RunSettings, budget: Budget | None) -> tuple[Recipe, int]:
    """The recipe as the torch back end trains it, and the budget in bytes on the device its
    trial runs on: what a carry-over refuses before any run (a file that is no recipe, a budget
    for a device not here)."""
    from memopt.backends.torch.trial import resolve_torch_budget

    return exportable(settings.target).load(settings.options), resolve_torch_budget(budget, settings.device)


@dataclass(frozen=True)
class MappedConfig:
    """An ORT config of ``settings.target`` mapped to a torch policy, before the policy is checked and run."""

    settings: RunSettings
    batch: int
    recipe: Recipe  # the target as the torch back end trains it
    budget_bytes: int  # on the device the torch trial runs on
    limit_bytes: int  # the budget less the margin
    ort_version: str
    exported: TorchExport
    ort_trial: TrialResult  # ORT's own measurement of the config (the journal's, where it ran before)


def map_config(
    entries: tuple[ConfigEntry, ...],
    settings: RunSettings,
    batch: int,
    budget: Budget | None,
    *,
    margin: float,
    progress: Progress,
) -> MappedConfig:
    """Map ``entries`` (an ORT config of ``settings.target``) to a torch recompute policy: ORT's
    plans from a short probe, its trial of the config at ``batch``, the torch scan's plans."""
    target = settings.target
    # Imported here, not with the module: the torch back end loads torch, which the commands' shared
    # start-up must not carry (``exportable`` loaded it before the options were read).
    from memopt.backends.torch.scan import scan_recipe
    from memopt.pipeline.torch_export import export_config

    loaded, budget_bytes = torch_side(settings, budget)
    journal = Journal.in_folder(settings.runs_dir)
    with progress.working(f"ORT's plans for {target} (a short ORTModule probe, once)…"):
        ort_version, report, ort_dims = _ort_plans(settings, batch)
    # ORT's own measurement of the config: the journal's, where it ran at this batch before.
    with progress.working(f"ORT trial of the config at batch {batch} (or the journal's)…"):
        ort_trial = run_trial(TrialSpec(settings, batch, entries), settings.runs_dir, journal=journal, resume=True)
    with progress.working(f"Capturing training steps of {target} in plain PyTorch…"):
        torch_scan = scan_recipe(loaded, min(batch, _IN_PROCESS_BATCH))
    exported = export_config(
        entries, report.patterns, torch_scan, batch=batch, ort_dims=ort_dims, ort_stashed=report.stashed
    )
    limit_bytes = int(budget_limit(budget_bytes, margin))
    return MappedConfig(settings, batch, loaded, budget_bytes, limit_bytes, ort_version, exported, ort_trial)


@dataclass(frozen=True)
class CarriedOver:
    """The mapped policy's trial in plain PyTorch, and the file its export line names."""

    trial: TrialResult
    policy_path: Path

    def within(self, mapped: MappedConfig) -> bool:
        return self.trial.within(mapped.limit_bytes)


def verify_mapped(mapped: MappedConfig, *, out: Path | None, force: bool, progress: Progress) -> CarriedOver:
    """The mapped policy's gradients checked against the unwrapped model's (refused where they
    differ), then the policy run at the config's batch; ``out``: its file written there too."""
    from memopt.backends.torch.gradients import gradient_differences
    from memopt.backends.torch.trial import policy_path, run_torch_trial

    exported, settings, batch = mapped.exported, mapped.settings, mapped.batch
    policy = exported.policy
    progress.say(
        f"at batch {batch}, ORT's plans save {format_bytes(exported.ort_bytes)} of the "
        f"{format_bytes(exported.ort_kept_bytes)} ORT stashes (memopt's model of the ORT graph); the torch policy "
        f"{format_bytes(exported.torch_bytes)} of the {format_bytes(exported.torch_kept_bytes)} eager PyTorch keeps "
        "(torch scan, each plan alone)"
    )
    gradient_batch = min(batch, _IN_PROCESS_BATCH)
    with progress.working("Comparing gradients with and without the policy…"):
        differ = gradient_differences(mapped.recipe, policy, gradient_batch)
    if differ:
        raise MemoptError(
            f"the exported policy changes {len(differ)} gradient(s) or buffer(s) of a seeded step "
            f"({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''}): it is not written"
        )
    progress.say(
        f"gradients: equal to the unwrapped model's, bitwise (a seeded step at batch {gradient_batch}, on CPU)"
    )
    with progress.working(f"Trial at batch {batch} in plain PyTorch ({policy})…"):
        trial = run_torch_trial(settings, batch, policy, journal=Journal.in_folder(settings.runs_dir))
    if trial.status is not RunStatus.OUT_OF_MEMORY and (not trial.ran or trial.memory.device_peak is None):
        raise MemoptError(
            f"{trial.status.failure(settings.target.noun)}: {trial.error} (log: {Path(trial.run_dir) / TORCH_LOG_NAME})"
        )
    if out is not None:
        replace_atomically(out, policy.to_json() + "\n", overwrite=force)
    return CarriedOver(trial, out if out is not None else policy_path(trial))


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
