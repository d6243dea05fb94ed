"""``tune --backend torch --resume`` replays its journal: the same choice, the same verdict and
no run again, however often it is resumed, with damaged lines in the journal, from a read-only
folder. The scan's recompute times, measured afresh in each process, are the journal's too.

Real tunes of the tiny GPT at batch 256 in subprocesses, from the folder they ran in (the journal
names its run folders from there)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support.cli import CliRun, memopt
from support.mounts import read_only_copy

pytestmark = [pytest.mark.torch, pytest.mark.long]

# A budget under the run without recompute: the model chooses a policy from the scan's savings
# and recompute times.
TUNE = ("tune", "--backend", "torch", "gpt", "--size", "tiny", "--target-batch", "256", "--budget", "630MiB")
TUNE += ("--steps", "2", "--no-tui")


def tune(cwd: Path, runs: str, *extra: str) -> CliRun:
    done = memopt(*TUNE, "--runs-dir", runs, *extra, cwd=cwd)
    assert done.returncode in (0, 3), done.stderr  # verified, or no policy fits: either is a verdict
    return done


def said(done: CliRun, *starts: str) -> list[str]:
    """The progress lines that begin with one of ``starts`` once their stage's tag ("[search] ") is off."""
    lines = (line.split("] ", 1)[-1] if line.startswith("[") else line for line in done.stderr.splitlines())
    return [line for line in lines if line.startswith(starts)]


def decisions(done: CliRun) -> list[str]:
    """The model's choices and the measurements' verdicts, as the tune said them."""
    return said(done, "model:", "measurement:")


def runs_said(done: CliRun) -> list[str]:
    return said(done, "run (")


def damaged_warnings(done: CliRun) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("warning:") and "damaged" in line]


def test_a_resumed_tune_chooses_and_judges_as_it_did_and_runs_nothing_again(tmp_path: Path) -> None:
    first = tune(tmp_path, "runs")
    journal = tmp_path / "runs" / "journal.jsonl"
    written = journal.read_text()
    assert any(json.loads(line).get("kind") == "torch-scan" for line in written.splitlines())
    resumed = [tune(tmp_path, "runs", "--resume") for _ in range(3)]
    assert journal.read_text() == written  # no run again, nothing journaled
    for again in resumed:
        assert (again.returncode, decisions(again), again.stdout) == (first.returncode, decisions(first), first.stdout)
        assert all(line.endswith(")") and ", from the journal (" in line for line in runs_said(again))
    assert len(runs_said(resumed[0])) == len(runs_said(first)) >= 2

    # Damaged copies of its records, newer than the intact ones: each reported once, none believed.
    records = [json.loads(line) for line in written.splitlines()]
    trials = [r for r in records if "torch" in r]
    probe, verify = trials[0], trials[-1]
    damage = [
        ({**probe, "peak_bytes": 10**30, "device_peak_bytes": 10**30}, "peak_bytes"),
        ({**verify, "run_dir": "/etc"}, "run_dir"),
        ({**verify, "config": " ".join(verify["config"])}, "config"),
        ({**verify, "median_step_s": 1e300}, "median_step_s"),
        ({**probe, "status": "fine"}, "status"),
        ({**verify, "batch_size": -1}, "batch_size"),
    ]
    with journal.open("a") as handle:
        handle.writelines(json.dumps(record) + "\n" for record, _ in damage)
    with_damage = journal.read_text()
    again = tune(tmp_path, "runs", "--resume")
    assert (again.returncode, decisions(again), again.stdout) == (first.returncode, decisions(first), first.stdout)
    assert journal.read_text() == with_damage
    warned = damaged_warnings(again)
    assert len(warned) == len(damage), again.stderr
    for number, (_, field) in enumerate(damage, len(records) + 1):
        assert sum(bool(re.search(rf"journal\.jsonl line {number}: .*\({field}: ", line)) for line in warned) == 1

    # The same journal in a folder nothing can be written to.
    shutil.copytree(tmp_path / "runs", tmp_path / "copy")
    (tmp_path / "copy" / "journal.jsonl").write_text(written)
    with read_only_copy(tmp_path / "ro", tmp_path / "copy"):
        read_only = tune(tmp_path, "ro", "--resume")
    assert (read_only.returncode, decisions(read_only)) == (first.returncode, decisions(first))
    assert all(", from the journal (ro/" in line for line in runs_said(read_only)), read_only.stderr
