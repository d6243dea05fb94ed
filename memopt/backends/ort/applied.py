"""Which of a trial's plans ORT applied: its Plan table reports each plan ON or OFF, and a plan
it left OFF (a name it does not know, or one it declined) saved nothing."""

from __future__ import annotations

from collections.abc import Iterable

from memopt.backends.ort.config import PlanKey, plan_keys
from memopt.core.trial import Outcome, TrialResult

__all__ = ["applied_plans", "plans_left_off"]


def plans_left_off(trial: TrialResult, plans: Iterable[str]) -> tuple[PlanKey, ...]:
    """Of ``plans`` (enabled by the trial's config), those ORT did not apply: a plan whose every
    cell its Plan table did not report ON was ignored. Unknown (none) where ORT printed no Plan
    table or the trial was cancelled."""
    if not trial.plans_seen or trial.outcome is Outcome.CANCELLED:
        return ()
    on = {cell for key in plan_keys(trial.plans_on) for cell in key.cells}
    return tuple(key for key in plan_keys(plans) if not set(key.cells) <= on)


def applied_plans(trial: TrialResult, plans: Iterable[str]) -> tuple[PlanKey, ...]:
    """Of ``plans``, those ORT applied (all of them where that is unknown)."""
    selection = plan_keys(plans)
    off = set(plans_left_off(trial, selection))
    return tuple(key for key in selection if key not in off)
