"""The tuner's search loop, UI-free: the "auto-search" that ``memopt tune`` runs in the TUI and with ``--no-tui``.

    probe + scan -> calibrate (no-config trials at two small batches) -> plan for the target
    batch under the budget -> trial -> recalibrate -> add plans when over budget, try removing
    the costliest when it fits -> stop at a verified config, at ``max_trials``, or when even
    every plan cannot fit (then say the largest batch predicted to fit).

Everything a view needs arrives as typed events (``TuneEvent``) through one callback, from
whichever thread runs the search. ``Tuner.cancel()`` may be called from any thread: it kills
the running trial's child process group and the next step raises ``TuneCancelled``. Every
trial goes to the journal (``memopt.journal``) the moment it ends; ``resume`` reuses
finished trials of a previous session with the same key.

The tuner drives issue 5's machinery (trials, journal, memory model, planner, calibration)
and adds no analysis of its own. Two adapters live here rather than in those modules:
``_calibrate`` redoes ``memopt.calibrate.calibrate``'s steps one by one (it probes and runs its
trials in one call, with no progress callback and no way to reuse an already loaded graph),
and ``_CancelAwareJournal``/``_kill_trial_children`` make a trial cancellable
(``memopt.runs.launch`` blocks in ``Popen.wait`` and exposes no handle).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memopt.budget import Budget
from memopt.calibrate import (
    Calibration,
    default_calibration_batches,
    fit_calibration,
    require_batch_dim,
    require_ran,
)
from memopt.config import (
    ConfigEntry,
    export_line,
    format_config_string,
    takes_json_file,
    write_json_config,
)
from memopt.errors import MemoptError
from memopt.journal import Journal
from memopt.memory_model import (
    MemoryModel,
    ModelError,
    Observation,
    Prediction,
)
from memopt.ortversion import OrtVersion
from memopt.planner import PlanChoice, PlanResult, choose_plans, config_entries
from memopt.runs import RECORD_NAME
from memopt.scan import ScanReport, scan_graph
from memopt.scan.target import ScanTarget, load_target
from memopt.trials import (
    StackVersions,
    TrialResult,
    TrialSpec,
    run_trial,
    stack_versions,
)

__all__ = [
    "CUDA_DEFAULT_FRACTION",
    "Note",
    "PlanRow",
    "Ready",
    "SearchFinished",
    "StageFinished",
    "StageStarted",
    "TrialFinished",
    "TrialRecord",
    "TrialStarted",
    "TuneCancelled",
    "TuneError",
    "TuneEvent",
    "TuneResult",
    "TuneSettings",
    "Tuner",
    "budget_required",
]

CUDA_DEFAULT_FRACTION = 0.9  # default CUDA budget: the device's memory less 10% (allocator cache, context)
_FATAL_OUTCOMES = ("recipe_error", "stack_error")
_CHILD_MODULE = "memopt._child"


class TuneError(MemoptError):
    """The search cannot start or go on (no budget, a broken recipe, no ORT)."""


class TuneCancelled(MemoptError):
    """The user cancelled; the running trial's child was killed and the journal kept."""


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class TuneSettings:
    recipe: str
    target_batch: int
    budget: Budget | None = None  # None: CUDA only, the device's memory less 10%
    options: Mapping[str, Any] = field(default_factory=dict)
    max_trials: int = 6  # search trials at the target batch (calibration trials not counted)
    steps: int = 2
    runs_dir: Path = Path("runs")
    resume: bool = False
    device: str = "auto"
    margin: float = 0.02  # fraction of the budget held back for prediction error
    calibration_batches: tuple[int, ...] | None = None
    timeout_s: float = 1800.0
    python: str | None = None
    probe_batch: int = 2

    def __post_init__(self) -> None:
        if self.target_batch < 1:
            raise TuneError(f"--target-batch must be a positive integer, not {self.target_batch}")
        if self.max_trials < 1:
            raise TuneError(f"--max-trials must be at least 1, not {self.max_trials}")
        if self.steps < 1:
            raise TuneError(f"--steps must be at least 1, not {self.steps}")
        if not 0 <= self.margin < 1:
            raise TuneError(f"--margin must be a fraction in [0, 1), not {self.margin:g}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise TuneError(f"--device must be auto, cpu or cuda, not {self.device!r}")
        if self.calibration_batches is not None and (
            len(set(self.calibration_batches)) < 2 or min(self.calibration_batches) < 1
        ):
            raise TuneError("calibration needs two or more different positive batch sizes")


def budget_required(settings: TuneSettings, versions: StackVersions) -> bool:
    """On CPU there is no default budget."""
    return settings.budget is None and (settings.device == "cpu" or not versions.cuda)


# ----------------------------------------------------------------------------- what views show


@dataclass(frozen=True)
class PlanRow:
    """One Plan-table row as the tuner sees it at the target batch."""

    key: str  # the config entry, e.g. "FusedMatMul+Add+:1:-1"
    subgraph: str
    kind: str  # "recompute" or "compromise"
    frequency: int
    saving_bytes: float  # the scan's exact saving at the target batch
    effective_bytes: float  # what the memory model expects it to lower the peak by
    cost_s: float  # estimated extra seconds per step
    modules: tuple[str, ...]
    counts_honoured: bool  # ORT <= 1.16 recomputes the first N occurrences; 1.17+ all or nothing


@dataclass(frozen=True)
class TrialRecord:
    """A trial the tuner ran (or reused), with why it ran and what the model predicted."""

    number: int  # 1-based, in this session
    purpose: str  # "calibration", "search" or "manual"
    plans: tuple[str, ...]
    predicted_bytes: float | None
    reason: str
    result: TrialResult
    cancelled: bool = False

    @property
    def outcome(self) -> str:
        return "cancelled" if self.cancelled else self.result.outcome

    @property
    def fits(self) -> bool:
        return not self.cancelled and self.result.outcome == "ok"

    @property
    def peak_bytes(self) -> int | None:
        return self.result.peak_bytes

    @property
    def step_s(self) -> float | None:
        return self.result.median_step_s

    @property
    def batch_size(self) -> int:
        return self.result.batch_size

    @property
    def prediction_error(self) -> float | None:
        if self.predicted_bytes is None or not self.result.peak_bytes:
            return None
        return (self.predicted_bytes - self.result.peak_bytes) / self.result.peak_bytes


@dataclass(frozen=True)
class TuneResult:
    """How a search ended. ``status``: verified, max_trials, impossible, cancelled, failed."""

    status: str
    message: str
    best: TrialRecord | None
    trials: tuple[TrialRecord, ...]
    largest_batch: int | None = None  # when impossible: predicted to fit with every plan

    @property
    def verified(self) -> bool:
        return self.best is not None


@dataclass(frozen=True)
class StageStarted:
    stage: str  # probe, scan, calibrate, plan
    message: str


@dataclass(frozen=True)
class StageFinished:
    stage: str
    message: str
    seconds: float


@dataclass(frozen=True)
class Ready:
    """Set-up is done: plans, model and budget are known."""

    recipe: str
    options: Mapping[str, Any]
    ort_version: str
    ort_package: str | None
    torch_version: str | None
    device: str  # "CPU" or the CUDA device's name
    budget_bytes: int
    limit_bytes: float
    target_batch: int
    rows: tuple[PlanRow, ...]
    runs_dir: Path


@dataclass(frozen=True)
class TrialStarted:
    number: int
    purpose: str
    batch_size: int
    plans: tuple[str, ...]
    predicted_bytes: float | None
    reason: str
    steps: int
    timeout_s: float


@dataclass(frozen=True)
class TrialFinished:
    record: TrialRecord
    explanation: str  # one line: what happened and what the model learnt


@dataclass(frozen=True)
class Note:
    """One line of the search explaining itself."""

    message: str


@dataclass(frozen=True)
class SearchFinished:
    result: TuneResult


TuneEvent = StageStarted | StageFinished | Ready | TrialStarted | TrialFinished | Note | SearchFinished


# ----------------------------------------------------------------------------- the tuner


class Tuner:
    """One tuning session: set up once, then any mix of predictions, manual trials and auto-search."""

    def __init__(self, settings: TuneSettings, on_event: Callable[[TuneEvent], None] | None = None) -> None:
        self.settings = replace(settings, runs_dir=Path(settings.runs_dir).resolve())
        self._listeners: list[Callable[[TuneEvent], None]] = [on_event] if on_event else []
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self.journal = _CancelAwareJournal(Journal.in_folder(self.settings.runs_dir).path, self._cancel)
        self.versions: StackVersions | None = None
        self.target: ScanTarget | None = None
        self.report: ScanReport | None = None
        self.calibration: Calibration | None = None
        self.model: MemoryModel | None = None
        self.budget_bytes: int = 0
        self.device_name: str = "CPU"
        self.records: list[TrialRecord] = []
        self.ready: Ready | None = None
        self._numbers = 0

    # -- events and cancellation ------------------------------------------------------

    def subscribe(self, listener: Callable[[TuneEvent], None]) -> None:
        self._listeners.append(listener)

    def _emit(self, event: TuneEvent) -> None:
        for listener in list(self._listeners):
            listener(event)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop: kill the running trial's (or probe's) child process group; safe from any thread."""
        self._cancel.set()
        _kill_trial_children(self.settings.runs_dir)

    def reset_cancel(self) -> None:
        """Allow new work after a cancelled search (the TUI keeps the session)."""
        self._cancel.clear()

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise TuneCancelled("cancelled")

    # -- set-up -----------------------------------------------------------------------

    @property
    def is_ready(self) -> bool:
        return self.ready is not None

    def setup(self) -> Ready:
        """Probe, scan and calibrate (emitting progress); idempotent."""
        if self.ready is not None:
            return self.ready
        s = self.settings
        self.versions = stack_versions(s.python)
        if self.versions.ort_version is None:
            raise TuneError("the ORT training stack cannot run: onnxruntime-training is not installed")
        if budget_required(s, self.versions):
            raise TuneError("--budget is required on CPU (e.g. --budget 2.5GiB or --budget 50%)")
        self._check_cancel()

        self._stage("probe", f"Exporting {s.recipe} under ORTModule (no-config probe at batch {s.probe_batch})…",
                    lambda: self._load_target(), lambda t: f"training graph {t.graph_path.name}, {len(t.graph.nodes)} nodes")
        self._check_cancel()
        assert self.target is not None
        ort_version = self.target.ort_version or self.versions.ort_version
        report = self._stage("scan", f"Scanning the training graph with ORT {ort_version}'s rules…",
                             lambda: scan_graph(self.target.graph, ort_version, dims=self.target.logged_dims or None),
                             lambda r: f"{len(r.patterns)} recompute plans")
        self.report = report
        self._check_cancel()
        self.calibration = self._calibrate(ort_version)
        self.model = self.calibration.model
        self.budget_bytes = self._resolve_budget()
        if self.budget_bytes <= 0:
            raise TuneError("the device's memory is unknown; give --budget")
        self.ready = Ready(
            recipe=s.recipe, options=dict(s.options), ort_version=ort_version,
            ort_package=self.versions.ort_package, torch_version=self.versions.torch_version,
            device=self.device_name, budget_bytes=self.budget_bytes, limit_bytes=self.limit_bytes,
            target_batch=s.target_batch, rows=self.rows(), runs_dir=s.runs_dir,
        )
        self._emit(self.ready)
        return self.ready

    def set_budget(self, budget_bytes: int) -> Ready:
        """Change the budget of a set-up session (views get a fresh ``Ready``)."""
        if budget_bytes <= 0:
            raise TuneError(f"the budget must be more than zero, not {budget_bytes}")
        if self.ready is None:
            raise TuneError("set up the session before changing its budget")
        self.budget_bytes = int(budget_bytes)
        self.ready = replace(self.ready, budget_bytes=self.budget_bytes, limit_bytes=self.limit_bytes)
        self._emit(self.ready)
        return self.ready

    def _stage(self, stage: str, message: str, work: Callable[[], Any], done: Callable[[Any], str]) -> Any:
        self._emit(StageStarted(stage, message))
        started = time.monotonic()
        value = work()
        self._emit(StageFinished(stage, done(value), time.monotonic() - started))
        return value

    def _load_target(self) -> ScanTarget:
        s = self.settings
        try:
            self.target = load_target(s.recipe, options=s.options, runs_dir=s.runs_dir, probe_batch=s.probe_batch,
                                      python=s.python)
        except MemoptError:
            self._check_cancel()
            raise
        return self.target

    def _calibrate(self, ort_version: str) -> Calibration:
        """``memopt.calibrate.calibrate`` on the graph already loaded, its trials shown as events."""
        s = self.settings
        assert self.target is not None and self.report is not None and self.versions is not None
        require_batch_dim(self.report, s.recipe)
        batches = tuple(dict.fromkeys(s.calibration_batches or default_calibration_batches(s.target_batch)))
        self._emit(StageStarted("calibrate", f"Calibrating the memory model: no-config trials at batch "
                                             f"{' and '.join(map(str, batches))}…"))
        started = time.monotonic()
        trials = []
        for batch in batches:
            record = self._trial(batch, (), "calibration", f"no-config calibration at batch {batch}", None, None)
            require_ran(record.result)
            trials.append(record.result)
        if trials[0].device == "cuda":
            self.device_name = _device_name(trials[0])
        calibration = fit_calibration(self.target, self.report, trials, recipe=s.recipe, options=s.options,
                                      journal=self.journal, versions=self.versions, runs_dir=s.runs_dir,
                                      target_batch=s.target_batch, ort_version=ort_version)
        model = calibration.model
        self._emit(StageFinished("calibrate", f"model: static {_mib(model.static_bytes)} + "
                                              f"{_mib(model.per_sample_bytes)}/sample", time.monotonic() - started))
        return calibration

    def _resolve_budget(self) -> int:
        assert self.calibration is not None
        total = self.calibration.device_total
        if self.settings.budget is not None:
            return self.settings.budget.bytes_of(total)
        return int((total or 0) * CUDA_DEFAULT_FRACTION)

    # -- the model's view -----------------------------------------------------------------

    @property
    def limit_bytes(self) -> float:
        return self.budget_bytes * (1.0 - self.settings.margin)

    @property
    def ort_version(self) -> OrtVersion:
        assert self.calibration is not None
        return OrtVersion.parse(self.calibration.ort_version)

    def costs(self) -> dict[str, float]:
        assert self.calibration is not None
        return self.calibration.costs_s

    def rows(self) -> tuple[PlanRow, ...]:
        """The plans at the target batch, largest saving first."""
        assert self.report is not None and self.model is not None
        batch, costs = self.settings.target_batch, self.costs()
        honoured = self.ort_version.minor <= 16
        rows = []
        for pattern in self.report.patterns:
            raw = self.model.raw_saving(pattern.key, batch)
            rows.append(PlanRow(
                key=pattern.key, subgraph=pattern.subgraph, kind=pattern.kind.name.lower(),
                frequency=pattern.frequency, saving_bytes=raw, effective_bytes=self.model.factor(pattern.key) * raw,
                cost_s=costs.get(pattern.key, 0.0), modules=_modules(pattern.modules), counts_honoured=honoured,
            ))
        rows.sort(key=lambda r: (-r.saving_bytes, r.key))
        return tuple(rows)

    def predict(self, plans: Iterable[str], batch_size: int | None = None) -> Prediction:
        assert self.model is not None
        return self.model.predict(batch_size or self.settings.target_batch, tuple(plans))

    def cost_of(self, plans: Iterable[str]) -> float:
        costs = self.costs()
        return sum(costs.get(key, 0.0) for key in plans)

    def plan(self) -> PlanResult:
        assert self.model is not None and self.calibration is not None
        return choose_plans(self.model, self.costs(), self.settings.target_batch, self.budget_bytes,
                            self.calibration.ort_version, margin=self.settings.margin,
                            baseline_step_s=self.calibration.baseline_step_s)

    def entries(self, plans: Iterable[str]) -> tuple[ConfigEntry, ...]:
        assert self.model is not None
        choices = tuple(PlanChoice(key, self.model.plan(key).entries, -1, self.model.plan(key).frequency, 0.0, 0.0)
                        for key in plans)
        return config_entries(choices)

    def useful_plans(self) -> tuple[str, ...]:
        """Plans the model expects to lower the peak at the target batch, largest first."""
        return tuple(r.key for r in self.rows() if r.effective_bytes > 0)

    # -- trials ---------------------------------------------------------------------------

    def run_trial(self, plans: Iterable[str], purpose: str = "manual", reason: str = "your selection") -> TrialRecord:
        """A trial at the target batch with ``plans`` on; the model learns from it."""
        self.setup()
        plans = tuple(dict.fromkeys(plans))
        predicted = self.predict(plans).peak_bytes
        return self._trial(self.settings.target_batch, plans, purpose, reason, predicted, self.budget_bytes)

    def _trial(self, batch: int, plans: tuple[str, ...], purpose: str, reason: str, predicted: float | None,
               budget: int | None) -> TrialRecord:
        self._check_cancel()
        s = self.settings
        with self._lock:
            self._numbers += 1
            number = self._numbers
        entries = self.entries(plans) if plans else ()
        self._emit(TrialStarted(number, purpose, batch, plans, predicted, reason, s.steps, s.timeout_s))
        spec = TrialSpec(s.recipe, batch, dict(s.options), entries, s.steps, s.device, s.timeout_s, s.python)
        result = run_trial(spec, s.runs_dir, journal=self.journal, resume=s.resume, budget_bytes=budget,
                           predicted_peak_bytes=int(predicted) if predicted is not None else None,
                           versions=self.versions)
        cancelled = self._cancel.is_set() and result.status != "ok"
        record = TrialRecord(number, purpose, plans, predicted, reason, result, cancelled)
        self.records.append(record)
        explanation = self._learn(record)
        self._emit(TrialFinished(record, explanation))
        if cancelled:
            raise TuneCancelled("cancelled")
        return record

    def _learn(self, record: TrialRecord) -> str:
        """Recalibrate on a finished trial; one line saying what happened."""
        result = record.result
        outcome = record.outcome.replace("_", " ")
        reused = " (reused from the journal)" if result.reused else ""
        if record.cancelled:
            return f"trial {record.number} cancelled: its child process was killed"
        if not result.ran or not result.peak_bytes:
            return f"trial {record.number}: {outcome}{reused}: {result.error or 'no measurement'}"
        line = f"trial {record.number}: {outcome}{reused}, peak {_mib(result.peak_bytes)}"
        if result.median_step_s:
            line += f", {result.median_step_s:.2f} s/step"
        if record.predicted_bytes is not None:
            line += f" (predicted {_mib(record.predicted_bytes)}, {(record.prediction_error or 0) * 100:+.1f}%)"
        if self.model is not None and record.purpose != "calibration":
            known = {p.key for p in self.model.plans}
            on = tuple(k for k in result.plans_on if k in known) or record.plans
            try:
                self.model = self.model.with_observation(Observation(result.batch_size, on, result.peak_bytes))
            except ModelError:
                return line
            if record.plans:
                line += f"; model recalibrated (plan effectiveness {self.model.global_effectiveness:.2f})"
            else:
                line += "; model recalibrated"
        return line

    # -- auto-search ------------------------------------------------------------------------

    def auto_search(self, max_trials: int | None = None) -> TuneResult:
        """Search for the cheapest verified config; never more than ``max_trials`` search trials."""
        try:
            self.setup()
            result = self._search(max_trials or self.settings.max_trials)
        except TuneCancelled:
            result = self._finish("cancelled", "cancelled: the running trial was stopped; the journal keeps every finished trial")
        self._emit(SearchFinished(result))
        return result

    def _search(self, max_trials: int) -> TuneResult:
        limit = self.limit_bytes
        tried: dict[frozenset[str], TrialRecord] = {}
        plan = self.plan()
        if plan.feasible:
            selection = plan.plans
            if selection:
                reason = (f"planner: {_names(selection)} predicted {_mib(plan.predicted_bytes)} ≤ limit {_mib(limit)} "
                          f"(no config {_mib(plan.baseline_bytes)}) for ~{plan.cost_s * 1000:.0f} ms/step")
            else:
                reason = f"planner: no config predicted {_mib(plan.baseline_bytes)} ≤ limit {_mib(limit)}; verifying"
        else:
            selection = self.useful_plans()
            reason = (f"planner: even every plan is predicted at {_mib(plan.predicted_bytes)} > limit {_mib(limit)}; "
                      "trying every plan once to check")
        self._emit(Note(reason))
        used = 0
        while used < max_trials:
            record = self._trial(self.settings.target_batch, selection, "search", reason,
                                 self.predict(selection).peak_bytes, self.budget_bytes)
            used += 1
            tried[frozenset(selection)] = record
            if record.result.outcome in _FATAL_OUTCOMES:
                return self._finish("failed", f"the trial could not run: {record.result.error} "
                                              f"(log: {record.result.run_dir}/ort.log)")
            if record.fits:
                step = self._lighter(selection, tried)
            elif record.result.outcome in ("over_budget", "out_of_memory"):
                step = self._heavier(selection, tried)
            else:  # crashed or timed out: shown, and the search goes on without this selection
                self._emit(Note(f"trial {record.number} {record.outcome.replace('_', ' ')}; trying another selection"))
                step = self._heavier(selection, tried)
            if isinstance(step, _Stop):
                return self._stop(step)
            selection, reason = step
            if used < max_trials:
                self._emit(Note(reason))
        return self._stop(_Stop("max_trials", f"stopped after --max-trials {max_trials} search trials"))

    def _lighter(self, selection: tuple[str, ...], tried: Mapping[frozenset[str], TrialRecord]
                 ) -> tuple[tuple[str, ...], str] | _Stop:
        """After a fit: a cheaper selection still predicted to fit, or why there is none."""
        if not selection:
            return _Stop("verified", "no recompute needed at this batch")
        plan = self.plan()
        current = self.cost_of(selection)
        if plan.feasible and frozenset(plan.plans) not in tried and self.cost_of(plan.plans) < current:
            return plan.plans, (f"fits; recalibrated planner: {_names(plan.plans) or 'no config'} is cheaper and "
                                f"predicted {_mib(plan.predicted_bytes)} ≤ limit {_mib(self.limit_bytes)}")
        costs = self.costs()
        costliest = max(selection, key=lambda key: (costs.get(key, 0.0), key))
        lighter = tuple(key for key in selection if key != costliest)
        predicted = self.predict(lighter).peak_bytes
        if predicted <= self.limit_bytes and frozenset(lighter) not in tried:
            return lighter, (f"fits; trying without the costliest plan {_short(costliest)} "
                             f"(predicted {_mib(predicted)} ≤ limit {_mib(self.limit_bytes)})")
        why = "already tried" if frozenset(lighter) in tried else f"predicted {_mib(predicted)} > limit {_mib(self.limit_bytes)}"
        return _Stop("verified", f"nothing lighter to try (without {_short(costliest)}: {why})")

    def _heavier(self, selection: tuple[str, ...], tried: Mapping[frozenset[str], TrialRecord]
                 ) -> tuple[tuple[str, ...], str] | _Stop:
        """After an overshoot: a selection predicted to save more, or why there is none."""
        plan = self.plan()
        if plan.feasible and frozenset(plan.plans) not in tried and set(plan.plans) != set(selection):
            return plan.plans, (f"over; recalibrated planner: {_names(plan.plans)} predicted "
                                f"{_mib(plan.predicted_bytes)} ≤ limit {_mib(self.limit_bytes)}")
        candidate = list(selection)
        for key in self.useful_plans():  # largest saving first
            if key in candidate:
                continue
            candidate.append(key)
            if frozenset(candidate) in tried:
                continue
            predicted = self.predict(candidate).peak_bytes
            if predicted <= self.limit_bytes or len(candidate) == len(self.useful_plans()):
                return tuple(candidate), (f"over; adding {_short(key)}: {_names(candidate)} predicted {_mib(predicted)}"
                                          f" vs limit {_mib(self.limit_bytes)}")
        return _Stop("impossible", "every plan is on")

    def _stop(self, stop: _Stop) -> TuneResult:
        best = self.best()
        if stop.status == "impossible":
            assert self.model is not None
            largest = self.model.max_batch(self.limit_bytes, self.useful_plans())
            message = (f"batch {self.settings.target_batch} does not fit in {_mib(self.budget_bytes)} even with every "
                       f"plan; predicted to fit: batch {largest} with every plan")
            return self._finish("verified" if best is not None else "impossible", message, largest)
        if best is None:
            return self._finish("failed" if stop.status == "verified" else stop.status, f"{stop.message}; no verified config")
        return self._finish("verified" if stop.status == "verified" else stop.status, stop.message)

    def _finish(self, status: str, message: str, largest: int | None = None) -> TuneResult:
        best = self.best()
        if best is not None and status != "cancelled":
            message += f"; best verified: trial {best.number} ({_names(best.plans) or 'no config'})"
        return TuneResult(status, message, best, tuple(self.records), largest)

    # -- results ------------------------------------------------------------------------------

    def best(self) -> TrialRecord | None:
        """The verified config: fits at the target batch, lowest measured step time."""
        fitting = [r for r in self.records if r.fits and r.purpose != "calibration"
                   and r.batch_size == self.settings.target_batch]
        if not fitting:
            return None
        return min(fitting, key=lambda r: (r.step_s if r.step_s is not None else float("inf"), len(r.plans), r.number))

    def config_value(self, plans: Iterable[str], path: Path | None = None) -> str | None:
        """What ORTMODULE_MEMORY_OPT_CONFIG must hold for ``plans``: the string (<=1.18) or a JSON file written now (1.19)."""
        plans = tuple(plans)
        if not plans:
            return None
        entries = self.entries(plans)
        version = self.ort_version
        if not takes_json_file(version):
            return format_config_string(entries, version)
        name = Path(self.settings.recipe.partition(":")[0]).stem.replace(".", "-") or "recipe"
        path = path or self.settings.runs_dir / f"tune-{name}-b{self.settings.target_batch}.json"
        return str(write_json_config(entries, path, version, overwrite=True))

    def export_lines(self, plans: Iterable[str] | None = None) -> list[str]:
        """The shell lines that apply ``plans`` (default: the best verified config)."""
        if plans is None:
            best = self.best()
            if best is None:
                return []
            plans = best.plans
        value = self.config_value(plans)
        if value is None:
            return ["unset ORTMODULE_MEMORY_OPT_CONFIG  # no recompute needed"]
        return [export_line(value)]

    def save_config(self, plans: Iterable[str], path: Path | None = None) -> Path:
        """Write the config for ``plans``: JSON (ORT 1.19) or the string in a text file (<=1.18)."""
        plans = tuple(plans)
        if not plans:
            raise TuneError("nothing to save: the selection enables no plan")
        if takes_json_file(self.ort_version):
            return Path(self.config_value(plans, path) or "")
        name = Path(self.settings.recipe.partition(":")[0]).stem.replace(".", "-") or "recipe"
        target = path or self.settings.runs_dir / f"tune-{name}-b{self.settings.target_batch}.txt"
        target.write_text((self.config_value(plans) or "") + "\n")
        return target.resolve()

    def summary(self, result: TuneResult) -> dict[str, Any]:
        """The search result for ``--json``."""
        best = result.best
        return {
            "status": result.status, "message": result.message, "recipe": self.settings.recipe,
            "options": dict(self.settings.options), "target_batch": self.settings.target_batch,
            "budget_bytes": self.budget_bytes, "limit_bytes": self.limit_bytes,
            "device": self.device_name, "ort_version": str(self.ort_version) if self.calibration else None,
            "largest_batch": result.largest_batch,
            "best": None if best is None else {
                "trial": best.number, "plans": list(best.plans), "config": list(best.result.config),
                "peak_bytes": best.peak_bytes, "median_step_s": best.step_s, "run_dir": best.result.run_dir,
            },
            "export": self.export_lines() if best is not None else [],
            "journal": str(self.journal.path),
            "trials": [{
                "number": r.number, "purpose": r.purpose, "batch_size": r.batch_size, "plans": list(r.plans),
                "outcome": r.outcome, "peak_bytes": r.peak_bytes, "predicted_bytes": r.predicted_bytes,
                "median_step_s": r.step_s, "reason": r.reason, "reused": r.result.reused, "run_dir": r.result.run_dir,
            } for r in result.trials],
        }


# ----------------------------------------------------------------------------- adapters


@dataclass(frozen=True)
class _Stop:
    """Why the search loop ends: status (verified, impossible, max_trials) and a line."""

    status: str
    message: str


class _CancelAwareJournal(Journal):
    """The journal, but a trial killed by ``Tuner.cancel`` is recorded as cancelled, not crashed."""

    def __init__(self, path: Path, cancelled: threading.Event) -> None:
        super().__init__(path)
        self._cancelled = cancelled

    def append(self, record: Mapping[str, Any]) -> None:
        if self._cancelled.is_set() and record.get("status") != "ok":
            record = {**record, "status": "cancelled", "outcome": "cancelled",
                      "error": "cancelled by the user (memopt tune); the child was killed"}
        super().append(record)


def _kill_trial_children(runs_dir: Path) -> list[int]:
    """Kill the process groups of this process's ``memopt._child`` children working under ``runs_dir``.

    ``memopt.runs.launch`` starts each child in its own session (group id = pid) and, when the
    child dies, collects whatever it wrote: the blocked ``run_trial`` returns normally.
    """
    me, killed = os.getpid(), []
    marker = str(runs_dir)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent != me:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        words = [a.decode(errors="replace") for a in argv]
        if _CHILD_MODULE in words and any(w.startswith(marker) for w in words):
            try:
                os.killpg(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _device_name(trial: TrialResult) -> str:
    try:
        record = json.loads((Path(trial.run_dir) / RECORD_NAME).read_text())
        return str(record["result"].get("cuda_device_name") or "CUDA")
    except (OSError, ValueError, KeyError, TypeError):
        return "CUDA"


def _modules(modules: Iterable[str]) -> tuple[str, ...]:
    import re

    return tuple(dict.fromkeys(re.sub(r"(?<=\.)\d+(?=\.|$)", "*", m) for m in modules))


def _mib(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 2**20:,.1f} MiB"


def _short(key: str) -> str:
    return key.removesuffix(":1:-1")


def _names(plans: Iterable[str]) -> str:
    return ", ".join(_short(p) for p in plans)
