"""Two real `memopt tune` processes in one runs folder, at once, with different budgets.

Each must export the config it verified (the file its export line names holds exactly its
best config), the shared journal must hold every trial of both, and the shared model
library must stay readable. Real ORTModule trials of the tiny MLP on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memopt.run import Journal

pytestmark = pytest.mark.ort

BUDGETS = ("16GiB", "12GiB")


@pytest.mark.long
def test_two_tunes_in_one_runs_folder_each_export_what_they_verified(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "memopt", "tune", "mlp", "--size", "tiny", "--target-batch", "8"]
    command += ["--calibrate", "2,4", "--steps", "1", "--max-trials", "2", "--no-tui", "--json"]
    command += ["--runs-dir", str(runs), "--timeout", "600"]
    tunes = [
        subprocess.Popen(
            [*command, "--budget", budget], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
        )
        for budget in BUDGETS
    ]
    outputs = [tune.communicate(timeout=900) for tune in tunes]
    summaries = []
    for tune, (out, err) in zip(tunes, outputs, strict=True):
        assert tune.returncode == 0, err
        assert "Traceback" not in err
        summaries.append(json.loads(out))
    for summary in summaries:
        best = summary["best"]
        assert best is not None and summary["status"] == "verified"
        (line,) = summary["export"]
        if not best["config"]:
            assert line.startswith("unset ORTMODULE_MEMORY_OPT_CONFIG")
            continue
        path = Path(line.split("=", 1)[1].strip("'"))
        assert json.loads(path.read_text()) == best["config"]
    trials = sum(sum(1 for t in s["trials"] if not t["reused"]) for s in summaries)
    assert len(list(Journal.in_folder(runs).entries())) == trials
    assert json.loads((runs / "memopt_models.json").read_text())
