"""TuneSettings: the shared fields and ORT's own section, checked once as a session is asked."""

from __future__ import annotations

import pytest

from memopt.core import parse_runnable
from memopt.run import RunSettings
from memopt.tune import OrtTuneSettings, TuneError, TuneSettings


def test_a_command_without_its_batch_placeholder_calibrates_and_probes_at_its_own_batch() -> None:
    settings = TuneSettings(
        run=RunSettings(target=parse_runnable("cmd:python train.py")),
        target_batch=12,
        ort=OrtTuneSettings(calibration_batches=(2, 4), probe_batch=2),
    )
    assert settings.ort == OrtTuneSettings(calibration_batches=(12,), probe_batch=12)


def test_a_recipe_keeps_the_calibration_it_was_given() -> None:
    ort = OrtTuneSettings(calibration_batches=(2, 4), probe_batch=2)
    settings = TuneSettings(run=RunSettings(target=parse_runnable("gpt")), target_batch=16, ort=ort)
    assert settings.ort is ort
    assert TuneSettings(run=settings.run, target_batch=16).ort == OrtTuneSettings()


@pytest.mark.parametrize("batches", [(), (0, 4)])
def test_calibration_batches_must_be_positive(batches: tuple[int, ...]) -> None:
    with pytest.raises(TuneError, match="positive batch sizes"):
        TuneSettings(
            run=RunSettings(target=parse_runnable("gpt")),
            target_batch=16,
            ort=OrtTuneSettings(calibration_batches=batches),
        )
