"""A torch trial's journal record read back on --resume: one ``TrialResult`` whichever release
wrote it (today's record, or the ``torch-trial`` line of the release before), reused where it
holds the trial its key names, skipped with one warning naming the line and the field where a
field is damaged (then run afresh).

The older lines below are as ``memopt tune --backend torch gpt --size tiny --target-batch 64
--budget 700MiB --steps 2 --no-tui --runs-dir runs64`` wrote them (memopt at 6d43241, CPU).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from memopt.backends.torch.scan import TorchPlanRow, TorchScan
from memopt.backends.torch.trial import (
    journaled_times,
    journaled_torch_trial,
    policy_path,
    run_torch_trial,
    trial_key,
)
from memopt.core import RunStatus, parse_runnable
from memopt.core.trial import Outcome, TorchTrialDetails, TrialResult
from memopt.errors import DamagedRecord
from memopt.recompute import RecomputePlan, RecomputePolicy
from memopt.run.journal import Journal
from memopt.run.settings import RunSettings

pytestmark = pytest.mark.torch

NONE = RecomputePolicy(())
BLOCKS = RecomputePolicy((RecomputePlan.parse("blocks.*: *"),))
OLDER_PROBE = (
    '{"allocator":{"MALLOC_MMAP_THRESHOLD_":"131072"},"batch":2,"error":null,"key":"4217639b64271d6f",'
    '"kind":"torch-trial","median_step_s":0.5509346669999786,"peak_bytes":731553792,"plans":[],'
    '"run_dir":"runs64/torch-gpt-b2-20261206-173233","status":"ok"}'
)
OLDER_VERIFY = (
    '{"allocator":{"MALLOC_MMAP_THRESHOLD_":"131072"},"batch":64,"error":null,"key":"3aa99588bc0a38ee",'
    '"kind":"torch-trial","median_step_s":1.484818856000004,"peak_bytes":765296640,"plans":["blocks.*: *"],'
    '"run_dir":"runs64/torch-gpt-b64-20261206-173242","status":"ok"}'
)


@pytest.fixture
def runs64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunSettings:
    """The settings the older lines were written with, run from the folder they were (their run folders are relative)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    return RunSettings(
        target=parse_runnable("gpt"), options={"size": "tiny"}, device="auto", steps=2, runs_dir=Path("runs64")
    )


def journal_of(settings: RunSettings, *lines: str) -> Journal:
    journal = Journal.in_folder(settings.runs_dir)
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    journal.path.write_text("".join(line + "\n" for line in lines))
    return journal


def test_an_older_release_s_lines_read_back_as_the_trials_their_keys_name(runs64: RunSettings) -> None:
    journal = journal_of(runs64, OLDER_PROBE, OLDER_VERIFY)
    assert trial_key(runs64, 64, BLOCKS)[:16] == "3aa99588bc0a38ee"  # one digest, today's longer
    verify = journaled_torch_trial(runs64, 64, BLOCKS, journal)
    assert (
        verify is not None and verify.reused and verify.torch == TorchTrialDetails({"MALLOC_MMAP_THRESHOLD_": "131072"})
    )
    assert (verify.batch_size, verify.config, verify.status, verify.outcome) == (
        64,
        ("blocks.*: *",),
        RunStatus.OK,
        Outcome.OK,
    )
    assert (verify.memory.device_peak, verify.median_step_s) == (765296640, 1.484818856000004)
    assert verify.within(765296640) and not verify.within(765296639)
    assert policy_path(verify) == Path("runs64/torch-gpt-b64-20261206-173242/recompute-policy.json")
    probe = journaled_torch_trial(runs64, 2, NONE, journal)
    assert probe is not None and probe.memory.device_peak == 731553792 and probe.config == ()
    # The same trial again, as today's record (one schema for both back ends) reads it back.
    today = journal_of(runs64, json.dumps(replace(verify, key=trial_key(runs64, 64, BLOCKS)).to_record()))
    again = journaled_torch_trial(runs64, 64, BLOCKS, today)
    assert again is not None and replace(again, key=verify.key) == verify


def test_today_s_record_reads_back_whole(tmp_path: Path) -> None:
    settings = RunSettings(target=parse_runnable("mlp"), device="cpu", runs_dir=tmp_path / "runs", steps=2)
    trial = TrialResult(
        key=trial_key(settings, 4, BLOCKS),
        target=settings.target,
        options={},
        batch_size=4,
        config=("blocks.*: *",),
        config_value=str(tmp_path / "runs" / "t" / "recompute-policy.json"),
        outcome=Outcome.OK,
        status=RunStatus.OK,
        run_dir=str(tmp_path / "runs" / "t"),
        steps=2,
        device="cpu",
        step_times_s=(0.5, 0.1, 0.2),
        median_step_s=0.15,
        torch=TorchTrialDetails({"MALLOC_MMAP_THRESHOLD_": "131072"}),
    )
    trial = replace(
        trial, memory=replace(trial.memory, memory_kind="rss", static_bytes=300 << 20, peak_bytes=400 << 20)
    )
    journal = journal_of(settings, json.dumps(trial.to_record()))
    assert journaled_torch_trial(settings, 4, BLOCKS, journal) == replace(trial, reused=True)
    assert journaled_torch_trial(settings, 4, NONE, journal) is None  # another policy's key


# Each: the field as the journal line names it, and its damaged raw JSON.
DAMAGE = [
    ("peak_bytes", str(10**30)),  # more than any machine holds
    ("peak_bytes", "-5"),
    ("peak_bytes", "1"),  # no run that ran holds one byte
    ("peak_bytes", '"abc"'),
    ("median_step_s", "1e300"),
    ("median_step_s", "NaN"),
    ("batch", "-1"),
    ("batch", "64.0"),
    ("plans", '"blocks.*: *"'),
    ("plans", '["blocks.*: __class__"]'),
    ("run_dir", '"/etc"'),
    ("status", '"fine"'),
    ("allocator", '"131072"'),
    ("allocator", '{"MALLOC_MMAP_THRESHOLD_": 131072}'),
    ("kind", None),
]


def damaged(line: str, field: str, raw: str | None) -> str:
    record = json.loads(line)
    if raw is None:
        del record[field]
        return json.dumps(record)
    record[field] = "@@"
    return json.dumps(record).replace('"@@"', raw)


@pytest.mark.parametrize(("field", "raw"), DAMAGE)
def test_a_damaged_older_line_is_reported_once_by_line_and_field_and_not_believed(
    runs64: RunSettings, field: str, raw: str | None
) -> None:
    journal = journal_of(runs64, damaged(OLDER_VERIFY, field, raw))
    with pytest.warns(DamagedRecord) as caught:
        assert journaled_torch_trial(runs64, 64, BLOCKS, journal) is None
    said = [str(w.message) for w in caught if issubclass(w.category, DamagedRecord)]
    assert len(said) == 1 and re.search(rf"journal.jsonl line 1: skipped a damaged trial record \({field}[:.]", said[0])


TODAY_DAMAGE = [
    ("peak_bytes", str(10**30)),
    ("peak_bytes", "1"),
    ("static_bytes", str(800 << 20)),  # above the whole run's peak: one or the other is wrong
    ("median_step_s", "NaN"),
    ("batch_size", "-1"),
    ("config", '"blocks.*: *"'),
    ("config", '["blocks.*: __class__"]'),
    ("run_dir", '"/etc"'),
    ("status", '"fine"'),
    ("outcome", '"exploded"'),
    ("torch", '{"allocator": "131072"}'),
    ("torch", "null"),
    ("kind", '"torch-trial"'),
]


@pytest.mark.parametrize(("field", "raw"), TODAY_DAMAGE)
def test_a_damaged_record_of_today_is_reported_once_by_line_and_field_and_not_believed(
    runs64: RunSettings, field: str, raw: str
) -> None:
    verify = journaled_torch_trial(runs64, 64, BLOCKS, journal_of(runs64, OLDER_VERIFY))
    assert verify is not None
    memory = replace(verify.memory, memory_kind="rss", static_bytes=300 << 20, peak_over_run_bytes=700 << 20)
    record = replace(verify, key=trial_key(runs64, 64, BLOCKS), memory=memory).to_record()
    journal = journal_of(
        runs64,
        OLDER_VERIFY.replace("3aa99588bc0a38ee", "0" * 16),
        json.dumps(record),
        damaged(json.dumps(record), field, raw),
    )
    with pytest.warns(DamagedRecord) as caught:
        found = journaled_torch_trial(runs64, 64, BLOCKS, journal)
    assert found is not None and found.memory.static_bytes == 300 << 20  # the intact line 2, not the damaged line 3
    said = [str(w.message) for w in caught if issubclass(w.category, DamagedRecord)]
    assert len(said) == 1 and re.search(rf"journal.jsonl line 3: skipped a damaged trial record \({field}[:.]", said[0])


def test_a_damaged_record_is_run_afresh(tmp_path: Path) -> None:
    settings = RunSettings(target=parse_runnable("mlp"), device="cpu", runs_dir=tmp_path / "runs", steps=2)
    line = OLDER_PROBE.replace("4217639b64271d6f", trial_key(settings, 2, NONE)[:16]).replace("runs64/", "/etc/")
    journal = journal_of(settings, line)
    with pytest.warns(
        DamagedRecord, match=r"line 1: skipped a damaged trial record \(run_dir: outside the runs folder"
    ):
        trial = run_torch_trial(settings, 2, NONE, journal=journal, resume=True)
    assert not trial.reused and trial.status is RunStatus.OK and Path(trial.run_dir).parent == settings.runs_dir
    assert trial.memory.device_peak != 731553792 and trial.torch is not None
    assert journaled_torch_trial(settings, 2, NONE, journal) == replace(trial, reused=True)


def test_both_back_ends_trials_print_one_json_summary(tmp_path: Path) -> None:
    """``trial --json`` prints the trial's record on either back end: the same fields."""
    torch_trial = journaled_torch_trial_of(tmp_path)
    ort_trial = replace(torch_trial, torch=None, config=("Gelu+:1:-1",), ort_version="1.19.2", plans_seen=3)
    assert set(torch_trial.to_record()) == set(ort_trial.to_record())
    assert torch_trial.to_record()["torch"] == {"allocator": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
    assert ort_trial.to_record()["torch"] is None


def journaled_torch_trial_of(folder: Path) -> TrialResult:
    settings = RunSettings(
        target=parse_runnable("gpt"), options={"size": "tiny"}, device="cpu", steps=2, runs_dir=folder
    )
    line = OLDER_PROBE.replace("4217639b64271d6f", trial_key(settings, 2, NONE)[:16]).replace("runs64/", f"{folder}/")
    trial = journaled_torch_trial(settings, 2, NONE, journal_of(settings, line))
    assert trial is not None
    return trial


def test_a_resume_chooses_with_the_journal_s_recompute_times(tmp_path: Path) -> None:
    """Measured afresh, a recompute time differs from process to process: a resume reads the journal's."""
    settings = RunSettings(target=parse_runnable("gpt"), options={"size": "tiny"}, device="cpu", runs_dir=tmp_path)
    row = TorchPlanRow(
        BLOCKS.plans[0], tensors=3, modules=2, saving_bytes=4096, saving=None, recompute_seconds=0.5, peak_share=1.0
    )
    # The plans layer by layer, which tune chooses from, keep their times too.
    layer = replace(row, plan=RecomputePlan.parse("blocks.0: *"), modules=1, recompute_seconds=0.25)
    scanned = TorchScan(batch=2, seq=64, saved_bytes=8192, saved=None, rows=(row,), layers=(layer,))
    journal = Journal.in_folder(tmp_path)
    assert journaled_times(scanned, settings, journal, resume=False) == scanned
    written = journal.path.read_text()
    measured_again = replace(
        scanned, rows=(replace(row, recompute_seconds=0.7),), layers=(replace(layer, recompute_seconds=0.4),)
    )
    assert journaled_times(measured_again, settings, journal, resume=True) == scanned
    assert journal.path.read_text() == written  # nothing to write: a read-only folder resumes
    damaged = json.loads(written)
    damaged["recompute_s"]["blocks.*: *"] = float("nan")
    with journal.path.open("a") as handle:
        handle.write(json.dumps(damaged) + "\n")
    with pytest.warns(DamagedRecord, match=r"journal.jsonl line 2: skipped a damaged scan record \(recompute_s"):
        assert journaled_times(measured_again, settings, journal, resume=True) == scanned
