"""Tuning: from "out of memory at the batch I need" to a verified config.

- ``settings``: what a session is asked (``TuneSettings``) and its errors.
- ``events``: what views are told (typed events, trial records, the result).
- ``policy``: the search as a pure function, ``next_step(state)``.
- ``session``: a session as its views see it (``TuningSession``), whichever back end runs it.
- ``tuner``: ORT's session (``Tuner``) that runs trials through a ``TrialRunner``;
  ``torch_session``: the plain-PyTorch back end's (``TorchTuner``).
- ``export``: ORT's config file and the shell line handed back to the user.

The events and settings are imported here; ORT's search, session and export on first use, so a
view or the torch back end that imports this package loads nothing of ORT's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.lazy import lazy_exports
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
    event_line,
)
from memopt.tune.settings import DEFAULT_MAX_TRIALS, DEFAULT_REPEATS, TuneCancelled, TuneError, TuneSettings

if TYPE_CHECKING:
    from memopt.tune.export import ConfigExport, plan_export, write_config
    from memopt.tune.policy import Attempt, BestVerified, SearchState, Stop, TryPlans, best_verified, next_step
    from memopt.tune.tuner import Tuner

_LAZY = {
    "memopt.tune.export": ("ConfigExport", "plan_export", "write_config"),
    "memopt.tune.policy": ("Attempt", "BestVerified", "SearchState", "Stop", "TryPlans", "best_verified", "next_step"),
    "memopt.tune.tuner": ("Tuner",),
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "DEFAULT_MAX_TRIALS",
    "DEFAULT_REPEATS",
    "Attempt",
    "BestVerified",
    "ConfigExport",
    "Note",
    "PlanRow",
    "Purpose",
    "Ready",
    "SearchFinished",
    "SearchState",
    "SearchStatus",
    "StageFinished",
    "StageStarted",
    "Stop",
    "TrialFinished",
    "TrialRecord",
    "TrialStarted",
    "TryPlans",
    "TuneCancelled",
    "TuneError",
    "TuneEvent",
    "TuneResult",
    "TuneSettings",
    "Tuner",
    "best_verified",
    "event_line",
    "next_step",
    "plan_export",
    "write_config",
]
