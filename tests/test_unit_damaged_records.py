"""Damaged records read back from disk: reported and skipped, never a traceback, never inf or nan.

Real files: a journal line and a model library as memopt wrote them, then damaged by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_unit_reliability import small_model

from memopt.core import RunStatus, parse_target
from memopt.errors import DamagedRecord
from memopt.predict.calibrate import MODEL_FILE, load_saved_model, save_model
from memopt.run import Journal, TrialResult
from memopt.run.trials import Outcome

MiB = 2**20


def journaled_trial(tmp_path: Path) -> Journal:
    trial = TrialResult(
        key="k",
        target=parse_target("gpt"),
        options={},
        batch_size=4,
        config=("Gelu+:1:-1",),
        config_value=None,
        outcome=Outcome.OK,
        status=RunStatus.OK,
        run_dir=str(tmp_path / "run"),
        steps=2,
        device="cpu",
        peak_bytes=300 * MiB,
        step_times_s=(0.5, 0.1, 0.1),
        median_step_s=0.1,
        plans_on=("Gelu+:1:-1",),
    )
    journal = Journal.in_folder(tmp_path)
    journal.append(trial.to_record())
    return journal


def damage(journal: Journal, field: str, raw: str) -> None:
    """Replace ``field``'s value in the journal's one line by the raw JSON text ``raw``."""
    record = json.loads(journal.path.read_text())
    record[field] = "@@"
    journal.path.write_text(json.dumps(record).replace('"@@"', raw) + "\n")


def test_an_intact_record_reads_back(tmp_path: Path) -> None:
    entry = next(journaled_trial(tmp_path).entries())
    trial = TrialResult.from_record(entry.record, entry.where)
    assert trial is not None and trial.peak_bytes == 300 * MiB and trial.plans_on == ("Gelu+:1:-1",)


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("peak_bytes", '"abc"'),
        ("peak_bytes", "Infinity"),
        ("peak_bytes", "NaN"),
        ("peak_bytes", "-5"),
        ("peak_bytes", "1.5"),
        ("plans_on", "5"),
        ("step_times_s", "[NaN, 0.1]"),
        ("median_step_s", "Infinity"),
        ("batch_size", "0"),
        ("ranks", '[{"rank": 0, "peak_bytes": "x"}]'),
    ],
)
def test_a_damaged_trial_record_is_reported_and_skipped(tmp_path: Path, field: str, raw: str) -> None:
    journal = journaled_trial(tmp_path)
    damage(journal, field, raw)
    entry = next(journal.entries())
    with pytest.warns(DamagedRecord, match=rf"journal.jsonl line 1: skipped a damaged trial record \({field}"):
        assert TrialResult.from_record(entry.record, entry.where) is None


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("static_bytes", "NaN"),
        ("per_sample_bytes", "Infinity"),
        ("static_bytes", '"12"'),
        ("fixed_dims", '{"seq": -1}'),
    ],
)
def test_a_damaged_saved_model_is_reported_and_skipped(tmp_path: Path, field: str, raw: str) -> None:
    save_model(tmp_path, "me", small_model(100))
    model = load_saved_model(tmp_path, "me")
    assert model is not None and math.isfinite(model.predict(4, ()).peak_bytes)
    saved = json.loads((tmp_path / MODEL_FILE).read_text())
    saved["me"][field] = "@@"
    (tmp_path / MODEL_FILE).write_text(json.dumps(saved).replace('"@@"', raw))
    with pytest.warns(DamagedRecord, match="memopt_models.json: skipped the damaged model"):
        assert load_saved_model(tmp_path, "me") is None
