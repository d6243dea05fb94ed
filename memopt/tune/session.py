"""A tuning session as its views see it: what the TUI asks of ORT's ``Tuner`` and of the torch
back end's ``TorchTuner`` alike.

The views (``memopt.tui``) hold a ``TuningSession`` and nothing of a back end: plans are
``PlanName`` values (ORT's ``PlanKey``, or a torch plan such as ``blocks.*: *``), events and records are
``memopt.tune.events``'.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from memopt.core.plan import PlanName
from memopt.run.journal import Journal
from memopt.tune.events import PlanRow, Purpose, Ready, TrialRecord, TuneEvent, TuneResult
from memopt.tune.settings import TuneCancelled, TuneSettings

__all__ = ["SelectionPrediction", "SessionEvents", "TuningSession"]


class SessionEvents:
    """What every session shares with its views: the listeners its events go to, and the flag
    that cancels its running work; safe from any thread."""

    def __init__(self, on_event: Callable[[TuneEvent], None] | None = None) -> None:
        self._listeners: list[Callable[[TuneEvent], None]] = [on_event] if on_event else []
        self._cancel = threading.Event()

    def subscribe(self, listener: Callable[[TuneEvent], None]) -> None:
        self._listeners.append(listener)

    def _emit(self, event: TuneEvent) -> None:
        for listener in list(self._listeners):
            listener(event)

    def cancel(self) -> None:
        """Stop the running trial or probe (its process group is killed)."""
        self._cancel.set()

    def reset_cancel(self) -> None:
        """Allow new work after a cancelled search (the TUI keeps the session)."""
        self._cancel.clear()

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise TuneCancelled("cancelled")


class SelectionPrediction(Protocol):
    @property
    def peak_bytes(self) -> float: ...

    @property
    def baseline_bytes(self) -> float: ...


class TuningSession(Protocol):
    settings: TuneSettings
    journal: Journal
    ready: Ready | None
    budget_bytes: int

    @property
    def limit_bytes(self) -> float: ...

    @property
    def is_ready(self) -> bool: ...

    @property
    def records(self) -> Sequence[TrialRecord]: ...

    def subscribe(self, listener: Callable[[TuneEvent], None]) -> None: ...

    def setup(self) -> Ready:
        """Scan, probe and model: everything before the search (blocking; a worker thread runs it)."""
        ...

    def auto_search(self, max_trials: int | None = None) -> TuneResult: ...

    def run_trial(self, plans: Sequence[PlanName], purpose: Purpose, reason: str) -> TrialRecord: ...

    def cancel(self) -> None:
        """End the running trial (its process killed; the journal kept)."""
        ...

    def reset_cancel(self) -> None: ...

    def rows(self) -> tuple[PlanRow, ...]: ...

    def predict(self, plans: Iterable[PlanName]) -> SelectionPrediction: ...

    def cost_of(self, plans: Iterable[PlanName]) -> float: ...

    def best(self) -> TrialRecord | None: ...

    def summary(self, result: TuneResult) -> dict[str, Any]:
        """The auto-search's ``result`` for ``--json``."""
        ...

    def export_lines(self, plans: Iterable[PlanName] | None = None) -> list[str]: ...

    def write_export_file(self, plans: Iterable[PlanName]) -> Path | None: ...

    def save_config(self, plans: Iterable[PlanName], path: Path | None = None) -> Path: ...
