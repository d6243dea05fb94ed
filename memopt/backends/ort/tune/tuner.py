"""One tuning session: set up once, then any mix of predictions, manual trials and searches.

    prepare (probe + scan) -> calibrate (no-config trials at two small batches) -> search:
    ``policy.next_step`` picks each trial, the memory model learns from each result

The session runs trials only through a ``TrialRunner`` (real child processes by default;
tests pass a fake) wrapped so that every finished trial is journaled the moment it ends,
and ``resume`` reuses finished trials of an earlier session. ``cancel()`` may be called
from any thread: it sets the event the running launch watches, which kills that child's
process group, and the search ends as cancelled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from memopt.backends.ort import ConfigEntry, OrtVersion, PlanKey, plan_config_entries, plan_keys, takes_json_file
from memopt.backends.ort.applied import plans_left_off
from memopt.backends.ort.calibrate import ScannedGraph, calibrate_on, prepare_target
from memopt.backends.ort.predict.calibration import (
    Calibration,
    DoesNotFit,
    default_calibration_batches,
    largest_under_prediction,
    learn_from_trial,
    require_ran,
)
from memopt.backends.ort.predict.memory_model import MemoryModel, ModelError, Prediction
from memopt.backends.ort.predict.planner import PlanResult
from memopt.backends.ort.scan import ScanReport, fold_layers
from memopt.backends.ort.target import ProbedGraph, graph_of_run
from memopt.backends.ort.trials import (
    JournaledRunner,
    RealTrialRunner,
    StackVersions,
    TrialRunner,
    TrialSpec,
    stack_versions,
)
from memopt.backends.ort.tune.export import ConfigExport, plan_export, write_config
from memopt.backends.ort.tune.policy import (
    CONFIG_SPREAD,
    Attempt,
    KeptRoom,
    Room,
    SearchState,
    Stop,
    best_verified,
    names,
    next_step,
)
from memopt.core import RunStatus
from memopt.core.memory import Phase
from memopt.core.trial import Outcome, TrialResult
from memopt.errors import MemoptError
from memopt.predict import FixedPeaks, RunSpread, budget_limit
from memopt.run import Journal, require_budget, resolve_budget
from memopt.tune.events import (
    Note,
    PlanRow,
    Purpose,
    Ready,
    SearchFinished,
    SearchStatus,
    StageFinished,
    StageStarted,
    TrialFinished,
    TrialRecord,
    TrialStarted,
    TuneEvent,
    TuneResult,
)
from memopt.tune.session import SessionEvents
from memopt.tune.settings import TuneCancelled, TuneError, TuneSettings
from memopt.units import format_cuda_memory, format_mib

__all__ = ["Tuner"]

_T = TypeVar("_T")


class Tuner(SessionEvents):
    """One tuning session; views subscribe to its events and call its methods from any thread."""

    def __init__(
        self,
        settings: TuneSettings,
        on_event: Callable[[TuneEvent], None] | None = None,
        *,
        runner: TrialRunner | None = None,
        versions: StackVersions | None = None,
        prepare: Callable[[threading.Event], ScannedGraph] | None = None,
    ) -> None:
        """``versions``: the stack, where the caller already asked for it; ``runner`` and ``prepare``
        replace the real child processes (tests)."""
        super().__init__(on_event)
        self.settings = replace(settings, run=replace(settings.run, runs_dir=Path(settings.run.runs_dir).resolve()))
        self._lock = threading.Lock()
        self.journal = Journal.in_folder(self.settings.run.runs_dir)
        self._runner = runner
        self._prepare = prepare
        self.versions = versions
        self.prepared: ScannedGraph | None = None
        self.calibration: Calibration | None = None
        self.model: MemoryModel | None = None
        self.budget_bytes: int = 0
        self.device_name: str = "CPU"
        self.records: list[TrialRecord] = []
        self.ready: Ready | None = None
        self._numbers = 0
        self._probed: TrialResult | None = None  # the calibration trial that was the graph probe
        self.kept_room: KeptRoom | None = None  # room for the noise, learnt by the calibration

    # -- set-up -----------------------------------------------------------------------

    @property
    def is_ready(self) -> bool:
        return self.ready is not None

    def setup(self) -> Ready:
        """Probe, scan and calibrate (emitting progress); idempotent."""
        if self.ready is not None:
            return self.ready
        s, run = self.settings, self.settings.run
        self.versions = self.versions or stack_versions(run.python, run.timeout_s)
        if self.versions.ort_version is None:
            raise TuneError("the ORT training stack cannot run: onnxruntime-training is not installed")
        try:
            require_budget(s.budget, run.device, self.versions.cuda)
        except MemoptError as err:
            raise TuneError(str(err)) from None
        self._check_cancel()
        prepared = self._stage(
            "probe",
            f"Exporting {run.target} under ORTModule (no-config probe at batch {self._probe_batch}) and scanning…",
            self._prepare_target,
            lambda p: (
                f"training graph {p.loaded.graph_path.name}, {len(p.loaded.graph.nodes)} nodes; "
                f"{len(p.report.patterns)} recompute plans (ORT {p.ort_version}'s rules)"
            ),
        )
        self.prepared = prepared
        for line in prepared.refused:
            self._emit(Note(line))
        self._check_cancel()
        self.calibration = self._calibrate(prepared)
        self.model = self.calibration.model
        try:
            self.budget_bytes = resolve_budget(s.budget, self.calibration.device, self.calibration.device_total)
        except MemoptError as err:
            raise TuneError(str(err)) from None
        self.ready = Ready(
            target=run.target,
            options=dict(run.options),
            runtime=f"ORT {prepared.ort_version}"
            + (f" ({self.versions.ort_package})" if self.versions.ort_package else "")
            + f" · torch {self.versions.torch_version}",
            device=self.device_name,
            budget_bytes=self.budget_bytes,
            limit_bytes=self.limit_bytes,
            target_batch=s.target_batch,
            rows=self.rows(),
            runs_dir=run.runs_dir,
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

    def _stage(self, stage: str, message: str, work: Callable[[], _T], done: Callable[[_T], str]) -> _T:
        self._emit(StageStarted(stage, message))
        started = time.monotonic()
        value = work()
        self._emit(StageFinished(stage, done(value), time.monotonic() - started))
        return value

    @property
    def _calibration_batches(self) -> tuple[int, ...]:
        s = self.settings
        return tuple(dict.fromkeys(s.ort.calibration_batches or default_calibration_batches(s.target_batch)))

    @property
    def _probe_batch(self) -> int:
        """The graph probe runs at the first calibration batch (unless told otherwise): it is that
        calibration run too, so a search needs the probe and its verifying trials only."""
        return self.settings.ort.probe_batch or self._calibration_batches[0]

    def _prepare_target(self) -> ScannedGraph:
        try:
            if self._prepare is not None:
                return self._prepare(self._cancel)
            loaded, probe_batch = None, self._probe_batch
            if probe_batch in self._calibration_batches:
                loaded = self._probe_by_calibration(probe_batch)
                if loaded is None and self._probed is not None and self._probed.status is RunStatus.OUT_OF_MEMORY:
                    probe_batch = max(1, probe_batch // 2)
            return prepare_target(
                self.settings.run,
                probe_batch=probe_batch,
                versions=self.versions,
                loaded=loaded,
                cancel=self._cancel,
            )
        except MemoptError:
            self._check_cancel()  # a probe killed by cancel() is a cancel, not a failure
            raise

    def _probe_by_calibration(self, batch: int) -> ProbedGraph | None:
        """The no-config calibration trial at ``batch``, run with ORTModule's graphs saved: the
        graph it saved, or None where it saved none (it died before ORTModule built its session,
        or the journal's trial it reused kept no graphs) and a probe of its own must run."""
        record = self._trial(
            batch, (), Purpose.CALIBRATION, f"graph probe and no-config calibration at batch {batch}", None, None, True
        )
        self._probed = record.result
        if record.result.status is not RunStatus.OUT_OF_MEMORY:
            # A job that failed fails again: its own error ends the session, not a second run of it.
            require_ran(record.result)
        try:
            return graph_of_run(self.settings.run.target, Path(record.result.run_dir), record.result.ort_version)
        except (MemoptError, OSError):
            return None

    def _calibrate(self, prepared: ScannedGraph) -> Calibration:
        """``pipeline.calibrate_on`` with this session's runner: each calibration trial is an event."""
        s = self.settings
        batches = self._calibration_batches
        self._emit(
            StageStarted(
                "calibrate",
                f"Calibrating the memory model: no-config trials at batch {' and '.join(map(str, batches))}"
                f"{' (the probe was the first)' if self._probed is not None else ''}"
                f"{f', then {s.repeats} runs of no config at the target batch {s.target_batch}' if s.repeats > 1 else ''}…",
            )
        )
        started = time.monotonic()

        def run(batch: int, plans: tuple[PlanKey, ...]) -> TrialResult:
            reason = (
                f"calibration with every plan at batch {batch} (no config ran out of memory)"
                if plans
                else f"no-config calibration at batch {batch}"
            )
            done = sum(r.batch_size == batch and r.plans == plans for r in self.records)
            if batch == s.target_batch or done:
                reason += f" to measure its run-to-run noise (run {done + 1} of {s.repeats})"
            # No config at the target is the no-config answer's run too: judged against the
            # budget where it is bytes (a share of the device is judged once the device is known).
            answer = batch == s.target_batch and not plans
            budget = s.budget.bytes if answer and s.budget is not None else None
            record = self._trial(batch, plans, Purpose.CALIBRATION, reason, None, budget)
            if record.result.device == "cuda":
                self.device_name = record.result.cuda_device_name or "CUDA"
            return record.result

        calibration = calibrate_on(
            prepared,
            run,
            s.target_batch,
            runs_dir=s.run.runs_dir,
            journal=self.journal,
            calibration_batches=batches,
            resume=s.resume,
            ran={(self._probed.batch_size, ()): self._probed} if self._probed is not None else None,
            runs=s.repeats,
        )
        model = calibration.model
        spread = RunSpread.of_trials(calibration.trials)
        repeated = max(
            calibration.trials, key=lambda t: (sum(t.key == o.key for o in calibration.trials), t.batch_size)
        )
        self.kept_room = KeptRoom(
            spread,
            largest_under_prediction(model),
            sum(t.key == repeated.key for t in calibration.trials),
            repeated.batch_size,
            # One run of a config is a verdict where ``--repeats`` is 1: no spread for it to clear.
            CONFIG_SPREAD * max(t.memory.device_peak or 0 for t in calibration.trials if t.key == repeated.key)
            if s.repeats > 1
            else 0.0,
            model.largest_buffer(s.target_batch),
        )
        self._emit(
            StageFinished(
                "calibrate",
                f"model: {model.describe()}; recompute costs: {calibration.cost_source}"
                + (f"; {calibration.arena_check}" if calibration.arena_check else "")
                + f"; {self.kept_room.describe()}",
                time.monotonic() - started,
            )
        )
        return calibration

    # -- the model's view -----------------------------------------------------------------

    @property
    def limit_bytes(self) -> float:
        return budget_limit(self.budget_bytes, self.settings.margin)

    @property
    def ort_version(self) -> OrtVersion:
        return self._calibrated().ort_version

    def _calibrated(self) -> Calibration:
        if self.calibration is None:
            raise TuneError("the session is not set up yet")
        return self.calibration

    def _model(self) -> MemoryModel:
        if self.model is None:
            raise TuneError("the session is not set up yet")
        return self.model

    @property
    def report(self) -> ScanReport:
        """The scan of the target's training graph."""
        if self.prepared is None:
            raise TuneError("the session is not set up yet")
        return self.prepared.report

    def costs(self) -> dict[PlanKey, float]:
        return self._calibrated().costs_s

    def rows(self) -> tuple[PlanRow, ...]:
        """The plans at the target batch, largest saving first."""
        model, batch, costs = self._model(), self.settings.target_batch, self.costs()
        honoured = self.ort_version.minor <= 16
        rows = []
        for pattern in self.report.patterns:
            raw = model.raw_saving(pattern.key, batch)
            rows.append(
                PlanRow(
                    key=pattern.key,
                    subgraph=pattern.subgraph,
                    kind=pattern.kind.label,
                    frequency=pattern.frequency,
                    saving_bytes=raw,
                    effective_bytes=model.factor(pattern.key) * raw,
                    cost_s=costs.get(pattern.key, 0.0),
                    modules=fold_layers(pattern.modules),
                    counts_honoured=honoured,
                )
            )
        rows.sort(key=lambda r: (-r.saving_bytes, r.key))
        return tuple(rows)

    def predict(self, plans: Iterable[str], batch_size: int | None = None) -> Prediction:
        return self._model().predict(batch_size or self.settings.target_batch, plan_keys(plans))

    def cost_of(self, plans: Iterable[str]) -> float:
        costs = self.costs()
        return sum(costs.get(key, 0.0) for key in plan_keys(plans))

    def search_state(self, trials_used: int = 0, max_trials: int | None = None) -> SearchState:
        """What the policy knows now: the model, costs, budget and every trial at the target batch."""
        calibration = self._calibrated()
        results = [r.result for r in self.records]
        # The calibration's no-config runs at the target batch are runs of the no-config answer.
        attempts = tuple(
            _attempt(r) if r.purpose is not Purpose.CALIBRATION else _attempt(r, self.budget_bytes)
            for r in self.records
            if (r.purpose is not Purpose.CALIBRATION or (not r.plans and r.result.ran))
            and r.batch_size == self.settings.target_batch
            and r.outcome is not Outcome.CANCELLED
        )
        return SearchState(
            model=self._model(),
            costs_s=self.costs(),
            target_batch=self.settings.target_batch,
            budget_bytes=self._search_budget(attempts),
            margin=self.settings.margin,
            ort_version=calibration.ort_version,
            max_trials=max_trials or self.settings.max_trials,
            baseline_step_s=calibration.baseline_step_s,
            attempts=attempts,
            trials_used=trials_used,
            fixed_peaks=FixedPeaks.of_trials(results),
            spread=RunSpread.of_trials(results),
            repeats=self.settings.repeats,
            kept_room=self.kept_room,
        )

    def _search_budget(self, attempts: Iterable[Attempt]) -> int:
        """The budget the search plans against: the user's, or less where trials at the target
        batch died of memory (a real limit under the budget: a GPU with less free memory, a
        cgroup). The device ran out below the lowest peak the model now predicts for those
        trials, and the lowest it can reach is every plan's: the search plans for the middle,
        so each death halves the range the limit lies in, however far off the predictions are."""
        died = [self.predict(a.plans).peak_bytes for a in attempts if a.outcome is Outcome.OUT_OF_MEMORY]
        if not died:
            return self.budget_bytes
        floor = self.predict(tuple(p.key for p in self.report.patterns)).peak_bytes
        cap = (min(died) + floor) / 2 if floor < min(died) else floor
        return min(self.budget_bytes, int(cap / (1 - self.settings.margin)))

    def plan(self) -> PlanResult:
        return self.search_state().plan()

    def useful_plans(self) -> tuple[PlanKey, ...]:
        """Plans the model expects to lower the peak at the target batch, largest first."""
        return self.search_state().useful_plans()

    def entries(self, plans: Iterable[str]) -> tuple[ConfigEntry, ...]:
        return plan_config_entries(plan_keys(plans))

    # -- trials ---------------------------------------------------------------------------

    def run_trial(
        self, plans: Iterable[str], purpose: Purpose = Purpose.MANUAL, reason: str = "your selection"
    ) -> TrialRecord:
        """A trial at the target batch with ``plans`` on; the model learns from it."""
        self.setup()
        selection = tuple(dict.fromkeys(plan_keys(plans)))
        predicted = self.predict(selection).peak_bytes
        return self._trial(self.settings.target_batch, selection, purpose, reason, predicted, self.budget_bytes)

    def _trial_runner(self) -> TrialRunner:
        s = self.settings
        assert self.versions is not None
        inner = self._runner or RealTrialRunner(s.run.runs_dir, self.versions)
        return JournaledRunner(inner, self.journal, self.versions, s.resume)

    def _trial(
        self,
        batch: int,
        plans: tuple[PlanKey, ...],
        purpose: Purpose,
        reason: str,
        predicted: float | None,
        budget: int | None,
        save_onnx: bool = False,
    ) -> TrialRecord:
        self._check_cancel()
        s = self.settings
        with self._lock:
            self._numbers += 1
            number = self._numbers
        self._emit(TrialStarted(number, purpose, batch, plans, predicted, reason, s.run.steps, s.run.timeout_s))
        repeat = sum(r.batch_size == batch and frozenset(r.plans) == frozenset(plans) for r in self.records)
        spec = TrialSpec(
            s.run,
            batch,
            self.entries(plans),
            save_onnx=save_onnx,
            repeat=repeat,
            # The calibration's costs come from its first run's node times; a repeat measures noise.
            profile=purpose is Purpose.CALIBRATION and not repeat,
        )
        result = self._trial_runner()(
            spec,
            budget_bytes=budget,
            predicted_peak_bytes=int(predicted) if predicted is not None else None,
            cancel=self._cancel,
        )
        record = TrialRecord(number, purpose, plans, predicted, reason, result, plans_left_off(result, plans))
        self.records.append(record)
        self._emit(TrialFinished(record, self._learn(record)))
        if record.outcome is Outcome.CANCELLED:
            raise TuneCancelled("cancelled")
        return record

    def _learn(self, record: TrialRecord) -> str:
        """Recalibrate on a finished trial; one line saying what happened."""
        result = record.result
        reused = " (reused from the journal)" if result.reused else ""
        if record.outcome is Outcome.CANCELLED:
            return f"trial {record.number} cancelled: its child process was killed"
        if not result.ran or not result.memory.peak_bytes:
            if record.outcome.fatal or (
                record.purpose is Purpose.CALIBRATION and record.outcome is not Outcome.OUT_OF_MEMORY
            ):
                # The session ends on it and says why once, with the log.
                return f"trial {record.number}: {record.outcome.label}{reused} (log: {result.run_dir}/ort.log)"
            return f"trial {record.number}: {record.outcome.label}{reused}: {result.error or 'no measurement'}"
        line = f"trial {record.number}: {record.outcome.label}{reused}, {_peak_judged(result)}"
        if len(result.ranks) > 1:
            line += f" (highest of {len(result.ranks)} ranks)"
        if result.memory.on_cuda and result.memory.cuda_reserved_bytes is not None:
            line += "; on the card " + format_cuda_memory(
                result.memory.whole_run_peak, result.memory.cuda_reserved_bytes, result.memory.cuda_outside_bytes
            )
        if result.at_the_edge:
            line += f"; {result.at_the_edge}"
        if result.median_step_s:
            line += f", {result.median_step_s:.2f} s/step{_spread(result.measured_step_times_s)}"
        if result.start_up_binds:
            line += f"; {result.start_up_binds}"
        if record.predicted_bytes is not None:
            line += f" (predicted {format_mib(record.predicted_bytes)}, {(record.prediction_error or 0) * 100:+.1f}%)"
        if record.left_off:
            line += f"; ORT left {names(record.left_off)} OFF"
        if record.fits and record.purpose is not Purpose.CALIBRATION and self.calibration is not None:
            room = self.room(record)
            if room is not None:
                line += f"; {room.describe()}" + (f": {room.verdict}" if room.verdict else "")
        if self.model is not None and record.purpose is not Purpose.CALIBRATION:
            try:
                learnt = learn_from_trial(self.model, result, record.plans)
            except ModelError:
                return line
            if learnt is not None:
                self.model = learnt
                line += f"; model recalibrated: {self.model.describe()}"
        return line

    # -- auto-search ------------------------------------------------------------------------

    def auto_search(self, max_trials: int | None = None) -> TuneResult:
        """Search for the cheapest verified config; never more than ``max_trials`` search trials."""
        try:
            self.setup()
            stop = self._search(max_trials or self.settings.max_trials)
            result = self._finish(stop.status, stop.message, stop.largest_batch)
        except TuneCancelled:
            result = self._finish(
                SearchStatus.CANCELLED,
                "cancelled: the running trial was stopped; the journal keeps every finished trial",
            )
        except DoesNotFit as err:
            result = self._finish(SearchStatus.IMPOSSIBLE, f"{err}: no batch fits", 0)
        self._emit(SearchFinished(result))
        return result

    def _search(self, max_trials: int) -> Stop:
        used = 0
        while True:
            step = next_step(self.search_state(used, max_trials))
            if isinstance(step, Stop):
                # Every plan is not enough at the target batch (not start-up binding, which has no
                # largest batch), or the trials ran out with every one of them dead of memory.
                state = self.search_state()
                died = any(a.outcome is Outcome.OUT_OF_MEMORY for a in state.attempts)
                if (step.status is SearchStatus.IMPOSSIBLE and step.largest_batch is not None) or (
                    step.status is SearchStatus.MAX_TRIALS and died and self.best() is None
                ):
                    return self._largest_that_runs(step)
                return step
            self._emit(Note(step.reason))
            self._trial(
                self.settings.target_batch,
                step.plans,
                Purpose.SEARCH,
                step.reason,
                self.predict(step.plans).peak_bytes,
                self.budget_bytes,
            )
            used += not step.repeat

    def _largest_that_runs(self, stop: Stop) -> Stop:
        """Nothing fits at the target batch even with every plan: the largest batch that does,
        checked by runs with every plan on, bisecting between the largest batch known to fit
        (a calibration run within the budget counts) and the smallest known not to, to within
        an eighth. A run that dies of memory (or goes over the budget) also caps the limit at
        what it was predicted to need, so the model's largest batch under that cap may come
        lower than the middle."""
        every = tuple(p.key for p in self.report.patterns)
        target, limit = self.settings.target_batch, self.search_state().limit_bytes
        fitting = [r for r in self.records if r.batch_size < target and self._checked(r)]
        good = max(fitting, key=lambda r: r.batch_size, default=None)
        bad = target
        batch = self._model().max_batch(limit, every, ceiling=target - 1)
        while True:
            low = good.batch_size if good is not None else 0
            if bad - low <= max(1, low // 8):
                break
            if not low < batch < bad:
                batch = (low + bad + 1) // 2
            predicted = self.predict(every, batch).peak_bytes
            reason = f"batch {target} does not fit: checking batch {batch} with every plan"
            self._emit(Note(reason))
            record = self._trial(batch, every, Purpose.SEARCH, reason, predicted, self.budget_bytes)
            if self._checked(record):
                good = record
            elif record.fits or record.outcome.does_not_fit:
                bad, limit = batch, min(limit, predicted)
            else:
                return Stop(
                    SearchStatus.FAILED,
                    f"batch {target} does not fit even with every plan; the check at batch {batch} "
                    f"{record.outcome.label}: {record.result.error}",
                )
            lower = self._model().max_batch(limit, every, ceiling=bad - 1)
            batch = min(lower, (low + bad) // 2) if good is None else (good.batch_size + bad) // 2
        head = (
            f"batch {target} does not fit in {format_mib(self.budget_bytes)} even with every plan"
            if stop.status is SearchStatus.IMPOSSIBLE
            else f"{stop.message}: every trial at batch {target} ran out of memory"
        )
        if good is None:
            return Stop(stop.status, f"{head}; nor does batch 1 with every plan", 0)
        return Stop(
            stop.status,
            f"{head}; fits up to batch {good.batch_size} (checked: trial {good.number}"
            f"{', with every plan' if good.plans else ', no config'})",
            good.batch_size,
        )

    def _checked(self, record: TrialRecord) -> bool:
        """Ran within the budget, and under the limit by more than the run-to-run noise: one
        run of a batch below the target, which bounds what fits rather than verifying a config."""
        return record.result.ran and self.search_state().checked_alone(_attempt(record))

    def room(self, record: TrialRecord) -> Room | None:
        """How far ``record``'s whole run is under the limit, against its binding phase's spread;
        a run below the target batch by itself."""
        state = self.search_state()
        if record.batch_size != self.settings.target_batch:
            state = state.alone()
        return state.room(_attempt(record))

    def _finish(self, status: SearchStatus, message: str, largest: int | None = None) -> TuneResult:
        best = self.best()
        if best is not None and status is not SearchStatus.CANCELLED:
            room = self.room(best)
            message += (
                f"; best verified: trial {best.number} ({names(best.plans) or 'no config'}; {self.best_rule()})"
                + (f"; {room.describe()}" if room is not None else "")
            )
            ran = next(r for r in self.records if r.number == best.number)
            if ran.left_off:
                message += f"; ORT left {names(ran.left_off)} OFF in that trial: not in the final config"
        return TuneResult(status, message, best, tuple(self.records), largest)

    # -- results ------------------------------------------------------------------------------

    def best(self) -> TrialRecord | None:
        """The verified config: the cost model's cheapest of those that fit, unless measured steps differ beyond their spread."""
        if self.calibration is None:
            return None
        best = best_verified(self.search_state())
        record = next((r for r in self.records if best is not None and best.attempt.number == r.number), None)
        # The final config holds only what ORT applied: an entry it left OFF saved nothing.
        return replace(record, plans=record.applied_plans, left_off=()) if record is not None else None

    def best_rule(self) -> str | None:
        """Which rule chose the verified config among those that fit."""
        if self.calibration is None:
            return None
        best = best_verified(self.search_state())
        return best.rule if best is not None else None

    def export(self, plans: Iterable[str], path: Path | None = None) -> ConfigExport:
        """The config that enables ``plans``, and where it goes; nothing is written."""
        s = self.settings
        return plan_export(self.entries(plans), self.ort_version, s.run.runs_dir, s.run.target, s.target_batch, path)

    def export_lines(self, plans: Iterable[str] | None = None) -> list[str]:
        """The shell lines that apply ``plans`` (default: the best verified config); nothing is written."""
        if plans is None:
            best = self.best()
            if best is None:
                return []
            plans = best.plans
        return self.export(plans).lines

    def write_export_file(self, plans: Iterable[str]) -> Path | None:
        """Write the file the export line of ``plans`` names (ORT 1.19's JSON), if it names one."""
        selection = tuple(plans)
        if not selection or not takes_json_file(self.ort_version):
            return None
        return write_config(self.export(selection))

    def save_config(self, plans: Iterable[str], path: Path | None = None) -> Path:
        """Write the config for ``plans``: JSON (ORT 1.19) or the string in a text file (<=1.18)."""
        selection = tuple(plans)
        if not selection:
            raise TuneError("nothing to save: the selection enables no plan")
        return write_config(self.export(selection, path))

    def summary(self, result: TuneResult) -> dict[str, Any]:
        """The search result for ``--json``."""
        best = result.best
        return {
            "status": str(result.status),
            "message": result.message,
            "recipe": self.settings.run.target.spec,
            "options": dict(self.settings.run.options),
            "target_batch": self.settings.target_batch,
            "budget_bytes": self.budget_bytes,
            "limit_bytes": self.limit_bytes,
            "device": self.device_name,
            "ort_version": str(self.ort_version) if self.calibration else None,
            "largest_batch": result.largest_batch,
            "kept_room_bytes": self.search_state().room_bytes if self.calibration else None,
            "kept_room": self.kept_room.describe(self.search_state().spread) if self.kept_room else None,
            "best": None
            if best is None
            else {
                "trial": best.number,
                "plans": list(best.plans),
                "config": list(best.result.config),
                **_ort_plans(best.result),
                "peak_bytes": best.peak_bytes,
                "whole_run_peak_bytes": best.result.memory.whole_run_peak,
                **_cuda_fields(best.result),
                "binding_phase": _phase(best.result),
                "median_step_s": best.step_s,
                **_room_fields(self.room(best)),
                "chosen_by": self.best_rule(),
                "run_dir": best.result.run_dir,
            },
            "export": self.export_lines() if best is not None else [],
            "journal": str(self.journal.path),
            "trials": [
                {
                    "number": r.number,
                    "purpose": str(r.purpose),
                    "batch_size": r.batch_size,
                    "plans": list(r.plans),
                    **_ort_plans(r.result),
                    "outcome": str(r.outcome),
                    "peak_bytes": r.peak_bytes,
                    "whole_run_peak_bytes": r.result.memory.whole_run_peak,
                    **_cuda_fields(r.result),
                    "binding_phase": _phase(r.result),
                    "ranks": [{"rank": k.get("rank"), "peak_bytes": k.get("peak_bytes")} for k in r.result.ranks],
                    "predicted_bytes": r.predicted_bytes,
                    "median_step_s": r.step_s,
                    "reason": r.reason,
                    "reused": r.result.reused,
                    "run_dir": r.result.run_dir,
                }
                for r in result.trials
            ],
        }


def _room_fields(room: Room | None) -> dict[str, Any]:
    """How much room the verified config leaves under the limit, for ``--json``."""
    if room is None:
        return {}
    return {"room_bytes": room.under_limit_bytes, "spread_bytes": room.spread_bytes, "spread": room.spread_line}


def _attempt(record: TrialRecord, budget_bytes: int | None = None) -> Attempt:
    """A trial as the policy sees it; ``budget_bytes``: judged against it (a calibration run was
    judged against none)."""
    result = record.result if budget_bytes is None else record.result.judged(budget_bytes)
    return Attempt(
        plan_keys(record.plans),
        result.outcome,
        record.step_s,
        plan_keys(record.left_off),
        _error_line(result),
        record.number,
        result.measured_step_times_s,
        result.memory.fixed_floor,
        result.memory.device_peak,
        result.memory.binding_phase or Phase.START_UP,
        # CPU runs measure the exit where the job ends by itself; memopt ended this one.
        result.memory.memory_kind == "rss" and result.memory.exit_peak_bytes is None,
    )


def _peak_judged(result: TrialResult) -> str:
    """The peak a trial is judged on, and the steps' where they differ: an over-budget line
    names the figure that was over (on CUDA the line goes on with what the card held)."""
    memory = result.memory
    steps = f"peak {format_mib(memory.peak_bytes)}"
    judged = memory.whole_run_peak
    if memory.on_cuda or judged is None or memory.peak_bytes is None or judged == memory.peak_bytes:
        return steps
    over = result.outcome is Outcome.OVER_BUDGET and result.budget_bytes is not None
    return (
        f"whole-run peak {format_mib(judged)}{f' > budget {format_mib(result.budget_bytes)}' if over else ''} "
        f"(the {memory.binding_phase}'s; the steps' {steps})"
    )


def _ort_plans(result: TrialResult) -> dict[str, list[str]]:
    """What ORT's Plan table said of a trial's config: the plans it ran ON, the entries it left OFF."""
    return {"plans_on": list(result.plans_on), "plans_off": list(result.plans_off)}


def _phase(result: TrialResult) -> str | None:
    phase = result.memory.binding_phase
    return str(phase) if phase else None


def _spread(times: tuple[float, ...]) -> str:
    return f" (spread {max(times) - min(times):.2f} s over {len(times)} steps)" if len(times) > 1 else ""


def _error_line(result: TrialResult) -> str | None:
    if result.error is None:
        return None
    return f"{result.error} (log: {result.run_dir}/ort.log)"


def _cuda_fields(result: TrialResult) -> dict[str, Any]:
    """What ran out on the card, in its parts, for ``--json`` (a CPU trial has none of them)."""
    memory = result.memory
    if not memory.on_cuda:
        return {}
    return {
        "device_peak_bytes": memory.device_peak,
        "cuda_reserved_bytes": memory.cuda_reserved_bytes,
        "cuda_outside_bytes": memory.cuda_outside_bytes,
        "cuda_alloc_retries": memory.cuda_alloc_retries,
        "at_the_edge": memory.at_the_edge,
    }
