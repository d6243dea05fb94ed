"""A runs folder damaged by hand, read back by the real command line: every damaged record is
said once (one `warning:` line each), none is a traceback, and a trial whose record was
damaged is run again rather than trusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import memopt

TRIAL = ("trial", "gpt", "--size", "tiny", "--batch", "2")


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning:")]


# The overflow in make test; the figure trusted once, the same path, in make test-all.
@pytest.mark.ort
@pytest.mark.parametrize("peak", [10**400, pytest.param(10**30, marks=pytest.mark.long)])
def test_a_journaled_peak_past_any_machine_is_said_once_and_the_trial_runs_again(tmp_path: Path, peak: int) -> None:
    first = memopt(*TRIAL, "--runs-dir", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    journal = tmp_path / "journal.jsonl"
    record = json.loads(journal.read_text())
    record["peak_bytes"] = "@@"
    journal.write_text(json.dumps(record).replace('"@@"', str(peak)) + "\ngarbage\n" + "x" * (10 * 2**20) + "\n")
    again = memopt(*TRIAL, "--runs-dir", str(tmp_path), "--json", "--resume")
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    said = warnings_in(again.stderr)
    assert len(said) == 3, said  # each damaged line once
    assert "line 1: skipped a damaged trial record (peak_bytes" in said[-1]
    assert any("line 2: skipped a damaged record (not JSON" in line for line in said)
    assert any("line 3: skipped a damaged record (longer than" in line for line in said)
    redone = json.loads(again.stdout)
    assert not redone["reused"] and 0 < redone["peak_bytes"] < 2**40


@pytest.mark.ort
@pytest.mark.long
def test_a_damaged_model_library_is_said_once(tmp_path: Path) -> None:
    plan = memopt(
        "plan", "gpt", "--size", "tiny", "--target-batch", "4", "--budget", "2GiB", "--runs-dir", str(tmp_path)
    )
    assert plan.returncode == 0, plan.stderr
    library = tmp_path / "memopt_models.json"
    saved = json.loads(library.read_text())
    for model in saved.values():
        model["activation_scale"] = -1e308
    library.write_text(json.dumps(saved))
    trial = memopt(*TRIAL, "--runs-dir", str(tmp_path), "--resume")
    assert trial.returncode == 0 and "Traceback" not in trial.stderr, trial.stderr
    assert warnings_in(trial.stderr) == [
        f"warning: {library}: skipped the damaged model of this target "
        "(ModelError: activation_scale: Input should be greater than or equal to 1)"
    ]
    library.write_text(library.read_text()[:100])  # truncated
    trial = memopt(*TRIAL, "--runs-dir", str(tmp_path), "--resume")
    assert trial.returncode == 0, trial.stderr
    said = warnings_in(trial.stderr)
    assert len(said) == 1 and "skipped the damaged model library (JSONDecodeError" in said[0], said


@pytest.mark.ort
@pytest.mark.long
def test_tune_resumes_past_absurd_peaks_and_says_each_damaged_line_once(tmp_path: Path) -> None:
    """A verified tune's journal with the calibration trial's peak at 10**400 bytes (an overflow
    once), the verified answer's first run's at 10**30 (trusted once, it made the search hunt for
    a batch that fits) and a garbage line: the resumed tune runs each damaged trial again,
    reuses only the sane ones (the answer's other runs at the target batch), verifies as before,
    and says each damaged line once."""
    tune = ("tune", "gpt", "--size", "tiny", "--target-batch", "8", "--budget", "900MiB", "--no-tui", "--json")
    first = memopt(*tune, "--runs-dir", str(tmp_path))
    assert first.returncode == 0, first.stderr
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text().splitlines()
    trials = [number for number, line in enumerate(lines) if '"kind"' not in line]
    damaged: dict[int, str] = {}  # line number: the run folder its record named
    for number, peak in zip(trials, (10**400, 10**30)):
        record = json.loads(lines[number])
        damaged[number + 1] = Path(record["run_dir"]).name
        record["peak_bytes"] = "@@"
        lines[number] = json.dumps(record).replace('"@@"', str(peak))
    journal.write_text("\n".join([*lines, "garbage"]) + "\n")
    again = memopt(*tune, "--runs-dir", str(tmp_path), "--resume")
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    said = warnings_in(again.stderr)
    assert len(said) == len(set(said)) == 3, said
    for number in damaged:
        assert any(f"line {number}: skipped a damaged trial record (peak_bytes" in line for line in said), said
    assert any(f"line {len(lines) + 1}: skipped a damaged record (not JSON" in line for line in said), said
    summary, before = json.loads(again.stdout), json.loads(first.stdout)
    assert summary["status"] == before["status"] == "verified", summary
    assert summary["best"]["config"] == before["best"]["config"], summary
    redone = summary["trials"]
    assert not any(trial["reused"] and Path(trial["run_dir"]).name in damaged.values() for trial in redone), redone
    assert sum(not trial["reused"] for trial in redone) == len(damaged), redone
    assert all(0 < trial["peak_bytes"] < 2**40 for trial in redone), redone
