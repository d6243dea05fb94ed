"""Shared fixtures: real ORTModule probes run once per session and reused by the tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

RECIPES = Path(__file__).parent / "recipes"


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


def memopt(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> CliRun:
    """Run the real ``memopt`` command line in a subprocess, as a user would."""
    completed = subprocess.run(
        [sys.executable, "-m", "memopt", *args], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=timeout,
    )
    return CliRun(completed.returncode, completed.stdout, completed.stderr)


def assert_one_line_error(run: CliRun, *fragments: str) -> None:
    """Exit 2, one ``error:`` line on stderr naming the problem, no traceback."""
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def gpt_probe(runs_dir: Path) -> CliRun:
    """One real ORTModule probe of the tiny GPT on CPU, shared by every test that reads it."""
    run = memopt("probe", "gpt", "--size", "tiny", "--batch", "4", "--runs-dir", str(runs_dir))
    assert run.returncode == 0, run.stderr
    return run
