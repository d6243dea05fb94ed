"""The planner's fallback when no selection fits: the lowest simulated peak, which is not
always every plan (a recomputed tensor can land where the peak is)."""

from __future__ import annotations

from memopt.ort import PlanKey
from memopt.predict.planner import _lowest_peak

A, B, C = PlanKey("A+:1:-1"), PlanKey("B+:1:-1"), PlanKey("C+:1:-1")


def test_a_plan_that_raises_the_peak_is_left_out() -> None:
    # A and B each take 100 off a 1000 peak; C's recompute adds 50 at the peak.
    def peak(plans: set[PlanKey]) -> float:
        return 1000 - 100 * (A in plans) - 100 * (B in plans) + 50 * (C in plans)

    assert _lowest_peak(peak, {A, B, C}) == {A, B}


def test_every_plan_stays_when_each_lowers_the_peak() -> None:
    def peak(plans: set[PlanKey]) -> float:
        return 1000 - 10 * len(plans)

    assert _lowest_peak(peak, {A, B, C}) == {A, B, C}
