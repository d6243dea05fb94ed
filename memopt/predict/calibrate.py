"""Everything the planner needs for a recipe, from real runs: graph, plans, memory model, costs.

1. a no-config probe saves ORT's training graph (``memopt.run.target.load_target``), and
   the scan lists its plans with exact saving polynomials;
2. no-config trials at two small batch sizes fit the memory model's static and per-sample
   parts (journaled, reused with ``resume``); every other finished trial of the same
   recipe, options and stack in the journal (configs included) refines the plans'
   effectiveness and the recompute-cost scale;
3. recompute costs come from the largest no-config trial's profiled node times (CPU),
   scaled by each node's work to the target dims; a node without one costs its work
   (FLOPs/bytes) in seconds via that trial's step time, refined by the recompute-cost scale.
The model is saved next to the journal so ``memopt trial`` can show predicted vs measured.

Each calibration journals how much of the journal it read (a ``calibration`` record); a
resumed session reads exactly that much again, so it fits the very model the interrupted
session fitted, and trials that session ran afterwards are learnt in the order they ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from memopt.child import NODE_TIMES_FILE
from memopt.child.memory import Memory
from memopt.core import Command, RunnableTarget, RunStatus, parse_target
from memopt.cuda_caching import AllocatorSettings, AllocatorSettingsNotModelled, CudaSetup, PoolLayout
from memopt.errors import one_line
from memopt.graph.sizes import batch_symbols
from memopt.graph.training_graph import TrainingGraph
from memopt.logparse import growth_parts_at, training_arena_growth
from memopt.ort.config import PlanKey, plan_config_entries
from memopt.ort.rules import rules_for
from memopt.predict.liveness import ActivationSimulator, Recompute
from memopt.predict.memory_model import (
    MemoryModel,
    ModelError,
    Observation,
    PlanSavings,
    fit_memory_model,
)
from memopt.predict.recompute_cost import BALANCE, RecomputeCost, read_node_times, seconds_per_unit
from memopt.run.budget import cpu_device_memory
from memopt.run.files import exclusive_lock, replace_atomically
from memopt.run.journal import Journal
from memopt.run.launch import LOG_NAME
from memopt.run.records import checked_calibration_record, report_damaged
from memopt.run.settings import DEFAULT_RUNS_DIR, RunSettings
from memopt.run.target import ScanTarget, load_target
from memopt.run.trials import (
    StackVersions,
    TrialResult,
    TrialSpec,
    run_trial,
    stack_versions,
)
from memopt.scan import ScanReport, scan_graph
from memopt.scan.patterns import Occurrence

__all__ = [
    "MODEL_FILE",
    "Calibration",
    "CalibrationRun",
    "DoesNotFit",
    "PreparedTarget",
    "calibrate",
    "calibrate_on",
    "calibration_points",
    "default_calibration_batches",
    "fit_calibration",
    "learn_from_trial",
    "load_saved_model",
    "model_identity",
    "plan_savings",
    "prepare_target",
    "require_batch_dim",
    "require_ran",
    "save_model",
]

MODEL_FILE = "memopt_models.json"
CALIBRATION_KIND = "calibration"  # the journal record of how much of the journal a calibration read


@dataclass(frozen=True)
class Calibration:
    model: MemoryModel
    plan_costs_s: Mapping[PlanKey, float]  # recompute seconds per plan at the target batch
    cost_scale: float  # measured extra step time / predicted, from trials with plans (1.0 without)
    baseline_step_s: float | None  # predicted no-config step time at the target batch
    target_batch: int
    trials: tuple[TrialResult, ...]  # the no-config calibration trials
    graph_source: str
    ort_version: str
    device: str
    device_total: int | None
    identity: str
    cost_source: str  # where the recompute costs come from, in words
    refused: tuple[str, ...] = ()  # PreparedTarget.refused: plans left out, each with why
    arena_check: str = ""  # whether the simulated arena grew as ORT's did in the largest calibration run

    @property
    def costs_s(self) -> dict[PlanKey, float]:
        return {key: seconds * self.cost_scale for key, seconds in self.plan_costs_s.items()}


def default_calibration_batches(target_batch: int) -> tuple[int]:
    """One no-config run at half the target batch: the graph's simulation scales it to the target."""
    return (max(1, target_batch // 2),)


def model_identity(target: RunnableTarget, options: Mapping[str, Any], versions: StackVersions, device: str) -> str:
    return json.dumps(
        {
            "recipe": target.identity(),
            "options": dict(options),
            "ort": versions.ort_version,
            "torch": versions.torch_version,
            "device": device,
        },
        sort_keys=True,
        default=str,
    )


def load_saved_model(runs_dir: Path, identity: str) -> MemoryModel | None:
    """The model saved for ``identity``; None where there is none, or (reported as a
    ``DamagedRecord`` warning) where the saved one is damaged."""
    path = Path(runs_dir) / MODEL_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:  # a number past Python's 4300 digits is a ValueError too
        library = json.loads(text)
        if not isinstance(library, dict):
            raise ModelError(f"a JSON {type(library).__name__}, not an object of models")
    except (ModelError, ValueError) as err:
        report_damaged(f"{path}: skipped the damaged model library ({one_line(err)})")
        return None
    if identity not in library:
        return None
    try:
        return MemoryModel.from_json(library[identity])
    except (ModelError, ValueError, KeyError, TypeError, ZeroDivisionError) as err:
        report_damaged(f"{path}: skipped the damaged model of this target ({one_line(err)})")
        return None


def save_model(runs_dir: Path, identity: str, model: MemoryModel) -> None:
    """Add or replace one model in the runs folder's library, under a lock: memopt processes
    sharing the folder each keep their models."""
    path = Path(runs_dir) / MODEL_FILE
    with exclusive_lock(path):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = {}
        if not isinstance(saved, dict):
            saved = {}
        saved[identity] = model.to_json()
        replace_atomically(path, json.dumps(saved, indent=1))


@dataclass(frozen=True)
class PreparedTarget:
    """A target's training graph and plans, ready to calibrate: the probe and scan, done once."""

    target: RunnableTarget
    options: Mapping[str, Any]
    loaded: ScanTarget
    report: ScanReport
    versions: StackVersions
    ort_version: str
    batch_symbols: tuple[str, ...]
    refused: tuple[str, ...] = ()  # plans the scan found that ORT's Plan table lacks, each with why


# Runs one calibration trial at a batch size with plans on (none: no config); the tuner's
# runner also reports progress and can be cancelled.
CalibrationRun = Callable[[int, tuple[PlanKey, ...]], TrialResult]


class DoesNotFit(ModelError):
    """Not even batch 1 with every plan on ran: nothing to calibrate on, and no config fits."""


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


def prepare_target(
    target: RunnableTarget,
    *,
    options: Mapping[str, Any] | None = None,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    python: str | None = None,
    probe_batch: int = 2,
    versions: StackVersions | None = None,
    loaded: ScanTarget | None = None,
    cancel: threading.Event | None = None,
) -> PreparedTarget:
    """Probe ``target`` (unless its graph is already ``loaded``) and scan its graph."""
    options = dict(options or {})
    versions = versions or stack_versions(python)
    loaded = loaded or load_target(
        target, options=options, runs_dir=runs_dir, probe_batch=probe_batch, python=python, cancel=cancel
    )
    ort_version = loaded.ort_version or versions.ort_version or "1.19"
    report = scan_graph(loaded.graph, ort_version, dims=loaded.logged_dims or None)
    report, refused = keep_ort_plans(report, loaded.ort_plans)
    symbols = require_batch_dim(report, target)
    own = sorted({loaded.logged_dims[s] for s in symbols if s in loaded.logged_dims})
    if target.fixed_batch and own and probe_batch not in own:
        raise ModelError(
            f"the command runs at batch {own[0]} (ORT's graph says so) and has no {{batch}} to change it: "
            f"give --target-batch {own[0]}, or put {{batch}} in the command"
        )
    return PreparedTarget(target, options, loaded, report, versions, ort_version, symbols, refused)


def keep_ort_plans(report: ScanReport, ort_plans: frozenset[str] | None) -> tuple[ScanReport, tuple[str, ...]]:
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


def calibrate_on(
    prepared: PreparedTarget,
    run: CalibrationRun,
    target_batch: int,
    *,
    runs_dir: Path,
    journal: Journal,
    calibration_batches: tuple[int, ...] | None = None,
    resume: bool = False,
    node_times: bool = True,
    ran: Mapping[tuple[int, tuple[PlanKey, ...]], TrialResult] | None = None,
) -> Calibration:
    """Calibrate on trials that ``run`` runs, one per calibration batch size: no config where it
    fits, else the first of ``calibration_points`` that does not run out of memory; with
    ``resume``, on the journal as the same calibration of an earlier session read it
    (``node_times``: see ``fit_calibration``); ``ran``: trials already run, by (batch, plans),
    such as the graph probe's. Raises ``DoesNotFit`` where nothing runs."""
    every_plan = tuple(p.key for p in prepared.report.patterns)
    trials = dict(ran or {})
    for batch in tuple(dict.fromkeys(calibration_batches or default_calibration_batches(target_batch))):
        for point in calibration_points(batch, every_plan):
            trial = trials.get(point) or run(*point)
            trials[point] = trial
            if trial.status is not RunStatus.OUT_OF_MEMORY:
                require_ran(trial)
                break
        else:
            raise DoesNotFit(
                f"{prepared.target} runs out of memory even at batch 1 with every plan on "
                f"(log: {trial.run_dir}/ort.log)"
            )
    return fit_calibration(
        prepared,
        [trial for trial in trials.values() if trial.ran],
        journal=journal,
        runs_dir=runs_dir,
        target_batch=target_batch,
        resume=resume,
        node_times=node_times,
    )


def calibrate(
    settings: RunSettings,
    target_batch: int,
    *,
    calibration_batches: tuple[int, ...] | None = None,
    resume: bool = True,
    versions: StackVersions | None = None,
    node_times: bool = True,
    loaded: ScanTarget | None = None,
) -> Calibration:
    """Probe, scan and calibrate ``settings.target`` with real trials (``memopt plan``);
    ``loaded``: its graph already probed (``load_target``); ``node_times``: see ``fit_calibration``."""
    runs_dir = Path(settings.runs_dir)
    journal = Journal.in_folder(runs_dir)
    probe_batch = 2
    if settings.target.fixed_batch:
        calibration_batches, probe_batch = (target_batch,), target_batch
    prepared = prepare_target(
        settings.target,
        options=settings.options,
        runs_dir=runs_dir,
        python=settings.python,
        versions=versions or stack_versions(settings.python, settings.timeout_s),
        probe_batch=probe_batch,
        loaded=loaded,
    )

    def run(batch: int, plans: tuple[PlanKey, ...]) -> TrialResult:
        spec = TrialSpec.of(replace(settings, options=prepared.options), batch, plan_config_entries(plans))
        return run_trial(spec, runs_dir, journal=journal, resume=resume, versions=prepared.versions)

    return calibrate_on(
        prepared,
        run,
        target_batch,
        runs_dir=runs_dir,
        journal=journal,
        calibration_batches=calibration_batches,
        resume=resume,
        node_times=node_times,
    )


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
    ort_version: str,
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


def fit_calibration(
    prepared: PreparedTarget,
    trials: Sequence[TrialResult],
    *,
    journal: Journal,
    runs_dir: Path,
    target_batch: int,
    resume: bool = False,
    node_times: bool = True,
) -> Calibration:
    """Memory model and recompute costs from the no-config ``trials`` and the journal's history
    (with ``resume``, the part of it the same calibration read before, where one did).
    ``node_times=False`` leaves out the node times a trial profiled: costs from the graph's
    work alone, as a `--cmd` job or a CUDA run gets them."""
    loaded, report, target, options, versions = (
        prepared.loaded,
        prepared.report,
        prepared.target,
        prepared.options,
        prepared.versions,
    )
    symbols = prepared.batch_symbols
    fixed = {name: value for name, value in loaded.logged_dims.items() if name not in symbols}
    plans = plan_savings(report, loaded.graph)
    device_used = trials[0].device or "cpu"
    identity = model_identity(target, options, versions, device_used)
    record_key = _calibration_key(identity, trials, target_batch)
    earlier = journal.latest(record_key, kind=CALIBRATION_KIND) if resume else None
    checked = checked_calibration_record(earlier.record, earlier.where) if earlier is not None else None
    read_upto = checked.get("journal_lines") if checked is not None else None
    journaled, lines_read = _history(journal, target, options, versions, device_used, read_upto)
    if checked is None:  # none yet, or a damaged one: this calibration's record is written anew
        journal.append({"key": record_key, "kind": CALIBRATION_KIND, "journal_lines": lines_read, "identity": identity})
    # The journal's history of this target, and these trials even where no journal holds them.
    known = (*journaled, *trials)
    history = list({t.key or id(t): t for t in known}.values())  # a trial no journal keyed counts once
    observations = [
        _observation(t.batch_size, _plans_of(t, plans), t.memory) for t in history if t.predicted_figure_bytes
    ]
    if loaded.probe_peak is not None and loaded.probe_peak[2] == device_used:
        # The graph probe is a no-config run too: with the calibration run, two batches fit the allocator's scale.
        observations.append(_observation(loaded.probe_peak[0], (), loaded.probe_peak[1]))
    model = fit_memory_model(
        observations,
        plans,
        symbols,
        fixed,
        single_batch=target.fixed_batch,
        simulator=simulator_for(
            plans,
            loaded.graph,
            loaded.graph_path,
            prepared.ort_version,
            device_used,
            cuda_setup(trials) if device_used == "cuda" else CudaSetup(),
        ),
    )
    save_model(runs_dir, identity, model)

    # Costs: the node times the largest calibration trial profiled, else the graph's work in
    # seconds via that trial's step time.
    balance = BALANCE.get(device_used, BALANCE["cpu"])
    reference = max(trials, key=lambda t: t.batch_size)
    reference_dims = model.dims(reference.batch_size)
    cost = RecomputeCost(
        loaded.graph,
        balance,
        seconds_per_unit(reference.median_step_s or 0.0, loaded.graph, reference_dims, balance),
        read_node_times(Path(reference.run_dir) / NODE_TIMES_FILE) if node_times else {},
        reference_dims,
    )
    occurrences = {p.key: p.occurrences for p in report.patterns}
    plan_costs = {key: cost.seconds(_recomputed(occurrences, (key,)), model.dims(target_batch)) for key in occurrences}
    step_fit = _step_fit([t for t in history if not t.config and t.median_step_s])
    # Measured node times need no correction; a step-time fit across processes would only add its noise.
    scale = 1.0 if cost.measured else _cost_scale(history, step_fit, occurrences, model, cost, plans)
    cost_source = _cost_source(cost, set(_recomputed(occurrences, occurrences)), reference.batch_size, scale)
    baseline_step = max(step_fit[0] + step_fit[1] * target_batch, 0.0) if step_fit else None
    totals = [t.cuda_total_memory for t in trials if t.cuda_total_memory]
    device_total = totals[0] if totals else (cpu_device_memory() if device_used == "cpu" else None)
    return Calibration(
        model,
        plan_costs,
        scale,
        baseline_step,
        target_batch,
        tuple(trials),
        loaded.description,
        prepared.ort_version,
        device_used,
        device_total,
        identity,
        cost_source,
        prepared.refused,
        # A command may run several ranks whose arena lines interleave in one log: only memopt's own
        # single-process runs are compared.
        "" if isinstance(target, Command) else _arena_check(reference, model),
    )


def _arena_check(trial: TrialResult, model: MemoryModel) -> str:
    """Whether the memory model's arena added the regions ORT's did in ``trial`` (a no-config
    CPU run, its log at DEVINFO), in words; empty where there is nothing to compare.

    The model's figure is the arena's placement; a kernel it wrongly lets write in place, or
    an output it places in the arena that is not there, shows first as a region added for
    another request."""
    if trial.device != "cpu" or not model.simulated or trial.config:
        return ""
    try:
        with open(Path(trial.run_dir) / LOG_NAME, encoding="utf-8", errors="replace") as log:
            real = training_arena_growth(log)
    except OSError:
        return ""
    if not real:
        return ""
    simulated = model.timeline(trial.batch_size).arena_growth
    mib = 2**20
    index = growth_parts_at(real, simulated)
    if index is not None:
        grown = real[index]
        other = simulated[index] if index < len(simulated) else None
        ours = (
            f"{other.region_bytes / mib:,.0f} MiB for a {other.request_bytes / mib:,.1f} MiB request"
            if other
            else "none"
        )
        return (
            f"the simulated arena grew unlike ORT's at batch {trial.batch_size}: ORT's region {index + 1} was "
            f"{grown.region_bytes / mib:,.0f} MiB for a {grown.request_bytes / mib:,.1f} MiB request, the "
            f"simulation's {ours}; predictions may be off by the regions they part on"
        )
    total = sum(grown.region_bytes for grown in real)
    return f"the simulated arena grew as ORT's did at batch {trial.batch_size} ({len(real)} regions, {total / mib:,.0f} MiB)"


def _calibration_key(identity: str, trials: Sequence[TrialResult], target_batch: int) -> str:
    """The journal key of one calibration: the target, its stack and device, and its trials."""
    what = json.dumps([identity, sorted(t.key for t in trials), target_batch])
    return "calibration-" + hashlib.sha256(what.encode()).hexdigest()[:20]


def _history(
    journal: Journal,
    target: RunnableTarget,
    options: Mapping[str, Any],
    versions: StackVersions,
    device: str,
    upto: int | None = None,
) -> tuple[list[TrialResult], int]:
    """Finished trials of this target/options/stack/device, newest per key, in the journal's
    first ``upto`` lines (all of it when None); and the number of the last line read."""
    identity = target.identity()
    latest: dict[str, TrialResult] = {}
    last = 0
    for entry in journal.entries():
        if upto is not None and entry.line_number > upto:
            break
        last = entry.line_number
        record = entry.record
        if record.get("status") != RunStatus.OK or record.get("device") != device:
            continue
        if parse_target(str(record.get("recipe"))).identity() != identity or dict(record.get("options") or {}) != dict(
            options
        ):
            continue
        if record.get("ort_version") != versions.ort_version or record.get("torch_version") != versions.torch_version:
            continue
        trial = TrialResult.from_record(record, entry.where)
        if trial is not None:
            latest[entry.key] = trial
    return list(latest.values()), last


def learn_from_trial(
    model: MemoryModel,
    trial: TrialResult,
    plans: Iterable[PlanKey],
    counts: Mapping[PlanKey, int] | None = None,
) -> MemoryModel | None:
    """``model`` refitted with what ``trial`` measured: of ``plans`` (those its config enabled),
    the ones ORT applied and the model knows, an entry ORT left OFF having saved nothing.
    None where the trial measured no peak. Raises ``ModelError`` where no model fits."""
    if not trial.ran or not trial.predicted_figure_bytes:
        return None
    known = {p.key for p in model.plans}
    applied = tuple(key for key in trial.applied(plans) if key in known)
    partial = {key: count for key, count in (counts or {}).items() if key in applied}
    return model.with_observation(_observation(trial.batch_size, applied, trial.memory, partial))


def _observation(
    batch_size: int, plans: tuple[PlanKey, ...], memory: Memory, counts: Mapping[PlanKey, int] | None = None
) -> Observation:
    """What a run at ``batch_size`` measured, as the model learns it: on CUDA what ran out
    (reserved plus outside the allocator, the outside part kept apart), elsewhere the steps' peak."""
    return Observation(
        batch_size, plans, int(memory.predicted_figure or 0), dict(counts or {}), memory.cuda_outside_bytes or 0
    )


def _plans_of(trial: TrialResult, plans: tuple[PlanSavings, ...]) -> tuple[PlanKey, ...]:
    """The model's plans a trial had on: what ORT reported ON, else what its config names
    (a journaled trial keeps its config entries, not the model's plan keys)."""
    known = {p.key for p in plans}
    if trial.plans_on:
        return tuple(key for key in trial.plans_on if key in known)
    configured = {cell for entry in trial.config for cell in PlanKey(entry).cells if not cell.endswith(":0")}
    enabled = tuple(p.key for p in plans if configured and set(p.entries) <= configured)
    return trial.applied(enabled)


def _step_fit(trials: list[TrialResult]) -> tuple[float, float] | None:
    if not trials:
        return None
    x = np.array([t.batch_size for t in trials], dtype=float)
    y = np.array([t.median_step_s for t in trials], dtype=float)
    if len(set(x)) < 2:
        return 0.0, float(y.mean() / x.mean())
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(max(slope, 0.0))


def _recomputed(occurrences: Mapping[PlanKey, Sequence[Occurrence]], keys: Iterable[PlanKey]) -> list[str]:
    """The nodes ``keys`` recompute, every occurrence's (the cost counts a shared one once)."""
    return [name for key in keys for o in occurrences.get(key, ()) for name in o.nodes]


def _cost_source(cost: RecomputeCost, recomputed: set[str], batch: int, scale: float) -> str:
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


def _cost_scale(
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
        keys = _plans_of(trial, plans) if trial.config else ()
        if not keys or not trial.median_step_s:
            continue
        predicted += cost.seconds(_recomputed(occurrences, keys), model.dims(trial.batch_size))
        extra += trial.median_step_s - (step_fit[0] + step_fit[1] * trial.batch_size)
    if predicted <= 0 or extra <= 0:
        return 1.0
    return float(np.clip(extra / predicted, 0.1, 10.0))
