"""The README's ``examples/train_ddp.py`` commands, read from the README itself and run as a
user pastes them: from a fresh folder that holds only ``examples/``, with the venv's
``bin`` first on PATH (what ``. .venv/bin/activate`` does), and the exported config then
handed to the job unchanged. ``make demo``, the README's first command, runs in CI."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support.readme import shell_blocks

pytestmark = pytest.mark.ort  # real torchrun training jobs

ROOT = Path(__file__).resolve().parents[2]
EXPORT = re.compile(r"^export ORTMODULE_MEMORY_OPT_CONFIG=(\S+)", re.MULTILINE)


def train_ddp_block() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text()
    found = [
        block for block in shell_blocks(readme) if any("examples/train_ddp.py" in " ".join(line) for line in block)
    ]
    assert len(found) == 1, "the README shows one examples/train_ddp.py block"
    return found[0]


def test_the_readme_block_reads_as_tune_then_the_job() -> None:
    tune, first_export, second_export, job = train_ddp_block()
    assert tune[:3] == ["memopt", "tune", "--cmd"] and "--no-tui" in tune
    assert first_export[0] == "export" and first_export[1].startswith("ORTMODULE_MEMORY_OPT_CONFIG=")
    assert first_export == second_export
    assert shlex.join(job) == "torchrun --nproc_per_node 2 examples/train_ddp.py --batch-size 8"


@pytest.mark.long
def test_the_readme_train_ddp_commands_run_as_pasted(tmp_path: Path) -> None:
    tune_words, _, _, job_words = train_ddp_block()
    tune, job = shlex.join(tune_words), shlex.join(job_words)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
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
