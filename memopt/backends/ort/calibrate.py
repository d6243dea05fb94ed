"""Everything the planner needs for a recipe, from real runs: graph, plans, memory model, costs.

1. a no-config probe saves ORT's training graph (``memopt.backends.ort.target.load_target``), and
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

This module runs, journals and keeps; what it fits with is pure and lives in
``memopt.predict`` (``calibration``, ``memory_model``, ``recompute_cost``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memopt.backends.ort.config import PlanKey, plan_config_entries
from memopt.backends.ort.logparse import growth_parts_at, training_arena_growth
from memopt.backends.ort.predict.calibration import (
    Calibration,
    DoesNotFit,
    calibration_points,
    cuda_setup,
    default_calibration_batches,
    describe_cost_source,
    fit_cost_scale,
    fit_step_times,
    keep_ort_plans,
    observation_of,
    plan_savings,
    plans_of,
    recomputed_nodes,
    require_batch_dim,
    require_ran,
    simulator_for,
)
from memopt.backends.ort.predict.memory_model import MemoryModel, ModelError, fit_memory_model
from memopt.backends.ort.predict.recompute_cost import BALANCE, RecomputeCost, read_node_times, seconds_per_unit
from memopt.backends.ort.scan import ScanReport, scan_graph
from memopt.backends.ort.target import ProbedGraph, load_target
from memopt.backends.ort.trials import StackVersions, TrialSpec, run_trial, stack_versions
from memopt.backends.ort.version import OrtVersion
from memopt.child import NODE_TIMES_FILE
from memopt.core import Command, RunnableTarget, RunStatus, parse_target
from memopt.core.records import checked_calibration_record, report_damaged
from memopt.core.trial import TrialResult
from memopt.cuda_caching import CudaSetup
from memopt.errors import one_line
from memopt.run.budget import cpu_device_memory
from memopt.run.files import exclusive_lock, replace_atomically
from memopt.run.journal import Journal, read_trial
from memopt.run.launch import LOG_NAME
from memopt.run.settings import RunSettings

__all__ = [
    "CalibrationRun",
    "MODEL_FILE",
    "ScannedGraph",
    "calibrate",
    "calibrate_on",
    "fit_calibration",
    "load_saved_model",
    "model_identity",
    "prepare_target",
    "save_model",
]

MODEL_FILE = "memopt_models.json"
CALIBRATION_KIND = "calibration"  # the journal record of how much of the journal a calibration read


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
class ScannedGraph:
    """A target's training graph and plans, ready to calibrate: the probe and scan, done once."""

    target: RunnableTarget
    options: Mapping[str, Any]
    loaded: ProbedGraph
    report: ScanReport
    versions: StackVersions
    ort_version: OrtVersion
    batch_symbols: tuple[str, ...]
    refused: tuple[str, ...] = ()  # plans the scan found that ORT's Plan table lacks, each with why


# Runs one calibration trial at a batch size with plans on (none: no config); the tuner's
# runner also reports progress and can be cancelled.
CalibrationRun = Callable[[int, tuple[PlanKey, ...]], TrialResult]


def prepare_target(
    settings: RunSettings,
    *,
    probe_batch: int = 2,
    versions: StackVersions | None = None,
    loaded: ProbedGraph | None = None,
    cancel: threading.Event | None = None,
) -> ScannedGraph:
    """Probe ``settings.target`` (unless its graph is already ``loaded``) and scan its graph."""
    target, options = settings.target, dict(settings.options)
    versions = versions or stack_versions(settings.python)
    loaded = loaded or load_target(
        target,
        options=options,
        runs_dir=settings.runs_dir,
        probe_batch=probe_batch,
        python=settings.python,
        cancel=cancel,
    )
    ort_version = OrtVersion.parse(loaded.ort_version or versions.ort_version or "1.19")
    report = scan_graph(loaded.graph, ort_version, dims=loaded.logged_dims or None)
    report, refused = keep_ort_plans(report, loaded.ort_plans)
    symbols = require_batch_dim(report, target)
    own = sorted({loaded.logged_dims[s] for s in symbols if s in loaded.logged_dims})
    if target.fixed_batch and own and probe_batch not in own:
        raise ModelError(
            f"the command runs at batch {own[0]} (ORT's graph says so) and has no {{batch}} to change it: "
            f"give --target-batch {own[0]}, or put {{batch}} in the command"
        )
    return ScannedGraph(target, options, loaded, report, versions, ort_version, symbols, refused)


def calibrate_on(
    prepared: ScannedGraph,
    run: CalibrationRun,
    target_batch: int,
    *,
    runs_dir: Path,
    journal: Journal,
    calibration_batches: tuple[int, ...] | None = None,
    resume: bool = False,
    node_times: bool = True,
    ran: Mapping[tuple[int, tuple[PlanKey, ...]], TrialResult] | None = None,
    runs: int = 1,
) -> Calibration:
    """Calibrate on trials that ``run`` runs, one per calibration batch size: no config where it
    fits, else the first of ``calibration_points`` that does not run out of memory; with
    ``resume``, on the journal as the same calibration of an earlier session read it
    (``node_times``: see ``fit_calibration``); ``ran``: trials already run, by (batch, plans),
    such as the graph probe's. Then no config at the target batch is made ``runs`` times in all
    (a calibration run there counts): their spread is the run-to-run noise the search keeps
    room for, measured where the search runs (a half-batch run's noise was a tenth of the
    target's); where it dies of memory, the calibration run nearest the target is made again
    instead. Raises ``DoesNotFit`` where nothing runs."""
    every_plan = tuple(p.key for p in prepared.report.patterns)
    trials = dict(ran or {})
    calibrated: list[tuple[int, tuple[PlanKey, ...]]] = []
    for batch in tuple(dict.fromkeys(calibration_batches or default_calibration_batches(target_batch))):
        for point in calibration_points(batch, every_plan):
            trial = trials.get(point) or run(*point)
            trials[point] = trial
            if trial.status is not RunStatus.OUT_OF_MEMORY:
                require_ran(trial)
                calibrated.append(point)
                break
        else:
            raise DoesNotFit(
                f"{prepared.target} runs out of memory even at batch 1 with every plan on "
                f"(log: {trial.run_dir}/ort.log)"
            )
    repeats: list[TrialResult] = []
    noisy: tuple[int, tuple[PlanKey, ...]] = (target_batch, ())
    if noisy in trials and trials[noisy].status is RunStatus.OUT_OF_MEMORY:
        noisy = max(calibrated, key=lambda point: point[0])
    made = int(noisy in trials)
    while runs > 1 and made < runs:
        trial = run(*noisy)
        made += 1
        if trial.status is RunStatus.OUT_OF_MEMORY:  # the target runs only with recompute
            nearest = max(calibrated, key=lambda point: point[0])
            if noisy == nearest:  # a repeat of a marginal run died: the noise is what the others measured
                break
            noisy, made = nearest, 1
        elif made == 1:
            trials[noisy] = trial  # a calibration point of its own: a second batch for the fit
        else:
            repeats.append(trial)
    return fit_calibration(
        prepared,
        [trial for trial in (*trials.values(), *repeats) if trial.ran],
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
    loaded: ProbedGraph | None = None,
) -> Calibration:
    """Probe, scan and calibrate ``settings.target`` with real trials (``memopt plan``);
    ``loaded``: its graph already probed (``load_target``); ``node_times``: see ``fit_calibration``."""
    runs_dir = Path(settings.runs_dir)
    journal = Journal.in_folder(runs_dir)
    probe_batch = 2
    if settings.target.fixed_batch:
        calibration_batches, probe_batch = (target_batch,), target_batch
    prepared = prepare_target(
        settings,
        versions=versions or stack_versions(settings.python, settings.timeout_s),
        probe_batch=probe_batch,
        loaded=loaded,
    )

    def run(batch: int, plans: tuple[PlanKey, ...]) -> TrialResult:
        spec = TrialSpec(replace(settings, options=prepared.options), batch, plan_config_entries(plans))
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


def fit_calibration(
    prepared: ScannedGraph,
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
    # The journal's history of this target, and these trials even where no journal holds them:
    # each of them, as repeats of one run share its key.
    own = {t.key for t in trials}
    history = [*(t for t in journaled if t.key not in own), *trials]
    observations = [
        observation_of(t.batch_size, plans_of(t, plans), t.memory) for t in history if t.predicted_figure_bytes
    ]
    if loaded.probe_peak is not None and loaded.probe_peak[2] == device_used:
        # The graph probe is a no-config run too: with the calibration run, two batches fit the allocator's scale.
        observations.append(observation_of(loaded.probe_peak[0], (), loaded.probe_peak[1]))
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
    plan_costs = {
        key: cost.seconds(recomputed_nodes(occurrences, (key,)), model.dims(target_batch)) for key in occurrences
    }
    step_fit = fit_step_times([t for t in history if not t.config and t.median_step_s])
    # Measured node times need no correction; a step-time fit across processes would only add its noise.
    scale = 1.0 if cost.measured else fit_cost_scale(history, step_fit, occurrences, model, cost, plans)
    cost_source = describe_cost_source(
        cost, set(recomputed_nodes(occurrences, occurrences)), reference.batch_size, scale
    )
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
        if not RunStatus.read(record.get("status")).ran or record.get("device") != device:
            continue
        if parse_target(str(record.get("recipe"))).identity() != identity or dict(record.get("options") or {}) != dict(
            options
        ):
            continue
        if record.get("ort_version") != versions.ort_version or record.get("torch_version") != versions.torch_version:
            continue
        if record.get("torch") is not None:  # a plain-PyTorch trial: another back end's memory
            continue
        trial = read_trial(entry)
        if trial is not None:
            latest[entry.key] = trial
    return list(latest.values()), last
