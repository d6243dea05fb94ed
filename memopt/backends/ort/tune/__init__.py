"""ORT's tuning session: its search, its loop and the config it hands back.

- ``policy``: the search as a pure function, ``next_step(state)``.
- ``tuner``: ORT's session (``Tuner``) that runs trials through a ``TrialRunner``.
- ``export``: ORT's config file and the shell line handed back to the user.
"""

from memopt.backends.ort.tune.export import ConfigExport, plan_export, write_config
from memopt.backends.ort.tune.policy import (
    Attempt,
    BestVerified,
    SearchState,
    Stop,
    TryPlans,
    best_verified,
    next_step,
)
from memopt.backends.ort.tune.tuner import Tuner

__all__ = [
    "Attempt",
    "BestVerified",
    "ConfigExport",
    "SearchState",
    "Stop",
    "TryPlans",
    "Tuner",
    "best_verified",
    "next_step",
    "plan_export",
    "write_config",
]
