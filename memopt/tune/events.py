"""What the tuner tells its views: typed events, and the records they carry.

Every event arrives through one callback, from whichever thread runs the search; views
(the TUI, ``--no-tui`` lines, ``--json``) only render them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from memopt.core import Target
from memopt.core.plan import PlanName, plan_names
from memopt.core.trial import Outcome, TrialResult
from memopt.units import format_mib

__all__ = [
    "Note",
    "PlanRow",
    "Purpose",
    "Ready",
    "SearchFinished",
    "SearchStatus",
    "StageFinished",
    "StageStarted",
    "TrialFinished",
    "TrialRecord",
    "TrialStarted",
    "TuneEvent",
    "TuneResult",
    "event_line",
]


class Purpose(str, Enum):
    """Why a trial ran."""

    CALIBRATION = "calibration"  # no config at a small batch: fits the memory model
    SEARCH = "search"  # chosen by the search at the target batch
    MANUAL = "manual"  # the user's selection in the TUI

    def __str__(self) -> str:
        return self.value


class SearchStatus(str, Enum):
    """How a search ended."""

    VERIFIED = "verified"  # a config was measured to fit
    MAX_TRIALS = "max_trials"  # --max-trials search trials ran first
    IMPOSSIBLE = "impossible"  # even every plan is not enough at the target batch
    # What fits has less room under the limit than the run-to-run spread: a re-run may go over
    WITHIN_NOISE = "within_noise"
    CANCELLED = "cancelled"
    FAILED = "failed"  # the target cannot run at all, or nothing could be verified

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PlanRow:
    """One plan as the tuner sees it at the target batch (ORT: a row of its Plan table)."""

    key: PlanName
    subgraph: str
    kind: str  # what it recomputes, as its back end says it (ORT: its optimization type)
    frequency: int
    saving_bytes: float  # the scan's exact saving at the target batch
    effective_bytes: float  # what the memory model expects it to lower the peak by
    cost_s: float  # estimated extra seconds per step
    modules: tuple[str, ...]
    counts_honoured: bool  # ORT <= 1.16 recomputes the first N occurrences; 1.17+ all or nothing

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", plan_names((self.key,))[0])  # a name read back from text is a PlanName again


@dataclass(frozen=True)
class TrialRecord:
    """A trial the tuner ran (or reused), with why it ran and what the model predicted."""

    number: int  # 1-based, in this session
    purpose: Purpose
    plans: tuple[PlanName, ...]
    predicted_bytes: float | None
    reason: str
    result: TrialResult
    # Plans the trial enabled that its back end did not apply (ORT: its Plan table left them OFF)
    left_off: tuple[PlanName, ...] = ()

    def __post_init__(self) -> None:
        for name in ("plans", "left_off"):  # names read back from text are PlanNames again
            object.__setattr__(self, name, plan_names(getattr(self, name)))

    @property
    def outcome(self) -> Outcome:
        return self.result.outcome

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def peak_bytes(self) -> int | None:
        return self.result.shown_peak_bytes

    @property
    def step_s(self) -> float | None:
        return self.result.median_step_s

    @property
    def batch_size(self) -> int:
        return self.result.batch_size

    @property
    def applied_plans(self) -> tuple[PlanName, ...]:
        """The plans its back end applied: the config to hand back, without the ones it ignored."""
        return tuple(plan for plan in self.plans if plan not in self.left_off)

    @property
    def prediction_error(self) -> float | None:
        measured = self.result.predicted_figure_bytes
        if self.predicted_bytes is None or not measured:
            return None
        return (self.predicted_bytes - measured) / measured


@dataclass(frozen=True)
class TuneResult:
    """How a search ended, the verified config if any, and every trial of the session."""

    status: SearchStatus
    message: str
    best: TrialRecord | None
    trials: tuple[TrialRecord, ...]
    largest_batch: int | None = None  # when impossible: predicted to fit with every plan

    @property
    def verified(self) -> bool:
        return self.best is not None


@dataclass(frozen=True)
class StageStarted:
    stage: str  # probe, scan, calibrate
    message: str


@dataclass(frozen=True)
class StageFinished:
    stage: str
    message: str
    seconds: float


@dataclass(frozen=True)
class Ready:
    """Set-up is done: plans, model and budget are known."""

    target: Target
    options: Mapping[str, Any]
    runtime: str  # what trains, in a few words: "ORT 1.19.2 (onnxruntime-training-cpu) · torch 2.4.1"
    device: str  # "CPU" or the CUDA device's name
    budget_bytes: int
    limit_bytes: float
    target_batch: int
    rows: tuple[PlanRow, ...]
    runs_dir: Path


@dataclass(frozen=True)
class TrialStarted:
    number: int
    purpose: Purpose
    batch_size: int
    plans: tuple[PlanName, ...]
    predicted_bytes: float | None
    reason: str
    steps: int
    timeout_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "plans", plan_names(self.plans))  # names read back from text are PlanNames again


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


def event_line(event: TuneEvent) -> str:
    """The event as one plain line, for logs and ``--no-tui`` progress."""
    if isinstance(event, StageStarted):
        return f"[{event.stage}] {event.message}"
    if isinstance(event, StageFinished):
        return f"[{event.stage}] done in {event.seconds:.1f} s: {event.message}"
    if isinstance(event, Ready):
        return (
            f"[ready] {event.target} on {event.device}, {event.runtime}; "
            f"target batch {event.target_batch}, budget {format_mib(event.budget_bytes)} (limit "
            f"{format_mib(event.limit_bytes)}); {len(event.rows)} plans"
        )
    if isinstance(event, TrialStarted):
        plans = ", ".join(p.short for p in event.plans) or "no config"
        predicted = f", predicted {format_mib(event.predicted_bytes)}" if event.predicted_bytes is not None else ""
        return f"[trial {event.number}] {event.purpose} at batch {event.batch_size}: {plans}{predicted}…"
    if isinstance(event, TrialFinished):
        return f"[result] {event.explanation}"
    if isinstance(event, Note):
        return f"[search] {event.message}"
    return f"[done] {event.result.status}: {event.result.message}"
