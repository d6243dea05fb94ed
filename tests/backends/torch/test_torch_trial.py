"""A torch trial's journal record read back on --resume: reused where it is what this release
writes, run afresh where a field is not (a record edited by hand or written elsewhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memopt.backends.torch.trial import TRIAL_KIND, run_torch_trial, trial_key
from memopt.core import RunStatus, parse_runnable
from memopt.recompute import RecomputePolicy
from memopt.run.journal import Journal
from memopt.run.settings import RunSettings

pytestmark = pytest.mark.torch

NONE = RecomputePolicy(())


def journaled(settings: RunSettings, **fields: Any) -> Journal:
    journal = Journal.in_folder(settings.runs_dir)
    record = {
        "key": trial_key(settings, 2, NONE),
        "kind": TRIAL_KIND,
        "batch": 2,
        "plans": [],
        "status": RunStatus.OK.value,
        "run_dir": str(settings.runs_dir / "earlier"),
        "peak_bytes": 123_456_789,
        "median_step_s": 0.5,
        "error": None,
        "allocator": {"MALLOC_MMAP_THRESHOLD_": "131072"},
    }
    journal.append(record | fields)
    return journal


def settings_in(folder: Path) -> RunSettings:
    return RunSettings(target=parse_runnable("mlp"), device="cpu", runs_dir=folder, steps=2)


def test_a_record_as_written_is_reused_without_a_run(tmp_path: Path) -> None:
    settings = settings_in(tmp_path / "runs")
    trial = run_torch_trial(settings, 2, NONE, journal=journaled(settings), resume=True)
    assert trial.reused and trial.peak_bytes == 123_456_789 and trial.median_step_s == 0.5
    assert dict(trial.allocator) == {"MALLOC_MMAP_THRESHOLD_": "131072"}


@pytest.mark.parametrize(
    "fields",
    [
        {"allocator": "131072"},
        {"allocator": {"MALLOC_MMAP_THRESHOLD_": 131072}},
        {"peak_bytes": "lots"},
        {"run_dir": 7},
    ],
)
def test_a_record_with_a_field_this_release_does_not_write_is_run_afresh(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    settings = settings_in(tmp_path / "runs")
    trial = run_torch_trial(settings, 2, NONE, journal=journaled(settings, **fields), resume=True)
    assert not trial.reused and trial.status is RunStatus.OK and trial.peak_bytes != 123_456_789
