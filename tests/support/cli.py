"""The ``memopt`` command line run as a user runs it: a subprocess, its exit code and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CliRun", "assert_one_line_error", "headless_tune", "memopt"]


@dataclass(frozen=True)
class CliRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def run_dir(self) -> Path:
        """The run folder the output names (the ``run folder`` line or the log path in an error)."""
        for line in (self.stdout + self.stderr).splitlines():
            if "run folder" in line:
                return Path(line.split()[-1])
            if "(log: " in line:
                return Path(line.rsplit("(log: ", 1)[1].rstrip(")")).parent
        raise AssertionError(f"no run folder in output:\n{self.stdout}\n{self.stderr}")

    def record(self) -> dict:
        return json.loads((self.run_dir / "run.json").read_text())

    @property
    def log_path(self) -> Path:
        return self.run_dir / "ort.log"

    @property
    def execution_graph(self) -> Path:
        return self.run_dir / "onnx" / "memopt_execution_model_training.onnx"


def memopt(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> CliRun:
    """Run the real ``memopt`` command line in a subprocess, as a user would."""
    completed = subprocess.run(
        [sys.executable, "-m", "memopt", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=timeout,
    )
    return CliRun(completed.returncode, completed.stdout, completed.stderr)


def headless_tune(
    command: str, target_batch: int, budget_bytes: int, runs_dir: Path, *options: str, cwd: Path
) -> CliRun:
    """``memopt tune --cmd COMMAND … --no-tui --json``, as a script would run it."""
    return memopt(
        "tune",
        "--cmd",
        command,
        "--target-batch",
        str(target_batch),
        "--budget",
        f"{budget_bytes}B",
        *options,
        "--no-tui",
        "--json",
        "--runs-dir",
        str(runs_dir),
        cwd=cwd,
        timeout=1500,
    )


def assert_one_line_error(run: CliRun, *fragments: str, after_backend_line: bool = False) -> None:
    """Exit 2, one ``error:`` line on stderr naming the problem, no traceback.
    ``after_backend_line``: an error met once the command's checks have passed (a run that
    failed), which follows the ``backend:`` line such a command starts with; bad input never does."""
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    if after_backend_line:
        assert len(lines) == 2 and lines[0].startswith("backend: "), run.stderr
        lines = lines[1:]
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
