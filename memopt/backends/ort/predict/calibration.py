"""Calibration's pure part: from a scan and the trials measured to the memory model's plans,
observations and simulator, and the recompute costs' fit. The runs, the journal and the model
file that feed and keep it are ``memopt.backends.ort.calibrate``'s."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from memopt.backends.ort.applied import applied_plans
from memopt.backends.ort.config import PlanCell, PlanKey, plan_keys
from memopt.backends.ort.graph.sizes import batch_symbols
from memopt.backends.ort.graph.training_graph import TrainingGraph
from memopt.backends.ort.predict.liveness import ActivationSimulator, Recompute
from memopt.backends.ort.predict.memory_model import MemoryModel, ModelError, Observation, PlanSavings
from memopt.backends.ort.predict.recompute_cost import RecomputeCost
from memopt.backends.ort.rules import rules_for
from memopt.backends.ort.scan import ScanReport
from memopt.backends.ort.scan.patterns import Occurrence
from memopt.backends.ort.version import OrtVersion
from memopt.core import RunnableTarget
from memopt.core.memory import Memory
from memopt.core.trial import TrialResult
from memopt.cuda_caching import AllocatorSettings, AllocatorSettingsNotModelled, CudaSetup, PoolLayout

__all__ = [
    "Calibration",
    "DoesNotFit",
    "calibration_points",
    "cuda_setup",
    "default_calibration_batches",
    "describe_cost_source",
    "fit_cost_scale",
    "fit_step_times",
    "keep_ort_plans",
    "largest_under_prediction",
    "learn_from_trial",
    "observation_of",
    "plan_savings",
    "plans_of",
    "recomputed_nodes",
    "require_batch_dim",
    "require_ran",
    "simulator_for",
]


@dataclass(frozen=True)
class Calibration:
    model: MemoryModel
    plan_costs_s: Mapping[PlanKey, float]  # recompute seconds per plan at the target batch
    cost_scale: float  # measured extra step time / predicted, from trials with plans (1.0 without)
    baseline_step_s: float | None  # predicted no-config step time at the target batch
    target_batch: int
    trials: tuple[TrialResult, ...]  # the no-config calibration trials
    graph_source: str
    ort_version: OrtVersion
    device: str
    device_total: int | None
    identity: str
    cost_source: str  # where the recompute costs come from, in words
    refused: tuple[str, ...] = ()  # ScannedGraph.refused: plans left out, each with why
    arena_check: str = ""  # whether the simulated arena grew as ORT's did in the largest calibration run

    @property
    def costs_s(self) -> dict[PlanKey, float]:
        return {key: seconds * self.cost_scale for key, seconds in self.plan_costs_s.items()}


class DoesNotFit(ModelError):
    """Not even batch 1 with every plan on ran: nothing to calibrate on, and no config fits."""


def default_calibration_batches(target_batch: int) -> tuple[int]:
    """One no-config run at half the target batch: the graph's simulation scales it to the target."""
    return (max(1, target_batch // 2),)


def calibration_points(batch: int, every_plan: tuple[PlanKey, ...]) -> Iterator[tuple[int, tuple[PlanKey, ...]]]:
    """Where to calibrate when a run there dies of memory, in order: no config at ``batch``, every
    plan at ``batch`` (the model simulates configs, so that run calibrates it as well), then the
    same at half the batch, down to batch 1."""
    while True:
        yield batch, ()
        if every_plan:
            yield batch, every_plan
        if batch == 1:
            return
        batch = max(1, batch // 2)


def keep_ort_plans(report: ScanReport, ort_plans: frozenset[PlanCell] | None) -> tuple[ScanReport, tuple[str, ...]]:
    """The scan's plans ORT itself listed for this graph, and a line for each one left out:
    an entry whose name ORT's Plan table lacks is one ORT ignores, so it can save nothing."""
    if ort_plans is None:
        return report, ()
    kept, refused = [], []
    for pattern in report.patterns:
        missing = [cell for cell in pattern.key.cells if cell not in ort_plans]
        if missing:
            refused.append(
                f"{pattern.key.short}: not in the Plan table ORT printed for this model "
                f"(no {', '.join(missing)}), so ORT would ignore it; left out"
            )
        else:
            kept.append(pattern)
    return replace(report, patterns=tuple(kept)), tuple(refused)


def require_batch_dim(report: ScanReport, target: RunnableTarget) -> tuple[str, ...]:
    """The graph's batch symbols; a graph without one cannot be scaled by batch."""
    symbols = batch_symbols(report.inputs)
    if not symbols:
        raise ModelError(f"the training graph of {target} has no dynamic batch dim; memopt cannot scale it by batch")
    return symbols


def require_ran(trial: TrialResult) -> None:
    """Raise where a calibration trial did not run its steps to the end, saying why in the user's words."""
    if not trial.ran:
        what = "configured" if trial.config else "no-config"
        raise ModelError(
            f"the {what} calibration trial at batch {trial.batch_size} did not run to the end "
            f"({trial.outcome.label}): {trial.error} (log: {trial.run_dir}/ort.log)"
        )


def plan_savings(report: ScanReport, graph: TrainingGraph) -> tuple[PlanSavings, ...]:
    """The scan's plans as the memory model sees them, occurrences in topological order."""
    order = {node.name: node.order for node in graph.nodes}
    plans = []
    for p in report.patterns:
        occurrences = sorted(p.occurrences, key=lambda o: order.get(o.entry, 0))
        plans.append(
            PlanSavings(
                p.key,
                p.key.cells,
                p.frequency,
                p.exact,
                tuple(o.exact for o in occurrences),
                tuple(Recompute(o.entry, o.nodes) for o in occurrences),
            )
        )
    return tuple(plans)


def simulator_for(
    plans: Sequence[PlanSavings],
    graph: TrainingGraph,
    source: Path | None,
    ort_version: OrtVersion,
    device: str,
    cuda: CudaSetup = CudaSetup(),
) -> ActivationSimulator:
    return ActivationSimulator(
        graph,
        {p.key: p.recomputes for p in plans},
        str(source) if source else None,
        rules_for(ort_version).analysis_order,
        device,
        cuda,
    )


def cuda_setup(trials: Iterable[TrialResult], environ: Mapping[str, str] = os.environ) -> CudaSetup:
    """How a CUDA step is simulated: PyTorch's allocator with the settings a run started from
    ``environ`` gets (those it leaves out named in one warning; ``MemoptError`` where caching
    is off), and the residents' layout of the first of ``trials`` that read its pool."""
    settings = AllocatorSettings.from_environment(environ)
    if (warning := settings.warning()) is not None:
        warnings.warn(AllocatorSettingsNotModelled(warning), stacklevel=2)
    pool = next((PoolLayout.from_json(t.cuda_pool) for t in trials if t.cuda_pool), None)
    return CudaSetup(settings, pool.residents() if pool is not None else None)


def learn_from_trial(
    model: MemoryModel,
    trial: TrialResult,
    plans: Iterable[str],
    counts: Mapping[PlanKey, int] | None = None,
) -> MemoryModel | None:
    """``model`` refitted with what ``trial`` measured: of ``plans`` (those its config enabled),
    the ones ORT applied and the model knows, an entry ORT left OFF having saved nothing.
    None where the trial measured no peak. Raises ``ModelError`` where no model fits."""
    if not trial.ran or not trial.predicted_figure_bytes:
        return None
    known = {p.key for p in model.plans}
    applied = tuple(key for key in applied_plans(trial, plans) if key in known)
    partial = {key: count for key, count in (counts or {}).items() if key in applied}
    return model.with_observation(observation_of(trial.batch_size, applied, trial.memory, partial))


def observation_of(
    batch_size: int, plans: tuple[PlanKey, ...], memory: Memory, counts: Mapping[PlanKey, int] | None = None
) -> Observation:
    """What a run at ``batch_size`` measured, as the model learns it: on CUDA what ran out
    (reserved plus outside the allocator, the outside part kept apart), elsewhere the steps' peak."""
    return Observation(
        batch_size, plans, int(memory.predicted_figure or 0), dict(counts or {}), memory.cuda_outside_bytes or 0
    )


def largest_under_prediction(model: MemoryModel) -> float:
    """How far ``model`` falls below the highest of the runs it was fitted on (0 where it falls
    below none): a fit through one run passes through it, one through repeats of a run passes
    their middle, and a config planned against the limit lands that much higher again."""
    below = (o.peak_bytes - model.predict(o.batch_size, o.plans, o.counts).peak_bytes for o in model.observations)
    return max(0.0, max(below, default=0.0))


def plans_of(trial: TrialResult, plans: tuple[PlanSavings, ...]) -> tuple[PlanKey, ...]:
    """The model's plans a trial had on: what ORT reported ON, else what its config names
    (a journaled trial keeps its config entries, not the model's plan keys)."""
    known = {p.key for p in plans}
    if trial.plans_on:
        return tuple(key for key in plan_keys(trial.plans_on) if key in known)
    configured = {cell for entry in plan_keys(trial.config) for cell in entry.cells if not cell.endswith(":0")}
    enabled = tuple(p.key for p in plans if configured and set(p.entries) <= configured)
    return applied_plans(trial, enabled)


def fit_step_times(trials: list[TrialResult]) -> tuple[float, float] | None:
    if not trials:
        return None
    x = np.array([t.batch_size for t in trials], dtype=float)
    y = np.array([t.median_step_s for t in trials], dtype=float)
    if len(set(x)) < 2:
        return 0.0, float(y.mean() / x.mean())
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(max(slope, 0.0))


def recomputed_nodes(occurrences: Mapping[PlanKey, Sequence[Occurrence]], keys: Iterable[PlanKey]) -> list[str]:
    """The nodes ``keys`` recompute, every occurrence's (the cost counts a shared one once)."""
    return [name for key in keys for o in occurrences.get(key, ()) for name in o.nodes]


def describe_cost_source(cost: RecomputeCost, recomputed: set[str], batch: int, scale: float) -> str:
    """Where the recompute costs come from, in words: how many recomputed nodes have a profiled time."""
    timed = len(recomputed & cost.measured.keys())
    if recomputed and timed == len(recomputed):
        return f"node times from ORT's profiler at batch {batch}"
    work = f"the graph's FLOPs and bytes through the batch-{batch} step time"
    if scale != 1.0:
        work += f", × {scale:.2f} as fitted on trials with plans"
    if timed:
        return f"node times from ORT's profiler at batch {batch} for {timed} of {len(recomputed)} recomputed nodes; {work} for the rest"
    return f"{work} (no node times measured)"


def fit_cost_scale(
    history: Sequence[TrialResult],
    step_fit: tuple[float, float] | None,
    occurrences: Mapping[PlanKey, Sequence[Occurrence]],
    model: MemoryModel,
    cost: RecomputeCost,
    plans: tuple[PlanSavings, ...],
) -> float:
    """Measured extra step time over predicted recompute time, over trials with plans on."""
    if step_fit is None or cost.seconds_per_unit <= 0:
        return 1.0
    extra, predicted = 0.0, 0.0
    for trial in history:
        keys = plans_of(trial, plans) if trial.config else ()
        if not keys or not trial.median_step_s:
            continue
        predicted += cost.seconds(recomputed_nodes(occurrences, keys), model.dims(trial.batch_size))
        extra += trial.median_step_s - (step_fit[0] + step_fit[1] * trial.batch_size)
    if predicted <= 0 or extra <= 0:
        return 1.0
    return float(np.clip(extra / predicted, 0.1, 10.0))
