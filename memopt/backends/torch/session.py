"""The torch back end's tuning session for the TUI: ``tune --backend torch``'s steps, told as events.

Set-up is ``plan_torch`` (scan, the run or runs without recompute, the model's choice); the
search is ``verify_torch`` (the choice run at the target batch, and once more where it is over);
a trial of the user's selection is one more run. Each run is a ``TrialRecord`` the TUI shows as
it shows ORT's: its plans are the torch plans' text (``blocks.*: *``), its result the run's
status and peak. The selection's predicted peak is the peak model's where it has played that
policy at the target batch, else the prediction without recompute less the scan's savings of
each plan alone (a fake-tensor play takes seconds at base size: too slow for a key press).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from memopt.backends.torch.predict import plan_saving, policy_saving
from memopt.backends.torch.simulate import SimulatedPeak
from memopt.backends.torch.trial import (
    allocator_env,
    export_line,
    on_cuda,
    policy_path,
    run_torch_trial,
    trial_export_line,
)
from memopt.backends.torch.tune import TorchPlan, TorchTuneResult, plan_torch, verify_torch
from memopt.core import RunStatus
from memopt.core.plan import PlanName
from memopt.core.trial import Outcome, TrialResult
from memopt.recompute import RecomputePlan, RecomputePolicy
from memopt.run.files import replace_atomically
from memopt.run.journal import Journal
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
from memopt.units import format_bytes, format_compared

__all__ = ["TorchTuner"]

_NONE = RecomputePolicy(())


@dataclass(frozen=True)
class _Prediction:
    peak_bytes: float
    baseline_bytes: float


class TorchTuner(SessionEvents):
    """One tuning session on the torch back end (a ``memopt.tune.session.TuningSession``)."""

    def __init__(self, settings: TuneSettings, on_event: Callable[[TuneEvent], None] | None = None) -> None:
        super().__init__(on_event)
        self.settings = settings
        self.journal = Journal.in_folder(settings.run.runs_dir)
        self.ready: Ready | None = None
        self.budget_bytes = 0
        self.plan: TorchPlan | None = None
        self._rows: tuple[PlanRow, ...] = ()  # the plan's rows at the target batch, once it is set up
        self.records: list[TrialRecord] = []
        self._trials: dict[int, TrialResult] = {}  # by record number
        self._lock = threading.Lock()
        self._searched: TorchTuneResult | None = None  # the last auto-search's, for its summary

    # -- set-up -----------------------------------------------------------------------

    @property
    def is_ready(self) -> bool:
        return self.ready is not None

    @property
    def limit_bytes(self) -> float:
        return self.plan.limit_bytes if self.plan is not None else 0.0

    def setup(self) -> Ready:
        """Scan, the runs without recompute and the model's first choice; idempotent."""
        if self.ready is not None:
            return self.ready
        s = self.settings
        started = time.monotonic()
        self._emit(StageStarted("plan", f"scanning {s.run.target} and measuring it without recompute"))
        plan = plan_torch(
            s.run, s.target_batch, s.budget, margin=s.margin, resume=s.resume, say=self._say, run=self._unplanned
        )
        self.plan, self.budget_bytes, self._rows = plan, plan.budget_bytes, _rows(plan)
        self._emit(
            StageFinished(
                "plan",
                f"{plan.policy} predicted at {format_bytes(int(plan.predicted_bytes))}",
                time.monotonic() - started,
            )
        )
        cuda = on_cuda(s.run.device)
        self.ready = Ready(
            target=s.run.target,
            options=dict(s.run.options),
            runtime=f"plain PyTorch · torch {torch.__version__}",
            device=torch.cuda.get_device_name() if cuda else "CPU",
            budget_bytes=plan.budget_bytes,
            limit_bytes=plan.limit_bytes,
            target_batch=s.target_batch,
            rows=self._rows,
            runs_dir=s.run.runs_dir,
        )
        self._emit(self.ready)
        return self.ready

    def retarget(self, budget_bytes: int) -> Ready:
        """Aim the set-up session at another budget (``tune --frontier``): the scan, the peak model and
        every run so far are kept, the model's choice is made again, and a search run of a policy
        this session already ran is that run, judged against the new limit. The room the choice
        keeps is learnt from every run so far (a run below its prediction widens it)."""
        with self._lock:
            trials = list(self._trials.values())
        plan = self._plan().at_budget(budget_bytes, self.settings.margin, trials)
        self.plan, self.budget_bytes = plan, budget_bytes
        self.ready = replace(self.setup(), budget_bytes=budget_bytes, limit_bytes=plan.limit_bytes)
        self._emit(
            Note(
                f"budget {format_bytes(budget_bytes)}: {plan.policy} predicted at "
                f"{format_bytes(int(plan.predicted_bytes))}; {plan.room_line}"
            )
        )
        return self.ready

    def _say(self, line: str) -> None:
        self._emit(Note(line))

    def _unplanned(self, batch: int) -> TrialResult:
        return self._run(batch, _NONE, Purpose.CALIBRATION, "no recompute: the peak model's run", None)

    def _plan(self) -> TorchPlan:
        if self.plan is None:
            raise TuneError("the session is not set up")
        return self.plan

    # -- the model ----------------------------------------------------------------------

    def rows(self) -> tuple[PlanRow, ...]:
        self._plan()
        return self._rows

    def predict(self, plans: Iterable[PlanName]) -> _Prediction:
        plan = self._plan()
        policy, batch = _policy(plans), plan.target_batch
        model = plan.model
        if policy.plans and isinstance(model, SimulatedPeak) and not model.played(batch, policy):
            estimate = plan.baseline_bytes - policy_saving(policy, plan.scanned, batch)
            return _Prediction(estimate, plan.baseline_bytes)
        return _Prediction(model.predict(policy, batch), plan.baseline_bytes)

    def cost_of(self, plans: Iterable[PlanName]) -> float:
        # The plans layer by layer a search chose cost as the scan timed them, as the rows do.
        return self._plan().cost_s(plans)

    # -- trials ---------------------------------------------------------------------------

    def run_trial(
        self, plans: Sequence[PlanName], purpose: Purpose = Purpose.MANUAL, reason: str = "your selection"
    ) -> TrialRecord:
        self.setup()
        policy = _policy(plans)
        predicted = self.predict(plans).peak_bytes
        self._run(self._plan().target_batch, policy, purpose, reason, predicted)
        return self.records[-1]

    def _run(
        self, batch: int, policy: RecomputePolicy, purpose: Purpose, reason: str, predicted: float | None
    ) -> TrialResult:
        self._check_cancel()
        s = self.settings
        with self._lock:
            number = len(self.records) + 1
        keys = _keys(policy)
        self._emit(TrialStarted(number, purpose, batch, keys, predicted, reason, s.run.steps, s.run.timeout_s))
        earlier = self._ran(policy) if purpose is Purpose.SEARCH and batch == self._plan().target_batch else None
        trial = (
            replace(earlier, reused=True)
            if earlier is not None
            else run_torch_trial(s.run, batch, policy, journal=self.journal, resume=s.resume, cancel=self._cancel)
        )
        result = replace(
            trial.judged(self.budget_bytes or None),
            predicted_peak_bytes=int(predicted) if predicted is not None else None,
        )
        record = TrialRecord(number, purpose, keys, predicted, reason, result)
        with self._lock:  # the views read both from their own threads: the trial first, then its record
            self._trials[number] = result
            self.records.append(record)
        self._emit(TrialFinished(record, _explained(record, result, self.limit_bytes or None)))
        if result.outcome is Outcome.CANCELLED:
            raise TuneCancelled("cancelled")
        return result

    def auto_search(self, max_trials: int | None = None) -> TuneResult:
        """The model's choice run at the target batch, and once more where it is over the limit
        (``max_trials`` is ORT's search's: this one makes at most two runs)."""
        try:
            self.setup()
            plan = self._plan()
            result = verify_torch(
                plan,
                lambda policy, predicted: self._run(
                    plan.target_batch, policy, Purpose.SEARCH, "the model's choice", predicted
                ),
                say=self._say,
            )
            self._searched = result
        except TuneCancelled:
            message = "cancelled: the running trial was stopped; the journal keeps every finished trial"
            cancelled = TuneResult(SearchStatus.CANCELLED, message, self.best(), tuple(self.records))
            self._emit(SearchFinished(cancelled))
            return cancelled
        best = self.best()  # the search's run, or a trial of the user's that fits at less cost
        if result.verified and result.verify is not None:
            peak, limit = format_compared(result.verify.memory.device_peak or 0, plan.limit_bytes)
            message = f"{result.policy} peaked at {peak}, under the limit {limit}"
        else:
            message = (
                f"no policy the model chose brought batch {plan.target_batch} under {format_bytes(plan.limit_bytes)}: "
                f"{plan.floor_line}"
            )
        status = SearchStatus.VERIFIED if best is not None else SearchStatus.IMPOSSIBLE
        finished = TuneResult(status, message, best, tuple(self.records))
        self._emit(SearchFinished(finished))
        return finished

    # -- results ------------------------------------------------------------------------------

    def summary(self, result: TuneResult) -> dict[str, Any]:
        """The auto-search's result for ``--json``."""
        if self._searched is None:
            return {"status": str(result.status), "message": result.message, "backend": "torch"}
        return self._searched.summary(self.settings.run, self.journal.path)

    def best(self) -> TrialRecord | None:
        """The cheapest run at the target batch whose peak is under the limit (by the scan's recompute times)."""
        if self.plan is None:
            return None
        with self._lock:
            ran = [(r, self._trials[r.number]) for r in self.records]
        fitting = [
            r for r, trial in ran if r.batch_size == self.plan.target_batch and trial.within(int(self.plan.limit_bytes))
        ]
        return min(fitting, key=lambda r: (self.cost_of(r.plans), r.number), default=None)

    def export_lines(self, plans: Iterable[PlanName] | None = None) -> list[str]:
        """The shell lines that apply ``plans`` (default: the best verified run's): the policy file
        of a run at the target batch that had them, else where ``write_export_file`` puts it; nothing
        is written. A policy no run has brought under the limit is marked NOT verified."""
        if plans is None:
            best = self.best()
            if best is None:
                return []
            plans = best.plans
        policy = _policy(plans)
        ran = self._ran(policy)
        if ran is not None:
            verified = ran.within(int(self.limit_bytes)) if self.limit_bytes else False
            return [f"# {policy}" if verified else f"# {policy} (NOT verified)", trial_export_line(ran)]
        return [
            f"# {policy} (NOT verified)",
            export_line(self._selection_path(policy), allocator_env(self.settings.run.device)),
        ]

    def write_export_file(self, plans: Iterable[PlanName]) -> Path | None:
        """The policy file the export line of ``plans`` names: a run's, or written for a selection no run had."""
        policy = _policy(plans)
        ran = self._ran(policy)
        if ran is not None:
            return policy_path(ran)
        return self.save_config(plans)

    def save_config(self, plans: Iterable[PlanName], path: Path | None = None) -> Path:
        """Write the policy file of ``plans`` (default: named by its content, in the runs folder)."""
        policy = _policy(plans)
        if not policy.plans:
            raise TuneError("nothing to save: the selection enables no plan")
        target = path or self._selection_path(policy)
        return replace_atomically(target, policy.to_json() + "\n", overwrite=True).resolve()

    def _ran(self, policy: RecomputePolicy) -> TrialResult | None:
        """The last run at the target batch with ``policy``."""
        batch, plans = self._plan().target_batch, set(_keys(policy))
        with self._lock:
            trials = list(self._trials.values())
        return next((t for t in reversed(trials) if t.batch_size == batch and set(t.config) == plans and t.ran), None)

    def _selection_path(self, policy: RecomputePolicy) -> Path:
        """Where a policy no run had is saved: named by its content, so sessions sharing a runs
        folder never replace each other's file; nothing is created."""
        s = self.settings
        digest = hashlib.sha256(policy.to_json().encode()).hexdigest()[:12]
        return Path(s.run.runs_dir) / f"torch-{s.run.target.label}-b{s.target_batch}-{digest}.json"


def _rows(plan: TorchPlan) -> tuple[PlanRow, ...]:
    """The scan's plans as the table shows them at the target batch, largest saving first."""
    scanned, batch = plan.scanned, plan.target_batch
    rows = []
    for row in scanned.rows:
        saving = plan_saving(row, scanned, batch)
        rows.append(
            PlanRow(
                key=PlanName(str(row.plan)),
                subgraph=str(row.plan),  # the whole policy line: module plans differ only by their path
                kind=row.plan.kind,
                frequency=row.modules,
                saving_bytes=saving,
                effective_bytes=saving,
                cost_s=row.seconds_at(batch, scanned.batch),
                modules=(row.plan.module,),
                counts_honoured=False,
            )
        )
    rows.sort(key=lambda r: (-r.saving_bytes, r.key))
    return tuple(rows)


def _policy(plans: Iterable[str]) -> RecomputePolicy:
    return RecomputePolicy(tuple(RecomputePlan.parse(plan) for plan in plans))


def _keys(policy: RecomputePolicy) -> tuple[PlanName, ...]:
    return tuple(PlanName(str(plan)) for plan in policy.plans)


def _explained(record: TrialRecord, trial: TrialResult, limit: float | None) -> str:
    measured = trial.memory.device_peak
    if trial.status is RunStatus.OUT_OF_MEMORY:
        return f"trial {record.number}: out of memory at batch {trial.batch_size}"
    if not trial.ran or measured is None:
        return f"trial {record.number}: {trial.status.failure('target')}: {trial.error} ({trial.run_dir})"
    peak, against = format_bytes(measured), ""
    if limit is not None:
        peak, limit_shown = format_compared(measured, limit)
        against = f", {'under' if measured <= limit else 'over'} the limit {limit_shown}"
    error = ""
    if record.predicted_bytes is not None and record.prediction_error is not None:
        error = f" (predicted {format_bytes(int(record.predicted_bytes))}, error {record.prediction_error:+.1%})"
    return f"trial {record.number}: peak {peak}{against}{error}"
