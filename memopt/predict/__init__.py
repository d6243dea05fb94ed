"""What both back ends' predictions share: the exact choice and the whole run's fixed phases.

- ``choice``: the least-cost cover of a budget's shortfall, solved exactly (HiGHS), and the
  margin a prediction keeps below the budget, and the room a choice keeps for the run-to-run
  noise and the model's error (``kept_room``).
- ``whole_run``: the start-up's peak by batch (recompute cannot lower it) and each phase's
  run-to-run spread, from the runs a session made.

Each back end's own model (ORT's memory model played over its training graph,
``memopt.backends.ort.predict``; plain PyTorch's, ``memopt.backends.torch.predict``) sits in
its package. Nothing here runs a process or reads the journal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.lazy import lazy_exports

if TYPE_CHECKING:
    from memopt.predict.choice import DEFAULT_MARGIN, budget_limit, kept_room
    from memopt.predict.whole_run import FixedPeaks, PhaseSpread, RunSpread

# Imported on first use: a view that imports this package loads neither scipy nor pydantic.
_LAZY = {
    "memopt.predict.choice": ("DEFAULT_MARGIN", "budget_limit", "kept_room"),
    "memopt.predict.whole_run": ("FixedPeaks", "PhaseSpread", "RunSpread"),
}
__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_MARGIN",
    "FixedPeaks",
    "PhaseSpread",
    "RunSpread",
    "budget_limit",
    "kept_room",
]
