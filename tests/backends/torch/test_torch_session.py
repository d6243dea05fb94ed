"""The torch back end's tuning session without its screen, over real plain-PyTorch runs of a tiny
GPT: what its export lines say and where a selection's policy file goes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from support.cli import memopt

from memopt.backends.torch.session import TorchTuner
from memopt.core import parse_runnable
from memopt.recompute import POLICY_ENV, RecomputePlan, RecomputePolicy
from memopt.run.budget import Budget
from memopt.run.settings import RunSettings
from memopt.tui.state import plan_cells
from memopt.tune import TuneSettings
from memopt.tune.settings import TuneError

pytestmark = pytest.mark.torch


def policy_path(line: str) -> Path:
    assignments = dict(word.split("=", 1) for word in shlex.split(line)[1:])
    return Path(assignments[POLICY_ENV])


def test_a_selection_is_saved_by_its_content_and_a_run_over_the_limit_is_not_verified(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = RunSettings(target=parse_runnable("gpt"), options={"size": "tiny"}, device="cpu", runs_dir=runs)
    # Batch 2 is the anchor's: its run without recompute is the target batch's, far over 64 MiB.
    tuner = TorchTuner(TuneSettings(run=run, target_batch=2, budget=Budget("64MiB", bytes=64 * 2**20)))
    tuner.setup()
    assert tuner.best() is None
    none = tuner.export_lines(())
    assert none[0] == "# no recompute (NOT verified)" and policy_path(none[1]).is_file()  # that run's own policy file

    rows = tuner.rows()
    # The screen's pattern column tells every plan apart: module plans differ only by their path.
    patterns = [plan_cells(row, False)[3] for row in rows]
    assert len(set(patterns)) == len(rows) and all(": " in pattern for pattern in patterns)
    assert all(plan_cells(row, False)[2].endswith(" s") for row in rows)  # seconds a step, as step times
    first, second = (row.key for row in rows[:2])
    lines = tuner.export_lines([first])
    assert lines[0].endswith("(NOT verified)")
    path = policy_path(lines[1])
    assert path.parent == runs.resolve() and not path.exists()  # the line is worked out, nothing written
    assert tuner.save_config([first]) == path
    assert RecomputePolicy.read(path).plans == (RecomputePlan.parse(first),)
    other = tuner.save_config([second])
    assert other != path and RecomputePolicy.read(path).plans == (RecomputePlan.parse(first),)  # kept
    assert tuner.write_export_file([first]) == path
    with pytest.raises(TuneError, match="nothing to save"):
        tuner.save_config([])


def test_a_target_batch_at_the_anchor_is_verified_by_the_anchors_run_alone(tmp_path: Path) -> None:
    done = memopt(
        "tune",
        "gpt",
        "--size",
        "tiny",
        "--backend",
        "torch",
        "--target-batch",
        "2",
        "--budget",
        "20GiB",
        "--no-tui",
        "--json",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "verified" and result["best"]["plans"] == []
    assert [t["batch"] for t in result["trials"]] == [2]  # the one run, listed once
