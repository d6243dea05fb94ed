"""The search policy and the tuning loop, without ORT.

``next_step`` is tested on a hand-made memory model; the ``Tuner`` runs over a FAKE trial
runner (tests/support/fake_tuning.py) on a real ORT 1.19.2 training graph, so calibration, the
planner, the journal, cancellation and resume run for real in well under a second each.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from support.fake_tuning import FakeRunner, MiB, fake_tuner, prepared_gpt
from support.results import measured

from memopt.backends.ort import OrtVersion
from memopt.backends.ort.predict.memory_model import MemoryModel, Observation, PlanSavings, fit_memory_model
from memopt.backends.ort.tune.policy import (
    CONFIG_SPREAD,
    Attempt,
    KeptRoom,
    SearchState,
    Stop,
    TryPlans,
    best_verified,
    next_step,
)
from memopt.core.memory import Phase
from memopt.core.trial import Outcome
from memopt.graph import Polynomial
from memopt.predict import FixedPeaks, PhaseSpread, RunSpread
from memopt.run import Journal
from memopt.tune import Purpose, SearchStatus

# A model with static 1000 MiB + 100 MiB/sample and three plans saving 40, 20, 10 MiB/sample.
SAVINGS = {"A+:1:-1": 40, "B+:1:-1": 20, "C+:1:-1": 10}
COSTS = {"A+:1:-1": 0.03, "B+:1:-1": 0.01, "C+:1:-1": 0.005}
A, B, C = SAVINGS

pytestmark = pytest.mark.usefixtures("simulate_sample_once")


def model() -> MemoryModel:
    plans = [
        PlanSavings(key, (key.rsplit(":", 1)[0],), 1, Polynomial.symbol("batch") * Polynomial.constant(mib * MiB))
        for key, mib in SAVINGS.items()
    ]
    observations = [Observation(2, (), 1200 * MiB), Observation(4, (), 1400 * MiB)]
    return fit_memory_model(observations, plans, ("batch",), {})


def state(
    budget_mib: float,
    *attempts: Attempt,
    max_trials: int = 6,
    margin: float = 0.0,
    fixed_peaks: FixedPeaks = FixedPeaks(),
    spread: RunSpread = RunSpread(),
) -> SearchState:
    return SearchState(
        model=model(),
        costs_s=COSTS,
        target_batch=16,
        budget_bytes=int(budget_mib * MiB),
        margin=margin,
        ort_version=OrtVersion.parse("1.19.2"),
        max_trials=max_trials,
        attempts=attempts,
        trials_used=len(attempts),
        fixed_peaks=fixed_peaks,
        spread=spread,
    )


def test_first_step_is_the_cheapest_selection_predicted_to_fit() -> None:
    # no config: 2600 MiB; 2400 MiB needs 200 MiB: B alone saves 320 MiB at the least cost
    step = next_step(state(2400))
    assert step == TryPlans((B,), step.reason) and "planner" in step.reason


def test_fits_first_time_then_stops_verified() -> None:
    step = next_step(state(2400, Attempt((B,), Outcome.OK, 0.5, number=1)))
    assert isinstance(step, Stop) and step.status is SearchStatus.VERIFIED
    assert step.message == "B+ fits: verified by 1 run of it"


def test_a_fit_runs_again_until_it_has_the_runs_a_verdict_needs() -> None:
    # 3 runs needed: a fit under the limit is run again (outside --max-trials), then verified
    first = Attempt((B,), Outcome.OK, number=1, whole_run_bytes=2300 * MiB)
    step = next_step(replace(state(2400, first, max_trials=1), repeats=3))
    assert isinstance(step, TryPlans) and step.plans == (B,) and step.repeat
    assert "running B+ again to measure its run-to-run noise (run 2 of 3)" in step.reason
    runs = (first, replace(first, number=2, whole_run_bytes=2304 * MiB), replace(first, number=3))
    searched = replace(state(2400, *runs), repeats=3, spread=RunSpread(steps=PhaseSpread(4 * MiB, 3)))
    stop = next_step(searched)
    assert isinstance(stop, Stop) and stop.status is SearchStatus.VERIFIED, stop
    room = searched.room(runs[0])
    assert room is not None and room.under_limit_bytes == 96 * MiB and room.runs == 3  # the highest run's


def test_a_repeat_over_the_budget_unverifies_its_config() -> None:
    # a fit, then the same config over the budget (the exit spiked): more recompute, not verified
    runs = (
        Attempt((B,), Outcome.OK, number=1, whole_run_bytes=2300 * MiB),
        Attempt((B,), Outcome.OVER_BUDGET, number=2, whole_run_bytes=2410 * MiB),
        Attempt((B,), Outcome.OK, number=3, whole_run_bytes=2300 * MiB),
    )
    searched = replace(state(2400, *runs), repeats=3)
    assert not searched.verified(runs[0]) and best_verified(searched) is None
    step = next_step(searched)
    assert isinstance(step, TryPlans) and B in step.plans and len(step.plans) > 1, step
    assert "trial 2 of the same config over budget" in step.reason


def test_a_lower_batchs_check_is_judged_by_its_own_run() -> None:
    # every plan over the budget at the target batch; the same plans at a lower batch fit: that
    # run is no repeat of the target batch's, so it alone says whether the lower batch fits
    at_target = Attempt((B, C), Outcome.OVER_BUDGET, number=4, whole_run_bytes=2410 * MiB)
    lower = Attempt((B, C), Outcome.OK, number=5, whole_run_bytes=2000 * MiB)
    searched = replace(state(2400, at_target), repeats=3)
    assert not searched.verified(lower)  # judged with the target batch's run, as the check used to be
    assert searched.checked_alone(lower)
    assert not searched.checked_alone(Attempt((B, C), Outcome.OVER_BUDGET, number=6, whole_run_bytes=2410 * MiB))


def test_a_fit_within_the_noise_its_repeats_measured_is_not_verified() -> None:
    # 2,352 MiB limit; three runs, the highest 2,340 MiB: 12 MiB of room, but the exit's repeats
    # spread by 25 MiB (the spike at the end of one rank's life)
    runs = tuple(
        Attempt((B,), Outcome.OK, number=n, whole_run_bytes=mib * MiB, fixed_bytes=mib * MiB, fixed_phase=Phase.EXIT)
        for n, mib in ((1, 2315), (2, 2340), (3, 2318))
    )
    spread = RunSpread.of_trials(
        [measured("k", 16, 2300, 2300, exit_peak_bytes=mib * MiB) for mib in (2315, 2340, 2318)]
    )
    assert spread.exit == PhaseSpread(25 * MiB, 3) and spread.noise_bytes == 25 * MiB
    searched = replace(state(2400, *runs, margin=0.02), repeats=3, spread=spread)
    room = searched.room(runs[0])
    assert room is not None and room.under_limit_bytes == 12 * MiB and not room.verified
    assert room.verdict == "within the run-to-run spread of the limit, not verified"
    assert best_verified(searched) is None


@pytest.mark.parametrize("outcome", [Outcome.OVER_BUDGET, Outcome.OUT_OF_MEMORY, Outcome.CRASHED])
def test_over_budget_or_out_of_memory_adds_plans(outcome: Outcome) -> None:
    step = next_step(state(2400, Attempt((B,), outcome, number=1)))
    assert isinstance(step, TryPlans) and B in step.plans and len(step.plans) > 1


def test_a_plan_ort_left_off_is_dropped_from_later_selections() -> None:
    step = next_step(state(2400, Attempt((B,), Outcome.OVER_BUDGET, left_off=(B,), number=1)))
    assert isinstance(step, TryPlans) and B not in step.plans and step.plans
    assert "OFF" in step.reason
    assert B not in state(2400, Attempt((B,), Outcome.OVER_BUDGET, left_off=(B,))).useful_plans()


def test_nothing_fits_suggests_the_largest_batch_predicted_to_fit() -> None:
    # every plan saves 70 MiB/sample: 1000 + 30·b ≤ 1400 MiB up to batch 13
    first = next_step(state(1400))
    assert isinstance(first, TryPlans) and set(first.plans) == {A, B, C}
    # before any search trial: the lowest peak the plans reach, the budget that would do, the batch that fits
    assert "the lowest peak at batch 16 is 1,480.0 MiB (A+, B+, C+; no config 2,600.0 MiB)" in first.reason
    assert (
        "a budget of 1,480.0 MiB or more (no run repeated yet: the run-to-run noise it would need room for "
        "is not in it), or batch 13, is predicted to fit; checking the prediction with one run at batch 16 (A+, B+, C+)"
    ) in first.reason
    stop = next_step(state(1400, Attempt((A, B, C), Outcome.OVER_BUDGET, number=1)))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE
    assert stop.largest_batch == 13 and "batch 13" in stop.message
    assert "tried 3 of 3 plans: A+, B+, C+" in stop.message


def test_impossible_without_a_plan_that_saves_does_not_claim_every_plan() -> None:
    stop = next_step(state(1400, Attempt((A, B, C), Outcome.OVER_BUDGET, left_off=(A, B, C), number=1)))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE, stop
    assert "and no plan is predicted to lower its peak" in stop.message and "every plan" not in stop.message
    assert "tried 0 of 3 plans: none; left out (ORT left them OFF): A+, B+, C+" in stop.message


def test_impossible_names_the_plans_left_out_and_why() -> None:
    stop = next_step(state(1400, Attempt((A, B, C), Outcome.OVER_BUDGET, left_off=(A,), number=1)))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE, stop
    assert "tried 2 of 3 plans: B+, C+; left out (ORT left them OFF): A+" in stop.message


def test_a_broken_recipe_stops_the_search() -> None:
    stop = next_step(state(2400, Attempt((B,), Outcome.RECIPE_ERROR, error="no make_batch", number=1)))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.FAILED and "no make_batch" in stop.message


def test_max_trials_ends_the_search_without_a_verified_config() -> None:
    stop = next_step(state(2400, Attempt((B,), Outcome.OVER_BUDGET, number=1), max_trials=1))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.MAX_TRIALS and "no verified config" in stop.message


def test_best_is_the_config_with_the_most_room() -> None:
    # B is the cost model's cheapest, A leaves more room under the limit: A is chosen
    attempts = (
        Attempt((B,), Outcome.OK, 0.40, number=1, whole_run_bytes=2390 * MiB),
        Attempt((A,), Outcome.OK, 0.60, number=2, whole_run_bytes=2200 * MiB),
        Attempt((), Outcome.OVER_BUDGET, 0.3, number=3, whole_run_bytes=2600 * MiB),
    )
    best = best_verified(state(2400, *attempts))
    assert best is not None and best.attempt == attempts[1]
    assert best.rule == "the most room under the limit of the 2 configs verified"
    assert best_verified(state(2400)) is None


def test_rooms_within_the_noise_are_alike_and_the_cheapest_of_them_wins() -> None:
    # no config and B both verified, B 1.7 MiB further under the limit, the runs spread 2.5 MiB:
    # the noise alone can reorder them, so no config (nothing recomputed) is the answer
    attempts = (
        Attempt((), Outcome.OK, 0.30, number=1, whole_run_bytes=2300 * MiB),
        Attempt((B,), Outcome.OK, 0.31, number=2, whole_run_bytes=int(2298.3 * MiB)),
    )
    spread = RunSpread.of_trials([measured("k", 16, mib, mib) for mib in (2300, 2302.5, 2301)])
    best = best_verified(replace(state(2400, *attempts), spread=spread))
    assert best is not None and best.attempt == attempts[0]
    assert best.rule.startswith("the cheapest of the 2 configs verified whose room under the limit is within")


def test_over_budget_at_start_up_stops_the_search() -> None:
    # the steps fit (B predicted within the budget), the export and session build do not
    over = Attempt((B,), Outcome.OVER_BUDGET, number=1, fixed_bytes=2500 * MiB)
    stop = next_step(state(2400, over))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE
    assert "start-up" in stop.message and "2,500.0 MiB" in stop.message


def test_over_budget_at_the_jobs_exit_beyond_what_recompute_reaches_stops_the_search() -> None:
    # The exit peaked at 2,500 MiB with B (steps predicted 2,280 MiB); every plan takes a
    # further 800 MiB off the steps, so the exit can come down to 1,700 MiB at best: over 1,600.
    over = Attempt((B,), Outcome.OVER_BUDGET, number=1, fixed_bytes=2500 * MiB, fixed_phase=Phase.EXIT)
    stop = next_step(state(1600, over))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE
    assert "the job's exit" in stop.message and "2,500.0 MiB" in stop.message and "start-up" not in stop.message
    assert "recompute cannot lower it enough: the lowest reachable peak is about 1,700.0 MiB" in stop.message


def test_over_budget_at_the_jobs_exit_tries_more_recompute_where_it_could_reach() -> None:
    # The exit's peak is the process's lifetime peak: it begins where the steps left the process,
    # so taking more off the steps (up to 800 MiB here) can bring it under 2,400 MiB.
    over = Attempt((B,), Outcome.OVER_BUDGET, number=1, fixed_bytes=2500 * MiB, fixed_phase=Phase.EXIT)
    step = next_step(state(2400, over))
    assert isinstance(step, TryPlans) and B in step.plans and len(step.plans) > 1, step


def test_a_fit_over_the_limit_by_an_exit_a_hair_above_the_steps_tries_more_recompute() -> None:
    # Measured on the demo's GPT: the steps peaked at 1,018.5 MiB, the exit's lifetime peak at
    # 1,018.8 MiB, within the budget, over the limit: the steps' level, which recompute lowers.
    fit = Attempt(
        (B,), Outcome.OK, number=1, fixed_bytes=2390 * MiB, whole_run_bytes=2390 * MiB, fixed_phase=Phase.EXIT
    )
    step = next_step(state(2400, fit, margin=0.02))
    assert isinstance(step, TryPlans) and B in step.plans and len(step.plans) > 1, step


def test_over_budget_on_cuda_with_a_start_up_under_it_adds_plans() -> None:
    # On CUDA the verdict is on reserved + outside: the start-up peaked above the steps in
    # allocated bytes, but alone it fits; the steps' segments made the run over, and more
    # recompute may take some away.
    over = Attempt((B,), Outcome.OVER_BUDGET, number=1, fixed_bytes=2000 * MiB)
    step = next_step(state(2400, over))
    assert isinstance(step, TryPlans) and B in step.plans and len(step.plans) > 1


# -- verdicts against the limit and the run-to-run spread ---------------------------------------

# The start-up (export, session build) measured at 1,090 MiB in runs at batch 8 and 16, 12 MiB apart.
START_UP = FixedPeaks(((8, 1084 * MiB), (16, 1096 * MiB)))
START_UP_SPREAD = RunSpread(start_up=PhaseSpread(12 * MiB, 2))


def test_a_fit_under_the_budget_but_over_the_limit_is_not_verified() -> None:
    # budget 2,400 MiB less 2%: limit 2,352 MiB; the steps peaked at 2,380 MiB, within the budget
    fit = Attempt((B,), Outcome.OK, 0.5, number=1, whole_run_bytes=2380 * MiB)
    searched = state(2400, fit, margin=0.02)
    assert not searched.verified(fit) and best_verified(searched) is None
    step = next_step(searched)
    assert isinstance(step, TryPlans) and B in step.plans and len(step.plans) > 1
    assert "28.0 MiB over the limit 2,352.0 MiB" in step.reason and "not verified" in step.reason


def test_a_start_up_fit_within_its_spread_of_the_limit_says_so_instead_of_verified() -> None:
    # limit 1,078.0 MiB (1,100 MiB less 2%); the start-up peaked at 1,070 MiB: 8 MiB of room, 12 MiB of spread
    fit = Attempt((B,), Outcome.OK, number=1, fixed_bytes=1070 * MiB, whole_run_bytes=1070 * MiB)
    searched = state(1100, fit, margin=0.02, fixed_peaks=START_UP, spread=START_UP_SPREAD)
    room = searched.room(fit)
    assert room is not None and room.phase is Phase.START_UP and not room.verified
    stop = next_step(searched)
    assert isinstance(stop, Stop) and stop.status is SearchStatus.WITHIN_NOISE, stop
    assert "within the run-to-run noise of what is reachable" in stop.message
    assert "8.0 MiB under the limit 1,078.0 MiB" in stop.message and "spread of the start-up 12.0 MiB" in stop.message
    assert "recompute cannot lower the start-up" in stop.message
    # verified needs more than 1,070 + 12 MiB under the limit: above 1,082 / 0.98 (1,104.08)
    assert "a budget of 1,104.1 MiB or more would verify" in stop.message
    assert best_verified(searched) is None


def test_a_start_up_fit_over_the_limit_is_not_called_noise() -> None:
    # within the budget (1,090 ≤ 1,100 MiB) but over the limit 1,078 MiB: recompute cannot help
    fit = Attempt((B,), Outcome.OK, number=1, fixed_bytes=1090 * MiB, whole_run_bytes=1090 * MiB)
    stop = next_step(state(1100, fit, margin=0.02, fixed_peaks=START_UP, spread=START_UP_SPREAD))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE, stop
    assert "peaks at 1,090.0 MiB > limit 1,078.0 MiB; recompute cannot lower it" in stop.message


def test_every_plan_on_within_the_budget_but_over_the_limit_is_within_the_noise_not_impossible() -> None:
    fit = Attempt((A, B, C), Outcome.OK, number=1, whole_run_bytes=1395 * MiB)
    stop = next_step(state(1400, fit, margin=0.02))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.WITHIN_NOISE, stop
    assert "trial 1 (A+, B+, C+) is 23.0 MiB over the limit 1,372.0 MiB" in stop.message
    assert "every plan is on; a budget of 1,423.5 MiB or more would verify" in stop.message


def test_a_config_that_fit_the_budget_is_named_when_every_plan_then_runs_over_it() -> None:
    # A and B fit the budget but not the limit; every plan at once then ran over the budget
    # (more plans can raise the peak): the search ends within the noise, naming A and B's run,
    # not "batch 16 does not fit even with every plan".
    close = Attempt((A, B), Outcome.OK, number=1, whole_run_bytes=1390 * MiB)
    every = Attempt((A, B, C), Outcome.OVER_BUDGET, number=2, whole_run_bytes=1450 * MiB)
    stop = next_step(replace(state(1400, close, every, margin=0.02), trials_used=2))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.WITHIN_NOISE, stop
    assert "trial 1 (A+, B+) is 18.0 MiB over the limit" in stop.message and "does not fit" not in stop.message
    over = next_step(replace(state(1400, every, margin=0.02), trials_used=1))
    assert isinstance(over, Stop) and over.status is SearchStatus.IMPOSSIBLE  # nothing fit the budget


def test_a_fit_with_more_room_than_the_spread_is_verified_and_says_how_much() -> None:
    fit = Attempt((B,), Outcome.OK, number=1, fixed_bytes=1060 * MiB, whole_run_bytes=1060 * MiB)
    searched = state(1100, fit, margin=0.02, fixed_peaks=START_UP, spread=START_UP_SPREAD)
    room = searched.room(fit)
    assert room is not None and room.verified
    assert room.describe() == (
        "18.0 MiB under the limit 1,078.0 MiB at the whole run's peak (the start-up binds); "
        "run-to-run spread of the start-up 12.0 MiB (2 runs of one config)"
    )
    best = best_verified(searched)
    assert best is not None and best.attempt == fit


def test_a_phase_run_once_has_no_spread_and_needs_only_the_limit() -> None:
    fit = Attempt((B,), Outcome.OK, number=1, whole_run_bytes=2350 * MiB)
    searched = state(2400, fit, margin=0.02)
    room = searched.room(fit)
    assert room is not None and room.verified and "not measured yet" in room.describe()


def test_advice_counts_the_start_up_and_never_says_batch_0() -> None:
    # every plan brings the steps to 1,480 MiB at batch 16, under the limit 1,568 MiB (1,600 MiB
    # less 2%); the start-up was measured at 1,590 MiB at batch 8 and 1,602 MiB at batch 16
    start_up = FixedPeaks(((8, 1590 * MiB), (16, 1602 * MiB)))
    first = next_step(state(1600, margin=0.02, fixed_peaks=start_up, spread=START_UP_SPREAD))
    assert isinstance(first, TryPlans)
    assert "the lowest peak at batch 16 is 1,602.0 MiB, the start-up's (measured; recompute cannot lower it" in (
        first.reason
    ), first.reason
    # the start-up at batch 16 plus its spread, over 0.98; no batch's start-up is under the limit
    assert "a budget of 1,647.0 MiB or more is predicted to fit; not even batch 1" in first.reason
    assert "batch 0" not in first.reason


def test_nothing_fitting_at_any_batch_says_not_even_batch_1() -> None:
    stop = next_step(state(800, Attempt((A, B, C), Outcome.OVER_BUDGET, number=1)))
    assert isinstance(stop, Stop) and stop.status is SearchStatus.IMPOSSIBLE
    assert "predicted to fit: not even batch 1" in stop.message and "batch 0" not in stop.message
    assert next_step(state(800)).reason.endswith(
        "not even batch 1 is predicted to fit in this budget; checking the prediction with one run at batch 16 (A+, B+, C+)"
    )


def test_start_up_predicted_by_batch_and_its_spread_from_repeats() -> None:
    start_up = FixedPeaks(((4, 1000 * MiB), (8, 1010 * MiB)))
    assert start_up.at(16) == pytest.approx(1030 * MiB)
    assert start_up.largest_batch(1021 * MiB, 15) == 12 and start_up.largest_batch(900 * MiB, 15) == 0
    assert FixedPeaks(((8, 1000 * MiB), (4, 1010 * MiB))).at(16) == pytest.approx(
        1005 * MiB
    )  # never falls with the batch
    assert FixedPeaks().at(16) is None and FixedPeaks().largest_batch(1, 15) == 15


# -- the tuning loop over the fake runner ------------------------------------------------------


def budget_between(runner: FakeRunner, fraction: float = 0.5) -> int:
    """A budget ``fraction`` of the way from the every-plan peak to the no-config peak at batch 16."""
    every = tuple(p.key for p in runner.prepared.report.patterns)
    low, high = runner.peak(16, every), runner.peak(16, ())
    return int(low + fraction * (high - low))


def test_tuner_verifies_a_config_in_one_search_trial_when_the_model_is_right(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    budget = budget_between(runner)
    tuner = fake_tuner(tmp_path, runner, budget)
    result = tuner.auto_search()
    assert result.status is SearchStatus.VERIFIED, result.message
    search = [r for r in result.trials if r.purpose is Purpose.SEARCH]
    assert search[0].fits and search[0].peak_bytes is not None and search[0].peak_bytes <= budget
    error = search[0].prediction_error
    assert error is not None and abs(error) < 0.01  # the fake measures what the model predicts
    # calibration at batch 8 and three runs at the target (their noise), then the search's choice
    # three times (the verdict's)
    calibration = [r.batch_size for r in result.trials if r.purpose is Purpose.CALIBRATION]
    assert calibration == [8, 16, 16, 16] and [r.purpose for r in result.trials][4:] == [Purpose.SEARCH] * 3
    assert len({r.plans for r in search}) == 1
    assert tuner.export_lines()[0].startswith("export ORTMODULE_MEMORY_OPT_CONFIG=")
    assert len(list(Journal.in_folder(tmp_path).entries())) == len(result.trials)


def test_tuner_says_how_much_room_the_verified_config_leaves(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    tuner = fake_tuner(tmp_path, runner, budget_between(runner), margin=0.02)
    result = tuner.auto_search()
    assert result.status is SearchStatus.VERIFIED and result.best is not None, result.message
    assert (
        "MiB under the limit" in result.message
        and "spread of the steps 0.0 MiB (3 runs of one config)" in result.message
    )
    best = tuner.summary(result)["best"]
    assert best["room_bytes"] == tuner.limit_bytes - best["whole_run_peak_bytes"] >= 0
    assert best["spread_bytes"] == 0.0


def test_tuner_learns_what_the_allocator_adds_when_the_first_guess_misses(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt(), allocator_scale=1.6)
    # One verifying run and so no calibration runs at the target, whose second batch would teach
    # the model the allocator's scale before the first guess.
    tuner = fake_tuner(tmp_path, runner, budget_between(runner, 0.3), repeats=1)
    result = tuner.auto_search()
    assert result.status is SearchStatus.VERIFIED, result.message
    search = [r for r in result.trials if r.purpose is Purpose.SEARCH]
    assert len(search) >= 2 and not search[0].fits  # the first guess overshoots; the model recalibrates
    assert tuner.model is not None and tuner.model.activation_scale > 1.0


def test_tuner_drops_a_plan_ort_leaves_off(tmp_path: Path) -> None:
    prepared = prepared_gpt()
    runner = FakeRunner(prepared)
    planning = fake_tuner(tmp_path / "plan", runner, budget_between(runner))
    planning.setup()
    first = next_step(planning.search_state())
    assert isinstance(first, TryPlans) and first.plans
    ignored = frozenset(first.plans[:1])
    runner = FakeRunner(prepared, ignored=ignored)
    tuner = fake_tuner(tmp_path / "run", runner, budget_between(runner))
    result = tuner.auto_search()
    search = [r for r in result.trials if r.purpose is Purpose.SEARCH]
    assert search[0].left_off == tuple(ignored)
    # Later choices leave it out; the first config's own repeats are the same config again.
    later = [r for r in search if set(r.plans) != set(search[0].plans)]
    assert all(not (ignored & set(r.plans)) for r in later)
    assert result.status is SearchStatus.VERIFIED and not any(key in tuner.export_lines()[0] for key in ignored)


def test_tune_json_carries_what_ort_ran_on_and_left_off(tmp_path: Path) -> None:
    prepared = prepared_gpt()
    planning = fake_tuner(tmp_path / "plan", FakeRunner(prepared), budget_between(FakeRunner(prepared)))
    planning.setup()
    first = next_step(planning.search_state())
    assert isinstance(first, TryPlans) and first.plans
    ignored = first.plans[0]
    runner = FakeRunner(prepared, ignored=frozenset({ignored}))
    tuner = fake_tuner(tmp_path / "run", runner, budget_between(runner))
    summary = json.loads(json.dumps(tuner.summary(tuner.auto_search()), default=str))
    trials = summary["trials"]
    assert all("plans_on" in t and "plans_off" in t for t in trials)
    assert trials[0]["plans_on"] == trials[0]["plans_off"] == []  # the no-config calibration
    search = next(t for t in trials if t["purpose"] == "search")
    assert ignored not in search["plans_on"] and any(ignored in entry for entry in search["plans_off"])
    assert set(search["plans_on"]) == set(search["plans"]) - {ignored}
    best = summary["best"]
    # The final config leaves the plan out; its trial says ORT left it off where it ran with it.
    assert best is not None and set(best["plans_on"]) == set(best["plans"]) and ignored not in best["plans"]
    assert all(ignored in entry for entry in best["plans_off"])


def test_tuner_says_which_batch_fits_when_none_does(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    every = tuple(p.key for p in runner.prepared.report.patterns)
    # Between batch 4 and batch 8 with every plan on: batch 16 fits with no selection (every plan
    # at once is not always the lowest: some selections leave the arena's placement worse).
    tuner = fake_tuner(tmp_path, runner, int((runner.peak(8, every) + runner.peak(4, every)) / 2), max_trials=3)
    result = tuner.auto_search()
    assert result.status is SearchStatus.IMPOSSIBLE and not result.verified
    assert result.largest_batch is not None and 0 < result.largest_batch < 16
    assert f"batch {result.largest_batch}" in result.message


def test_a_lower_batchs_check_is_said_under_the_limit_by_its_own_run(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    every = tuple(p.key for p in runner.prepared.report.patterns)
    tuner = fake_tuner(tmp_path, runner, int((runner.peak(8, every) + runner.peak(4, every)) / 2), max_trials=8)
    result = tuner.auto_search()
    assert result.largest_batch is not None and 0 < result.largest_batch < 16
    check = next(r for r in tuner.records if r.batch_size == result.largest_batch)
    # Where the target batch ran the same plans over the limit (a Llama's lowest selection was
    # every plan), that run is no repeat of the check's.
    over = next(r for r in tuner.records if r.batch_size == 16 and r.purpose is Purpose.SEARCH and not r.fits)
    tuner.records.append(replace(over, plans=check.plans, number=len(tuner.records) + 1))
    room = tuner.room(check)
    assert room is not None and room.runs == 1 and room.under_limit_bytes > 0


def test_cancel_mid_trial_ends_the_search_and_keeps_the_journal(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt(), pause_on=2)  # the first search trial
    tuner = fake_tuner(tmp_path, runner, budget_between(runner))
    runner.on_call = lambda number: number == 2 and threading.Timer(0.1, tuner.cancel).start()
    result = tuner.auto_search()
    assert result.status is SearchStatus.CANCELLED
    assert len(runner.calls) == 2 and result.trials[-1].outcome is Outcome.CANCELLED
    statuses = [entry.record["status"] for entry in Journal.in_folder(tmp_path).entries()]
    assert statuses == ["ok", "cancelled"]


def test_resume_reuses_finished_trials_and_reaches_the_same_config(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    budget = budget_between(runner)
    first = fake_tuner(tmp_path, runner, budget).auto_search()
    again = FakeRunner(runner.prepared)
    second = fake_tuner(tmp_path, again, budget, resume=True).auto_search()
    assert again.calls == []  # every trial came from the journal
    assert all(r.result.reused for r in second.trials)
    assert first.best is not None and second.best is not None and second.best.plans == first.best.plans


def test_resume_reuses_a_configs_runs_in_the_order_they_were_made(tmp_path: Path) -> None:
    """A config's repeats landed apart (the second run 12 MiB above the first, the third 6 MiB
    below): a resume hands the search that config's first run first, so it judges the same
    peaks in the same order (a search that judged its highest run first would go another way)."""
    jitter = tuple(mib * MiB for mib in (0, 0, 0, 0, 0, 12, -6, 0, 0, 0, 0, 0))
    runner = FakeRunner(prepared_gpt(), jitter_bytes=jitter)
    budget = budget_between(runner)
    first = fake_tuner(tmp_path, runner, budget).auto_search()
    again = FakeRunner(runner.prepared)
    second = fake_tuner(tmp_path, again, budget, resume=True).auto_search()
    assert again.calls == []
    assert [(r.plans, r.peak_bytes) for r in second.trials] == [(r.plans, r.peak_bytes) for r in first.trials]
    search = [r.peak_bytes or 0 for r in first.trials if r.purpose is Purpose.SEARCH]
    assert len(search) >= 3 and search[1] - search[0] == 12 * MiB  # the repeats did land apart


def test_resume_after_a_cancel_makes_the_decisions_of_an_uninterrupted_search(tmp_path: Path) -> None:
    def search_steps(result: object) -> list[tuple[str, ...]]:
        return [r.plans for r in result.trials if r.purpose is Purpose.SEARCH and r.outcome is not Outcome.CANCELLED]  # type: ignore[attr-defined]

    reference = FakeRunner(prepared_gpt(), allocator_scale=1.6)
    budget = budget_between(reference, 0.3)
    whole = fake_tuner(tmp_path / "whole", reference, budget).auto_search()
    assert len(search_steps(whole)) >= 2  # the model had to learn: there is something to repeat

    interrupted = FakeRunner(
        reference.prepared, allocator_scale=1.6, pause_on=3
    )  # the second search trial (after one calibration run)
    tuner = fake_tuner(tmp_path / "resumed", interrupted, budget)
    interrupted.on_call = lambda number: number == 3 and threading.Timer(0.1, tuner.cancel).start()
    assert tuner.auto_search().status is SearchStatus.CANCELLED
    for _ in range(2):  # a second resume continues exactly as the first did
        resumed = fake_tuner(
            tmp_path / "resumed", FakeRunner(reference.prepared, allocator_scale=1.6), budget, resume=True
        )
        result = resumed.auto_search()
        assert search_steps(result) == search_steps(whole)
        assert result.best is not None and whole.best is not None and result.best.plans == whole.best.plans


def test_tuner_adds_plans_after_an_out_of_memory_trial(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt(), allocator_scale=1.6)
    budget = budget_between(runner, 0.3)
    runner.oom_above = budget  # the device itself fails above the budget: no measurement
    result = fake_tuner(tmp_path, runner, budget).auto_search()
    search = [r for r in result.trials if r.purpose is Purpose.SEARCH]
    assert search[0].outcome is Outcome.OUT_OF_MEMORY and search[0].peak_bytes is None
    assert len(search[1].plans) > len(search[0].plans)
    assert result.status is SearchStatus.VERIFIED, result.message


def test_final_config_leaves_out_what_ort_left_off(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    every = tuple(p.key for p in runner.prepared.report.patterns)
    smallest = min(every, key=lambda key: runner.peak(16, tuple(k for k in every if k != key)))
    runner = FakeRunner(runner.prepared, ignored=frozenset({smallest}))
    tuner = fake_tuner(tmp_path, runner, budget_between(runner))
    record = tuner.run_trial(every)  # fits although ORT leaves one entry OFF
    assert record.fits and record.left_off == (smallest,)
    assert tuner.best() is None  # one run is not a verdict
    for _ in range(2):
        tuner.run_trial(every)
    best = tuner.best()
    assert best is not None and best.plans == tuple(k for k in every if k != smallest)
    assert all(smallest.split(":")[0] not in line for line in tuner.export_lines())


@pytest.mark.parametrize("peak_mib", [934.2, 1000.0, 1078.05])
def test_a_budget_named_to_verify_verifies_the_same_runs(peak_mib: float) -> None:
    # the named budget must be one the same runs verify at, not one a hair short of it
    runs = tuple(
        Attempt(
            (B,), Outcome.OK, number=n, whole_run_bytes=int((peak_mib - n) * MiB), fixed_bytes=1, fixed_phase=Phase.EXIT
        )
        for n in (0, 1, 2)
    )
    noisy = RunSpread(exit=PhaseSpread(2 * MiB, 3))
    named = replace(state(1, *runs, margin=0.02), repeats=3, spread=noisy).budget_for(runs[0].whole_run_bytes or 0)
    at_named = replace(state(named / MiB, *runs, margin=0.02), repeats=3, spread=noisy)
    assert at_named.verified(runs[0]) and best_verified(at_named) is not None
    below = replace(at_named, budget_bytes=int(named - 0.1 * MiB))
    assert not below.verified(runs[0])


# Room for the noise, learnt by the calibration before the first search.
CALIBRATION_NOISE = KeptRoom(RunSpread(steps=PhaseSpread(60 * MiB, 3)), 30 * MiB, 3, 8)


def test_the_room_kept_is_twice_the_noise_and_the_fits_residual_widened_by_the_search() -> None:
    assert CALIBRATION_NOISE.bytes() == 150 * MiB
    wider = RunSpread(exit=PhaseSpread(70 * MiB, 2))
    assert CALIBRATION_NOISE.bytes(wider) == 170 * MiB  # a repeat in the search measured more
    assert CALIBRATION_NOISE.bytes(RunSpread(steps=PhaseSpread(5 * MiB, 3))) == 150 * MiB
    line = CALIBRATION_NOISE.describe()
    assert line.startswith("150.0 MiB of room kept under the limit (2 × the run-to-run spread of the steps 60.0 MiB")
    assert "+ 30.0 MiB the model fell below" in line and "learnt from 3 no-config runs at batch 8" in line
    assert KeptRoom(RunSpread(), -5 * MiB, 1, 8).bytes() == 0  # an over-prediction keeps no room


def test_the_room_kept_expects_a_configs_runs_to_spread_wider_than_the_no_config_runs() -> None:
    # three no-config runs 3 MiB apart at a 2,600 MiB peak: a config's runs are taken to spread
    # by 1.5% of that peak (39 MiB) at the least
    quiet = KeptRoom(RunSpread(steps=PhaseSpread(3 * MiB, 3)), 4 * MiB, 3, 8, CONFIG_SPREAD * 2600 * MiB)
    assert quiet.bytes() == 2 * 39 * MiB + 4 * MiB
    line = quiet.describe()
    assert "2 × 39.0 MiB, the least a config's runs are taken to spread by (1.5% of the highest no-config run" in line
    assert "measured: run-to-run spread of the steps 3.0 MiB" in line
    # noise measured wider than that is kept room for as measured
    assert quiet.bytes(RunSpread(steps=PhaseSpread(40 * MiB, 2))) == 2 * 40 * MiB + 4 * MiB


def test_the_room_kept_adds_the_steps_largest_buffer_whose_place_the_simulation_cannot_be_sure_of() -> None:
    placed = KeptRoom(RunSpread(steps=PhaseSpread(10 * MiB, 3)), 4 * MiB, 3, 8, 0.0, 62 * MiB)
    assert placed.bytes() == 2 * 10 * MiB + 4 * MiB + 62 * MiB
    assert "+ 62.0 MiB, the step's largest buffer, which the allocator may place on pages" in placed.describe()
    # a model that over-predicted keeps no room for that, and still the buffer's
    assert replace(placed, residual_bytes=-30 * MiB).bytes() == 2 * 10 * MiB + 62 * MiB
    assert "largest buffer" not in CALIBRATION_NOISE.describe()


def test_the_tuner_learns_the_least_noise_from_its_highest_no_config_run(tmp_path: Path) -> None:
    runner = FakeRunner(prepared_gpt())
    tuner = fake_tuner(tmp_path, runner, budget_between(runner), max_trials=4)
    tuner.auto_search()
    assert tuner.kept_room is not None
    at_target = [r.result for r in tuner.records if r.purpose is Purpose.CALIBRATION and r.batch_size == 16]
    highest = max(r.memory.device_peak or 0 for r in at_target)
    assert tuner.kept_room.least_noise_bytes == pytest.approx(CONFIG_SPREAD * highest)
    assert tuner.model is not None and tuner.kept_room.placement_bytes == tuner.model.largest_buffer(16) > 0


def test_the_first_search_chooses_under_the_limit_less_the_room_kept() -> None:
    # no config 2600 MiB at batch 16, limit 2400: B alone (2280 MiB) fits the limit, not 150 MiB under it;
    # B and C (2120 MiB) do, cheaper than A
    kept = replace(state(2400), kept_room=CALIBRATION_NOISE)
    assert kept.planning_limit == 2250 * MiB
    step = next_step(kept)
    assert isinstance(step, TryPlans) and set(step.plans) == {B, C}, step
    assert "150.0 MiB of room kept under the limit" in step.reason and "learnt from 3 no-config runs" in step.reason
    assert next_step(state(2400)) == TryPlans((B,), next_step(state(2400)).reason)  # no room kept: as before


def test_room_that_no_selection_keeps_falls_back_to_the_limit_and_says_so() -> None:
    # every plan is predicted at 1480 MiB: 1000 MiB of room under 2400 is out of reach
    huge = KeptRoom(RunSpread(steps=PhaseSpread(450 * MiB, 3)), 100 * MiB, 3, 8)
    step = next_step(replace(state(2400), kept_room=huge))
    assert isinstance(step, TryPlans) and step.plans == (B,), step
    assert "120.0 MiB under the limit, not the 1,000.0 MiB of room kept" in step.reason


def test_after_an_overshoot_the_next_selection_keeps_the_room_too() -> None:
    # B ran over the limit of 2400 MiB: the planner's next choice is predicted 200 MiB under it
    over = Attempt((B,), Outcome.OVER_BUDGET, number=1, whole_run_bytes=2450 * MiB)
    step = next_step(replace(state(2400, over), kept_room=KeptRoom(RunSpread(), 200 * MiB, 1, 8)))
    assert isinstance(step, TryPlans) and set(step.plans) == {B, C}, step
    assert "B+, C+ predicted 2,120.0 MiB ≤ limit 2,400.0 MiB; 200.0 MiB of room kept" in step.reason


def test_with_the_calibrations_noise_kept_the_first_config_is_the_one_verified(tmp_path: Path) -> None:
    """The calibration's no-config runs at the target land 0, +8 and −8 MiB off (spread 16 MiB):
    the search keeps twice that and the fit's residual as room, and its first config, whose
    runs land as far apart, clears the noise with its first three runs. Without the room, the
    same runs take a second config (checked by hand: LayerNormalization+ then Dropout+)."""
    jitter = tuple(mib * MiB for mib in (0, 0, 8, -8, 8, -8, 0))
    runner = FakeRunner(prepared_gpt(), jitter_bytes=jitter)
    tuner = fake_tuner(tmp_path, runner, budget_between(runner), repeats=3)
    result = tuner.auto_search()
    assert result.status is SearchStatus.VERIFIED, result.message
    calibration = [(r.batch_size, r.plans) for r in result.trials if r.purpose is Purpose.CALIBRATION]
    assert calibration == [(8, ()), (16, ()), (16, ()), (16, ())]
    assert len({r.plans for r in result.trials if r.purpose is Purpose.SEARCH}) == 1  # the first config
    assert len(result.trials) == 7
    assert [spec.profile for spec in runner.calls[:4]] == [True, True, False, False]  # repeats measure noise only
    summary = tuner.summary(result)
    assert tuner.kept_room is not None and tuner.kept_room.runs == 3 and tuner.kept_room.batch == 16
    assert summary["kept_room_bytes"] >= 32 * MiB  # twice the spread, and the residual
    first = next(r for r in result.trials if r.purpose is Purpose.SEARCH)
    assert first.predicted_bytes is not None and first.predicted_bytes <= tuner.limit_bytes - 32 * MiB
    assert "2 × the run-to-run spread of the steps 16.0 MiB (3 runs of one config)" in first.reason
    assert "learnt from 3 no-config runs at batch 16" in first.reason
    assert "to measure its run-to-run noise (run 3 of 3)" in result.trials[3].reason


def test_the_calibrations_runs_at_the_target_are_the_no_config_answers_runs(tmp_path: Path) -> None:
    """No config fits with room to spare: the three no-config runs the calibration made at the
    target batch verify it, and the search runs nothing more."""
    runner = FakeRunner(prepared_gpt(), jitter_bytes=tuple(mib * MiB for mib in (0, 0, 3, -3)))
    tuner = fake_tuner(tmp_path, runner, int(runner.peak(16, ()) * 1.2))
    result = tuner.auto_search()
    assert result.status is SearchStatus.VERIFIED and result.best is not None, result.message
    assert "no recompute needed at this batch: verified by 3 runs of it" in result.message
    assert [(r.purpose, r.batch_size) for r in result.trials] == [
        (Purpose.CALIBRATION, 8),
        *[(Purpose.CALIBRATION, 16)] * 3,
    ]
    assert result.best.plans == () and tuner.export_lines() == [
        "unset ORTMODULE_MEMORY_OPT_CONFIG  # no recompute needed"
    ]


def test_a_no_config_calibration_run_over_the_budget_is_not_a_fit_of_the_answer(tmp_path: Path) -> None:
    # the budget between the no-config runs' peaks at the target: the planner's no config is not verified
    runner = FakeRunner(prepared_gpt(), jitter_bytes=tuple(mib * MiB for mib in (0, 0, 30, -30)))
    tuner = fake_tuner(tmp_path, runner, int(runner.peak(16, ()) + 10 * MiB))
    result = tuner.auto_search()
    search = [r for r in result.trials if r.purpose is Purpose.SEARCH]
    assert search and all(r.plans for r in search), [(r.purpose, r.plans) for r in result.trials]
