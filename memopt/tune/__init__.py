"""Tuning as every back end's session and its views share it: from "out of memory at the batch I
need" to a verified config.

- ``settings``: what a session is asked (``TuneSettings``) and its errors.
- ``events``: what views are told (typed events, trial records, the result).
- ``session``: a session as its views see it (``TuningSession``), whichever back end runs it:
  ORT's ``memopt.backends.ort.tune.Tuner``, plain PyTorch's ``memopt.backends.torch.session.TorchTuner``.
"""

from __future__ import annotations

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
from memopt.tune.settings import (
    DEFAULT_MAX_TRIALS,
    DEFAULT_REPEATS,
    OrtTuneSettings,
    TuneCancelled,
    TuneError,
    TuneSettings,
)

__all__ = [
    "DEFAULT_MAX_TRIALS",
    "DEFAULT_REPEATS",
    "Note",
    "OrtTuneSettings",
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
    "TuneCancelled",
    "TuneError",
    "TuneEvent",
    "TuneResult",
    "TuneSettings",
    "event_line",
]
