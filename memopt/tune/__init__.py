"""Tuning: from "out of memory at the batch I need" to a verified config.

- ``settings``: what a session is asked (``TuneSettings``) and its errors.
- ``events``: what views are told (typed events, trial records, the result).
- ``policy``: the search as a pure function, ``next_step(state)``.
- ``tuner``: the session (``Tuner``) that runs trials through a ``TrialRunner``.
- ``export``: the config file and the shell line handed back to the user.
"""

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
from memopt.tune.export import ConfigExport, plan_export, write_config
from memopt.tune.policy import Attempt, BestVerified, SearchState, Stop, TryPlans, best_verified, next_step
from memopt.tune.settings import DEFAULT_MAX_TRIALS, TuneCancelled, TuneError, TuneSettings
from memopt.tune.tuner import Tuner

__all__ = [
    "DEFAULT_MAX_TRIALS",
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
