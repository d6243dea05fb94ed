"""The README's ``examples/train_ddp.py`` commands (scan, tune, the job under the export line),
read from the README itself and run as a user pastes them: from a fresh folder that holds only
``examples/``, with the venv's ``bin`` first on PATH (what ``. .venv/bin/activate`` does), and
the exported config then handed to the job unchanged. ``make demo``, the README's first command, runs in CI."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.readme import readme_block

pytestmark = pytest.mark.ort  # real torchrun training jobs

ROOT = Path(__file__).resolve().parents[2]
EXPORT = re.compile(r"^export ORTMODULE_MEMORY_OPT_CONFIG=(\S+)", re.MULTILINE)
SCRIPT = "examples/train_ddp.py"


def test_the_readme_block_reads_as_scan_tune_then_the_job() -> None:
    scan, tune, export, job = readme_block(SCRIPT)
    assert scan[:3] == ["memopt", "scan", "--cmd"]
    assert tune[:3] == ["memopt", "tune", "--cmd"] and "--no-tui" in tune
    assert export[0] == "export" and export[1].startswith("ORTMODULE_MEMORY_OPT_CONFIG=")
    assert shlex.join(job) == "torchrun --nproc_per_node 2 examples/train_ddp.py --batch-size 8"


@pytest.mark.long
def test_the_readme_train_ddp_commands_run_as_pasted(tmp_path: Path) -> None:
    scan_words, tune_words, _, job_words = readme_block(SCRIPT)
    tune, job = shlex.join(tune_words), shlex.join(job_words)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    scanned = subprocess.run(
        shlex.join(scan_words), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert scanned.returncode == 0, scanned.stderr[-3000:]
    assert "Dropout+:1:-1" in scanned.stdout, scanned.stdout
    tuned = subprocess.run(tune, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    exported = EXPORT.search(tuned.stdout)
    assert exported, tuned.stdout
    config = Path(exported.group(1))
    assert config.is_file() and config.is_relative_to(tmp_path / "runs")
    # The job as the README shows it, in a shell that pasted the export line; --max-steps
    # because the example trains until stopped.
    ran = subprocess.run(
        f"export ORTMODULE_MEMORY_OPT_CONFIG={shlex.quote(str(config))}; {job} --max-steps 3",
        shell=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
