"""The run-to-run spread of each phase and the start-up's peak, from the trials a session ran
(hand-made trial results: pure logic, no process)."""

from __future__ import annotations

from support.results import MiB, measured

from memopt.core.memory import Phase
from memopt.predict import FixedPeaks, PhaseSpread, RunSpread


def test_a_single_run_measures_no_spread() -> None:
    assert RunSpread.of_trials([measured("a", 8, 1000, 1090)]) == RunSpread()


def test_the_ranks_of_one_job_are_not_repeats() -> None:
    # two ranks are two processes doing different work (rank 0 logs, saves): not noise
    job = measured("a", 8, 1010, 1123, (1000, 1120), (1010, 1123))
    assert RunSpread.of_trials([job]) == RunSpread()


def test_repeats_of_a_two_rank_job_are_measured_rank_by_rank_and_counted_as_runs() -> None:
    # rank 1 holds 120 MiB more than rank 0 in both runs: the spread is each rank's own, 4 MiB at
    # most; the second run's exit spiked 25 MiB (the end of one rank's life)
    runs = [
        measured("a", 8, 1010, 1123, (1000, 1120), (1010, 1123), exit_peak_bytes=1130 * MiB),
        measured("a", 8, 1012, 1124, (1004, 1121), (1012, 1124), exit_peak_bytes=1155 * MiB),
    ]
    spread = RunSpread.of_trials(runs)
    assert spread.steps == PhaseSpread(4 * MiB, 2) and spread.start_up == PhaseSpread(1 * MiB, 2)
    assert spread.exit == PhaseSpread(25 * MiB, 2) and spread.whole_run == PhaseSpread(25 * MiB, 2)
    assert spread.noise_bytes == 25 * MiB
    assert spread.noise_line() == "run-to-run spread of the exit 25.0 MiB (2 runs of one config)"


def test_repeats_of_one_trial_measure_its_phase() -> None:
    # the same key twice (a resumed or repeated trial): the start-up bound both times, 15 MiB apart
    runs = [measured("a", 8, 1000, 1090), measured("a", 8, 990, 1105), measured("c", 4, 950, 1080)]
    spread = RunSpread.of_trials(runs)
    assert spread.start_up == PhaseSpread(15 * MiB, 2) and spread.steps == PhaseSpread(10 * MiB, 2)
    assert (
        spread.start_up.describe(Phase.START_UP) == "run-to-run spread of the start-up 15.0 MiB (2 runs of one config)"
    )
    assert FixedPeaks.of_trials(runs).samples == ((8, 1090 * MiB), (8, 1105 * MiB), (4, 1080 * MiB))


def test_other_configs_and_batches_are_not_counted_as_noise() -> None:
    # a warm-up step that binds the start-up changes with the config and the batch: not noise
    runs = [measured("a", 8, 1000, 1090), measured("b", 8, 990, 1060), measured("c", 4, 950, 1000)]
    assert RunSpread.of_trials(runs) == RunSpread()


def test_runs_the_steps_bound_tell_nothing_of_the_start_up() -> None:
    runs = [measured("a", 8, 1000, 1000), measured("a", 8, 1004, 1004)]
    spread = RunSpread.of_trials(runs)
    assert spread.steps == PhaseSpread(4 * MiB, 2) and spread.start_up is None
    assert FixedPeaks.of_trials(runs).samples == ()


def test_the_jobs_exit_is_a_fixed_peak_and_its_repeats_measure_its_spread() -> None:
    # optimum's run_clm.py on CPU: the steps peak near 970 MiB, the interpreter's exit 40-70 MiB
    # above, whatever is recomputed; the same key twice measures the exit's spread
    runs = [
        measured("a", 8, 975, 975, exit_peak_bytes=1012 * MiB, config=("A+:1:-1",)),
        measured("a", 8, 972, 972, exit_peak_bytes=1038 * MiB, config=("A+:1:-1",)),
        measured("b", 8, 964, 964, exit_peak_bytes=1008 * MiB, config=("B+:1:-1",)),
    ]
    spread = RunSpread.of_trials(runs)
    assert spread.exit == PhaseSpread(26 * MiB, 2) and spread.of(Phase.EXIT) == spread.exit
    peaks = FixedPeaks.of_trials(runs)
    assert peaks.phase is Phase.EXIT
    assert peaks.samples == ((8, 1012 * MiB), (8, 1038 * MiB), (8, 1008 * MiB))


def test_the_exit_of_a_run_without_recompute_is_no_floor_for_a_config() -> None:
    # no config at batch 128: the exit bound by 0.1 MiB over steps that any config ends lower
    runs = [measured("none", 128, 1150.9, 1150.9, exit_peak_bytes=int(1151.0 * MiB))]
    assert RunSpread.of_trials(runs).exit is None and FixedPeaks.of_trials(runs).samples == ()
