"""Damaged records read back from disk: reported and skipped, never a traceback, never inf or nan.

Real files: a journal line and a model library as memopt wrote them, then damaged by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_reliability import small_model

from memopt.backends.ort.calibrate import MODEL_FILE, load_saved_model, save_model
from memopt.core import RunStatus, parse_target
from memopt.core.memory import Memory
from memopt.core.records import checked_calibration_record
from memopt.core.trial import Outcome, TrialResult
from memopt.errors import DamagedRecord
from memopt.run import Journal

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
        memory=Memory(peak_bytes=300 * MiB),
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
    assert trial is not None and trial.memory.peak_bytes == 300 * MiB and trial.plans_on == ("Gelu+:1:-1",)


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
        # Correctly typed, but more than any machine holds: an overflow later, or a wrong answer.
        ("peak_bytes", str(10**400)),
        ("peak_bytes", str(10**30)),
        ("cuda_total_memory", str(2**61)),
        ("ranks", f'[{{"rank": 0, "peak_bytes": {10**30}}}]'),
        ("median_step_s", "1e308"),
        ("step_times_s", "[0.5, 1e300]"),
        ("throughput", "1e300"),
        ("finished_at", "-1e308"),
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
        ("static_bytes", "1e300"),
        ("activation_scale", "-1e308"),
        ("global_effectiveness", "1e308"),
        ("fixed_dims", f'{{"seq": {10**30}}}'),
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


@pytest.mark.parametrize(
    "coefficient", ["Infinity", '"Infinity"', "1e300", '"1/0"', f'"{10**30}"', "[1]", "NaN", '"x"']
)
def test_a_saved_saving_out_of_range_is_reported_and_skipped(tmp_path: Path, coefficient: str) -> None:
    save_model(tmp_path, "me", small_model(100))
    saved = json.loads((tmp_path / MODEL_FILE).read_text())
    saved["me"]["plans"][0]["saving"][0][1] = "@@"
    (tmp_path / MODEL_FILE).write_text(json.dumps(saved).replace('"@@"', coefficient))
    with pytest.warns(DamagedRecord, match=r"memopt_models.json: skipped the damaged model .*plans\.0\.saving"):
        assert load_saved_model(tmp_path, "me") is None


def test_a_saved_saving_of_too_high_a_degree_is_reported_and_skipped(tmp_path: Path) -> None:
    save_model(tmp_path, "me", small_model(100))
    saved = json.loads((tmp_path / MODEL_FILE).read_text())
    saved["me"]["plans"][0]["saving"][0][0] = [["batch", 9]]
    (tmp_path / MODEL_FILE).write_text(json.dumps(saved))
    with pytest.warns(DamagedRecord, match="skipped the damaged model"):
        assert load_saved_model(tmp_path, "me") is None


@pytest.mark.parametrize("damage", ["truncated", "garbage", "a list", "huge number"])
def test_a_damaged_model_library_is_reported_not_silently_ignored(tmp_path: Path, damage: str) -> None:
    save_model(tmp_path, "me", small_model(100))
    text = (tmp_path / MODEL_FILE).read_text()
    damaged = {
        "truncated": text[: len(text) // 2],
        "garbage": "\x00\x01 not json",
        "a list": "[1, 2]",
        "huge number": '{"me": ' + "9" * 5000 + "}",
    }[damage]
    (tmp_path / MODEL_FILE).write_text(damaged)
    with pytest.warns(DamagedRecord, match="memopt_models.json: skipped the damaged model library"):
        assert load_saved_model(tmp_path, "me") is None


def test_a_library_without_this_targets_model_warns_nothing(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    assert load_saved_model(tmp_path, "me") is None  # no file
    save_model(tmp_path, "other", small_model(100))
    assert load_saved_model(tmp_path, "me") is None  # another target's model only
    assert not [w for w in recwarn if issubclass(w.category, DamagedRecord)]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("garbage, not json", "not JSON"),
        ('{"key": "k", "peak_bytes": ' + "9" * 5000 + "}", "not JSON"),  # past Python's 4300 digits
        ('["a", "list"]', "not a record with a key"),
        ('{"key": 7}', "not a record with a key"),
        ("x" * (10 * 2**20), "longer than 1024 KiB"),  # a 10 MB line
    ],
)
def test_a_journal_line_that_holds_no_record_is_reported_and_skipped(tmp_path: Path, line: str, why: str) -> None:
    journal = journaled_trial(tmp_path)
    with open(journal.path, "a") as handle:
        handle.write(line + "\n")
    journal.append({"key": "after", "status": "ok"})
    with pytest.warns(DamagedRecord, match=rf"journal.jsonl line 2: skipped a damaged record \({why}") as caught:
        assert [entry.key for entry in journal.entries()] == ["k", "after"]
    assert len([w for w in caught if issubclass(w.category, DamagedRecord)]) == 1


def test_a_torn_last_line_and_blank_lines_warn_nothing(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    """A last line without its newline is being written, or its writer died: not damage to report."""
    journal = journaled_trial(tmp_path)
    with open(journal.path, "a") as handle:
        handle.write('\n{"key": "b", "sta')
    assert [entry.key for entry in journal.entries()] == ["k"]
    assert not [w for w in recwarn if issubclass(w.category, DamagedRecord)]


def test_a_damaged_calibration_record_is_reported_and_skipped(tmp_path: Path) -> None:
    with pytest.warns(DamagedRecord, match=r"skipped a damaged calibration record \(journal_lines"):
        assert checked_calibration_record({"key": "c", "kind": "calibration", "journal_lines": 10**400}, "j") is None
    assert checked_calibration_record({"key": "c", "kind": "calibration", "journal_lines": 12}, "j") == {
        "key": "c",
        "kind": "calibration",
        "journal_lines": 12,
    }
