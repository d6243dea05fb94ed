"""The planner where the simulated peak is not monotone in the plans: the lowest peak there is
(not always every plan: a recomputed tensor can land where the peak is), and a fitting
selection the search's path missed."""

from __future__ import annotations

from types import SimpleNamespace

from memopt.backends.ort import OrtVersion, PlanKey
from memopt.backends.ort.predict.planner import PlanResult, _choose_simulated, _lowest_peak

A, B, C = PlanKey("A+:1:-1"), PlanKey("B+:1:-1"), PlanKey("C+:1:-1")


def test_a_plan_that_raises_the_peak_is_left_out() -> None:
    # A and B each take 100 off a 1000 peak; C's recompute adds 50 at the peak.
    def peak(plans: set[PlanKey]) -> float:
        return 1000 - 100 * (A in plans) - 100 * (B in plans) + 50 * (C in plans)

    assert _lowest_peak(peak, lambda plans, than: peak(plans) < than, {A, B, C}) == {A, B}


def test_every_plan_stays_when_each_lowers_the_peak() -> None:
    def peak(plans: set[PlanKey]) -> float:
        return 1000 - 10 * len(plans)

    assert _lowest_peak(peak, lambda plans, than: peak(plans) < than, {A, B, C}) == {A, B, C}


class FakeModel:
    """A stand-in for MemoryModel with a peak given per selection (pure planner logic)."""

    def __init__(self, peaks: dict[frozenset[PlanKey], float]) -> None:
        self.peaks = peaks
        self.plans = [SimpleNamespace(key=key, entries=(), frequency=1) for key in (A, B, C)]
        self.ceilings: list[int | None] = []  # of each max_batch asked

    def peak(self, batch: int, plans: tuple[PlanKey, ...]) -> float:
        return self.peaks[frozenset(plans)]

    def peak_bounds(self, batch: int, plans: tuple[PlanKey, ...]) -> list[float]:
        return [self.peak(batch, plans)]

    def fits(self, batch: int, plans: tuple[PlanKey, ...], limit: float) -> bool:
        return self.peak(batch, plans) <= limit

    def factor(self, key: PlanKey) -> float:
        return 1.0

    def raw_saving(self, key: PlanKey, batch: int) -> float:
        return 0.0

    def max_batch(self, limit: float, plans: tuple[PlanKey, ...], ceiling: int | None) -> int:
        self.ceilings.append(ceiling)
        return 0  # the search is not this logic's: only what it is asked


def _choose_at_75(peaks: dict[frozenset[PlanKey], float], model: FakeModel | None = None) -> PlanResult:
    """The planner's choice at batch 8 under a limit of 75, every plan costing the same."""
    common = dict(
        target_batch=8,
        budget_bytes=75,
        limit_bytes=75,
        baseline_bytes=100,
        baseline_step_s=None,
        ort_version=OrtVersion.parse("1.19.2"),
    )
    model = model or FakeModel(peaks)
    return _choose_simulated(model, {A: 1.0, B: 1.0, C: 1.0}, 8, 75, common)  # type: ignore[arg-type]


def test_what_fits_instead_of_a_target_that_cannot_is_searched_below_it() -> None:
    # Nothing fits 75 at batch 8: the largest batches that do are asked below 8 (a larger one
    # can fit where the target does not), and where the target fits, anywhere.
    over = {frozenset(s): p for s, p in [((), 100), ((A,), 90), ((B,), 90), ((C,), 90), ((A, B, C), 80)]}
    over |= {frozenset((A, B)): 85, frozenset((A, C)): 85, frozenset((B, C)): 85}
    model = FakeModel(over)
    assert not _choose_at_75(over, model).feasible and model.ceilings == [7, 7]
    fitting = {**over, frozenset((A, B, C)): 70}
    model = FakeModel(fitting)
    assert _choose_at_75(fitting, model).feasible and model.ceilings == [None, None]


def test_a_fitting_selection_the_search_path_missed_is_found() -> None:
    # Each plan alone takes 10 off 100; the search takes all three for a 25 cut, and together
    # they raise the peak to 85. Every plan less A is the lowest peak there is, and it fits.
    peaks = {frozenset(s): p for s, p in [((), 100), ((A,), 90), ((B,), 90), ((C,), 90)]}
    peaks |= {frozenset((A, B)): 88, frozenset((A, C)): 88, frozenset((B, C)): 74, frozenset((A, B, C)): 85}
    result = _choose_at_75(peaks)
    assert result.feasible and {c.key for c in result.choices} == {B, C} and result.predicted_bytes == 74


def test_plans_of_equal_cost_are_dropped_in_key_order() -> None:
    # Every plan takes 10 off 100 and the three fit 75; any two of them fit too. With equal
    # costs the drop phase tries A first (ties go by key, not by the hash seed's set order):
    # without A the rest fit, and then neither B nor C can go.
    peaks = {frozenset(s): p for s, p in [((), 100), ((A,), 90), ((B,), 90), ((C,), 90), ((A, B, C), 70)]}
    peaks |= {frozenset((A, B)): 74, frozenset((A, C)): 74, frozenset((B, C)): 74}
    result = _choose_at_75(peaks)
    assert {c.key for c in result.choices} == {B, C}
