"""``memopt tune``: bad input as one-line errors, and the headless search (--no-tui --json) over real CPU trials."""

from __future__ import annotations

import json

import pytest
from support import real_tuning
from support.cli import assert_one_line_error, memopt

from memopt.backends.ort.config import ENV_VAR


@pytest.mark.subprocess
def test_bad_input_is_one_line(tmp_path) -> None:
    assert_one_line_error(
        memopt("tune", "gpt", "--target-batch", "16", "--budget", "lots", "--no-tui"), "--budget 'lots'"
    )
    assert_one_line_error(
        memopt("tune", "gpt", "--target-batch", "0", "--budget", "1GiB", "--no-tui"), "--target-batch"
    )
    assert_one_line_error(
        memopt("tune", "gpt", "--target-batch", "8", "--budget", "1GiB", "--json"), "--json needs --no-tui"
    )
    assert_one_line_error(
        memopt("tune", "gpt", "--target-batch", "8", "--budget", "1GiB", "--max-trials", "0", "--no-tui"),
        "--max-trials",
    )
    assert not list(tmp_path.iterdir())  # nothing launched


@pytest.mark.ort
def test_headless_search_resumes_the_journal_and_prints_json() -> None:
    """The shared sessions' runs folder (tests/support/real_tuning.py, same budget) continued with
    --resume: finished trials come back from the journal, the search reaches the same verified config."""
    tuner = real_tuning.tuner()
    _, budget = real_tuning.measured()
    run = memopt(
        "tune",
        real_tuning.RECIPE,
        "--target-batch",
        str(real_tuning.TARGET),
        "--budget",
        f"{budget}B",
        "-o",
        "n_layer=2",
        "-o",
        "seq_len=128",
        "--steps",
        str(real_tuning.STEPS),
        "--margin",
        "0.01",
        "--max-trials",
        "4",
        "--runs-dir",
        str(tuner.settings.run.runs_dir),
        "--resume",
        "--no-tui",
        "--json",
        "--calibrate",
        ",".join(map(str, real_tuning.CALIBRATION)),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "verified" and result["best"]["peak_bytes"] <= budget
    assert result["export"][0].startswith(f"export {ENV_VAR}=")
    assert result["journal"] == str(tuner.journal.path)
    assert "[probe]" in run.stderr and "[calibrate]" in run.stderr and "[done] verified" in run.stderr
    assert any(t["reused"] for t in result["trials"])  # calibration trials at least came from the journal
    # no config at the target batch made three times in the calibration: the room kept for its noise is said
    assert [t["batch_size"] for t in result["trials"] if t["purpose"] == "calibration"].count(real_tuning.TARGET) == 3
    assert result["kept_room_bytes"] is not None and "of room kept under the limit" in run.stderr
