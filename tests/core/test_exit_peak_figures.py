"""The job's exit in a run's memory figures (pure logic): the exit peak joins the whole run and
names its phase where it is highest, only on CPU, and journal records from before it read back."""

from __future__ import annotations

from support.results import MiB, measured

from memopt.core.memory import Memory, Phase
from memopt.core.trial import TrialResult


def test_an_exit_above_the_run_binds_the_whole_run() -> None:
    memory = Memory("rss", peak_bytes=800 * MiB, peak_over_run_bytes=780 * MiB).with_exit_peak(850 * MiB)
    assert memory.whole_run_peak == 850 * MiB and memory.binding_phase is Phase.EXIT
    assert memory.device_peak == 850 * MiB and memory.fixed_floor == 850 * MiB  # recompute cannot lower it


def test_an_exit_below_the_run_changes_nothing() -> None:
    start_up = Memory("rss", peak_bytes=800 * MiB, peak_over_run_bytes=900 * MiB).with_exit_peak(850 * MiB)
    assert start_up.whole_run_peak == 900 * MiB and start_up.binding_phase is Phase.START_UP
    steps = Memory("rss", peak_bytes=800 * MiB, peak_over_run_bytes=780 * MiB).with_exit_peak(790 * MiB)
    assert steps.whole_run_peak == 800 * MiB and steps.binding_phase is Phase.STEPS


def test_a_cuda_run_takes_no_host_rss_as_its_exit() -> None:
    cuda = Memory("cuda_allocated", peak_bytes=800 * MiB, peak_over_run_bytes=780 * MiB)
    assert cuda.with_exit_peak(4000 * MiB) == cuda


def test_the_exit_survives_the_journal_and_an_older_record_reads_back_without_one() -> None:
    trial = measured("k", 4, 800, 780, exit_peak_bytes=850 * MiB)
    record = trial.to_record()
    assert record["exit_peak_bytes"] == 850 * MiB and record["binding_phase"] == "exit"
    assert record["whole_run_peak_bytes"] == 850 * MiB
    again = TrialResult.from_record(record, "journal")
    assert again is not None and again.memory.binding_phase is Phase.EXIT
    del record["exit_peak_bytes"]
    older = TrialResult.from_record(record, "journal")
    assert older is not None and older.memory.exit_peak_bytes is None and older.memory.whole_run_peak == 800 * MiB
